#!/usr/bin/env python3
"""Coalescing latency of hayate's response cache (issue 6, "Speed").

A Node origin answers every request after 200 ms. hayate (--cache 5s, one
worker, pinned to SERVER_CPU) is in front of it. Each round, CONC clients
(threads on CLIENT_CPU) ask at once for a URL nobody asked for before: one
request goes to the origin, the others wait for it. Reported: the origin's
request count (should be one per round) and the clients' latency
percentiles over all rounds; the target is p99 <= 210 ms.

usage: bench/cache/coalesce.py [--hayate-bin PATH] [--rounds N] [--conc N]
Load goes to 127.0.0.1 only; every process started here is stopped by pid.
"""
import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ORIGIN_JS = r"""
const http = require('http');
let count = 0;
const s = http.createServer((req, res) => {
  if (req.url === '/count') { res.end(String(count)); return; }
  if (req.url === '/') { res.end('ok'); return; }
  count++;
  setTimeout(() => { res.setHeader('Content-Type', 'text/plain'); res.end('x'.repeat(1024)); }, 200);
});
s.keepAliveTimeout = 65000;
s.listen(Number(process.argv[2]), '127.0.0.1');
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, deadline=10.0):
    end = time.time() + deadline
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/")
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing answers on port {port}")


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    return r.status, r.getheader("Cache-Status", ""), body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hayate-bin", default="target/release/hayate")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--conc", type=int, default=100)
    a = ap.parse_args()
    server_cpu = os.environ.get("SERVER_CPU", "0")
    client_cpu = os.environ.get("CLIENT_CPU", "1")
    os.sched_setaffinity(0, {int(client_cpu)})
    tmp = tempfile.mkdtemp(prefix="hayate-coalesce-")
    js = os.path.join(tmp, "origin.js")
    with open(js, "w") as f:
        f.write(ORIGIN_JS)
    os.makedirs(os.path.join(tmp, "empty"))
    oport, hport = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(["taskset", "-c", client_cpu, "node", js, str(oport)]))
        wait_http(oport)
        procs.append(subprocess.Popen(
            ["taskset", "-c", server_cpu, a.hayate_bin, "serve", os.path.join(tmp, "empty"),
             "--listen", f"127.0.0.1:{hport}", "--workers", "1", "--access-log", "off",
             "--proxy", f"http://127.0.0.1:{oport}", "--cache", "5s",
             "--control", os.path.join(tmp, "control.sock")],
            stdout=subprocess.DEVNULL))
        wait_http(hport)
        lat, collapsed, errors = [], 0, 0
        for r in range(a.rounds):
            path = f"/r{r}-{time.time_ns()}"
            start = threading.Barrier(a.conc)
            out = [None] * a.conc

            def client(i):
                start.wait()
                t0 = time.perf_counter()
                try:
                    st, cs, _ = get(hport, path)
                    out[i] = (time.perf_counter() - t0, st, cs)
                except OSError:
                    out[i] = (None, 0, "")

            ts = [threading.Thread(target=client, args=(i,)) for i in range(a.conc)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for d, st, cs in out:
                if d is None or st != 200:
                    errors += 1
                    continue
                lat.append(d)
                collapsed += "collapsed" in cs
        origin_requests = int(get(oport, "/count")[2])
        lat.sort()
        pct = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1000
        print(f"rounds {a.rounds} x {a.conc} concurrent cold requests, origin 200 ms")
        print(f"origin requests: {origin_requests} (one per round: {a.rounds})")
        print(f"coalesced: {collapsed}, errors: {errors}")
        print(f"latency ms: p50 {pct(50):.1f}  p90 {pct(90):.1f}  p99 {pct(99):.1f}  max {lat[-1]*1000:.1f}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
