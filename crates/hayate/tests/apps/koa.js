// A Koa app as its guide writes it: app.listen(port), no host.
const Koa = require('koa');
const app = new Koa();
app.use(async (ctx) => { ctx.body = `koa instance ${process.env.HAYATE_INSTANCE} port ${process.env.PORT}`; });
app.listen(process.env.PORT || 3000);
