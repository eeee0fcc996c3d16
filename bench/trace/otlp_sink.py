#!/usr/bin/env python3
"""bench/trace/otlp_sink.py: the collector of the bench lab's case TR, as cheap as a
collector can be, so that the CPU measured is the exporter's, not the collector's.

usage: otlp_sink.py PORT STATS_FILE

Listens on 127.0.0.1:PORT for OTLP over HTTP (POST /v1/traces, protobuf), reads every
body, counts the exports, their bytes and the spans in them (a span is one entry of
ScopeSpans.spans: counted by walking the protobuf's length-delimited fields, no
generated code), answers 200 with an empty ExportTraceServiceResponse, and after each
export rewrites STATS_FILE with `exports=N bytes=N spans=N`. Runs until killed."""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def fields(buf):
    """(field number, wire type, value) of one protobuf message's top-level fields; value is
    the bytes of a length-delimited field, else None."""
    i, n = 0, len(buf)
    while i < n:
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(buf, i)
            yield num, wire, None
        elif wire == 1:
            i += 8
            yield num, wire, None
        elif wire == 2:
            length, i = varint(buf, i)
            yield num, wire, buf[i:i + length]
            i += length
        elif wire == 5:
            i += 4
            yield num, wire, None
        else:
            raise ValueError(f"wire type {wire}")


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def count_spans(body):
    """ExportTraceServiceRequest{1: ResourceSpans{2: ScopeSpans{2: Span}}}."""
    spans = 0
    for num, _, rs in fields(body):
        if num != 1 or rs is None:
            continue
        for num2, _, ss in fields(rs):
            if num2 != 2 or ss is None:
                continue
            spans += sum(1 for num3, _, _ in fields(ss) if num3 == 2)
    return spans


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    totals = {"exports": 0, "bytes": 0, "spans": 0}

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        t = Sink.totals
        t["exports"] += 1
        t["bytes"] += len(body)
        try:
            t["spans"] += count_spans(body)
        except (ValueError, IndexError):
            pass
        with open(sys.argv[2], "w") as f:
            f.write(" ".join(f"{k}={v}" for k, v in t.items()) + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)
    print("listening", flush=True)
    server.serve_forever()
