#!/usr/bin/env python3
"""An HTTP/3 client for hayate's tests, on aioquic (a QUIC and HTTP/3 stack
of its own, not hayate's): one QUIC connection, the requests given on the
command line one after another, and what came back as one JSON line each:
status, headers, interim (1xx) responses, body length and SHA-256, the body itself when short, and
what the handshake negotiated (ALPN, whether 0-RTT data was accepted).

    h3_client.py --ca CA.pem [--early] [--ticket FILE] HOST PORT \
        METHOD PATH [--header 'name: value']... [--body-file FILE]...

A request is METHOD PATH followed by its own --header/--body-file options;
a new METHOD starts the next request.

    h3_client.py --ca CA.pem --grpc-chat PATH TEXT,TEXT... HOST PORT

makes one gRPC bidirectional call instead (messages `{text}` of field 1):
(`--websocket PATH TEXT,TEXT...` opens a WebSocket over HTTP/3 instead,
RFC 9220, and sends each text, reading it back from an echoing upstream;
prints the status and what came back.)
each message is sent once the answer to the one before came back, so a
server that waits for the request's end never answers; prints what came
back and the call's trailers. With --ticket, the session ticket the
server sends is kept in FILE (the client waits up to a second for one),
and one already there resumes the session;
with --early as well, the first request goes out as 0-RTT data whatever the
ticket allows, to see that the server refuses it.

    h3_client.py --ca CA.pem --idle N HOST PORT GET PATH

opens N connections instead, each making the request once (the body read
whole), prints `open N` once they all have, and keeps them open, idle,
until its standard input closes.
"""

import argparse
import asyncio
import hashlib
import json
import os
import pickle
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset
from aioquic.quic.logger import QuicLogger

SHORT_BODY = 4096


def accept_interim_responses():
    """aioquic 1.2 takes the HEADERS after a response's first for trailers,
    and refuses a 103's successor for its :status. RFC 9114 §4.1 allows any
    number of 1xx HEADERS before the final one: after a 1xx, the stream's
    next HEADERS is read as a response again."""
    import aioquic.h3.connection as h3c

    validate = h3c.validate_response_headers

    def validate_noting_interim(headers, stream):
        validate(headers, stream)
        if dict(headers).get(b":status", b"").startswith(b"1"):
            stream.__dict__["interim_pending"] = True

    def get_state(stream):
        return stream.__dict__["headers_state"]

    def set_state(stream, state):
        if state == h3c.HeadersState.AFTER_HEADERS and stream.__dict__.pop("interim_pending", False):
            state = h3c.HeadersState.INITIAL
        stream.__dict__["headers_state"] = state

    h3c.validate_response_headers = validate_noting_interim
    h3c.H3Stream.headers_recv_state = property(get_state, set_state)


accept_interim_responses()


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.pending = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamReset) and event.stream_id in self.pending:
            future, _ = self.pending.pop(event.stream_id)
            future.set_exception(RuntimeError(f"stream reset, code {event.error_code}"))
            return
        if isinstance(event, ConnectionTerminated):
            for future, _ in self.pending.values():
                if not future.done():
                    future.set_exception(RuntimeError(f"connection closed: {event.reason_phrase}"))
            self.pending.clear()
            return
        for e in self.h3.handle_event(event):
            if e.stream_id not in self.pending:
                continue
            future, answer = self.pending[e.stream_id]
            if isinstance(e, HeadersReceived):
                fields = [(k.decode(), v.decode()) for k, v in e.headers]
                status = next((v for k, v in fields if k == ":status"), "")
                if answer["headers"] is None and status.startswith("1"):
                    answer["interim"].append(fields)
                elif answer["headers"] is None:
                    answer["headers"] = fields
                else:
                    answer["trailers"] = fields
                if "data" in answer:
                    answer["data"].set()
            elif isinstance(e, DataReceived):
                answer["body"].extend(e.data)
                if "data" in answer:
                    answer["data"].set()
            if e.stream_ended:
                del self.pending[e.stream_id]
                future.set_result(answer)

    async def request(self, authority, method, path, headers, body):
        stream_id = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ] + [(k.lower().encode(), v.encode()) for k, v in headers]
        future = asyncio.get_running_loop().create_future()
        self.pending[stream_id] = (future, {"headers": None, "trailers": None, "interim": [], "body": bytearray()})
        self.h3.send_headers(stream_id, fields, end_stream=body is None)
        if body is not None:
            self.h3.send_data(stream_id, body, end_stream=True)
        self.transmit()
        return await future


    async def grpc_chat(self, authority, path, texts):
        """One bidirectional gRPC call: a message, then its answer, then the
        next; the answers' texts and the call's trailers."""
        stream_id = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        future = asyncio.get_running_loop().create_future()
        answer = {"headers": None, "trailers": None, "interim": [], "body": bytearray(), "data": asyncio.Event()}
        self.pending[stream_id] = (future, answer)
        self.h3.send_headers(stream_id, fields)
        got = []
        for text in texts:
            message = b"\x0a" + bytes([len(text)]) + text.encode()
            self.h3.send_data(stream_id, b"\x00" + len(message).to_bytes(4, "big") + message, end_stream=False)
            self.transmit()
            while not future.done():
                body = answer["body"]
                if len(body) >= 5 and len(body) >= 5 + int.from_bytes(body[1:5], "big"):
                    n = int.from_bytes(body[1:5], "big")
                    reply = bytes(body[5 : 5 + n])
                    answer["body"] = body[5 + n :]
                    # Field 1 (text) comes first in grpc-js's encoding.
                    got.append(reply[2 : 2 + reply[1]].decode() if reply[:1] == b"\x0a" else "")
                    break
                answer["data"].clear()
                await asyncio.wait_for(answer["data"].wait(), 5)
        self.h3.send_data(stream_id, b"", end_stream=True)
        self.transmit()
        await asyncio.wait_for(future, 5)
        return got, answer


    async def websocket(self, authority, path, texts):
        """A WebSocket over HTTP/3 (RFC 9220): the extended CONNECT, then
        each text sent as the stream's bytes and read back (the test's
        upstream echoes what it gets after the upgrade); the answer's status
        and what came back."""
        stream_id = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", b"CONNECT"),
            (b":protocol", b"websocket"),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"sec-websocket-version", b"13"),
        ]
        future = asyncio.get_running_loop().create_future()
        answer = {"headers": None, "trailers": None, "interim": [], "body": bytearray(), "data": asyncio.Event()}
        self.pending[stream_id] = (future, answer)
        self.h3.send_headers(stream_id, fields)
        self.transmit()
        while answer["headers"] is None and not future.done():
            answer["data"].clear()
            await asyncio.wait_for(answer["data"].wait(), 5)
        status = next((int(v) for k, v in answer["headers"] or [] if k == ":status"), 0)
        got = []
        for text in texts if status == 200 else []:
            self.h3.send_data(stream_id, text.encode(), end_stream=False)
            self.transmit()
            while len(answer["body"]) < len(text) and not future.done():
                answer["data"].clear()
                await asyncio.wait_for(answer["data"].wait(), 5)
            got.append(bytes(answer["body"][: len(text)]).decode())
            del answer["body"][: len(text)]
        self.h3.send_data(stream_id, b"", end_stream=True)
        self.transmit()
        return status, got


def early_packets(logger):
    """How many 0-RTT packets the client sent (from its qlog trace)."""
    count = 0
    for trace in logger.to_dict()["traces"]:
        for event in trace["events"]:
            if event.get("name") == "transport:packet_sent":
                if event["data"]["header"].get("packet_type") == "0RTT":
                    count += 1
    return count


def parse(argv):
    top = argparse.ArgumentParser()
    top.add_argument("--ca")
    top.add_argument("--cert", nargs=2, metavar=("CERT", "KEY"), help="a client certificate (mutual TLS)")
    top.add_argument("--ticket")
    top.add_argument("--early", action="store_true")
    top.add_argument("--server-name", default="localhost")
    top.add_argument("--grpc-chat", nargs=2, metavar=("PATH", "TEXTS"))
    top.add_argument("--websocket", nargs=2, metavar=("PATH", "TEXTS"))
    top.add_argument("--idle", type=int, metavar="N")
    top.add_argument("host")
    top.add_argument("port", type=int)
    top.add_argument("rest", nargs=argparse.REMAINDER)
    args = top.parse_args(argv)
    requests, rest = [], args.rest
    one = argparse.ArgumentParser()
    one.add_argument("method")
    one.add_argument("path")
    one.add_argument("--header", action="append", default=[])
    one.add_argument("--body-file")
    while rest:
        end = next((i for i in range(2, len(rest)) if rest[i].isupper() and not rest[i - 1].startswith("--")), len(rest))
        r = one.parse_args(rest[:end])
        rest = rest[end:]
        headers = [tuple(p.strip() for p in h.split(":", 1)) for h in r.header]
        body = open(r.body_file, "rb").read() if r.body_file else None
        requests.append((r.method, r.path, headers, body))
    return args, requests


async def hold_idle(args, config, requests):
    """--idle N: N connections, each after one request, held until stdin closes."""
    import contextlib

    method, path, headers, body = requests[0]
    authority = f"{args.server_name}:{args.port}"

    async def one(stack):
        client = await stack.enter_async_context(
            connect(args.host, args.port, configuration=config, create_protocol=Client)
        )
        answer = await client.request(authority, method, path, headers, body)
        if not answer["body"]:
            raise SystemExit("an empty answer")

    async with contextlib.AsyncExitStack() as stack:
        # 50 handshakes at a time: all at once would be a flood (hayate
        # answers one with Retry).
        for start in range(0, args.idle, 50):
            await asyncio.gather(*[one(stack) for _ in range(min(50, args.idle - start))])
        print(f"open {args.idle}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        # Gone without closing each: a clean close waits out its draining
        # period connection by connection (a minute for 200).
        os._exit(0)


async def main(argv):
    args, requests = parse(argv)
    logger = QuicLogger()
    config = QuicConfiguration(
        is_client=True, alpn_protocols=H3_ALPN, server_name=args.server_name, quic_logger=logger
    )
    if args.cert:
        config.load_cert_chain(args.cert[0], args.cert[1])
    if args.ca:
        config.load_verify_locations(args.ca)
    else:
        config.verify_mode = ssl.CERT_NONE
    if args.ticket and os.path.exists(args.ticket):
        with open(args.ticket, "rb") as f:
            ticket = pickle.load(f)
        if args.early:
            # As if the server had offered early data: the client sends it,
            # and the server must refuse it.
            ticket.max_early_data_size = 0xFFFFFFFF
        config.session_ticket = ticket
    if args.idle:
        return await hold_idle(args, config, requests)

    kept = asyncio.Event()

    def keep(ticket):
        if args.ticket:
            with open(args.ticket, "wb") as f:
                pickle.dump(ticket, f)
            kept.set()

    authority = f"{args.server_name}:{args.port}"
    async with connect(
        args.host,
        args.port,
        configuration=config,
        create_protocol=Client,
        session_ticket_handler=keep,
        wait_connected=not args.early,
    ) as client:
        if args.grpc_chat:
            path, texts = args.grpc_chat
            got, answer = await client.grpc_chat(authority, path, texts.split(","))
            print(json.dumps({"chat": got, "headers": answer["headers"], "trailers": answer["trailers"]}), flush=True)
        if args.websocket:
            path, texts = args.websocket
            status, got = await client.websocket(authority, path, texts.split(","))
            print(json.dumps({"status": status, "echoed": got}), flush=True)
        for method, path, headers, body in requests:
            answer = await client.request(authority, method, path, headers, body)
            fields = answer["headers"] or []
            status = next((int(v) for k, v in fields if k == ":status"), 0)
            data = bytes(answer["body"])
            tls = client._quic.tls
            out = {
                "status": status,
                "headers": [[k, v] for k, v in fields if not k.startswith(":")],
                "trailers": answer["trailers"],
                "interim": answer["interim"],
                "length": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "alpn": tls.alpn_negotiated,
                "early_data_accepted": bool(tls.early_data_accepted),
                "resumed": bool(tls.session_resumed),
                "early_packets_sent": early_packets(logger),
            }
            if len(data) <= SHORT_BODY:
                out["body"] = data.decode("latin-1")
            print(json.dumps(out), flush=True)
        # Wait a moment for a session ticket of this connection, sent after
        # the handshake (hayate's 0-RTT tickets are good once: the next
        # connection needs a new one).
        if args.ticket:
            try:
                await asyncio.wait_for(kept.wait(), 1)
            except asyncio.TimeoutError:
                pass


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1:]))
    except Exception as e:  # a clear line for the test's assertion message
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(1)
