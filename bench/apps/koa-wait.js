// Case B of bench/run: a Koa handler that waits 1.5 s and answers "hello world" on
// /wait; any other path answers "ok" at once (readiness checks).
// usage: NODE_ENV=production node koa-wait.js PORT|UNIX_PATH
'use strict';
const fs = require('fs');
const Koa = require('koa');

const listen = process.argv[2];
if (!listen) { console.error('usage: node koa-wait.js PORT|UNIX_PATH'); process.exit(2); }
const app = new Koa();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
app.use(async (ctx) => {
  if (ctx.path === '/wait') {
    await sleep(1500);
    ctx.body = 'hello world';
  } else {
    ctx.body = 'ok';
  }
});
const server = require('http').createServer(app.callback());
server.keepAliveTimeout = 65000;
if (/^\d+$/.test(listen)) {
  server.listen(Number(listen), '127.0.0.1', () => console.log(`koa listening on http://127.0.0.1:${listen}/`));
} else {
  try { fs.unlinkSync(listen); } catch (e) { /* not there */ }
  server.listen(listen, () => console.log(`koa listening on unix:${listen}`));
}
process.on('SIGTERM', () => process.exit(0));
