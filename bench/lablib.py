#!/usr/bin/env python3
"""bench/lablib.py: the logic of the hayate bench lab (bench/run).

Pure functions (unit-tested in bench/tests/): parsing the output of wrk (the
WRK_RESULT line of bench/wrk/*.lua), h2load and ab; medians with min/max; the raw.csv
schema; ratios; the markdown report. Around them, the parts that touch the machine:
/proc readers (process trees, CPU ticks, RSS/PSS, per-core busy time), one measured
load run (`measure`), the preflight request (`preflight`) and the plots (`plots`,
matplotlib imported only there).

Command line (used by bench/run):
  lablib.py measure --raw CSV --case A --contender nginx --variant 1k.txt --conc 100 \
      --tool wrk --secs 5 --url URL --pids "PID [PID...]" [--front N] ...
  lablib.py not-yet --raw CSV --case C --contender ... --note "not yet: why"
  lablib.py preflight --url URL [--length N] [--file F] [--body TEXT] [--encoding gzip]
                      [--tls-version TLSv1.3] [--http2]   (--http2: curl over h2)
  lablib.py report RUN_DIR        (reads raw.csv, meta.tsv, notes.txt; writes report.md)
  lablib.py plots RUN_DIR         (PNG files beside report.md)
Only the standard library is needed except for `plots`.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import http.client
import math
import os
import re
import resource
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent

# ------------------------------------------------------------------ raw.csv schema

# One row per measurement. The first six columns name the measurement; a row whose
# note starts with "not yet" stands for a case hayate cannot run yet (no numbers).
FIELDS = [
    "case", "rep", "variant", "conc", "workers", "contender", "ref", "tool",
    "duration_s", "requests", "rps", "bytes", "bytes_per_req", "mb_per_s",
    "server_cpu_s", "server_cpu_pct", "us_cpu_per_req", "us_cpu_per_mb",
    "setup_cpu_s", "setup_us_per_req", "client_cpu_pct",
    "lat_mean_ms", "lat_p50_ms", "lat_p99_ms", "lat_max_ms",
    "err_connect", "err_read", "err_write", "err_status", "err_timeout", "unfinished", "errors",
    "peak_rss_kb", "peak_pss_kb", "server_core_busy_pct", "client_core_busy_pct", "steal_pct",
    "note",
]
GROUP_KEYS = ("case", "variant", "conc", "workers")


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def append_row(path, row):
    """Appends ROW (a dict) to the CSV at PATH, writing the header first if the file is new."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="raise")
        if new:
            w.writeheader()
        w.writerow({k: _fmt_cell(row.get(k, "")) for k in FIELDS})


def _fmt_cell(v):
    if isinstance(v, float):
        if v != v:  # NaN
            return ""
        if abs(v) >= 100:
            return f"{v:.0f}" if abs(v) >= 10000 else f"{v:.1f}"
        return f"{v:.3f}"
    return "" if v is None else str(v)


# ------------------------------------------------------------------ parsing load tools

_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _dur_ms(text):
    """'122us' / '23.38ms' / '1.5s' -> milliseconds (float)."""
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_kv_line(line):
    """'WRK_RESULT a=1 b=2.5' -> {'a': 1, 'b': 2.5}"""
    out = {}
    for tok in line.split()[1:]:
        k, _, v = tok.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            out[k] = float(v)
    return out


def _empty_result():
    return {
        "requests": 0, "duration_s": 0.0, "bytes": 0, "err_connect": 0, "err_read": 0,
        "err_write": 0, "err_status": 0, "err_timeout": 0, "unfinished": "",
        "lat_mean_ms": "", "lat_p50_ms": "", "lat_p99_ms": "", "lat_max_ms": "",
    }


def parse_wrk(text):
    """The WRK_RESULT line printed by bench/wrk/*.lua (and bench/ceiling/sink.c).
    Returns None when there is none (wrk failed)."""
    line = next((ln for ln in text.splitlines() if ln.startswith("WRK_RESULT")), None)
    if line is None:
        return None
    kv = parse_kv_line(line)
    r = _empty_result()
    r["requests"] = int(kv.get("requests", 0))
    r["duration_s"] = kv.get("duration_us", 0) / 1e6
    r["bytes"] = int(kv.get("bytes", 0))
    for k in ("connect", "read", "write", "status", "timeout"):
        r["err_" + k] = int(kv.get(k, 0))
    for k in ("mean", "p50", "p99", "max"):
        if f"lat_{k}_us" in kv:
            r[f"lat_{k}_ms"] = kv[f"lat_{k}_us"] / 1e3
    if "sent" in kv and "received" in kv:
        r["unfinished"] = max(0, int(kv["sent"]) - int(kv["received"]))
    for k in ("handshakes", "resumed"):  # bench/ceiling/tlsload.c
        if k in kv:
            r[k] = int(kv[k])
    return r


def parse_h2load(text):
    """h2load's summary (HTTP/1.1 or h2). Returns None when it has no 'finished in' line."""
    m = re.search(r"finished in ([0-9.]+)s, ([0-9.]+) req/s", text)
    if not m:
        return None
    r = _empty_result()
    r["duration_s"] = float(m.group(1))
    req_s = float(m.group(2))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    if m:
        total, started, done, ok, failed, errored, timeout = map(int, m.groups())
        r["requests"] = done
        r["err_read"] = errored
        r["err_timeout"] = timeout
        r["unfinished"] = max(0, started - done)
        if req_s > 0 and done > 0:
            # "finished in" includes a --warm-up-time; req/s is over the measured part only
            r["duration_s"] = done / req_s
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if m:
        r["err_status"] = int(m.group(3)) + int(m.group(4))
        # h2load counts a response with a 4xx/5xx status as succeeded; successful = 2xx+3xx
    m = re.search(r"traffic: .*?\((\d+)\) total", text)
    if m:
        r["bytes"] = int(m.group(1))
    m = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", text)
    if m:
        r["lat_max_ms"] = _dur_ms(m.group(2))
        r["lat_mean_ms"] = _dur_ms(m.group(3))
    # printed once per run for the first connection (not in the raw.csv; see protocol_note)
    m = re.search(r"^Application protocol: (\S+)", text, re.M)
    if m:
        r["alpn"] = m.group(1)
    m = re.search(r"^TLS Protocol: (\S+)", text, re.M)
    if m:
        r["tls_protocol"] = m.group(1)
    return r


def parse_ab(text):
    """ApacheBench's report. Returns None when it has no 'Complete requests' line."""
    m = re.search(r"Complete requests:\s+(\d+)", text)
    if not m:
        return None
    r = _empty_result()
    r["requests"] = int(m.group(1))

    def num(pattern, cast=float, default=0):
        mm = re.search(pattern, text)
        return cast(mm.group(1)) if mm else default

    r["duration_s"] = num(r"Time taken for tests:\s+([0-9.]+) seconds")
    r["bytes"] = num(r"Total transferred:\s+(\d+) bytes", int)
    failed = num(r"Failed requests:\s+(\d+)", int)
    # ab's "Failed requests" are connect/receive/length/exception failures; the breakdown
    # line follows when there are any
    m = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)", text)
    if m:
        c, rcv, length, exc = map(int, m.groups())
        r["err_connect"] = c
        r["err_read"] = rcv + length + exc
    else:
        r["err_read"] = failed
    r["err_status"] = num(r"Non-2xx responses:\s+(\d+)", int)
    r["lat_mean_ms"] = num(r"Time per request:\s+([0-9.]+) \[ms\] \(mean\)", float, "")
    for pct, key in (("50", "lat_p50_ms"), ("99", "lat_p99_ms"), ("100", "lat_max_ms")):
        mm = re.search(rf"^\s*{pct}%\s+(\d+)", text, re.M)
        if mm:
            r[key] = float(mm.group(1))
    return r


PARSERS = {"wrk": parse_wrk, "sink": parse_wrk, "h2load": parse_h2load, "ab": parse_ab,
           "tls-new": parse_wrk, "tls-resume": parse_wrk, "tls-bulk": parse_wrk, "h2load-h2": parse_h2load,
           "h3load": parse_h2load}

# bench/ceiling/tlsload.c's modes, by tool name
TLSLOAD_MODES = {"tls-new": "new", "tls-resume": "resume", "tls-bulk": "bulk"}


def resumption_note(tool, res):
    """A note when a resumed-handshake run (tool tls-resume) made more than 1 % of its
    handshakes full (the server did not take its tickets); '' otherwise. The first
    handshake is full (it brings the first ticket), and so are the few that start before
    a ticket has arrived."""
    if tool != "tls-resume" or "handshakes" not in res:
        return ""
    full = res["handshakes"] - res.get("resumed", 0)
    if full <= max(1, res["handshakes"] // 100):
        return ""
    return f"{full:,} of {res['handshakes']:,} handshakes were full, not resumed"


def protocol_note(tool, res):
    """A note when an HTTP/2 run (tool h2load-h2) did not speak HTTP/2 (h2, or h2c with
    prior knowledge), or spoke it over TLS other than 1.3 (h2load prints the protocols
    of its first connection; a TLS line only over https); '' otherwise."""
    if tool != "h2load-h2":
        return ""
    bad = []
    if res.get("alpn") not in ("h2", "h2c"):
        bad.append(f"protocol {res.get('alpn', 'unknown')} (want h2)")
    if res.get("tls_protocol", "TLSv1.3") != "TLSv1.3":
        bad.append(f"TLS {res['tls_protocol']} (want TLSv1.3)")
    return "; ".join(bad)


# ------------------------------------------------------------------ statistics

def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def ratio(a, b):
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def to_float(v):
    if v is None or v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def row_key(row):
    return tuple(row.get(k, "") for k in GROUP_KEYS) + (row["contender"],)


def summarize(rows):
    """Groups rows by (case, variant, conc, workers, contender) in first-seen order.
    Each summary holds, per numeric field, (median, min, max) over its repetitions;
    'n' repetitions; 'errors' summed; 'note' the distinct notes; 'ref' the reference."""
    order, groups = [], {}
    for r in rows:
        k = row_key(r)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    out = []
    for k in order:
        rs = groups[k]
        s = {f: rs[0].get(f, "") for f in GROUP_KEYS + ("contender", "ref", "tool")}
        measured = [r for r in rs if not r.get("note", "").startswith("not yet")]
        s["n"] = len(measured)
        notes = []
        for r in rs:
            if r.get("note") and r["note"] not in notes:
                notes.append(r["note"])
        s["note"] = "; ".join(notes)
        s["not_yet"] = not measured
        for r in measured:  # derived: answers with a 2xx/3xx status per second, and their count
            req, dur, bad = to_float(r.get("requests")), to_float(r.get("duration_s")), to_float(r.get("err_status"))
            if req is not None and dur:
                r["ok_requests"] = req - (bad or 0)
                r["ok_rps"] = (req - (bad or 0)) / dur
        # Each repetition's CPU per request, for ratios paired by repetition.
        s["cpu_by_rep"] = {r.get("rep"): v for r in measured
                           if (v := to_float(r.get("us_cpu_per_req"))) is not None}
        for f in FIELDS + ["ok_requests", "ok_rps"]:
            if f in s or f in ("rep", "note"):
                continue
            vals = [to_float(r.get(f)) for r in measured]
            vals = [v for v in vals if v is not None]
            if f in ("errors", "unfinished") or f.startswith("err_"):
                s[f] = (sum(vals), min(vals), max(vals)) if vals else None
            else:
                s[f] = (median(vals), min(vals), max(vals)) if vals else None
        out.append(s)
    return out


def med(s, field):
    v = s.get(field)
    return v[0] if v else None


def mostly_errors(s):
    """More error answers than good ones: left out of the line plots (the table shows them)."""
    e, n = med(s, "errors"), med(s, "requests")
    return bool(e and n and s["errors"][0] > s["n"] * n / 2)


def find_ref(summaries, s):
    """The summary of S's reference contender in the same (case, variant, conc, workers)."""
    if not s.get("ref") or s["ref"] == s["contender"]:
        return None
    for t in summaries:
        if t["contender"] == s["ref"] and all(t[k] == s[k] for k in GROUP_KEYS):
            return t
    return None


# ------------------------------------------------------------------ formatting

def fmt_num(v, digits=0):
    if v is None:
        return "-"
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def fmt_cell(stat, digits=0, scale=1.0):
    """'median [min-max]' when there were repetitions that differ, else the median."""
    if stat is None:
        return "-"
    m, lo, hi = (x * scale for x in stat)
    if lo == hi:
        return fmt_num(m, digits)
    return f"{fmt_num(m, digits)} [{fmt_num(lo, digits)}-{fmt_num(hi, digits)}]"


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}×"


# ------------------------------------------------------------------ report

CASE_TITLES = {
    "A": "A. Static files",
    "B": "B. Waiting handlers (1.5 s wait, \"hello world\")",
    "PHP": "PHP. Hello world through php-fpm (the same pool behind both)",
    "C": "C. Workers (Node cluster; hayate supervising N instances)",
    "D": "D. In front of an app (Express, 1 KiB JSON)",
    "P": "P. Proxy overhead (the C ceiling as the app, 1 KiB)",
    "TR": "TR. Tracing: a span per proxied request (OTLP/HTTP to a collector; the C ceiling as the app)",
    "G": "G. A protected route (real IP, allow list, basic auth, rate limit; the C ceiling as the app)",
    "R": "R. Site rules passed through (20 rules, no match; the C ceiling as the app)",
    "X": "X. X-Accel-Redirect (the C ceiling hands the file back; the front serves it)",
    "L": "D. Concurrency ladder (static 1 KiB file, h2load --h1)",
    "E": "E. Large file (100 MiB, sink client, 4 connections)",
    "T": "T. HTTPS (TLS 1.3, ECDSA P-256, the same certificate for both)",
    "H2": "H2. HTTP/2 over TLS 1.3 (h2load, the same certificate for both)",
    "H3": "H3. HTTP/3 against Caddy (bench/h3load, the same certificate for both)",
    "GR": "GR. gRPC over h2c (grpc-go behind both; h2load sending gRPC calls)",
}

# (header, function(summary, ref_summary) -> cell) per case
def _cell(key, digits=0, scale=1):
    """A column showing the median [min-max] of KEY."""
    return lambda s, r: fmt_cell(s.get(key), digits, scale)


def _ratio(key):
    """A column showing this row's median of KEY over its reference row's."""
    return lambda s, r: fmt_ratio(ratio(med(s, key), med(r, key))) if r else ""


def paired_cpu_ratio(s, r):
    """The median over repetitions of S's CPU per request over its reference R's in the same
    repetition. Within a repetition the two ran minutes apart at most; across repetitions the
    host's speed drifts (this VM: nginx 19-36 µs per proxied request within an hour), and a
    ratio of medians mixes the repetitions' speeds where a median of ratios does not."""
    a, b = s.get("cpu_by_rep") or {}, r.get("cpu_by_rep") or {}
    ratios = [a[k] / b[k] for k in a if b.get(k)]
    return median(ratios) if ratios else None


def _c_cpu_paired(s, r):
    return fmt_ratio(paired_cpu_ratio(s, r)) if r else ""


_c_rps, _c_rps_ratio = _cell("rps"), _ratio("rps")
_c_cpu, _c_cpu_ratio = _cell("us_cpu_per_req", 2), _ratio("us_cpu_per_req")
_c_setup_cpu = _cell("setup_us_per_req", 2)
_c_p99, _c_mean = _cell("lat_p99_ms", 1), _cell("lat_mean_ms", 1)
_c_rss, _c_pss = _cell("peak_rss_kb", 1, 1 / 1024), _cell("peak_pss_kb", 1, 1 / 1024)
_c_bpr, _c_answered = _cell("bytes_per_req"), _cell("ok_requests")
_c_ok_rps, _c_ok_rps_ratio = _cell("ok_rps"), _ratio("ok_rps")
_c_mbs, _c_mbs_ratio = _cell("mb_per_s"), _ratio("mb_per_s")
_c_cpu_mb, _c_cpu_mb_ratio = _cell("us_cpu_per_mb", 1), _ratio("us_cpu_per_mb")
_c_server_pct, _c_client_pct = _cell("server_cpu_pct"), _cell("client_cpu_pct")


def _big_only(column):
    """COLUMN on case T's large-file row only (MB/s of a handshake row says nothing)."""
    return lambda s, r: column(s, r) if s.get("variant") == "100 MiB" else ""


# The issues' targets, hayate / nginx: (case, variant) -> (measure, "<=" or ">=", ratio).
# "per core" is a rate on one core: the inverse of CPU per request, so it can be read
# when the client's core, not the server's, limits the rate (case T's handshakes).
TARGETS = {
    ("H2", "static 1 KiB"): ("us_cpu_per_req", "<=", 0.70),
    ("H2", "proxied 1 KiB"): ("us_cpu_per_req", "<=", 0.85),
    ("H2", "100 MiB"): ("mb_per_s", ">=", 1.00),
    ("T", "full handshake"): ("per core", ">=", 1.20),
    ("T", "resumed handshake"): ("per core", ">=", 1.20),
    # issue 39: full handshakes with client certificates required, against ssl_verify_client on
    ("T", "full handshake, client certificate"): ("per core", ">=", 1.20),
    ("T", "keep-alive 1 KiB"): ("us_cpu_per_req", "<=", 0.85),
    ("T", "100 MiB"): ("mb_per_s", ">=", 1.00),
    # issue 37: hayate's h3 against Caddy's h3 (the row "hayate h3"; its h2 row is the yardstick
    # of "h3 CPU per request <= 1.5 x its own h2", read from the two rows)
    ("H3", "static 1 KiB"): ("us_cpu_per_req", "<=", 0.60),
    ("H3", "proxied 1 KiB"): ("us_cpu_per_req", "<=", 0.70),
    ("H3", "100 MiB"): ("mb_per_s", ">=", 1.50),
    ("GR", "unary"): ("us_cpu_per_req", "<=", 0.75),
    # 100 messages a call: calls per core is messages per core / 100
    ("GR", "server stream"): ("per core", ">=", 1.30),
    # issue 41: every request traced, against the same proxy with tracing off
    ("TR", "1 KiB", "hayate, every request traced"): ("us_cpu_per_req", "<=", 1.15),
}


def target_met(case, variant, s, r):
    """(text, met) for S against its reference R under TARGETS, or None when the load
    has no target or a number is missing. Text: 'CPU ≤ 0.70×', 'MB/s ≥ 1.00×' or
    'per core ≥ 1.20×'."""
    key = (case, variant, s.get("contender"))
    if key not in TARGETS:
        key = (case, variant)
    if key not in TARGETS or r is None:
        return None
    field, op, want = TARGETS[key]
    if field == "per core":
        x = ratio(med(r, "us_cpu_per_req"), med(s, "us_cpu_per_req"))
        what = "per core"
    else:
        x = ratio(med(s, field), med(r, field))
        what = "CPU" if field == "us_cpu_per_req" else "MB/s"
    if x is None:
        return None
    sign = "≤" if op == "<=" else "≥"
    # compared as printed (two decimals), so a cell reading 0.70× meets "≤ 0.70×"
    x = round(x, 2)
    return f"{what} {sign} {want:.2f}×", (x <= want if op == "<=" else x >= want)


def _c_target(s, r):
    # The issues' targets are hayate's (a contender beside the reference is not held to them).
    if not s.get("contender", "").startswith("hayate"):
        return ""
    # Case H3's h2 row is hayate's own yardstick, not held to the h3 targets.
    if s.get("case") == "H3" and s.get("contender", "").endswith(" h2"):
        return ""
    t = target_met(s.get("case"), s.get("variant"), s, r)
    if t is None:
        return ""
    return f"{t[0]}: {'met' if t[1] else '**missed**'}"


def _per_core_row(s):
    """Rows read per core: case T's handshakes, case GR's calls."""
    return "handshake" in s.get("variant", "") or s.get("case") == "GR"


def _c_per_core(s, r):
    """Handshakes (calls) per second on one core: 1 / CPU per handshake."""
    c = med(s, "us_cpu_per_req")
    return f"{1e6 / c:,.0f}" if c and _per_core_row(s) else ""


def _c_per_core_ratio(s, r):
    if not r or not _per_core_row(s):
        return ""
    x = ratio(med(r, "us_cpu_per_req"), med(s, "us_cpu_per_req"))
    return fmt_ratio(x) if x is not None else ""


def _c_errors(s, r):
    e = s.get("errors")
    if e is None:
        return "-"
    return "0" if e[0] == 0 else f"**{e[0]:,.0f}**"


def ideal_wait_rps(conc, duration_s, wait_s=1.5):
    """Requests/s of a perfect server for CONC clients that each wait WAIT_S per request,
    counting only the rounds that end within DURATION_S."""
    if not conc or not duration_s:
        return None
    return conc * math.floor(duration_s / wait_s) / duration_s


def _c_ideal(s, r):
    return fmt_num(ideal_wait_rps(to_float(s.get("conc")), med(s, "duration_s")))


CASE_COLUMNS = {
    "A": [("file", None), ("workers", None), ("contender", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
          ("µs CPU/req", _c_cpu), ("CPU × ref", _c_cpu_ratio), ("bytes/resp", _c_bpr), ("p99 ms", _c_p99),
          ("peak RSS MB", _c_rss), ("server %", _c_server_pct), ("wrk %", _c_client_pct), ("errors", _c_errors)],
    "B": [("concurrency", None), ("setup", None), ("ok rps", _c_ok_rps), ("ideal rps", _c_ideal),
          ("ok rps × ref", _c_ok_rps_ratio), ("mean ms", _c_mean), ("p99 ms", _c_p99), ("answered ok", _c_answered),
          ("errors", _c_errors),
          ("peak RSS MB (sum)", _c_rss), ("peak PSS MB (sum)", _c_pss)],
    "C": [("handler", None), ("workers", None), ("setup", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
          ("µs CPU/req (all processes)", _c_setup_cpu), ("p99 ms", _c_p99), ("peak RSS MB (sum)", _c_rss),
          ("wrk %", _c_client_pct), ("errors", _c_errors)],
    "D": [("setup", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio), ("proxy µs CPU/req", _c_cpu),
          ("proxy CPU × ref", _c_cpu_ratio), ("µs CPU/req (proxy + app)", _c_setup_cpu), ("p99 ms", _c_p99),
          ("peak RSS MB (sum)", _c_rss), ("errors", _c_errors)],
    "PHP": [("setup", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio), ("front µs CPU/req", _c_cpu),
            ("front CPU × ref", _c_cpu_ratio), ("µs CPU/req (front + php-fpm)", _c_setup_cpu), ("p99 ms", _c_p99),
            ("peak RSS MB (sum)", _c_rss), ("errors", _c_errors)],
    "P": [("setup", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio), ("proxy µs CPU/req", _c_cpu),
          ("proxy CPU × ref", _c_cpu_ratio), ("paired × ref", _c_cpu_paired),
          ("µs CPU/req (proxy + app)", _c_setup_cpu), ("p99 ms", _c_p99),
          ("peak RSS MB", _c_rss), ("errors", _c_errors)],
    "TR": [("setup", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio), ("proxy µs CPU/req", _c_cpu),
           ("proxy CPU × ref", _c_cpu_ratio), ("paired × ref", _c_cpu_paired), ("target", _c_target),
           ("p99 ms", _c_p99), ("peak RSS MB", _c_rss), ("errors", _c_errors)],
    "G": [("setup", None), ("concurrency", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
          ("proxy µs CPU/req", _c_cpu), ("proxy CPU × ref", _c_cpu_ratio), ("paired × ref", _c_cpu_paired),
          ("p99 ms", _c_p99), ("peak RSS MB", _c_rss), ("errors", _c_errors)],
    "R": [("setup", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
          ("proxy µs CPU/req", _c_cpu), ("proxy CPU × ref", _c_cpu_ratio), ("paired × ref", _c_cpu_paired),
          ("p99 ms", _c_p99), ("peak RSS MB", _c_rss), ("errors", _c_errors)],
    "X": [("file", None), ("contender", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
          ("µs CPU/req (front + app)", _c_cpu), ("CPU × ref", _c_cpu_ratio), ("paired × ref", _c_cpu_paired),
          ("p99 ms", _c_p99), ("peak RSS MB", _c_rss), ("errors", _c_errors)],
    "L": [("concurrency", None), ("contender", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
          ("µs CPU/req", _c_cpu), ("CPU × ref", _c_cpu_ratio), ("mean ms", _c_mean),
          ("peak RSS MB", _c_rss), ("errors", _c_errors)],
    "E": [("setup", None), ("MB/s", _c_mbs), ("MB/s × ref", _c_mbs_ratio), ("µs CPU/MB", _c_cpu_mb),
          ("CPU × ref", _c_cpu_mb_ratio), ("server %", _c_server_pct), ("peak RSS MB", _c_rss),
          ("errors", _c_errors)],
    # one row per load: handshakes/s (one per request) or requests/s; MB/s for the large file
    "T": [("load", None), ("concurrency", None), ("contender", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
          ("µs CPU/req", _c_cpu), ("CPU × ref", _c_cpu_ratio), ("per core/s", _c_per_core),
          ("per core × ref", _c_per_core_ratio), ("MB/s", _big_only(_c_mbs)),
          ("MB/s × ref", _big_only(_c_mbs_ratio)), ("µs CPU/MB", _big_only(_c_cpu_mb)),
          ("CPU/MB × ref", _big_only(_c_cpu_mb_ratio)), ("target (hayate / nginx)", _c_target),
          ("server %", _c_server_pct), ("client %", _c_client_pct), ("peak RSS MB", _c_rss),
          ("errors", _c_errors)],
    # HTTP/2: requests/s and CPU per request; MB/s for the large file; the target per load
    "H2": [("load", None), ("streams", None), ("contender", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
           ("µs CPU/req", _c_cpu), ("CPU × ref", _c_cpu_ratio), ("µs CPU/req (proxy + app)", _c_setup_cpu),
           ("MB/s", _big_only(_c_mbs)), ("MB/s × ref", _big_only(_c_mbs_ratio)),
           ("µs CPU/MB", _big_only(_c_cpu_mb)), ("CPU/MB × ref", _big_only(_c_cpu_mb_ratio)),
           ("target (hayate / nginx)", _c_target), ("server %", _c_server_pct), ("client %", _c_client_pct),
           ("peak RSS MB", _c_rss), ("errors", _c_errors)],
    # gRPC: calls/s and CPU per call, the front alone and with the gRPC server; the target
    "GR": [("load", None), ("streams", None), ("contender", None), ("rps", _c_rps), ("rps × ref", _c_rps_ratio),
           ("µs CPU/req", _c_cpu), ("CPU × ref", _c_cpu_ratio), ("per core/s", _c_per_core),
           ("per core × ref", _c_per_core_ratio), ("µs CPU/req (proxy + app)", _c_setup_cpu),
           ("target (hayate / nginx)", _c_target), ("server %", _c_server_pct), ("client %", _c_client_pct),
           ("peak RSS MB", _c_rss), ("errors", _c_errors)],
}
# HTTP/3: H2's columns, against Caddy
CASE_COLUMNS["H3"] = [("target (hayate / Caddy)", f) if name.startswith("target") else (name, f)
                      for name, f in CASE_COLUMNS["H2"]]
_GROUP_CELL = {"file": "variant", "handler": "variant", "load": "variant", "concurrency": "conc", "workers": "workers",
               "contender": "contender", "setup": "contender", "streams": "conc"}


def case_table(summaries, case):
    """Markdown table (list of lines) for one case."""
    cols = CASE_COLUMNS[case]
    rows = [s for s in summaries if s["case"] == case]
    if not rows:
        return []
    lines = ["| " + " | ".join(h for h, _ in cols) + " | notes |",
             "|" + "|".join("---" if f is None else "---:" for _, f in cols) + "|---|"]
    for s in rows:
        ref = find_ref(summaries, s)
        cells = []
        for h, f in cols:
            if f is None:
                v = s.get(_GROUP_CELL[h], "")
                cells.append(f"**{v}**" if h in ("contender", "setup") and v.startswith("hayate") else v)
            elif s["not_yet"]:
                cells.append("not yet" if h in ("rps", "MB/s", "ok rps") else "")
            else:
                cells.append(f(s, ref))
        note = s["note"]
        if ref is not None and not s["not_yet"]:
            note = f"ref: {ref['contender']}" + (f"; {note}" if note else "")
        cells.append(note)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def load_meta(run_dir):
    """RUN_DIR/meta.tsv: KEY<TAB>VALUE lines written by bench/run (kept with the run, so the
    report can be made again from the committed files)."""
    meta = {}
    p = Path(run_dir) / "meta.tsv"
    if p.exists():
        for line in p.read_text().splitlines():
            k, _, v = line.partition("\t")
            if k:
                meta[k] = v
    return meta


def load_warnings(summaries):
    """Cases where other load shared the server's core or the hypervisor stole time."""
    out = []
    for s in summaries:
        busy, own, steal = med(s, "server_core_busy_pct"), med(s, "server_cpu_pct"), med(s, "steal_pct")
        setup_s, dur = med(s, "setup_cpu_s"), med(s, "duration_s")
        if s["case"] in ("H2", "GR") and own is not None and setup_s is not None and dur:
            own = max(own, 100 * setup_s / dur)  # the proxied row's app shares the server's core
        label = f"{s['case']} {s['variant']} c{s['conc']} w{s['workers']} {s['contender']}"
        if s["case"] in ("A", "E", "L", "T", "H2", "GR") and busy is not None and own is not None and busy - own > 20 \
                and s["workers"] in ("", "1"):
            out.append(f"{label}: server core {busy:.0f} % busy but the server used {own:.0f} %: other load; not reliable")
        if steal is not None and steal > 5:
            out.append(f"{label}: {steal:.1f} % of CPU time stolen by the hypervisor")
    return out


CASE_TEXT = {
    "A": "One process (one nginx worker, one Node process, one hayate worker) pinned to core 0, wrk -t1 on "
         "core 1, 100 keep-alive connections. `×2` rows: 2 workers (nginx 2 workers, st under Node cluster ×2, "
         "hayate --workers 2) on cores 0-1, wrk still on core 1 (sharing it): a whole-machine comparison. "
         "`page.html gzip` sends `Accept-Encoding: gzip`: nginx compresses on the fly (gzip_comp_level 1, "
         "its default), nginx gzip_static and hayate serve a `.gz` sibling made once, st gzips into its cache. "
         "The ceiling is the C epoll responder (fixed 1,024-byte answer): the floor.",
    "B": "Every setup is started fresh for each measurement (so peak memory belongs to that concurrency), "
         "pinned to core 0, wrk on core 1 (one request in flight per connection), no warm-up, a 30 s "
         "request timeout. "
         "Ideal rps = what a perfect server would answer: concurrency × the 1.5 s rounds that end within the "
         "run, per second. php-fpm runs with Debian's default pool (pm dynamic, "
         "max_children 5, start_servers 2, min/max spare 1/3, listen.backlog 511): it can answer 5 "
         "requests per 1.5 s, the rest queue; latencies are those of the requests answered within the run "
         "(the queued rest is still waiting when it ends); wrk's latencies include error answers (a fast 502 "
         "lowers the mean), so read them with the errors column. hayate → php-fpm: the same pool behind "
         "`--fastcgi --fastcgi-max-conns 5` (at most 5 connections, the rest in hayate's queue, 30 s). hayate → Koa (unix): Koa on a Unix socket, the way "
         "`hayate run` reaches its apps. Rows \"at ulimit -n 4096\" (full runs): hayate started with a "
         "descriptor limit of 4,096 and 4,000 clients, two descriptors per proxied wait, so its budget must "
         "queue what the limit cannot hold. ok rps / answered ok count 2xx answers. Memory: RSS and PSS summed over every process of the setup, peak of 4 "
         "samples/s.",
    "C": "N workers on cores 0..N-1, wrk on core 1 (from 2 workers on it shares a core with the server), "
         "100 connections. `hello`: \"hello world\"; `fib`: fib(20) computed per request (bench/apps/workers.js). "
         "Node cluster: N workers under a primary (round-robin). hayate run: `hayate run --instances N "
         "--workers N -- node workers.js` (hayate starts N instances on Unix sockets, supervises them and "
         "proxies to them). Interim row: hayate --proxy (N workers) in front of N single Node processes on "
         "Unix sockets started by the script. CPU per request counts every process of the setup.",
    "D": "Express (NODE_ENV=production) answers a 1 KiB JSON; proxy and app share core 0, wrk on core 1, "
         "100 connections, so the proxy's CPU comes out of the app's budget. nginx: 1 worker; "
         "\"TCP\" = proxy_pass without upstream keep-alive (HTTP/1.0, one connection per request), "
         "\"TCP keepalive\" = upstream keepalive 1024 + HTTP/1.1, \"unix\" = Unix socket with keepalive, "
         "\"cache 5s\" = proxy_cache_valid 5s in front of the keepalive upstream. hayate always pools "
         "upstream connections. \"C ceiling\" = bench/ceiling answering 1 KiB itself (epoll, read, write, "
         "no parsing): the floor of CPU per answer on this kernel, against which a cache hit's cost is read.",
    "PHP": "bench/apps/hello.php (echo \"hello world\") run by php-fpm with Debian's default pool (pm dynamic, "
           "max_children 5), started fresh for each setup; front server and php-fpm share core 0, wrk on core 1, "
           "100 connections. nginx (1 worker): fastcgi_pass with one connection per request (its default), and "
           "with `keepalive 5` + `fastcgi_keep_conn on`, these two with five parameters (SCRIPT_FILENAME, "
           "SCRIPT_NAME, REQUEST_METHOD, QUERY_STRING, SERVER_PROTOCOL: less than any PHP app needs); "
           "\"fastcgi-php.conf\" = kept connections and the PHP location of Debian's default site "
           "(`include snippets/fastcgi-php.conf`: split_path_info, try_files, fastcgi.conf's full CGI "
           "environment), the same work hayate does, and hayate's reference; hayate (--workers 1): `--fastcgi` "
           "with `--fastcgi-max-conns 5` (kept connections, never more than the pool's children; the rest wait "
           "in hayate's queue; the full CGI environment). front µs CPU/req counts the front server only; the "
           "next column adds php-fpm's.",
    "P": "The proxy's own cost: the app is bench/ceiling (C epoll, a fixed 1 KiB answer in a few µs) on "
         "TCP or a Unix socket, sharing core 0 with the proxy; wrk on core 1, 100 connections. nginx: 1 worker, "
         "upstream keepalive 1024 (never fewer idle slots than connections, so it does not churn) + HTTP/1.1; "
         "hayate: --workers 1 --proxy, its defaults. The C relay (bench/ceiling/relay.c) is a proxy's floor: "
         "it forwards bytes with the same four socket calls per request, parses nothing and pairs every "
         "client with an upstream connection of its own. proxy µs CPU/req counts the proxy's processes only. "
         "paired × ref: the median of each repetition's CPU ratio to the reference, which ran in the same "
         "repetition (the host's drift between repetitions cancels; proxy CPU × ref is the ratio of medians).",
    "R": "A site with 20 rules a request passes through without a match, in front of bench/ceiling on TCP "
         "(core 0 with the proxy; wrk on core 1): 5 prefix redirects, 10 regex redirects and 5 response "
         "header rules. nginx (1 worker, upstream keepalive 1024): 10 server-level rewrite ... redirect, 5 "
         "prefix locations with a rewrite, 5 add_header ... always. hayate (--workers 1): [[rule]] tables "
         "and response_headers in a config file. The issue's targets: hayate with rules ≤ 1.1 × hayate "
         "without (compare the two hayate rows' proxy µs CPU/req), and ≤ 0.8 × nginx with the same set.",
    "X": "The app (bench/ceiling with CEILING_ACCEL) answers every GET /download with an empty 200, "
         "Content-Disposition and X-Accel-Redirect: /protected/FILE; the front drops that answer and serves "
         "the file from an internal location (nginx: location /protected/ { internal; alias ROOT/; }, "
         "sendfile on; hayate: a route with internal = true and the same root). 1 KiB at the case's usual "
         "connections, 100 MiB at 4 with the sink client. CPU is the front's and the app's together (the "
         "app's share is the same for both). The issue's target: ≤ 0.8 × nginx.",
    "TR": "hayate (--workers 1) proxying to bench/ceiling (C epoll, fixed 1 KiB answer) over TCP, pinned to "
          "core 0 with it; wrk -c100 on core 1. `tracing off`: no otel_endpoint (nginx proxying the same, upstream "
          "keepalive 1024, is its reference); `every request traced`: --otel-endpoint to bench/trace/otlp_sink.py "
          "(OTLP/HTTP protobuf; reads and counts every export, answers 200; on core 1, so its CPU is not "
          "counted), --otel-sample 1: a SERVER span per request (route, status, client, upstream times), its W3C "
          "traceparent sent upstream, batched and exported off the request path by the exporter's thread; `1 in 10 traced`: --otel-sample 0.1. The notes give "
          "the spans the collector received. Target (issue 41): CPU per request with every request traced ≤ "
          "1.15× tracing off.",
    "G": "A route as a site protects an admin area, in front of bench/ceiling on TCP (core 0 with the proxy; "
         "wrk on core 1): the client from X-Forwarded-For behind a trusted proxy (127.0.0.1), an allow list "
         "holding it, basic auth from an htpasswd file made by `htpasswd -B -C 10` (bcrypt, cost 10) with the "
         "right credentials on every request, and a per-client rate limit too high to trigger. nginx (1 "
         "worker, upstream keepalive 1024): set_real_ip_from + real_ip_header, allow/deny, auth_basic with "
         "the same file, limit_req ... nodelay; it checks bcrypt on every request, so every row runs at 10 "
         "connections (nginx's queue then stays within wrk's timeout). hayate (--workers 1): the same four, each also alone (reference: the bare "
         "proxied route; the issue's target: each ≤ 1.05 ×), and together (reference: nginx protected; "
         "target ≤ 0.5 ×). Every request carries the same X-Forwarded-For and Authorization.",
    "L": "nginx (1 worker, worker_connections 25000) and hayate (1 worker) serving the 1 KiB file, h2load "
         "--h1 -t1 with a fixed number of connections, both started fresh for every step; the fd limit is "
         "raised inside the script only.",
    "E": "bench/ceiling/sink (4 keep-alive connections, bodies dropped in the kernel) so the server, not the "
         "client, is the limit. nginx sendfile off uses its default output_buffers.",
    "T": "nginx (1 worker; ssl_protocols TLSv1.2 TLSv1.3, ssl_session_cache shared:SSL:10m, session tickets on, "
         "its defaults otherwise: ssl_ecdh_curve auto, ssl_buffer_size 16k; no kTLS) and hayate (--workers 1, "
         "--listen https://, --tls-cert/--tls-key) with the same ECDSA P-256 certificate made per run, pinned to "
         "core 0; the client on core 1 negotiates TLS 1.3 (checked by the preflight), X25519, TLS_AES_256_GCM_SHA384. "
         "`full handshake` / `resumed handshake`: bench/ceiling/tlsload (OpenSSL, epoll, one thread) opens a "
         "connection, handshakes, GETs /1k.txt with Connection: close, reads the answer, closes, again; resumed "
         "offers the newest TLS 1.3 session ticket a previous connection received (psk_dhe_ke: an X25519 exchange "
         "still, no certificate or signature), so rps there is handshakes/s and µs CPU/req the server's CPU per "
         "handshake + one small request. `keep-alive 1 KiB`: wrk over https, 100 connections (handshakes only at "
         "the start). `100 MiB`: tlsload bulk, 4 keep-alive connections, the client decrypts and drops the bodies. "
         "When client % is near 100 the client limits rps: compare CPU per request (per MB) there. `per core/s` = "
         "1 / µs CPU/req: what one core of the server answers per second (the issue's handshake targets are per "
         "core). `full handshake, client certificate`: the same full handshakes to a second pair of servers that "
         "require a client certificate of a CA made per run (nginx `ssl_verify_client on` + "
         "`ssl_client_certificate`; hayate `--tls-client-auth require --tls-client-ca`), tlsload presenting an "
         "ECDSA P-256 certificate that CA signed on every handshake; the preflight checks that a client without "
         "one is refused and one with it served.",
    "H3": "Caddy " + "(`go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9`, GOMAXPROCS=1, its "
          "defaults: h3 on, no access log; `file_server` and `reverse_proxy` to the C ceiling) and hayate "
          "(--workers 1, `--http3 true` on an https:// listener: HTTP/3 on its UDP port; GSO on, its default, "
          "and off) with the same self-signed ECDSA P-256 certificate, pinned to core 0. bench/h3load on "
          "core 1 (quic-go's HTTP/3 client: no packaged h2load speaks HTTP/3) keeps `streams` requests in "
          "flight over connections of 10 streams (100 MiB: 4 connections, one stream each), every body "
          "read and its length checked, no content coding asked for (as h2load). `hayate h2` is the same hayate listener over TCP with h2load "
          "(HTTP/2 over TLS 1.3): the yardstick of the issue's h3 ≤ 1.5 × h2. The client is slower than "
          "both servers (client % near 100): compare CPU per request, not rps.",
    "H2": "nginx (1 worker, `listen ... ssl http2`, its HTTP/2 defaults: 128 streams, 8k chunks; no sendfile "
          "under TLS) and hayate (--workers 1, --listen https://, HTTP/2 on by default: 128 streams, windows "
          "1 MiB per stream and 2 MiB per connection, files read 64 KiB at a time) with the same ECDSA P-256 "
          "certificate made per run, pinned to core 0; h2load -t1 on core 1 negotiates h2 by ALPN over TLS 1.3, "
          "X25519, TLS_AES_256_GCM_SHA384 as in case T (the preflight checks h2 and TLS 1.3 with curl --http2; "
          "h2load's own report is checked too: a note says when it was not h2 over TLS 1.3). `streams` = "
          "streams in flight: `static 1 KiB` and `proxied 1 KiB` are h2load -c10 -m10 (10 connections × 10 "
          "streams); `proxied` goes to bench/ceiling (C epoll, fixed 1 KiB answer) over HTTP/1.1 on TCP, "
          "which shares core 0 (nginx: upstream keepalive 1024, proxy_http_version 1.1; hayate --proxy, its "
          "pool); µs CPU/req counts the front server only, the next column adds the app. `100 MiB`: h2load "
          "-c4 -m1 (4 connections, one 100 MiB stream each; h2load's windows are 1 GiB, so flow control does "
          "not limit it), MB/s counts the bytes received, partial bodies at the end included. The target "
          "column is the issue's: CPU per request ≤ 0.7× nginx static, ≤ 0.85× proxied, MB/s ≥ 1.0× on 100 MiB. "
          "When client % is near 100 h2load limits rps: compare CPU per request there.",
    "GR": "A grpc-go server (bench/grpc: grpc-go 1.85, messages passed as bytes with no generated code, "
          "MaxConcurrentStreams 1000) on core 0 beside the front server: nginx (1 worker, `listen ... http2` "
          "in plain text, `grpc_pass` to an upstream with keepalive 1024) and hayate (--workers 1, "
          "--proxy h2c://: its multiplexed HTTP/2 pool); `grpc-go direct` is h2load asking the server "
          "itself. h2load -t1 on core 1 POSTs a gRPC call (content-type application/grpc, te: trailers, "
          "one 5-byte message) with prior knowledge: `unary` is /bench.Echo/Unary, -c10 -m10 (100 calls in "
          "flight); `server stream` is /bench.Echo/Stream answering 100 messages of 1 KiB per call, -c10 "
          "-m1. Before the runs each setup passes a grpc-go client's unary call and server stream through "
          "it (status OK, every message). µs CPU/req is the front server's per call; the next column adds "
          "the gRPC server. Targets (the issue's): CPU per unary call ≤ 0.75× nginx; server-stream "
          "messages per second per core ≥ 1.3× nginx (`per core/s` × 100 messages). The notes count the "
          "front's connections to the gRPC server after a run (the issue: ≤ 1/50 of the streams in flight).",
}


def make_report(run_dir):
    run_dir = Path(run_dir)
    rows = read_rows(run_dir / "raw.csv")
    summaries = summarize(rows)
    meta = load_meta(run_dir)
    notes_p = run_dir / "notes.txt"
    notes = [ln for ln in (notes_p.read_text().splitlines() if notes_p.exists() else []) if ln.strip()]
    notes += load_warnings(summaries)
    errs = [s for s in summaries if s.get("errors") and s["errors"][0] > 0]
    pngs = sorted(p.name for p in run_dir.glob("*.png"))
    out = [f"# hayate bench lab: {meta.get('run', run_dir.name)}", ""]
    out.append(f"Mode **{meta.get('mode', '?')}**: {meta.get('reps', '?')} interleaved repetition(s), "
               f"{meta.get('warmup', '?')} s warm-up + {meta.get('secs', '?')} s per measurement; server "
               f"pinned to core {meta.get('server_cpu', '0')}, load generator to core {meta.get('client_cpu', '1')}. "
               "Cells: median [min-max] over repetitions. CPU = utime+stime of the server's processes "
               "from /proc per completed request. `× ref` = this row / its reference row (named in notes; "
               "nginx wherever nginx is in the case): rps higher is better, CPU lower is better. "
               "Method: bench/README.md.")
    out.append("")
    out.append("Machine: " + meta.get("machine", "?"))
    out.append("")
    if meta.get("tools"):
        out.append("Tools: " + meta["tools"])
        out.append("")
    for case in ("A", "B", "PHP", "C", "D", "P", "TR", "G", "R", "X", "L", "E", "T", "H2", "H3", "GR"):
        t = case_table(summaries, case)
        if not t:
            continue
        out += [f"## {CASE_TITLES[case]}", "", CASE_TEXT[case], ""] + t + [""]
        for png in pngs:
            if png.startswith(case + "_"):
                out += [f"![{png}]({png})", ""]
    fleet = run_dir / "F_fleet.md"
    if fleet.exists():
        out += ["## F. Several servers: three hayates sharing one Redis", "",
                "bench/shared/fleet.py: three hayate boxes (--workers 1, --cache 60s, --shared) and "
                "redis-server pinned to the server core, the origin and the clients to the other. "
                "Method in the script's header.", "", fleet.read_text().rstrip(), ""]
    idle = run_dir / "M_idle.md"
    if idle.exists():
        out += ["## M. Memory of idle connections", "",
                "bench/idle/idle.py: a fresh hayate (--workers 1) per row; each connection sends one "
                "GET of a 1 KiB file and stays open; hayate's RSS once settled, before the first "
                "connection and after the last. Method in the script's header.", "",
                idle.read_text().rstrip(), ""]
    not_yet = [s for s in summaries if s["not_yet"]]
    if not_yet:
        out += ["## Not yet", ""]
        seen = []
        for s in not_yet:
            line = f"- {s['case']} {s['contender']} ({s['variant']}): {s['note']}"
            if line not in seen:
                seen.append(line)
        out += seen + [""]
    if errs:
        out += ["## Errors", "", "Rows with errors are kept and marked (socket errors + non-2xx + timeouts):", ""]
        for s in errs:
            e = {k: s[k][0] if s.get(k) else 0 for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout")}
            out.append(f"- {s['case']} {s['variant']} c{s['conc']} {s['contender']}: {s['errors'][0]:,.0f} "
                       f"(connect {e['err_connect']:.0f}, read {e['err_read']:.0f}, write {e['err_write']:.0f}, "
                       f"status {e['err_status']:.0f}, timeout {e['err_timeout']:.0f})")
        out.append("")
    if notes:
        out += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    out.append(f"Raw rows: raw.csv ({len(rows)} rows). Total time {meta.get('total_s', '?')} s.")
    text = "\n".join(out) + "\n"
    (run_dir / "report.md").write_text(text)
    return text


# ------------------------------------------------------------------ plots

def make_plots(run_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    run_dir = Path(run_dir)
    summaries = [s for s in summarize(read_rows(run_dir / "raw.csv")) if not s["not_yet"]]
    made = []

    def color(name):
        if name.startswith("hayate --proxy"):
            return "#e377c2"
        if name.startswith("hayate"):
            return "#d62728"
        if name.startswith("nginx"):
            return "#2ca02c"
        if name == "ceiling":
            return "#7f7f7f"
        return "#1f77b4"

    def bars(case, fname, title, ylabel, field, groups_of, label_of):
        rows = [s for s in summaries if s["case"] == case and med(s, field) is not None]
        if not rows:
            return
        groups = []
        for s in rows:
            g = groups_of(s)
            if g not in groups:
                groups.append(g)
        ncols = min(3, len(groups))
        nrows = math.ceil(len(groups) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 0.9 + 3.4 * nrows), squeeze=False)
        flat = [ax for row in axes for ax in row]
        for ax in flat[len(groups):]:
            ax.axis("off")
        for ax, g in zip(flat, groups):
            rs = [s for s in rows if groups_of(s) == g]
            labels = [label_of(s) for s in rs]
            vals = [med(s, field) for s in rs]
            lo = [med(s, field) - s[field][1] for s in rs]
            hi = [s[field][2] - med(s, field) for s in rs]
            y = range(len(rs))
            ax.barh(list(y), vals, xerr=[lo, hi], color=[color(s["contender"]) for s in rs], capsize=3)
            ax.set_yticks(list(y))
            ax.set_yticklabels(labels, fontsize=8)
            ax.invert_yaxis()
            ax.set_title(g, fontsize=10)
            ax.set_xlabel(ylabel)
            for yi, v in zip(y, vals):
                ax.text(v, yi, f" {v:,.0f}", va="center", fontsize=7)
            ax.margins(x=0.3)
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
                lambda x, _: f"{x / 1000:.0f}k" if x >= 1000 else f"{x:.0f}"))
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(run_dir / fname, dpi=110)
        plt.close(fig)
        made.append(fname)

    bars("A", "A_rps.png", "A. static files: requests/s (one core; ×2: two workers)", "requests/s", "rps",
         lambda s: s["variant"] + (" ×" + s["workers"] if s["workers"] not in ("", "1") else ""),
         lambda s: s["contender"])
    bars("D", "D_rps.png", "D. in front of Express (1 KiB JSON): requests/s", "requests/s", "rps",
         lambda s: "Express 1 KiB JSON", lambda s: s["contender"])
    bars("E", "E_mbs.png", "E. 100 MiB file: MB/s (sink client)", "MB/s", "mb_per_s",
         lambda s: "100 MiB", lambda s: s["contender"])

    def lines(case, fname, title, panels, xfield="conc", xlabel="concurrent connections", logx=True,
              series_of=lambda s: s["contender"]):
        """PANELS: (field, y label, scale[, variant filter, panel title])"""
        allrows = [s for s in summaries if s["case"] == case]
        if not allrows:
            return
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
        for ax, panel in zip(axes[0], panels):
            field, ylabel, scale = panel[:3]
            rows = [s for s in allrows if len(panel) < 4 or s["variant"] == panel[3]]
            if len(panel) > 4:
                ax.set_title(panel[4], fontsize=10)
            series = []
            for s in rows:
                if series_of(s) not in series:
                    series.append(series_of(s))
            palette = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]
            for i, name in enumerate(series):
                pts = sorted((float(s[xfield]), med(s, field) * scale) for s in rows
                             if series_of(s) == name and med(s, field) is not None and s[xfield] != ""
                             and not mostly_errors(s))
                if pts:
                    c = color(name) if name.startswith(("hayate", "nginx")) else palette[i % len(palette)]
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name, color=c)
            if logx:
                ax.set_xscale("log")
            else:
                ax.set_xticks(sorted({float(s[xfield]) for s in rows if s[xfield] != ""}))
            ax.set_ylim(bottom=0)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(run_dir / fname, dpi=110)
        plt.close(fig)
        made.append(fname)

    lines("B", "B_latency_memory.png", "B. 1.5 s waiting handler: latency and memory vs concurrency "
          "(runs with mostly errors left out)",
          [("lat_mean_ms", "mean latency (ms)", 1), ("lat_p99_ms", "p99 latency (ms)", 1),
           ("peak_rss_kb", "peak RSS, all processes (MB)", 1 / 1024)])
    lines("L", "L_ladder.png", "D. concurrency ladder: static 1 KiB, one core",
          [("rps", "requests/s", 1), ("lat_mean_ms", "mean latency (ms)", 1),
           ("peak_rss_kb", "peak RSS (MB)", 1 / 1024)])
    lines("C", "C_scaling.png", "C. scaling with workers",
          [("rps", "requests/s", 1, "hello", "\"hello world\""), ("rps", "requests/s", 1, "fib", "fib(20)")],
          xfield="workers", xlabel="workers", logx=False)
    return made


# ------------------------------------------------------------------ /proc readers

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_KB = (os.sysconf("SC_PAGE_SIZE") // 1024) if hasattr(os, "sysconf") else 4


def _stat_fields(pid):
    """Fields after the command name of /proc/PID/stat (index 0 = field 3, state)."""
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    return s[s.rindex(")") + 2:].split()


def parse_stat_line(s):
    return s[s.rindex(")") + 2:].split()


def proc_children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            f = _stat_fields(d)
        except (OSError, ValueError):
            continue
        kids.setdefault(int(f[1]), []).append(int(d))
    return kids


def proc_tree(roots, kids=None):
    """The given pids and all their descendants."""
    kids = proc_children_map() if kids is None else kids
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_ticks(pids):
    """{pid: utime+stime+cutime+cstime} (children that exited and were reaped count in
    their parent's cutime/cstime)."""
    out = {}
    for p in pids:
        try:
            f = _stat_fields(p)
        except (OSError, ValueError):
            continue
        out[p] = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return out


def cpu_delta_s(before, after):
    return sum(v - before.get(p, 0) for p, v in after.items()) / CLK_TCK


def mem_kb(pids, pss=True):
    """(sum of RSS, sum of PSS) in KiB over PIDS."""
    rss = pss_sum = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                rss += int(f.read().split()[1]) * PAGE_KB
        except (OSError, ValueError, IndexError):
            continue
        if pss:
            try:
                with open(f"/proc/{p}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            pss_sum += int(line.split()[1])
                            break
            except OSError:
                pass
    return rss, pss_sum


def parse_cpu_list(text):
    """'0' / '0-1' / '0,2-3' -> [0, 1, ...]"""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def core_ticks(cpus):
    """(busy, total, steal) ticks summed over CPUS from /proc/stat."""
    want = {f"cpu{c}" for c in cpus}
    busy = total = steal = 0
    with open("/proc/stat") as f:
        for line in f:
            p = line.split()
            if p and p[0] in want:
                v = [int(x) for x in p[1:9]]
                b = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
                busy += b
                total += b + v[3] + v[4]
                steal += v[7]
    return busy, total, steal


def busy_pct(t0, t1):
    return 100.0 * (t1[0] - t0[0]) / (t1[1] - t0[1]) if t1[1] > t0[1] else 0.0


class MemSampler(threading.Thread):
    """Samples RSS and PSS summed over the process trees of ROOTS every INTERVAL s."""

    def __init__(self, roots, interval=0.25):
        super().__init__(daemon=True)
        self.roots, self.interval = roots, interval
        self.peak_rss = self.peak_pss = 0
        self._halt = threading.Event()

    def sample(self):
        rss, pss = mem_kb(proc_tree(self.roots))
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)

    def run(self):
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()
        self.sample()


# ------------------------------------------------------------------ one measurement

def tool_command(tool, url, conc, secs, timeout_s=5, headers=(), lua=None, lua_args=(), sink_bin=None,
                 tlsload_bin=None, streams=1, data=None, h3load=None):
    """The load tool's command line. CONC: connections, except for h2load-h2 where it is the
    streams in flight, STREAMS per connection (conc 100, streams 10: 10 connections). DATA:
    a file h2load POSTs as each request's body (case GR's gRPC call). H3LOAD: (binary, CA file)
    of bench/h3load, whose CONC counts streams in flight as h2load-h2's does."""
    secs = max(1, int(round(float(secs))))  # the tools take whole seconds
    if tool == "wrk":
        cmd = ["wrk", "-t1", f"-c{conc}", f"-d{secs}s", "--timeout", f"{timeout_s}s",
               "-s", str(lua or BENCH_DIR / "wrk" / "summary.lua")]
        for h in headers:
            cmd += ["-H", h]
        cmd.append(url)
        if lua_args:
            cmd += ["--", *lua_args]
        return cmd
    if tool == "h2load":
        cmd = ["h2load", "--h1", "-t1", f"-c{conc}", "-D", str(secs)]
        for h in headers:
            cmd += ["-H", h]
        return cmd + [url]
    if tool == "h2load-h2":  # HTTP/2: ALPN h2 over https, prior knowledge (h2c) over http
        streams = max(1, int(streams))
        cmd = ["h2load", "-t1", f"-c{max(1, conc // streams)}", f"-m{streams}", "-D", str(secs)]
        if url.startswith("https:"):  # case T's cipher (tlsload's choice); h2load would prefer AES-128-GCM
            cmd.append("--tls13-ciphers=TLS_AES_256_GCM_SHA384")
        if data:
            cmd += ["-d", str(data)]
        for h in headers:
            cmd += ["-H", h]
        return cmd + [url]
    if tool == "h3load":  # HTTP/3 (bench/h3load: quic-go), h2load's summary lines
        streams = max(1, int(streams))
        binary, ca = h3load or ("h3load", "")
        return [str(binary), "-ca", str(ca), "-c", str(max(1, conc // streams)), "-m", str(streams),
                "-d", str(secs), url]
    if tool == "ab":
        cmd = ["ab", "-q", "-r", "-c", str(conc), "-n", str(max(conc * 10, 1)), "-t", str(secs),
               "-s", str(timeout_s)]
        for h in headers:
            cmd += ["-H", h]
        return cmd + [url]
    if tool == "sink":
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        return [str(sink_bin or "sink"), hostport, "/" + path, str(secs), str(conc)]
    if tool in TLSLOAD_MODES:
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        return [str(tlsload_bin or "tlsload"), TLSLOAD_MODES[tool], hostport, "/" + path, str(secs), str(conc)]
    raise ValueError(f"unknown tool {tool}")


def _run_tool(cmd, client_cpus, secs):
    full = ["timeout", "-k", "5", str(int(secs) + 40), "taskset", "-c", client_cpus] + cmd
    p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    return p.returncode, p.stdout


def compute_row(res, cpu_front_s, cpu_setup_s, client_cpu_s):
    """Derived numbers of one measurement from a parsed tool result and CPU seconds."""
    row = dict(res)
    dur = res["duration_s"] or 1e-9
    req = res["requests"]
    by = res["bytes"]
    row["rps"] = req / dur
    row["mb_per_s"] = by / dur / 1e6
    row["bytes_per_req"] = by / req if req else ""
    row["server_cpu_s"] = cpu_front_s
    row["server_cpu_pct"] = 100 * cpu_front_s / dur
    row["us_cpu_per_req"] = cpu_front_s * 1e6 / req if req else ""
    row["us_cpu_per_mb"] = cpu_front_s * 1e6 / (by / 1e6) if by else ""
    row["setup_cpu_s"] = cpu_setup_s
    row["setup_us_per_req"] = cpu_setup_s * 1e6 / req if req else ""
    row["client_cpu_pct"] = 100 * client_cpu_s / dur
    row["errors"] = sum(int(res[k]) for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout"))
    return row


def measure(a):
    roots = [int(p) for p in a.pids.split()]
    front = roots[:a.front]
    server_cpus = parse_cpu_list(a.server_cpus)
    client_cpus = parse_cpu_list(a.client_cpus)
    try:
        os.sched_setaffinity(0, set(client_cpus))  # the sampler runs beside the load generator
    except OSError:
        pass
    mk = lambda secs: tool_command(a.tool, a.url, a.conc, secs, a.timeout, a.header, a.lua, a.lua_arg, a.sink,
                                   a.tlsload, a.streams, a.data, (a.h3load, a.ca) if a.h3load else None)
    if a.warmup > 0:
        _run_tool(mk(a.warmup), a.client_cpus, a.warmup)
    kids = proc_children_map()
    f0 = cpu_ticks(proc_tree(front, kids))
    s0 = cpu_ticks(proc_tree(roots, kids))
    k0, c0 = core_ticks(server_cpus), core_ticks(client_cpus)
    sampler = MemSampler(roots, a.rss_interval)
    sampler.sample()
    sampler.start()
    log0 = _size(a.access_log)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc, out = _run_tool(mk(a.secs), a.client_cpus, a.secs)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    kids = proc_children_map()
    f1 = cpu_ticks(proc_tree(front, kids))
    s1 = cpu_ticks(proc_tree(roots, kids))
    k1, c1 = core_ticks(server_cpus), core_ticks(client_cpus)
    sampler.stop()
    res = PARSERS[a.tool](out)
    note = a.note or ""
    if res is None:
        tail = " | ".join(out.strip().splitlines()[-3:])[:300]
        res = _empty_result()
        res["duration_s"] = float(a.secs)
        res["err_read"] = 1
        note = (note + "; " if note else "") + f"load tool failed (exit {rc}): {tail}"
    for extra in (resumption_note(a.tool, res), protocol_note(a.tool, res)):
        if extra:
            note = (note + "; " if note else "") + extra
    client_s = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    row = compute_row(res, cpu_delta_s(f0, f1), cpu_delta_s(s0, s1), client_s)
    steal_total = (k1[1] - k0[1]) + (c1[1] - c0[1])
    row.update({
        "case": a.case, "rep": a.rep, "variant": a.variant, "conc": a.conc, "workers": a.workers,
        "contender": a.contender, "ref": a.ref, "tool": a.tool,
        "peak_rss_kb": sampler.peak_rss, "peak_pss_kb": sampler.peak_pss,
        "server_core_busy_pct": busy_pct(k0, k1), "client_core_busy_pct": busy_pct(c0, c1),
        "steal_pct": 100 * ((k1[2] - k0[2]) + (c1[2] - c0[2])) / steal_total if steal_total else 0.0,
        "note": note,
    })
    if a.legacy:
        _append_legacy(a, row, log0)
        return row
    append_row(a.raw, row)
    lat = row.get("lat_p99_ms") or row.get("lat_mean_ms")
    print(f"  {a.case} {a.variant:<16} c{a.conc:<5} {a.contender:<24} {row['rps']:>10,.0f} rps "
          f"{row['mb_per_s']:>7,.0f} MB/s {_fmt_cell(row['us_cpu_per_req']) or '-':>7} µs/req "
          f"server {row['server_cpu_pct']:5.1f}% client {row['client_cpu_pct']:5.1f}% "
          f"lat {_fmt_cell(lat) or '-'} ms rss {sampler.peak_rss / 1024:.0f} MB errors {row['errors']}"
          + (f" ({note})" if note else ""), file=sys.stderr)
    return row


# bench/static/run and bench/engine/run keep their own raw.csv columns (lib.sh's
# BENCH_CSV_HEADER); bench_measure in lib.sh calls `measure --legacy` for them.
LEGACY_FIELDS = [
    "duration_s", "requests", "rps", "bytes", "mb_per_s", "server_cpu_s", "server_cpu_pct",
    "us_cpu_per_req", "us_cpu_per_mb", "client_cpu_pct", "err_connect", "err_read", "err_write",
    "err_status", "err_timeout", "errors", "log_bytes_per_req", "server_core_busy_pct",
    "client_core_busy_pct", "steal_pct",
]


def _size(path):
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def legacy_line(prefix, row):
    """One row of the static/engine raw.csv: PREFIX (section,rep,server,file,mode,conns) + numbers."""
    fmt = {"duration_s": "{:.3f}", "requests": "{:.0f}", "rps": "{:.0f}", "bytes": "{:.0f}",
           "mb_per_s": "{:.1f}", "server_cpu_s": "{:.2f}", "server_cpu_pct": "{:.1f}",
           "us_cpu_per_req": "{:.3f}", "us_cpu_per_mb": "{:.1f}", "client_cpu_pct": "{:.1f}",
           "server_core_busy_pct": "{:.1f}", "client_core_busy_pct": "{:.1f}", "steal_pct": "{:.1f}"}
    cells = []
    for f in LEGACY_FIELDS:
        v = row.get(f, "")
        if v == "" or v is None:
            cells.append("" if f == "log_bytes_per_req" else "0")
        elif f in fmt:
            cells.append(fmt[f].format(float(v)))
        else:
            cells.append(str(v))
    return prefix + "," + ",".join(cells)


def _append_legacy(a, row, log0):
    if a.access_log and row["requests"]:
        row["log_bytes_per_req"] = f"{(_size(a.access_log) - log0) / row['requests']:.1f}"
    line = legacy_line(f"{a.legacy},{a.conc}", row)
    with open(a.raw, "a") as f:
        f.write(line + "\n")
    section, rep, server, file, mode = a.legacy.split(",")
    print(f"  {server:<11} {file:<9} {mode:<10} rep {rep}: {row['rps']:8.0f} rps {row['mb_per_s']:7.0f} MB/s "
          f"{float(row['us_cpu_per_req'] or 0):7.2f} us/req  server {row['server_cpu_pct']:5.1f}% "
          f"(core {row['server_core_busy_pct']:5.1f}%)  wrk {row['client_cpu_pct']:5.1f}% "
          f"(core {row['client_core_busy_pct']:5.1f}%)  steal {row['steal_pct']:.1f}%  errors {row['errors']}"
          + (f" ({row['note']})" if row.get("note") else ""), file=sys.stderr)


# ------------------------------------------------------------------ preflight

def check_response(status, headers, body, length=None, expect_body=None, encoding=None):
    """Why a preflight response is wrong, or None. HEADERS: dict with lower-case names.
    LENGTH: the expected decoded body length; EXPECT_BODY: the expected decoded bytes;
    ENCODING: the expected Content-Encoding (None: identity)."""
    if status != 200:
        return f"status {status}"
    enc = headers.get("content-encoding", "").strip().lower() or None
    if enc != encoding:
        return f"Content-Encoding {enc or 'none'} (want {encoding or 'none'})"
    cl = headers.get("content-length")
    if cl is not None and int(cl) != len(body):
        return f"Content-Length {cl} but {len(body)} body bytes"
    if enc == "gzip":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as e:
            return f"body is not gzip: {e}"
    elif enc is not None:
        # br and zstd need modules outside the standard library: decoded when
        # they are installed, otherwise only the encoding and length are checked
        body = decode_optional(enc, body)
        if body is None:
            return None
        if isinstance(body, str):
            return body
    if length is not None and len(body) != length:
        return f"body of {len(body)} bytes (want {length})"
    if expect_body is not None and body != expect_body:
        return "body differs from the expected bytes"
    return None


def decode_optional(enc, body):
    """BODY decoded from ENC with an optional module (brotli, zstandard); None when the
    module is missing, a string saying why when the body does not decode."""
    try:
        if enc == "br":
            import brotli
            return brotli.decompress(body)
        if enc == "zstd":
            import zstandard
            return zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 30)
    except ImportError:
        return None
    except Exception as e:  # each module has its own error type
        return f"body is not {enc}: {e}"
    return f"unknown Content-Encoding {enc}"


def preflight(url, length=None, file=None, body=None, encoding=None, headers=(), timeout=20.0, tls_version=None,
              client_cert=None):
    """GET URL once and check the answer (check_response). https: the certificate is not
    verified (the lab makes its own per run); TLS_VERSION ('TLSv1.3') must be the one
    negotiated; CLIENT_CERT (cert, key): the client certificate presented."""
    m = re.fullmatch(r"(https?)://([^/:]+):(\d+)(/.*)?", url)
    if not m:
        return f"bad url {url}"
    scheme, host, port, path = m.groups()
    h = {}
    for line in headers:
        k, _, v = line.partition(":")
        h[k.strip()] = v.strip()
    if encoding and "Accept-Encoding" not in h:
        h["Accept-Encoding"] = encoding
    expect = Path(file).read_bytes() if file else (body.encode() if body is not None else None)
    try:
        if scheme == "https":
            import ssl
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            if client_cert:
                ctx.load_cert_chain(*client_cert)
            c = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=ctx)
        else:
            c = http.client.HTTPConnection(host, int(port), timeout=timeout)
        c.request("GET", path or "/", headers=h)
        r = c.getresponse()
        version = c.sock.version() if scheme == "https" else None
        data = r.read()
        c.close()
    except (OSError, http.client.HTTPException) as e:
        return f"request failed: {e}"
    if tls_version and version != tls_version:
        return f"negotiated {version} (want {tls_version})"
    return check_response(r.status, {k.lower(): v for k, v in r.getheaders()}, data, length, expect, encoding)


def parse_curl_head(text):
    """The last header block curl wrote with -D (after any 1xx): {lower-case name: value}."""
    blocks = [b for b in re.split(r"\r?\n\r?\n", text) if b.strip()]
    out = {}
    for line in (blocks[-1].splitlines()[1:] if blocks else []):
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip().lower()] = v.strip()
    return out


def preflight_h2(url, length=None, file=None, body=None, timeout=20.0, tls13=True):
    """GET URL once with curl over HTTP/2 (ALPN h2 for https, prior knowledge for http; the
    certificate is not verified) and check that the answer came over HTTP/2 (and TLS 1.3
    when TLS13), then check_response. Python's http.client speaks HTTP/1.1 only."""
    import tempfile
    if not re.fullmatch(r"https?://[^/:]+:\d+(/.*)?", url):
        return f"bad url {url}"
    https = url.startswith("https:")
    expect = Path(file).read_bytes() if file else (body.encode() if body is not None else None)
    with tempfile.TemporaryDirectory(prefix="h2pre") as d:
        cmd = ["curl", "-sS", "-k", "--max-time", str(int(timeout)), "-o", f"{d}/body", "-D", f"{d}/head",
               "-w", "%{http_version} %{http_code}"]
        cmd += (["--http2", "--tlsv1.3"] if tls13 else ["--http2"]) if https else ["--http2-prior-knowledge"]
        p = subprocess.run(cmd + [url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            return f"curl failed (exit {p.returncode}): {p.stderr.strip()[:200]}"
        version, _, status = p.stdout.strip().partition(" ")
        if version != "2":
            return f"answered over HTTP/{version} (want 2)"
        head = parse_curl_head(Path(f"{d}/head").read_text(errors="replace"))
        data = Path(f"{d}/body").read_bytes()
    return check_response(int(status or 0), head, data, length, expect)


# ------------------------------------------------------------------ command line

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def ident(p):
        p.add_argument("--raw", required=True)
        p.add_argument("--case", required=True)
        p.add_argument("--rep", default="1")
        p.add_argument("--variant", default="")
        p.add_argument("--conc", type=int, default=100)
        p.add_argument("--workers", default="1")
        p.add_argument("--contender", required=True)
        p.add_argument("--ref", default="")
        p.add_argument("--note", default="")

    m = sub.add_parser("measure", help="warm-up + one measured load run, appends a row to raw.csv")
    ident(m)
    m.add_argument("--tool", choices=sorted(PARSERS), default="wrk")
    m.add_argument("--url", required=True)
    m.add_argument("--secs", type=float, default=5)
    m.add_argument("--warmup", type=float, default=1)
    m.add_argument("--timeout", type=int, default=5)
    m.add_argument("--header", action="append", default=[])
    m.add_argument("--lua")
    m.add_argument("--lua-arg", action="append", default=[])
    m.add_argument("--sink")
    m.add_argument("--tlsload", help="bench/ceiling/tlsload binary (tools tls-new, tls-resume, tls-bulk)")
    m.add_argument("--h3load", help="bench/h3load binary (tool h3load)")
    m.add_argument("--ca", help="the CA (PEM) h3load trusts")
    m.add_argument("--streams", type=int, default=1,
                   help="h2load-h2: streams per connection (--conc counts the streams in flight)")
    m.add_argument("--data", help="h2load: a file POSTed as each request's body")
    m.add_argument("--pids", required=True, help="root pids of the setup; the first --front are the front server")
    m.add_argument("--front", type=int, default=1)
    m.add_argument("--server-cpus", default=os.environ.get("SERVER_CPU", "0"))
    m.add_argument("--client-cpus", default=os.environ.get("CLIENT_CPU", "1"))
    m.add_argument("--rss-interval", type=float, default=0.25)
    m.add_argument("--access-log", help="bytes it grows by per request go in log_bytes_per_req (--legacy)")
    m.add_argument("--legacy", metavar="SECTION,REP,SERVER,FILE,MODE",
                   help="append a row in the raw.csv format of bench/static/run and bench/engine/run")

    n = sub.add_parser("not-yet", help="a row for a case hayate cannot run yet")
    ident(n)

    p = sub.add_parser("preflight", help="GET URL and check status, length, body and encoding")
    p.add_argument("--url", required=True)
    p.add_argument("--length", type=int)
    p.add_argument("--file")
    p.add_argument("--body")
    p.add_argument("--encoding")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--tls-version", help="https: the TLS version that must be negotiated (TLSv1.3)")
    p.add_argument("--cert", help="https: a client certificate (PEM) to present")
    p.add_argument("--key", help="https: the key (PEM) of --cert")
    p.add_argument("--http2", action="store_true",
                   help="over HTTP/2 with curl (https: ALPN h2 and TLS 1.3; http: prior knowledge)")

    r = sub.add_parser("report", help="write RUN_DIR/report.md from raw.csv")
    r.add_argument("run_dir")
    pl = sub.add_parser("plots", help="write RUN_DIR/*.png from raw.csv (needs matplotlib)")
    pl.add_argument("run_dir")

    a = ap.parse_args(argv)
    if a.cmd == "measure":
        measure(a)
    elif a.cmd == "not-yet":
        note = a.note if a.note.startswith("not yet") else "not yet: " + a.note
        append_row(a.raw, {"case": a.case, "rep": a.rep, "variant": a.variant, "conc": a.conc,
                           "workers": a.workers, "contender": a.contender, "ref": a.ref, "note": note})
    elif a.cmd == "preflight":
        if a.http2:
            why = preflight_h2(a.url, a.length, a.file, a.body)
        else:
            why = preflight(a.url, a.length, a.file, a.body, a.encoding, a.header, tls_version=a.tls_version,
                            client_cert=(a.cert, a.key) if a.cert else None)
        if why:
            print(why)
            return 1
    elif a.cmd == "report":
        sys.stdout.write(make_report(a.run_dir))
    elif a.cmd == "plots":
        for f in make_plots(a.run_dir):
            print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
