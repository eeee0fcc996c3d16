// Node static-file contenders of case A (bench/run).
// usage: NODE_ENV=production node static.js KIND ROOT PORT [WORKERS]
//   KIND  http          http + fs: fs.readFile per request (the plain Node way)
//         node-static   node-static's Server
//         serve-static  serve-static as Express middleware (connect's static)
//         st            st with its default caches (fd, stat, content 64 MB) and gzip
//         sirv          sirv in production mode (dev: false)
//   WORKERS > 1: Node cluster with that many workers (the primary only distributes)
'use strict';
const http = require('http');
const path = require('path');
const fs = require('fs');
const cluster = require('cluster');

const [kind, root, port, workersArg] = process.argv.slice(2);
const workers = Number(workersArg || 1);
if (!kind || !root || !port) {
  console.error('usage: node static.js KIND ROOT PORT [WORKERS]');
  process.exit(2);
}

const TYPES = { '.html': 'text/html', '.txt': 'text/plain', '.png': 'image/png', '.bin': 'application/octet-stream' };

async function handler() {
  switch (kind) {
    case 'http':
      return (req, res) => {
        const p = path.join(root, path.normalize(decodeURIComponent(req.url.split('?')[0])));
        if (!p.startsWith(root)) { res.writeHead(403); res.end(); return; }
        fs.readFile(p, (err, data) => {
          if (err) { res.writeHead(404); res.end(); return; }
          res.writeHead(200, {
            'Content-Type': TYPES[path.extname(p)] || 'application/octet-stream',
            'Content-Length': data.length,
          });
          res.end(data);
        });
      };
    case 'node-static': {
      const nstatic = require('node-static');
      const file = new nstatic.Server(root, { cache: 3600 });
      return (req, res) => { req.addListener('end', () => file.serve(req, res)).resume(); };
    }
    case 'serve-static': {
      const express = require('express');
      const serveStatic = require('serve-static');
      const app = express();
      app.use(serveStatic(root));
      return app;
    }
    case 'st': {
      const { default: st } = await import('st'); // st 4 is an ES module
      const mount = st({ path: root, url: '/', index: false, gzip: true, passthrough: false });
      return (req, res) => mount(req, res);
    }
    case 'sirv': {
      const sirv = require('sirv');
      return sirv(root, { dev: false, etag: true });
    }
    default:
      console.error(`unknown kind ${kind}`);
      process.exit(2);
  }
}

if (workers > 1 && cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork();
  cluster.on('exit', (w, code) => console.error(`worker ${w.process.pid} died (${code})`));
  process.on('SIGTERM', () => { for (const id in cluster.workers) cluster.workers[id].kill(); process.exit(0); });
} else {
  handler().then((h) => {
    const server = http.createServer(h);
    server.keepAliveTimeout = 65000;
    server.listen(Number(port), '127.0.0.1', () => console.log(`${kind} listening on http://127.0.0.1:${port}/`));
  });
  process.on('SIGTERM', () => process.exit(0));
}
