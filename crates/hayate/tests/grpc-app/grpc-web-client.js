// A gRPC-Web client made by hand, as a browser's library speaks it (gRPC's
// PROTOCOL-WEB.md), for crates/hayate/tests/grpc.rs: Node's fetch (HTTP/1.1,
// like a browser's XHR or fetch), messages encoded with protobufjs, the
// answer read frame by frame as it arrives.
//   node grpc-web-client.js BASE_URL   runs the cases against BASE_URL (http://HOST:PORT)
//                                      and prints one JSON line per case: {"case", "ok", "detail"}
'use strict';
const path = require('path');
const protobuf = require('protobufjs');

// Field names as the .proto spells them (gap_ms), as grpc.js loads them.
const root = new protobuf.Root().loadSync(path.join(__dirname, 'test.proto'), { keepCase: true });
const Msg = root.lookupType('hayate.test.Msg');
const CountAsk = root.lookupType('hayate.test.CountAsk');

function report(name, ok, detail) {
  console.log(JSON.stringify({ case: name, ok: !!ok, detail: String(detail) }));
}

// One message as a gRPC frame: flag 0, big-endian length, the message.
function frame(Type, fields) {
  const message = Type.encode(Type.create(fields)).finish();
  const head = Buffer.alloc(5);
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, Buffer.from(message)]);
}

// Base64 decoded across pieces cut anywhere, padding allowed between them
// (Node's own decoder stops at the first '=').
class TextDecoder64 {
  constructor() { this.carry = ''; }
  push(text) {
    this.carry += text;
    const whole = this.carry.length - (this.carry.length % 4);
    const out = [];
    for (let q = 0; q < whole; q += 4) out.push(Buffer.from(this.carry.slice(q, q + 4), 'base64'));
    this.carry = this.carry.slice(whole);
    return Buffer.concat(out);
  }
}

// Calls METHOD of the Probe service (or another service's) and returns its
// HTTP status, content type, data frames (each with when it arrived), the
// status (from the trailer frame, or the head for a trailers-only answer).
async function call(base, service, method, body, { text = false, acceptText = false } = {}) {
  const contentType = text ? 'application/grpc-web-text+proto' : 'application/grpc-web+proto';
  const headers = { 'content-type': contentType, 'x-grpc-web': '1' };
  if (acceptText) headers.accept = 'application/grpc-web-text';
  const res = await fetch(`${base}/hayate.test.${service}/${method}`, {
    method: 'POST',
    headers,
    body: text ? Buffer.from(body.toString('base64')) : body,
    signal: AbortSignal.timeout(5000),
  });
  const answer = { http: res.status, type: res.headers.get('content-type'), head: Object.fromEntries(res.headers), messages: [], trailers: {} };
  const textAnswer = /grpc-web-text/.test(answer.type || '');
  const decoder = new TextDecoder64();
  let pending = Buffer.alloc(0);
  const reader = res.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const bytes = textAnswer ? decoder.push(Buffer.from(value).toString('latin1')) : Buffer.from(value);
    pending = Buffer.concat([pending, bytes]);
    while (pending.length >= 5 && pending.length >= 5 + pending.readUInt32BE(1)) {
      const len = pending.readUInt32BE(1);
      const payload = pending.subarray(5, 5 + len);
      if (pending[0] & 0x80) {
        for (const line of payload.toString().split('\r\n').filter(Boolean)) {
          const colon = line.indexOf(':');
          answer.trailers[line.slice(0, colon)] = line.slice(colon + 1).trim();
        }
      } else {
        answer.messages.push({ at: Date.now(), msg: Msg.toObject(Msg.decode(payload), { bytes: Buffer }) });
      }
      pending = pending.subarray(5 + len);
    }
  }
  answer.leftover = pending.length;
  // A trailers-only answer says its status in its head.
  answer.status = answer.trailers['grpc-status'] ?? res.headers.get('grpc-status');
  answer.message = answer.trailers['grpc-message'] ?? res.headers.get('grpc-message');
  return answer;
}

const show = (a) => JSON.stringify({ ...a, messages: a.messages.map((m) => m.msg.text) });

async function main(base) {
  // Unary, binary both ways.
  {
    const a = await call(base, 'Probe', 'Echo', frame(Msg, { text: 'hi' }));
    const ok = a.http === 200 && a.type === 'application/grpc-web+proto' && a.status === '0' &&
      a.messages.length === 1 && a.messages[0].msg.text === 'echo:hi' && a.leftover === 0;
    report('web_unary', ok, show(a));
  }
  // Unary in text (base64) both ways.
  {
    const a = await call(base, 'Probe', 'Echo', frame(Msg, { text: 'in text' }), { text: true });
    const ok = a.http === 200 && a.type === 'application/grpc-web-text+proto' && a.status === '0' &&
      a.messages.length === 1 && a.messages[0].msg.text === 'echo:in text';
    report('web_text_unary', ok, show(a));
  }
  // A server stream, asked in binary and answered in text (the client
  // accepts only text): three messages 300 ms apart arrive 300 ms apart.
  {
    const a = await call(base, 'Probe', 'Count', frame(CountAsk, { n: 3, gap_ms: 300 }), { acceptText: true });
    const t = a.messages.map((m) => m.at);
    const spread = t.length === 3 ? t[2] - t[0] : -1;
    const ok = a.type === 'application/grpc-web-text+proto' && a.status === '0' && spread >= 450;
    report('web_server_stream', ok, `spread ${spread} ms ${show(a)}`);
  }
  // An error status with trailing metadata.
  {
    const a = await call(base, 'Probe', 'Echo', frame(Msg, { text: 'fail' }));
    // In the trailer frame, or in the head of a trailers-only answer.
    const md = { ...a.head, ...a.trailers };
    const ok = a.http === 200 && a.status === '3' && decodeURIComponent(a.message || '') === 'failing as asked' &&
      md['x-reason'] === 'told to fail';
    report('web_error_status', ok, show(a));
  }
  // An upstream that is down: UNAVAILABLE in a trailers-only answer of
  // gRPC-Web's content type.
  {
    const a = await call(base, 'Down', 'Echo', frame(Msg, { text: 'hi' }));
    const ok = a.http === 200 && a.status === '14' && /^application\/grpc-web/.test(a.type) && /hayate/.test(a.message);
    report('web_upstream_down', ok, show(a));
  }
  // A text body that is not base64: the call fails as gRPC says (INTERNAL).
  {
    const res = await fetch(`${base}/hayate.test.Probe/Echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/grpc-web-text' },
      body: 'not base64!',
      signal: AbortSignal.timeout(5000),
    });
    await res.arrayBuffer();
    const ok = res.status === 200 && res.headers.get('grpc-status') === '13';
    report('web_bad_text', ok, `${res.status} grpc-status ${res.headers.get('grpc-status')} ${res.headers.get('grpc-message')}`);
  }
}

main(process.argv[2]).catch((e) => { console.error(e); process.exit(1); });
