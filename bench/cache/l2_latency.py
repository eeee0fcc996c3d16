#!/usr/bin/env python3
"""Latency of the shared cache tier (L2): a local hit, an L2 hit and a miss.

usage: bench/cache/l2_latency.py HAYATE_BINARY [N]

Starts, on 127.0.0.1 only: a redis-server (no persistence), a hayate serving N
generated 1 KiB files (the origin), and two caching hayates A and B sharing the
Redis (one worker each). Through A it fetches N files (misses: A writes them to
Redis); waits until Redis holds them; then times, at B over one keep-alive
connection, each file once (L2 hits), again (local hits), and N files nobody
fetched yet (misses that asked Redis first). Then Redis is killed and a fresh
caching hayate with `shared` and one without it are timed on misses,
interleaved in chunks of 100. Prints p50/p90/p99 per row; stops everything it
started, also on error.
"""
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    sys.exit(f"{what} did not listen on {port}")


def timed(port, paths):
    c = http.client.HTTPConnection("127.0.0.1", port)
    out, kinds = [], {}
    for p in paths:
        t = time.perf_counter()
        c.request("GET", p, headers={"Host": "bench"})
        r = c.getresponse()
        r.read()
        out.append((time.perf_counter() - t) * 1e6)
        cs = r.getheader("cache-status") or ""
        kind = "shared" if "detail=shared" in cs else "hit" if "; hit" in cs else "miss"
        kinds[kind] = kinds.get(kind, 0) + 1
    c.close()
    return out, kinds


def show(name, xs, kinds):
    xs = sorted(xs)
    q = lambda f: xs[min(len(xs) - 1, int(f * len(xs)))]
    print(f"| {name} | {len(xs)} | {q(.5):.0f} µs | {q(.9):.0f} µs | {q(.99):.0f} µs | {kinds} |")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 500
    procs = []
    tmp = tempfile.TemporaryDirectory()

    def start(args, port, what):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        wait_port(port, what)
        return p

    try:
        site = os.path.join(tmp.name, "site")
        os.mkdir(site)
        for i in range(2 * n):
            with open(os.path.join(site, f"f{i}"), "wb") as f:
                f.write(bytes((i + j) % 26 + 97 for j in range(1024)))
        rport, oport, aport, bport = (free_port() for _ in range(4))
        redis = start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                       "--save", "", "--appendonly", "no"], rport, "redis-server")
        start([binary, site, "--listen", f"127.0.0.1:{oport}", "--workers", "1",
               "--control", os.path.join(tmp.name, "o.sock")], oport, "origin")

        def cache(port, name, shared=True):
            args = [binary, "--proxy", f"http://127.0.0.1:{oport}", "--cache", "60s",
                    "--listen", f"127.0.0.1:{port}", "--workers", "1",
                    "--control", os.path.join(tmp.name, f"{name}.sock")]
            if shared:
                args += ["--shared", f"redis://127.0.0.1:{rport}"]
            return start(args, port, name)

        cache(aport, "a")
        cache(bport, "b")
        print("| at | n | p50 | p90 | p99 | Cache-Status |")
        print("|---|---|---|---|---|---|")
        show("A: miss (L2 asked first)", *timed(aport, [f"/f{i}" for i in range(n)]))
        deadline = time.monotonic() + 10
        while len(redis_keys(rport)) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        show("B: L2 hit", *timed(bport, [f"/f{i}" for i in range(n)]))
        show("B: local hit", *timed(bport, [f"/f{i}" for i in range(n)]))
        show("B: miss (L2 asked first)", *timed(bport, [f"/f{i}" for i in range(n, 2 * n)]))

        redis.send_signal(signal.SIGKILL)
        redis.wait()
        cport, dport = free_port(), free_port()
        cache(cport, "c")
        cache(dport, "d", shared=False)
        rows = {cport: ([], {}), dport: ([], {})}
        for chunk in range(0, 2 * n, 100):
            order = (cport, dport) if chunk // 100 % 2 else (dport, cport)
            for port in order:
                xs, kinds = timed(port, [f"/f{i}" for i in range(chunk, min(chunk + 100, 2 * n))])
                rows[port][0].extend(xs)
                for k, v in kinds.items():
                    rows[port][1][k] = rows[port][1].get(k, 0) + v
        show("Redis down: miss", *rows[cport])
        show("no shared tier: miss", *rows[dport])
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
        tmp.cleanup()


def redis_keys(port):
    """The L2 entry keys in Redis (KEYS over RESP: fine on a bench's few keys)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"*2\r\n$4\r\nKEYS\r\n$12\r\nhayate:l2:e*\r\n")
        f = s.makefile("rb")
        head = f.readline()
        count = int(head[1:]) if head.startswith(b"*") else 0
        keys = []
        for _ in range(count):
            size = int(f.readline()[1:])
            keys.append(f.read(size + 2)[:-2])
        return keys


if __name__ == "__main__":
    main()
