// Case D of bench/run: Express answering a 1 KiB JSON document (serialized per request
// with res.json), on a TCP port and on a Unix socket from one process.
// usage: NODE_ENV=production node express-json.js PORT UNIX_PATH
'use strict';
const fs = require('fs');
const express = require('express');

const [port, sock] = process.argv.slice(2);
if (!port || !sock) { console.error('usage: node express-json.js PORT UNIX_PATH'); process.exit(2); }

// a plausible API answer padded to exactly 1,024 bytes of JSON
const doc = {
  id: 4711, name: 'hayate bench lab', status: 'ok', version: '1.0.0',
  tags: ['static', 'proxy', 'cache', 'tls'], owner: { id: 42, login: 'bench', admin: false },
  created_at: '2024-03-01T12:00:00Z', updated_at: '2024-03-02T08:30:00Z', counters: { a: 1, b: 2, c: 3 },
  description: '',
};
doc.description = 'x'.repeat(1024 - Buffer.byteLength(JSON.stringify(doc)));
if (Buffer.byteLength(JSON.stringify(doc)) !== 1024) throw new Error('document is not 1,024 bytes');

const app = express();
app.set('etag', false);
app.set('x-powered-by', false);
app.get('/', (req, res) => res.json(doc));
app.get('/api', (req, res) => res.json(doc));

const http = require('http');
const tcp = http.createServer(app);
tcp.keepAliveTimeout = 65000;
tcp.listen(Number(port), '127.0.0.1', () => console.log(`express listening on http://127.0.0.1:${port}/`));
try { fs.unlinkSync(sock); } catch (e) { /* not there */ }
const uds = http.createServer(app);
uds.keepAliveTimeout = 65000;
uds.listen(sock, () => console.log(`express listening on unix:${sock}`));
process.on('SIGTERM', () => process.exit(0));
