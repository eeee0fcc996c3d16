// A plain (non-gRPC) Node http2 server for crates/hayate/tests/h2_upstream.rs.
//   node http2-server.js [--tls KEY CERT] [--goaway-after N]
// prints "listening PORT" (127.0.0.1, a free port); h2c unless --tls.
//   GET  /hello   "hello over h2", with the connection's number in x-session
//   POST /echo    the body back, its length in the trailer x-length
//   GET  /slow    after 200 ms
//   GET  /stats   {"sessions": connections accepted, "streams": streams served}
// With --goaway-after N, a connection is closed gracefully (GOAWAY, its open
// streams finish) once it has served N streams.
'use strict';
const fs = require('fs');
const http2 = require('http2');

const args = process.argv.slice(2);
const arg = (name, n = 1) => {
  const i = args.indexOf(name);
  return i < 0 ? undefined : args.slice(i + 1, i + 1 + n);
};
const tls = arg('--tls', 2);
const goawayAfter = Number((arg('--goaway-after') || [0])[0]);

let sessions = 0;
let streams = 0;
const server = tls
  ? http2.createSecureServer({ key: fs.readFileSync(tls[0]), cert: fs.readFileSync(tls[1]) })
  : http2.createServer();
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
