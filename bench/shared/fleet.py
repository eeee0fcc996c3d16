#!/usr/bin/env python3
"""Case F: three hayates on loopback sharing one Redis (issue 20, "Speed").

Three hayate boxes (`--workers 1 --cache 60s --shared redis://...`) and
redis-server share SERVER_CPU; the origin and the clients share CLIENT_CPU.

Latency (bench/cache/burst.c, one connection, one request at a time, a new
URL per request): the same N URLs are asked of box A, then box B, then box B
again, then box C:
  - A: every request is a miss that goes to the origin (a Node server that
    answers 1 KiB at once and counts requests) and is written to Redis;
  - B, first pass: a miss in B's own cache answered from Redis (an L2 hit);
  - B, second pass: B's own cache (a local hit);
  - C: L2 hits again.
Reported: p50/p99 of each, the origin's requests per box (what the shared
tier saved: without it every box asks the origin N times), and the
Cache-Status classes burst saw.

Throughput (wrk -t1 -c100, a new URL per request, so every request is a
local miss; the origin is bench/ceiling, a C responder, so the front's own
cost shows): a box without the shared tier, a box with Redis up, and a box
with Redis stopped (the circuit breaker's case). Reported: rps and the box's
µs CPU per request (utime+stime from /proc). The issue's targets: an L2 hit
costs <= 1 ms p99 more than a local hit; throughput with Redis down within
5 % of no shared tier.

usage: bench/shared/fleet.py [--hayate-bin PATH] [--requests N] [--seconds N]
                             [--reps N] [--markdown FILE]
Load goes to 127.0.0.1 only; every process started here is stopped by pid.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "cache"))
from coalesce import build_burst, free_port, get, parse_burst, percentile, wait_http  # noqa: E402

ORIGIN_JS = r"""
const http = require('http');
let count = 0;
const body = 'x'.repeat(1024);
const s = http.createServer((req, res) => {
  if (req.url === '/count') { res.end(String(count)); return; }
  if (req.url === '/') { res.end('ok'); return; }
  count++;
  res.setHeader('Content-Type', 'text/plain');
  res.end(body);
});
s.keepAliveTimeout = 65000;
s.listen(Number(process.argv[2]), '127.0.0.1');
"""

SITE = "fleet.test"

UNIQUE_LUA = r"""
-- a new URL for every request: every request is a miss in the box's own cache
local prefix, n = "", 0
init = function(args) prefix = args[1] or "" end
request = function()
   n = n + 1
   return wrk.format("GET", "/t-" .. prefix .. "-" .. n)
end
done = function(summary, latency, requests)
   local e = summary.errors
   io.write(string.format("WRK_RESULT requests=%d duration_us=%d errors=%d status=%d\n",
      summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status))
end
"""


class Fleet:
    """The processes of a run, stopped by pid at the end."""

    def __init__(self, tmp, server_cpu, client_cpu, hayate_bin):
        self.tmp, self.server_cpu, self.client_cpu, self.bin = tmp, server_cpu, client_cpu, hayate_bin
        self.procs = []

    def start(self, argv, cpu, **kw):
        p = subprocess.Popen(["taskset", "-c", cpu] + argv, **kw)
        self.procs.append(p)
        return p

    def stop(self, p):
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        self.procs.remove(p)

    def stop_all(self):
        for p in list(self.procs):
            self.stop(p)

    def redis(self, port):
        p = self.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no"], self.server_cpu, stdout=subprocess.DEVNULL)
        end = time.time() + 10
        while time.time() < end:
            r = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True)
            if r.stdout.strip() == "PONG":
                return p
            time.sleep(0.05)
        raise SystemExit(f"redis-server does not answer on port {port}")

    def hayate(self, name, origin_port, redis_port=None):
        port = free_port()
        argv = [self.bin, "serve", os.path.join(self.tmp, "empty"), "--listen", f"127.0.0.1:{port}",
                "--workers", "1", "--access-log", "off", "--proxy", f"http://127.0.0.1:{origin_port}",
                "--cache", "60s", "--control", os.path.join(self.tmp, f"{name}.sock")]
        if redis_port is not None:
            argv += ["--shared", f"redis://127.0.0.1:{redis_port}/0"]
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        p = self.start(argv, self.server_cpu, stdout=subprocess.DEVNULL, stderr=log)
        wait_http(port)
        return p, port


def settle_redis(port, at_least, bound=20.0):
    """Waits until Redis holds at least `at_least` keys and their number has
    stopped growing: box A writes what it stored in the background."""
    end, last = time.time() + bound, -1
    while time.time() < end:
        n = int(subprocess.run(["redis-cli", "-p", str(port), "dbsize"], capture_output=True,
                               text=True).stdout.strip() or 0)
        if n >= at_least and n == last:
            return
        last = n
        time.sleep(0.1)
    print(f"Redis holds {last} keys after {bound:.0f} s (expected at least {at_least})", file=sys.stderr)


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def burst_pass(burst, cpu, port, n, prefix):
    """n sequential requests for prefix0..prefix(n-1) on one connection."""
    # One Host for every box: they answer for one site, and the site's name is in the key.
    cmd = ["taskset", "-c", cpu, burst, f"127.0.0.1:{port}", "1", str(n), prefix, "0", "5000", SITE]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=n * 5 + 30)
    reqs, done = parse_burst(res.stdout)
    if res.returncode != 0 or done is None or done.get("errors"):
        sys.stderr.write(res.stderr)
        raise SystemExit(f"burst failed on port {port} (exit status {res.returncode})")
    lat = sorted(q["latency_us"] / 1000 for q in reqs)
    classes = {}
    for q in reqs:
        classes[q["cache"]] = classes.get(q["cache"], 0) + 1
    return lat, classes


def wrk_run(cpu, port, seconds, lua, prefix):
    """(requests per second, errors) of one wrk run with the unique-URL script."""
    cmd = ["taskset", "-c", cpu, "wrk", "-t1", "-c100", f"-d{seconds}s", "-s", lua,
           f"http://127.0.0.1:{port}/", "--", prefix]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    for line in res.stdout.splitlines():
        if line.startswith("WRK_RESULT "):
            f = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
            return f["requests"] * 1e6 / f["duration_us"], f["errors"] + f["status"]
    raise SystemExit(f"wrk printed no result:\n{res.stdout}\n{res.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hayate-bin", default="target/release/hayate")
    ap.add_argument("--requests", type=int, default=2000, help="URLs per latency pass")
    ap.add_argument("--seconds", type=int, default=5, help="seconds per throughput run")
    ap.add_argument("--reps", type=int, default=3, help="throughput repetitions (alternating setups)")
    ap.add_argument("--markdown", help="write the tables here too")
    a = ap.parse_args()
    for tool in ("redis-server", "redis-cli", "wrk", "node", "gcc", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed (bench/run installs it)")
    server_cpu = os.environ.get("SERVER_CPU", "0")
    client_cpu = os.environ.get("CLIENT_CPU", "1")
    tmp = tempfile.mkdtemp(prefix="hayate-fleet-")
    os.makedirs(os.path.join(tmp, "empty"))
    js = os.path.join(tmp, "origin.js")
    with open(js, "w") as f:
        f.write(ORIGIN_JS)
    lua = os.path.join(tmp, "unique.lua")
    with open(lua, "w") as f:
        f.write(UNIQUE_LUA)
    burst = build_burst(tmp)
    ceiling = os.path.join(tmp, "ceiling")
    subprocess.run(["gcc", "-O2", "-o", ceiling, os.path.join(BENCH, "ceiling", "ceiling.c")], check=True)
    fleet = Fleet(tmp, server_cpu, client_cpu, a.hayate_bin)
    out = []
    try:
        redis_port, origin_port = free_port(), free_port()
        redis = fleet.redis(redis_port)
        fleet.start(["node", js, str(origin_port)], client_cpu)
        wait_http(origin_port)
        boxes = {name: fleet.hayate(name, origin_port, redis_port) for name in "ABC"}

        # latency, and what the tier saves the origin
        prefix = f"/f{time.time_ns()}-"
        rows, origin_per_box, before = [], {}, int(get(origin_port, "/count")[2])
        for label, box in (("A: origin (miss everywhere)", "A"), ("B: L2 hit (Redis)", "B"),
                           ("B: local hit", "B"), ("C: L2 hit (Redis)", "C")):
            if box == "B" and label.startswith("B: L2"):
                settle_redis(redis_port, a.requests)
            lat, classes = burst_pass(burst, client_cpu, boxes[box][1], a.requests, prefix)
            now = int(get(origin_port, "/count")[2])
            origin_per_box[box] = origin_per_box.get(box, 0) + now - before
            before = now
            rows.append((label, percentile(lat, 50), percentile(lat, 99), lat[-1],
                         ", ".join(f"{k} {v}" for k, v in sorted(classes.items()))))
        out.append(f"Latency: {a.requests} URLs asked once per pass, one connection, one request at a time.\n")
        out.append("| pass | p50 ms | p99 ms | max ms | Cache-Status classes (burst) |")
        out.append("|---|---:|---:|---:|---|")
        for label, p50, p99, mx, cls in rows:
            out.append(f"| {label} | {p50:.3f} | {p99:.3f} | {mx:.3f} | {cls} |")
        l2_p99 = max(rows[1][2], rows[3][2])
        out.append(f"\nL2 hit p99 - local hit p99 = {l2_p99 - rows[2][2]:+.3f} ms (target <= +1 ms); "
                   f"origin p99 {rows[0][2]:.3f} ms.")
        out.append("\nOrigin requests per box for the same "
                   f"{a.requests} URLs: " + ", ".join(f"{b} {origin_per_box.get(b, 0)}" for b in "ABC")
                   + f" (without the shared tier: {a.requests} each; saved: "
                   + ", ".join(f"{b} {a.requests - origin_per_box.get(b, 0)}" for b in "ABC") + ").\n")
        for box in boxes.values():
            fleet.stop(box[0])

        # throughput on local misses: no tier, Redis up, Redis down
        ceiling_port = free_port()
        fleet.start([ceiling, f"127.0.0.1:{ceiling_port}"], client_cpu, stdout=subprocess.DEVNULL)
        wait_http(ceiling_port)
        results = {"no shared tier": [], "Redis up": [], "Redis down": []}
        for rep in range(a.reps):
            for setup in results:
                if setup == "Redis down" and redis is not None:
                    fleet.stop(redis)
                    redis = None
                if setup == "Redis up" and redis is None:
                    redis = fleet.redis(redis_port)
                shared = None if setup == "no shared tier" else redis_port
                p, port = fleet.hayate(f"t-{rep}-{len(results[setup])}", ceiling_port, shared)
                # one warm-up second: connections to the origin (and Redis) open
                wrk_run(client_cpu, port, 1, lua, f"w{time.time_ns()}")
                c0 = cpu_seconds(p.pid)
                rps, errors = wrk_run(client_cpu, port, a.seconds, lua, f"m{time.time_ns()}")
                used = cpu_seconds(p.pid) - c0
                results[setup].append((rps, used * 1e6 / max(1.0, rps * a.seconds), errors))
                fleet.stop(p)
        out.append(f"Throughput: wrk -t1 -c100 -d{a.seconds}s, a new URL per request (every request a "
                   f"local miss), the origin bench/ceiling; {a.reps} repetitions alternating, median "
                   "[min-max].\n")
        out.append("| setup | rps | rps × no tier | µs CPU/req (box) | errors |")
        out.append("|---|---:|---:|---:|---:|")
        base = sorted(r[0] for r in results["no shared tier"])[len(results["no shared tier"]) // 2]
        for setup, rs in results.items():
            rps = sorted(r[0] for r in rs)
            cpu = sorted(r[1] for r in rs)
            med = rps[len(rps) // 2]
            out.append(f"| {setup} | {med:,.0f} [{rps[0]:,.0f}-{rps[-1]:,.0f}] | {med / base:.2f}× | "
                       f"{cpu[len(cpu) // 2]:.2f} [{cpu[0]:.2f}-{cpu[-1]:.2f}] | {sum(r[2] for r in rs)} |")
        text = "\n".join(out)
        print(text)
        if a.markdown:
            with open(a.markdown, "w") as f:
                f.write(text + "\n")
        return 0
    finally:
        fleet.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
