// A socket.io chat server: echoes each message with the instance that
// holds the client's session.
const http = require('http');
const { Server } = require('socket.io');
const server = http.createServer((req, res) => res.end(`instance ${process.env.HAYATE_INSTANCE}`));
const io = new Server(server);
io.on('connection', (socket) => {
  socket.on('say', (text, ack) => ack(`instance ${process.env.HAYATE_INSTANCE} heard ${text}`));
});
server.listen(process.env.PORT || 3000);
