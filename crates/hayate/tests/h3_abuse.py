#!/usr/bin/env python3
"""Abusive HTTP/3 and QUIC clients for hayate's tests, on aioquic: each mode
does one thing a well-behaved client never does and prints what came back
as one JSON line.

    h3_abuse.py reset-flood N PATH HOST PORT
        one connection; N requests for PATH, each cancelled (STOP_SENDING)
        as it is sent; prints how the connection ended.
    h3_abuse.py empty-frames N PATH HOST PORT
        one POST to PATH whose body is N empty DATA frames and N empty
        frames of a reserved type (RFC 9114 §7.2.8); prints the answer or
        how the connection ended.
    h3_abuse.py initials N SOCKETS HOST PORT
        N Initial packets, each a new connection's first flight (a real
        ClientHello) from one of SOCKETS source ports, none ever answered:
        handshakes left in progress, as from spoofed addresses; prints how
        many Retry packets came back.
"""

import asyncio
import json
import select
import socket
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated
from aioquic.quic.packet import QuicPacketType, pull_quic_header
from aioquic.buffer import Buffer


def config():
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
    c.verify_mode = ssl.CERT_NONE
    return c


class Abuser(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.ended = asyncio.get_running_loop().create_future()
        self.answers = 0
        self.answered = asyncio.Event()
        # Set at every datagram the server sends (its MAX_STREAMS among
        # them): what a client out of stream credit waits for.
        self.heard = asyncio.Event()

    def datagram_received(self, data, addr):
        super().datagram_received(data, addr)
        self.heard.set()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated) and not self.ended.done():
            self.ended.set_result({"closed_with": event.error_code, "reason": event.reason_phrase})
            return
        for e in self.h3.handle_event(event):
            if getattr(e, "stream_ended", False):
                self.answers += 1
                self.answered.set()

    def head(self, method, path):
        return [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", b"localhost"),
            (b":path", path.encode()),
        ]


async def reset_flood(n, path, host, port):
    async with connect(host, port, configuration=config(), create_protocol=Abuser) as c:
        quic = c._quic
        sent = 0
        deadline = time.monotonic() + 5
        while sent < n and not c.ended.done() and time.monotonic() < deadline:
            sid = quic.get_next_available_stream_id()
            if sid // 4 >= quic._remote_max_streams_bidi:
                # No stream credit yet: wait for the server's next datagram
                # (its MAX_STREAMS) before looking again.
                c.heard.clear()
                c.transmit()
                try:
                    await asyncio.wait_for(c.heard.wait(), 1)
                except asyncio.TimeoutError:
                    break
                continue
            c.h3.send_headers(sid, c.head("GET", path), end_stream=True)
            quic.stop_stream(sid, 0x10C)  # H3_REQUEST_CANCELLED
            sent += 1
            if sent % 32 == 0:
                # Out now, and the event loop reads what came back.
                c.transmit()
                await asyncio.sleep(0)
        c.transmit()
        try:
            ended = await asyncio.wait_for(asyncio.shield(c.ended), 3)
        except asyncio.TimeoutError:
            ended = {"closed_with": None}
        ended["cancelled"] = sent
        return ended


async def empty_frames(n, path, host, port):
    async with connect(host, port, configuration=config(), create_protocol=Abuser) as c:
        quic = c._quic
        sid = quic.get_next_available_stream_id()
        c.h3.send_headers(sid, c.head("POST", path), end_stream=False)
        # DATA (type 0) of length 0, then a reserved type 0x21 of length 0.
        quic.send_stream_data(sid, b"\x00\x00" * n + b"\x21\x00" * n, end_stream=True)
        c.transmit()
        answered = asyncio.ensure_future(c.answered.wait())
        await asyncio.wait([c.ended, answered], timeout=3, return_when=asyncio.FIRST_COMPLETED)
        answered.cancel()
        ended = c.ended.result() if c.ended.done() else {"closed_with": None}
        ended["answers"] = c.answers
        return ended


def initials(n, sockets, host, port):
    socks = []
    for _ in range(sockets):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        socks.append(s)
    now = time.time()
    for i in range(n):
        conn = QuicConnection(configuration=config())
        conn.connect((host, port), now=now)
        for data, _ in conn.datagrams_to_send(now=now):
            socks[i % sockets].sendto(data, (host, port))
    # What came back until a quiet 0.3 s (1 s at most: the handshakes begun
    # resend their flights): Retry packets,
    # Initials of handshakes hayate started.
    retries = answers = 0
    start = time.monotonic()
    while time.monotonic() - start < 1:
        readable, _, _ = select.select(socks, [], [], 0.3)
        if not readable:
            break
        for s in readable:
            try:
                data = s.recv(2048)
            except BlockingIOError:
                continue
            answers += 1
            header = pull_quic_header(Buffer(data=data), host_cid_length=8)
            if header.packet_type == QuicPacketType.RETRY:
                retries += 1
    return {"sent": n, "answers": answers, "retries": retries}


def main(argv):
    mode, *rest = argv
    if mode == "initials":
        n, sockets, host, port = rest
        return initials(int(n), int(sockets), host, int(port))
    n, path, host, port = rest
    run = {"reset-flood": reset_flood, "empty-frames": empty_frames}[mode]
    return asyncio.run(run(int(n), path, host, int(port)))


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
