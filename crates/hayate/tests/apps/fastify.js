// A Fastify app as its docs write it for containers: port from PORT,
// every interface (hayate holds it to loopback).
const fastify = require('fastify')();
fastify.get('/', async () => `fastify instance ${process.env.HAYATE_INSTANCE} port ${process.env.PORT}`);
fastify.listen({ port: process.env.PORT || 3000, host: '0.0.0.0' }, (err) => {
  if (err) { console.error(err); process.exit(1); }
});
