// Case C of bench/run: "hello world" on /hello, fib(20) computed per request on /fib.
// usage: NODE_ENV=production node workers.js [PORT|UNIX_PATH [WORKERS]]
//   WORKERS >= 1: Node cluster with that many workers (the primary distributes
//   connections); 0 or absent: one plain process (behind hayate --proxy or hayate run).
//   Without an address it listens where $PORT says (a port or a Unix socket path: hayate run).
'use strict';
const http = require('http');
const fs = require('fs');
const cluster = require('cluster');

const listen = process.argv[2] || process.env.PORT;
const workersArg = process.argv[3];
const workers = Number(workersArg || 0);
if (!listen) { console.error('usage: node workers.js PORT|UNIX_PATH [WORKERS] (or PORT in the environment)'); process.exit(2); }

function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

if (workers >= 1 && cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork();
  cluster.on('exit', (w, code) => console.error(`worker ${w.process.pid} died (${code})`));
  process.on('SIGTERM', () => { for (const id in cluster.workers) cluster.workers[id].kill(); process.exit(0); });
  console.log(`primary ${process.pid}: ${workers} workers on ${listen}`);
} else {
  const server = http.createServer((req, res) => {
    let body;
    if (req.url === '/fib') body = `fib(20) = ${fib(20)}\n`;
    else body = 'hello world';
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  });
  server.keepAliveTimeout = 65000;
  if (/^\d+$/.test(listen)) {
    server.listen(Number(listen), '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${listen}/`));
  } else {
    if (!cluster.isWorker) { try { fs.unlinkSync(listen); } catch (e) { /* not there */ } }
    server.listen(listen, () => console.log(`listening on unix:${listen}`));
  }
  process.on('SIGTERM', () => process.exit(0));
}
