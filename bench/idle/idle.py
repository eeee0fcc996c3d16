#!/usr/bin/env python3
"""Memory of idle keep-alive connections.

For each N of --conns, a fresh hayate (one worker, access log off) serves a
1 KiB file; N keep-alive connections each send one GET for it, read the
response and stay open, idle. hayate's resident memory (VmRSS in
/proc/PID/status) is read once it has settled (unchanged for 0.5 s, at most
15 s) before the first connection and after the last; the report is
(after - before) / N, the RSS an idle keep-alive connection costs.

--protocol picks what the connections speak: http1 (default), h2c (HTTP/2
with prior knowledge on a plain listener), h2 (HTTP/2 over TLS by ALPN,
hayate's internal CA) or h3 (HTTP/3 over QUIC with aioquic, the tests'
client crates/hayate/tests/h3_client.py; hayate with --http3 true). An HTTP/2 connection sends the preface, its SETTINGS,
one GET on stream 1, acknowledges the server's SETTINGS, and is idle once the
response's last DATA frame has come.

usage: bench/idle/idle.py [--hayate-bin PATH] [--conns 3000,6000,9000]
                          [--protocol http1|h2c|h2|h3] [--markdown PATH]

--markdown appends one table row per N to PATH (the lab's case M, with the
issues' targets: an idle HTTP/1.1 connection in 2.5 KB, 10,000 idle HTTP/2
connections in 128 MiB), writing the table's head first if PATH is new.
Raises its own open-file limit to the hard limit (hayate raises its own);
load goes to 127.0.0.1 only; the hayate started here is stopped by pid.
"""
import argparse
import os
import re
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def vmrss_kib(status_text):
    """VmRSS in KiB from the text of /proc/PID/status."""
    m = re.search(r"^VmRSS:\s+(\d+) kB$", status_text, re.M)
    if not m:
        raise ValueError("no VmRSS line")
    return int(m.group(1))


def per_conn_bytes(before_kib, after_kib, conns):
    """RSS growth per connection, in bytes (rounded)."""
    return round((after_kib - before_kib) * 1024 / conns)


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return vmrss_kib(f.read())


def settled_rss(pid, quiet=0.5, limit=15.0):
    last, since, end = rss(pid), time.time(), time.time() + limit
    while time.time() < end:
        time.sleep(0.05)
        now = rss(pid)
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= quiet:
            return now
    raise SystemExit(f"hayate's RSS did not settle in {limit} s")


def get(sock, path):
    """One GET on a keep-alive connection; returns the status code."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("connection closed before a response")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ", 2)[1])


def h2_request(path, scheme):
    """The client's first bytes: preface, empty SETTINGS, HEADERS for GET
    `path` on stream 1 (HPACK: indexed :method GET and :scheme, literal
    :path and :authority without indexing)."""
    block = bytes([0x82, 0x87 if scheme == "https" else 0x86])
    block += bytes([0x04, len(path)]) + path.encode()
    block += bytes([0x01, 5]) + b"bench"
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    out += frame_head(0, 4, 0, 0)
    out += frame_head(len(block), 1, 0x5, 1) + block  # END_STREAM | END_HEADERS
    return out


def frame_head(length, kind, flags, stream):
    return length.to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")


def h2_get(sock, path, scheme):
    """One GET as the only stream of a new HTTP/2 connection; returns the
    :status (the first HEADERS must carry it as an indexed field or a
    literal)."""
    sock.sendall(h2_request(path, scheme))
    buf, status = b"", None
    while True:
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            length = int.from_bytes(buf[:3], "big")
            kind, flags = buf[3], buf[4]
            stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload, buf = buf[9:9 + length], buf[9 + length:]
            if kind == 4 and not flags & 1:  # the server's SETTINGS: acknowledge
                sock.sendall(frame_head(0, 4, 1, 0))
            elif kind == 1 and stream == 1 and status is None:
                status = hpack_status(payload)
            elif kind == 0 and stream == 1 and flags & 1:
                return status
            elif kind == 7:
                raise SystemExit("GOAWAY from the server")
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("connection closed before a response")
        buf += chunk


def hpack_status(block):
    """The :status of a response header block whose first field is :status:
    indexed (static entries 8-14), or a literal with the indexed name 8 and a
    value not Huffman-coded. None otherwise."""
    first = block[0]
    if first & 0x80:
        return {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}.get(first & 0x7F)
    name = first & 0x3F if first & 0x40 else first & 0x0F
    if name != 8 or block[1] & 0x80:
        return None
    n = block[1] & 0x7F
    return int(block[2:2 + n])


# Most bytes an idle connection may cost: 2.5 KB for HTTP/1.1 (issue 14),
# 128 MiB for 10,000 HTTP/2 connections (issue 16).
# 16 KB for HTTP/3 (issue 37).
TARGETS = {"http1": 2560, "h2c": 128 * 1024 * 1024 // 10000, "h2": 128 * 1024 * 1024 // 10000,
           "h3": 16 * 1024}

MARKDOWN_HEAD = ("| protocol | connections | RSS before (KiB) | RSS after (KiB) | bytes per connection "
                 "| all of them (MiB) | target | |\n|---|---:|---:|---:|---:|---:|---:|---|\n")

PROTOCOL_NAMES = {"http1": "HTTP/1.1", "h2c": "HTTP/2 (h2c)", "h2": "HTTP/2 over TLS",
                  "h3": "HTTP/3"}


def markdown_row(protocol, conns, before_kib, after_kib):
    """One row of case M's table."""
    per = per_conn_bytes(before_kib, after_kib, conns)
    target = TARGETS[protocol]
    verdict = "met" if per <= target else "missed"
    all_mib = (after_kib - before_kib) / 1024
    return (f"| {PROTOCOL_NAMES[protocol]} | {conns:,} | {before_kib:,} | {after_kib:,} | {per:,} "
            f"| {all_mib:.1f} | ≤ {target:,} B | {verdict} |\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(binary, root, conns, protocol):
    port = free_port()
    state = tempfile.mkdtemp(prefix="hayate-idle-")
    listen = f"127.0.0.1:{port}"
    args = [binary, root, "--workers", "1", "--access-log", "off"]
    if protocol == "h2":
        args += ["--listen", f"https://{listen}", "--tls", "internal", "--state-dir", state]
    else:
        args += ["--listen", listen]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tls = None
    held = []

    def connect(timeout):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        return tls.wrap_socket(sock, server_hostname="localhost") if tls else sock

    def one_get(sock):
        if protocol == "http1":
            return get(sock, "/1k.txt")
        return h2_get(sock, "/1k.txt", "https" if tls else "http")

    try:
        end = time.time() + 10
        while True:
            try:
                if protocol == "h2" and tls is None:
                    tls = ssl.create_default_context(
                        cafile=os.path.join(state, "local-ca", "ca.crt"))
                    tls.set_alpn_protocols(["h2"])
                warm = connect(1)
                break
            except (OSError, ssl.SSLError):
                tls = None
                if time.time() > end or proc.poll() is not None:
                    raise SystemExit("hayate did not start")
                time.sleep(0.05)
        # The first request fills the file cache (and the buffer pool).
        with warm:
            assert one_get(warm) == 200
        before = settled_rss(proc.pid)
        for _ in range(conns):
            s = connect(10)
            if one_get(s) != 200:
                raise SystemExit("non-200 answer")
            held.append(s)
        after = settled_rss(proc.pid)
        return before, after
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(state, ignore_errors=True)


def measure_h3(binary, root, conns):
    """As `measure`, over HTTP/3: each connection (a UDP socket of its own)
    sends one GET and stays open, idle (hayate's idle timeout is 75 s)."""
    import asyncio
    import contextlib
    import importlib.util
    from aioquic.asyncio.client import connect
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration

    path = os.path.join(REPO, "crates", "hayate", "tests", "h3_client.py")
    spec = importlib.util.spec_from_file_location("h3_client", path)
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    port = free_port()
    state = tempfile.mkdtemp(prefix="hayate-idle-")
    args = [binary, root, "--workers", "1", "--access-log", "off", "--http3", "true",
            "--listen", f"https://127.0.0.1:{port}", "--tls", "internal", "--state-dir", state]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ca = os.path.join(state, "local-ca", "ca.crt")

    async def one(stack):
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
        config.load_verify_locations(ca)
        c = await stack.enter_async_context(connect(
            "127.0.0.1", port, configuration=config, create_protocol=client.Client))
        answer = await c.request(f"localhost:{port}", "GET", "/1k.txt", [], None)
        if len(answer["body"]) != 1024:
            raise SystemExit("a short answer")

    async def run():
        end = time.time() + 10
        while not os.path.exists(ca):
            if time.time() > end or proc.poll() is not None:
                raise SystemExit("hayate did not start")
            await asyncio.sleep(0.05)
        async with contextlib.AsyncExitStack() as warm:
            await asyncio.sleep(0.2)
            await one(warm)
            before = settled_rss(proc.pid)
            async with contextlib.AsyncExitStack() as stack:
                for i in range(0, conns, 50):
                    await asyncio.gather(*[one(stack) for _ in range(min(50, conns - i))])
                return before, settled_rss(proc.pid)

    try:
        return asyncio.run(run())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(state, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hayate-bin", default=os.path.join(REPO, "target/release/hayate"))
    p.add_argument("--conns", default="3000,6000,9000")
    p.add_argument("--protocol", choices=["http1", "h2c", "h2", "h3"], default="http1")
    p.add_argument("--markdown", help="append the rows to this file (case M)")
    a = p.parse_args()
    if not os.access(a.hayate_bin, os.X_OK):
        raise SystemExit(f"{a.hayate_bin}: build it first (cargo build --release -p hayate)")
    counts = [int(n) for n in a.conns.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < max(counts) + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "1k.txt"), "wb") as f:
            f.write(b"x" * 1024)
        print("conns  rss_before_kib  rss_after_kib  bytes_per_conn")
        for n in counts:
            if a.protocol == "h3":
                before, after = measure_h3(a.hayate_bin, root, n)
            else:
                before, after = measure(a.hayate_bin, root, n, a.protocol)
            print(f"{n:5d}  {before:14d}  {after:13d}  {per_conn_bytes(before, after, n):14d}")
            sys.stdout.flush()
            if a.markdown:
                new = not os.path.exists(a.markdown)
                with open(a.markdown, "a") as f:
                    f.write((MARKDOWN_HEAD if new else "") + markdown_row(a.protocol, n, before, after))


if __name__ == "__main__":
    main()
