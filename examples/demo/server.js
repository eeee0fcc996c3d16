// A small app using only Node's standard library, run behind hayate:
//   hayate run -- node server.js
// hayate starts one instance per core, each listening on its own Unix socket
// (process.env.PORT is a path), serves ./public itself, and sends the rest here.
const http = require('http');

const instance = process.env.HAYATE_INSTANCE || '-';
const started = new Date().toISOString();

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname === '/api/hello') {
    const name = url.searchParams.get('name') || 'world';
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ hello: name, instance, pid: process.pid, started }));
    return;
  }
  if (url.pathname === '/api/slow') {
    // A handler that waits, like the published "1.5 s" experiment.
    setTimeout(() => res.end('done\n'), 1500);
    return;
  }
  res.statusCode = 404;
  res.setHeader('Content-Type', 'text/plain');
  res.end('not found\n');
});

server.listen(process.env.PORT || 3000, () => {
  console.log(`instance ${instance} listening on ${process.env.PORT || 3000}`);
});

// hayate drains an instance before it sends SIGTERM; close cleanly anyway.
process.on('SIGTERM', () => server.close(() => process.exit(0)));
