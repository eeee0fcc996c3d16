#!/usr/bin/env python3
"""Coalescing latency of hayate's response cache (issue 6, "Speed"; issue 19,
waiters' time to first byte).

A Node origin answers every request after 200 ms with BODY bytes (--body-bytes,
default 1 KiB; Content-Length). hayate (--cache 5s, one
worker, pinned to SERVER_CPU) is in front of it. The client is burst.c (built
here with gcc into the run's tmp dir, pinned to CLIENT_CPU): it opens CONC
keep-alive connections in advance, then each round writes a GET for a URL
nobody asked for before on all of them in one loop; one request goes to the
origin, the others wait for it. A request's latency runs from just before its
own write() to the arrival of its last byte, its time to first byte (TTFB) from
the same write() to the arrival of its response's first byte. Reported: the
origin's request count (should be one per round), the latency percentiles over
all rounds (target: p99 <= 210 ms for 1 KiB), the TTFB of the request that led
each round's fill and of those that waited on it, and per round the waiters'
worst TTFB minus the leader's (issue 19's target, with --body-bytes 1048576:
within 5 ms; waiters that only got the body once it was whole would trail by
the body's transfer time). Exit status 1 on any client error (non-200,
short read, timeout) or when the origin saw other than one request per round.

usage: bench/cache/coalesce.py [--hayate-bin PATH] [--rounds N] [--conc N] [--body-bytes N]
Load goes to 127.0.0.1 only; every process started here is stopped by pid.
"""
import argparse
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

ORIGIN_JS = r"""
const http = require('http');
let count = 0;
const body = Buffer.alloc(Number(process.argv[3]), 'x');
const s = http.createServer((req, res) => {
  if (req.url === '/count') { res.end(String(count)); return; }
  if (req.url === '/') { res.end('ok'); return; }
  count++;
  setTimeout(() => { res.setHeader('Content-Type', 'text/plain'); res.end(body); }, 200);
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


def parse_burst(text):
    """burst's stdout -> list of dicts (round, conn, status, latency_us: int;
    cache: str) for its "req" lines, and the "done" line as a dict (or None)."""
    reqs, done = [], None
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        fields = dict(f.split("=", 1) for f in rest.split())
        if kind == "req":
            reqs.append({k: (v if k == "cache" else int(v)) for k, v in fields.items()})
        elif kind == "done":
            done = {k: int(v) for k, v in fields.items()}
    return reqs, done


def percentile(sorted_values, p):
    """sorted_values[floor(p/100 * n)], clamped to the last one (no interpolation)"""
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


def ttfb_report(reqs):
    """Lines on time to first byte: the fill's leader (the round's one
    answered request that neither waited nor hit: cache=other) against the
    requests that waited on it (cache=collapsed), and per round the waiters'
    worst TTFB minus the leader's."""
    ok = [q for q in reqs if q["status"] == 200 and "ttfb_us" in q]
    lines = []
    for name, kind in (("leader", "other"), ("coalesced", "collapsed")):
        v = sorted(q["ttfb_us"] / 1000 for q in ok if q["cache"] == kind)
        if v:
            lines.append(f"time to first byte ms ({name}): p50 {percentile(v, 50):.1f}  "
                         f"p90 {percentile(v, 90):.1f}  p99 {percentile(v, 99):.1f}  max {v[-1]:.1f}")
    gaps = []
    for r in sorted({q["round"] for q in ok}):
        leaders = [q["ttfb_us"] for q in ok if q["round"] == r and q["cache"] == "other"]
        waiters = [q["ttfb_us"] for q in ok if q["round"] == r and q["cache"] == "collapsed"]
        if len(leaders) == 1 and waiters:
            gaps.append((max(waiters) - leaders[0]) / 1000)
    if gaps:
        gaps.sort()
        lines.append(f"waiters' worst TTFB minus the leader's, ms, over {len(gaps)} rounds: "
                     f"p50 {percentile(gaps, 50):.1f}  max {gaps[-1]:.1f}")
    return lines


def build_burst(outdir):
    exe = os.path.join(outdir, "burst")
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-o", exe, os.path.join(HERE, "burst.c")], check=True)
    return exe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hayate-bin", default="target/release/hayate")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--conc", type=int, default=100)
    ap.add_argument("--body-bytes", type=int, default=1024)
    a = ap.parse_args()
    server_cpu = os.environ.get("SERVER_CPU", "0")
    client_cpu = os.environ.get("CLIENT_CPU", "1")
    os.sched_setaffinity(0, {int(client_cpu)})
    tmp = tempfile.mkdtemp(prefix="hayate-coalesce-")
    js = os.path.join(tmp, "origin.js")
    with open(js, "w") as f:
        f.write(ORIGIN_JS)
    os.makedirs(os.path.join(tmp, "empty"))
    burst = build_burst(tmp)
    oport, hport = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(["taskset", "-c", client_cpu, "node", js, str(oport), str(a.body_bytes)]))
        wait_http(oport)
        procs.append(subprocess.Popen(
            ["taskset", "-c", server_cpu, a.hayate_bin, "serve", os.path.join(tmp, "empty"),
             "--listen", f"127.0.0.1:{hport}", "--workers", "1", "--access-log", "off",
             "--proxy", f"http://127.0.0.1:{oport}", "--cache", "5s",
             "--control", os.path.join(tmp, "control.sock")],
            stdout=subprocess.DEVNULL))
        wait_http(hport)
        pause_ms, timeout_ms = 50, 5000
        cmd = ["taskset", "-c", client_cpu, burst, f"127.0.0.1:{hport}", str(a.conc), str(a.rounds),
               f"/r{time.time_ns()}-", str(pause_ms), str(timeout_ms)]
        bound = a.rounds * (pause_ms + timeout_ms) / 1000 + 2 * timeout_ms / 1000 + 5
        try:
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=bound)
        except subprocess.TimeoutExpired:  # burst bounds each round itself; this is a last resort
            print(f"burst did not finish in {bound:.0f} s (killed)", file=sys.stderr)
            return 1
        reqs, done = parse_burst(res.stdout)
        origin_requests = int(get(oport, "/count")[2])
        lat = sorted(q["latency_us"] / 1000 for q in reqs if q["status"] == 200)
        waiters = sorted(q["latency_us"] / 1000 for q in reqs if q["status"] == 200 and q["cache"] == "collapsed")
        errors = (done or {}).get("errors", 0)
        print(f"rounds {a.rounds} x {a.conc} concurrent cold requests on keep-alive connections, "
              f"origin 200 ms, body {a.body_bytes} bytes")
        print(f"origin requests: {origin_requests} (one per round: {a.rounds})")
        print(f"answered: {len(reqs)} of {a.rounds * a.conc}, coalesced: {len(waiters)}, errors: {errors}")
        for name, v in (("all", lat), ("coalesced", waiters)):
            if v:
                print(f"latency ms ({name}): p50 {percentile(v, 50):.1f}  p90 {percentile(v, 90):.1f}  "
                      f"p99 {percentile(v, 99):.1f}  max {v[-1]:.1f}")
        for line in ttfb_report(reqs):
            print(line)
        if res.returncode != 0 or done is None:
            sys.stderr.write(res.stderr)
            print(f"burst failed (exit status {res.returncode})", file=sys.stderr)
            return 1
        if origin_requests != a.rounds:
            print("origin requests are not one per round", file=sys.stderr)
            return 1
        return 0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
