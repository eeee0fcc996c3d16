// A plain (non-gRPC) Node http2 server for crates/hayate/tests/h2_upstream.rs.
//   node http2-server.js [--tls KEY CERT] [--goaway-after N]
// prints "listening PORT" (127.0.0.1, a free port); h2c unless --tls.
//   GET  /hello   "hello over h2", with the connection's number in x-session
//   POST /echo    the body back, its length in the trailer x-length
//   GET  /slow    after 200 ms
//   GET  /early   103 Early Hints (a Link), then 200 "final" at GET /release
//   GET  /stats   {"sessions": connections accepted, "streams": streams served}
// With --goaway-after N, a connection is closed gracefully (GOAWAY, its open
// streams finish) once it has served N streams.
// With --tls, --allow-http1 also answers HTTP/1.1 clients (ALPN http/1.1),
// and --http1-only makes it an HTTPS server that speaks HTTP/1.1 only (no
// ALPN h2); over HTTP/1.1, GET /hello answers "hello over http/1.1" and
// POST /echo the body back (no trailer). /stats counts TLS connections.
'use strict';
const fs = require('fs');
const http2 = require('http2');
const https = require('https');

const args = process.argv.slice(2);
const arg = (name, n = 1) => {
  const i = args.indexOf(name);
  return i < 0 ? undefined : args.slice(i + 1, i + 1 + n);
};
const tls = arg('--tls', 2);
const goawayAfter = Number((arg('--goaway-after') || [0])[0]);

let sessions = 0;
let streams = 0;
// Streams of GET /early, answered at GET /release.
const held = [];
const allowHttp1 = args.includes('--allow-http1');
const http1Only = args.includes('--http1-only');
const keys = tls && { key: fs.readFileSync(tls[0]), cert: fs.readFileSync(tls[1]) };

// A request through Node's compatibility API, HTTP/1.1 or HTTP/2 (with
// --allow-http1 both come this way: a 'request' listener takes the h2
// streams too).
function answerEither(req, res) {
  streams += 1;
  const h2 = req.httpVersion === '2.0';
  if (req.url === '/stats') {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ sessions, streams }));
  }
  if (req.url === '/hello') {
    const session = h2 ? String(req.stream.session.number) : '-';
    res.writeHead(200, { 'content-type': 'text/plain', 'x-session': session });
    return res.end(req.method === 'HEAD' ? undefined : `hello over ${h2 ? 'h2' : 'http/1.1'}\n`);
  }
  if (req.url === '/echo' && req.method === 'POST') {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      const body = Buffer.concat(parts);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      if (h2) res.addTrailers({ 'x-length': String(body.length) });
      res.end(body);
    });
    return;
  }
  res.writeHead(404);
  res.end();
}

if (http1Only) {
  const server = https.createServer(keys, answerEither);
  server.on('secureConnection', () => { sessions += 1; });
  server.listen(0, '127.0.0.1', () => console.log('listening ' + server.address().port));
  return;
}
if (allowHttp1) {
  const server = http2.createSecureServer({ ...keys, allowHTTP1: true }, answerEither);
  server.on('session', (session) => {
    sessions += 1;
    session.number = sessions;
  });
  server.on('secureConnection', (socket) => {
    if (socket.alpnProtocol !== 'h2') sessions += 1;
  });
  server.listen(0, '127.0.0.1', () => console.log('listening ' + server.address().port));
  return;
}
const server = tls ? http2.createSecureServer(keys) : http2.createServer();
server.on('session', (session) => {
  sessions += 1;
  session.number = sessions;
  session.served = 0;
});
server.on('stream', (stream, headers) => {
  streams += 1;
  const session = stream.session;
  session.served += 1;
  if (goawayAfter && session.served === goawayAfter) session.close();
  const path = headers[':path'];
  const method = headers[':method'];
  if (path === '/stats') {
    stream.respond({ ':status': 200, 'content-type': 'application/json' });
    return stream.end(JSON.stringify({ sessions, streams }));
  }
  if (path === '/hello') {
    stream.respond({ ':status': 200, 'content-type': 'text/plain', 'x-session': String(session.number) });
    return stream.end(method === 'HEAD' ? undefined : 'hello over h2\n');
  }
  if (path === '/early') {
    // 103 Early Hints now, the final answer once /release is asked for.
    stream.additionalHeaders({ ':status': 103, link: '</style.css>; rel=preload; as=style' });
    held.push(stream);
    return;
  }
  if (path === '/release') {
    for (const early of held.splice(0)) {
      if (early.destroyed) continue;
      early.respond({ ':status': 200 });
      early.end('final\n');
    }
    stream.respond({ ':status': 200 });
    return stream.end('released\n');
  }
  if (path === '/slow') {
    return setTimeout(() => {
      if (stream.destroyed) return;
      stream.respond({ ':status': 200, 'x-session': String(session.number) });
      stream.end('slow\n');
    }, 200);
  }
  if (path === '/echo' && method === 'POST') {
    const parts = [];
    stream.on('data', (d) => parts.push(d));
    stream.on('end', () => {
      const body = Buffer.concat(parts);
      stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'x-length': String(body.length) }));
      stream.end(body);
    });
    return;
  }
  stream.respond({ ':status': 404 });
  stream.end();
});
server.listen(0, '127.0.0.1', () => console.log('listening ' + server.address().port));
