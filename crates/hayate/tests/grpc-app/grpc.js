// A grpc-js server and client for crates/hayate/tests/grpc.rs.
//   node grpc.js server [unix:PATH|HOST:PORT] [HEALTH]
//                                   listens on 127.0.0.1 (a free port), prints "listening PORT"
//                                   (or on the socket PATH, and prints "listening PATH"); its
//                                   grpc.health.v1 service answers HEALTH (default SERVING) for
//                                   the server and hayate.test.Probe, NOT_FOUND for others
//   node grpc.js client TARGET [CA] runs every call kind against TARGET (h2c, or TLS
//                                   trusting CA for the name localhost) and prints one
//                                   JSON line per case: {"case", "ok", "detail"}
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');

const definition = loader.loadSync(path.join(__dirname, 'test.proto'), { keepCase: true, defaults: true });
const proto = grpc.loadPackageDefinition(definition).hayate.test;
const health = grpc.loadPackageDefinition(
  loader.loadSync(path.join(__dirname, 'health.proto'), { keepCase: true, defaults: true }),
).grpc.health.v1;
// 4 MiB messages and their framing fit.
const MAX = 8 * 1024 * 1024;
const LIMITS = { 'grpc.max_receive_message_length': MAX, 'grpc.max_send_message_length': MAX };

function server(on, status = 'SERVING') {
  const s = new grpc.Server(LIMITS);
  s.addService(health.Health.service, {
    check(call, done) {
      const known = ['', 'hayate.test.Probe'];
      if (!known.includes(call.request.service)) return done({ code: grpc.status.NOT_FOUND, details: 'unknown service' });
      done(null, { status });
    },
  });
  s.addService(proto.Probe.service, {
    echo(call, done) {
      const m = call.request;
      if (m.text === 'fail') {
        const md = new grpc.Metadata();
        md.set('x-reason', 'told to fail');
        md.set('x-detail-bin', Buffer.from([0, 1, 2, 255]));
        return done({ code: grpc.status.INVALID_ARGUMENT, details: 'failing as asked', metadata: md });
      }
      if (m.text === 'hang') {
        call.on('cancelled', () => console.log('cancelled hang'));
        return;
      }
      done(null, { text: 'echo:' + m.text, data: m.data, sent_at: Date.now() });
    },
    count(call) {
      const { n, gap_ms } = call.request;
      let i = 0;
      let cancelled = false;
      const started = Date.now();
      // grpc-js also says 'cancelled' once a finished call's stream closes:
      // only a call cut short counts, with how long after it began.
      call.on('cancelled', () => {
        cancelled = true;
        if (i < n) console.log('cancelled count ' + (Date.now() - started));
      });
      const next = () => {
        if (cancelled) return;
        if (i === n) return call.end();
        call.write({ text: 'msg' + i, sent_at: Date.now() });
        i += 1;
        setTimeout(next, gap_ms);
      };
      next();
    },
    chat(call) {
      call.on('data', (m) => call.write({ text: 'echo:' + m.text, sent_at: Date.now() }));
      call.on('end', () => call.end());
    },
  });
  s.bindAsync(on && on !== '-' ? on : '127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) throw err;
    console.log('listening ' + (on && on.startsWith('unix:') ? on.slice('unix:'.length) : port));
  });
}

function report(name, ok, detail) {
  console.log(JSON.stringify({ case: name, ok, detail: String(detail) }));
}

function failure(err) {
  return { code: err.code, details: err.details, metadata: err.metadata && err.metadata.getMap() };
}

async function client(target, ca) {
  const credentials = ca
    ? grpc.credentials.createSsl(fs.readFileSync(ca))
    : grpc.credentials.createInsecure();
  const options = { ...LIMITS, 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' };
  const probe = new proto.Probe(target, credentials, options);
  const down = new proto.Down(target, credentials, options);
  // Every call has a deadline, so a proxy that loses one fails the case
  // instead of hanging the test; 5 s is past hayate's proxy_timeout (1 s).
  const unary = (stub, msg, deadlineMs = 5000) =>
    new Promise((resolve) => {
      stub.echo(msg, { deadline: Date.now() + deadlineMs }, (err, reply) => resolve({ err, reply }));
    });
  const soon = (ms) => new Promise((r) => setTimeout(r, ms));

  // Unary.
  {
    const { err, reply } = await unary(probe, { text: 'hi' });
    report('unary', !err && reply.text === 'echo:hi', err ? JSON.stringify(failure(err)) : reply.text);
  }
  // Server streaming: three messages 300 ms apart arrive 300 ms apart (a
  // buffering proxy hands them over together, at the end).
  {
    const arrived = await new Promise((resolve) => {
      const times = [];
      const call = probe.count({ n: 3, gap_ms: 300 }, { deadline: Date.now() + 5000 });
      call.on('data', () => times.push(Date.now()));
      call.on('error', (e) => resolve({ times, err: e }));
      call.on('end', () => resolve({ times }));
    });
    const { times, err } = arrived;
    const spread = times.length === 3 ? times[2] - times[0] : -1;
    report('server_stream', !err && spread >= 450, `spread ${spread} ms, ${times.length} messages${err ? ', ' + err.message : ''}`);
  }
  // The client cancels a server stream after its first message, while the
  // server waits 10 s to send the next: the server sees the call cancelled
  // at once, not when its next message finds the stream gone.
  {
    const result = await new Promise((resolve) => {
      const call = probe.count({ n: 5, gap_ms: 10000 }, { deadline: Date.now() + 60000 });
      call.on('data', () => call.cancel());
      call.on('error', (e) => resolve(e));
      call.on('end', () => resolve(null));
    });
    report('cancel_mid_stream', result && result.code === grpc.status.CANCELLED, JSON.stringify(result ? failure(result) : 'ended'));
  }
  // Bidirectional: each message is sent only once the previous one was
  // answered; a proxy that waits for the request's end never answers.
  {
    const result = await new Promise((resolve) => {
      const call = probe.chat({ deadline: Date.now() + 5000 });
      const sent = ['a', 'b', 'c'];
      const got = [];
      const timer = setTimeout(() => { call.cancel(); resolve({ got, err: 'no answer within 3 s' }); }, 3000);
      call.on('data', (m) => {
        got.push(m.text);
        if (got.length < sent.length) call.write({ text: sent[got.length] });
        else call.end();
      });
      call.on('error', (e) => { clearTimeout(timer); resolve({ got, err: e.message }); });
      call.on('end', () => { clearTimeout(timer); resolve({ got }); });
      call.write({ text: sent[0] });
    });
    const ok = !result.err && result.got.join(',') === 'echo:a,echo:b,echo:c';
    report('bidi_stream', ok, `${result.got.join(',')} ${result.err || ''}`);
  }
  // An error status with trailing metadata, binary included.
  {
    const { err } = await unary(probe, { text: 'fail' });
    const md = err && err.metadata;
    const bin = md && md.get('x-detail-bin')[0];
    const ok = err && err.code === grpc.status.INVALID_ARGUMENT && err.details === 'failing as asked' &&
      md.get('x-reason')[0] === 'told to fail' && Buffer.isBuffer(bin) && bin.equals(Buffer.from([0, 1, 2, 255]));
    report('error_with_trailers', !!ok, JSON.stringify(err ? failure(err) : 'no error'));
  }
  // The client's deadline.
  {
    const { err } = await unary(probe, { text: 'hang' }, 300);
    report('deadline_exceeded', err && err.code === grpc.status.DEADLINE_EXCEEDED, JSON.stringify(err ? failure(err) : 'answered'));
  }
  // hayate's own limit (the route's proxy_timeout, 1 s, before the call's
  // 5 s deadline), said in gRPC's terms.
  {
    const { err } = await unary(probe, { text: 'hang' });
    const ok = err && err.code === grpc.status.DEADLINE_EXCEEDED && /hayate/.test(err.details);
    report('hayate_deadline', !!ok, JSON.stringify(err ? failure(err) : 'answered'));
  }
  // A 4 MiB message each way.
  {
    const data = crypto.randomBytes(4 * 1024 * 1024);
    const { err, reply } = await unary(probe, { text: 'big', data });
    const ok = !err && Buffer.from(reply.data).equals(data);
    report('four_mib', ok, err ? JSON.stringify(failure(err)) : `${reply.data.length} bytes back`);
  }
  // An upstream that is down: UNAVAILABLE, not UNKNOWN.
  {
    const { err } = await unary(down, { text: 'hi' });
    const ok = err && err.code === grpc.status.UNAVAILABLE && /hayate/.test(err.details);
    report('upstream_down', !!ok, JSON.stringify(err ? failure(err) : 'answered'));
  }
  await soon(10);
  probe.close();
  down.close();
}

const [mode, target, third] = process.argv.slice(2);
if (mode === 'server') server(target, third);
else if (mode === 'client') client(target, third).catch((e) => { console.error(e); process.exit(1); });
else { console.error('usage: grpc.js server [ON] [HEALTH] | client TARGET [CA]'); process.exit(2); }
