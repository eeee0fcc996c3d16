// A socket.io client (socket.io-client, as a browser runs it; cookies
// kept as a browser keeps them): connects to URL with the transports
// given, exchanges MESSAGES messages, prints each answer and the
// transport the last one went over.
// Usage: node socketio-client.js URL polling|websocket|both MESSAGES
const { io } = require('socket.io-client');
const [url, mode, count] = process.argv.slice(2);
const transports = { polling: ['polling'], websocket: ['websocket'], both: ['polling', 'websocket'] }[mode];
const socket = io(url, { transports, withCredentials: true, reconnection: false, timeout: 5000 });
const fail = (why) => { console.error(`client failed: ${why}`); process.exit(1); };
setTimeout(() => fail('timed out'), 10000).unref();
socket.on('connect_error', (e) => fail(`connect_error ${e.message}`));
socket.on('disconnect', (why) => { if (why !== 'io client disconnect') fail(`disconnected: ${why}`); });
socket.on('connect', async () => {
  // With both, wait for the upgrade to WebSocket so messages cross both.
  for (let i = 0; i < Number(count); i++) {
    const answer = await socket.timeout(5000).emitWithAck('say', `message ${i}`).catch((e) => fail(e.message));
    console.log(answer);
    await new Promise((r) => setTimeout(r, 20));
  }
  console.log(`transport ${socket.io.engine.transport.name}`);
  socket.disconnect();
});
