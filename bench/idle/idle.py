#!/usr/bin/env python3
"""Memory of idle keep-alive connections.

For each N of --conns, a fresh hayate (one worker, access log off) serves a
1 KiB file; N keep-alive connections each send one GET for it, read the
response and stay open, idle. hayate's resident memory (VmRSS in
/proc/PID/status) is read once it has settled (unchanged for 0.5 s, at most
15 s) before the first connection and after the last; the report is
(after - before) / N, the RSS an idle keep-alive connection costs.

usage: bench/idle/idle.py [--hayate-bin PATH] [--conns 3000,6000,9000]
Raises its own open-file limit to the hard limit (hayate raises its own);
load goes to 127.0.0.1 only; the hayate started here is stopped by pid.
"""
import argparse
import os
import re
import resource
import socket
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(binary, root, conns):
    port = free_port()
    proc = subprocess.Popen(
        [binary, root, "--listen", f"127.0.0.1:{port}", "--workers", "1", "--access-log", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held = []
    try:
        end = time.time() + 10
        while True:
            try:
                warm = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                if time.time() > end:
                    raise SystemExit("hayate did not start")
                time.sleep(0.05)
        # The first request fills the file cache (and the buffer pool).
        with warm:
            assert get(warm, "/1k.txt") == 200
        before = settled_rss(proc.pid)
        for _ in range(conns):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if get(s, "/1k.txt") != 200:
                raise SystemExit("non-200 answer")
            held.append(s)
        after = settled_rss(proc.pid)
        return before, after
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait(timeout=10)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hayate-bin", default=os.path.join(REPO, "target/release/hayate"))
    p.add_argument("--conns", default="3000,6000,9000")
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
            before, after = measure(a.hayate_bin, root, n)
            print(f"{n:5d}  {before:14d}  {after:13d}  {per_conn_bytes(before, after, n):14d}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
