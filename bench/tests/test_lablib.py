"""Unit tests of bench/lablib.py: parsing load-tool output, statistics, ratios, the CSV,
the report. Standard library only.

    python3 -m pytest bench/tests -q      # with pytest
    python3 bench/tests/test_lablib.py    # without: prints "N passed, N failed"
"""

import csv
import gzip
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import lablib  # noqa: E402

WRK = """Running 1s test @ http://127.0.0.1:19600/x
  1 threads and 10 connections
  96691 requests in 1.10s, 107.80MB read
Requests/sec:  87925.61
WRK_RESULT requests=96691 duration_us=1099691 bytes=113031779 connect=0 read=2 write=0 status=5 timeout=1 lat_mean_us=72 lat_p50_us=60 lat_p99_us=158 lat_max_us=780
"""

# the older line (bench/ceiling/sink.c prints it): no latency fields
SINK = "WRK_RESULT requests=40 duration_us=3000000 bytes=4194304000 connect=0 read=0 write=0 status=0 timeout=0\n"

H2LOAD = """starting benchmark...
spawning thread #0: 10 total client(s). Timing-based test with 1s of warm-up time and 1s of main duration for measurements.
Application protocol: http/1.1
Main benchmark duration is over for thread #0. Stopping all clients.

finished in 2.00s, 70689.00 req/s, 78.81MB/s
requests: 70689 total, 70699 started, 70689 done, 70680 succeeded, 9 failed, 4 errored, 3 timeout
status codes: 70680 2xx, 0 3xx, 7 4xx, 2 5xx
traffic: 78.81MB (82635441) total, 11.43MB (11981498) headers (space savings 0.00%), 110.38MB (115745792) data
                     min         max         mean         sd        +/- sd
time for request:       39us      4.35ms       141us       106us    95.02%
time for connect:        0us         0us         0us         0us     0.00%
time to 1st byte:        0us         0us         0us         0us     0.00%
req/s           :    6969.31     7168.81     7067.44       60.89    70.00%
"""

# h2load 1.52 over https (h2 by ALPN): the TLS lines come before the progress lines
H2LOAD_H2 = """starting benchmark...
spawning thread #0: 10 total client(s). Timing-based test with 0s of warm-up time and 3s of main duration for measurements.
TLS Protocol: TLSv1.3
Cipher: TLS_AES_256_GCM_SHA384
Server Temp Key: X25519 253 bits
Application protocol: h2
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 3.00s, 14032.33 req/s, 15.64MB/s
requests: 42097 total, 42197 started, 42097 done, 42097 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 42097 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 46.93MB (49208912) total, 1.02MB (1070290) headers (space savings 39.11%), 41.11MB (43107328) data
                     min         max         mean         sd        +/- sd
time for request:      322us     21.50ms      6.36ms      1.71ms    83.12%
time for connect:        0us         0us         0us         0us     0.00%
time to 1st byte:        0us         0us         0us         0us     0.00%
req/s           :    1398.21     1409.59     1403.23        3.34    60.00%
"""

AB = """This is ApacheBench, Version 2.3 <$Revision$>
Benchmarking 127.0.0.1 (be patient).....done

Document Path:          /a.txt
Document Length:        6 bytes

Concurrency Level:      5
Time taken for tests:   0.104 seconds
Complete requests:      100
Failed requests:        3
   (Connect: 1, Receive: 0, Length: 2, Exceptions: 0)
Non-2xx responses:      4
Total transferred:      19100 bytes
HTML transferred:       600 bytes
Requests per second:    957.30 [#/sec] (mean)
Time per request:       5.223 [ms] (mean)
Time per request:       1.045 [ms] (mean, across all concurrent requests)

Percentage of the requests served within a certain time (ms)
  50%      4
  66%      5
  99%     11
 100%     12 (longest request)
"""


# ------------------------------------------------------------------ parsing

def test_parse_wrk_counters_and_latency():
    r = lablib.parse_wrk(WRK)
    assert r["requests"] == 96691
    assert abs(r["duration_s"] - 1.099691) < 1e-9
    assert r["bytes"] == 113031779
    assert (r["err_read"], r["err_status"], r["err_timeout"], r["err_connect"]) == (2, 5, 1, 0)
    assert r["lat_mean_ms"] == 0.072 and r["lat_p50_ms"] == 0.06 and r["lat_p99_ms"] == 0.158
    assert r["lat_max_ms"] == 0.78


def test_parse_wrk_without_latency_fields_and_failure():
    r = lablib.parse_wrk(SINK)
    assert r["requests"] == 40 and r["bytes"] == 4194304000
    assert r["lat_p99_ms"] == ""
    assert lablib.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n") is None


# bench/ceiling/tlsload.c (case T): the wrk line plus handshake counts
TLSLOAD = ("WRK_RESULT requests=166 duration_us=1001935 bytes=208994 connect=0 read=0 write=0 status=0 "
           "timeout=0 handshakes=167 resumed=166\n")


def test_parse_tlsload_and_resumption_note():
    r = lablib.parse_wrk(TLSLOAD)
    assert r["requests"] == 166 and r["handshakes"] == 167 and r["resumed"] == 166
    assert lablib.PARSERS["tls-resume"] is lablib.parse_wrk
    # the first handshake of a resumed run is full (it brings the ticket): no note
    assert lablib.resumption_note("tls-resume", r) == ""
    r["resumed"] = 100
    assert lablib.resumption_note("tls-resume", r) == "67 of 167 handshakes were full, not resumed"
    # a few full ones among thousands (connections that started before the first ticket): no note
    assert lablib.resumption_note("tls-resume", {"handshakes": 4549, "resumed": 4545}) == ""
    assert lablib.resumption_note("tls-new", r) == ""
    assert lablib.resumption_note("tls-resume", lablib.parse_wrk(SINK)) == ""


def test_parse_h2load():
    r = lablib.parse_h2load(H2LOAD)
    assert r["requests"] == 70689
    # "finished in" includes the warm-up; duration comes from done / req/s
    assert abs(r["duration_s"] - 1.0) < 1e-9
    assert r["bytes"] == 82635441
    assert r["err_status"] == 9  # 4xx + 5xx
    assert r["err_read"] == 4 and r["err_timeout"] == 3
    assert r["unfinished"] == 10
    assert abs(r["lat_mean_ms"] - 0.141) < 1e-9
    assert abs(r["lat_max_ms"] - 4.35) < 1e-9
    assert lablib.parse_h2load("connect error\n") is None


def test_parse_h2load_over_h2_and_protocol_note():
    r = lablib.parse_h2load(H2LOAD_H2)
    assert r["requests"] == 42097 and r["unfinished"] == 100 and r["bytes"] == 49208912
    assert abs(r["duration_s"] - 42097 / 14032.33) < 1e-9
    assert r["alpn"] == "h2" and r["tls_protocol"] == "TLSv1.3"
    assert lablib.protocol_note("h2load-h2", r) == ""
    assert lablib.protocol_note("h2load", lablib.parse_h2load(H2LOAD)) == ""  # --h1 rows: no check
    r12 = lablib.parse_h2load(H2LOAD_H2.replace("TLSv1.3", "TLSv1.2").replace("protocol: h2", "protocol: http/1.1"))
    assert lablib.protocol_note("h2load-h2", r12) == "protocol http/1.1 (want h2); TLS TLSv1.2 (want TLSv1.3)"
    assert lablib.protocol_note("h2load-h2", lablib.parse_h2load(H2LOAD)) == "protocol http/1.1 (want h2)"
    h2c = lablib.parse_h2load(H2LOAD.replace("protocol: http/1.1", "protocol: h2c"))
    assert lablib.protocol_note("h2load-h2", h2c) == ""  # prior knowledge on a plain port: no TLS line


def test_parse_curl_head():
    text = "HTTP/2 100\r\n\r\nHTTP/2 200\r\nserver: nginx\r\ncontent-length: 1024\r\nContent-Type: text/plain\r\n\r\n"
    assert lablib.parse_curl_head(text) == {"server": "nginx", "content-length": "1024", "content-type": "text/plain"}
    assert lablib.parse_curl_head("") == {}


def test_parse_ab():
    r = lablib.parse_ab(AB)
    assert r["requests"] == 100
    assert r["duration_s"] == 0.104
    assert r["bytes"] == 19100
    assert r["err_connect"] == 1 and r["err_read"] == 2 and r["err_status"] == 4
    assert r["lat_mean_ms"] == 5.223
    assert (r["lat_p50_ms"], r["lat_p99_ms"], r["lat_max_ms"]) == (4.0, 11.0, 12.0)
    assert lablib.parse_ab("apr_socket_recv: Connection refused (111)\n") is None


def test_dur_ms_units():
    assert lablib._dur_ms("122us") == 0.122
    assert lablib._dur_ms("23.38ms") == 23.38
    assert lablib._dur_ms("1.5s") == 1500.0


# ------------------------------------------------------------------ statistics and formatting

def test_median_min_max_and_ratio():
    assert lablib.median([3, 1, 2]) == 2
    assert lablib.median([4, 1, 3, 2]) == 2.5
    assert lablib.median([]) is None
    assert lablib.ratio(3, 2) == 1.5
    assert lablib.ratio(1, 0) is None and lablib.ratio(None, 2) is None


def test_fmt_cell():
    assert lablib.fmt_cell((1000.0, 1000.0, 1000.0)) == "1,000"
    assert lablib.fmt_cell((2.5, 2.0, 3.0), 2) == "2.50 [2.00-3.00]"
    assert lablib.fmt_cell((2048.0, 1024.0, 4096.0), 1, 1 / 1024) == "2.0 [1.0-4.0]"
    assert lablib.fmt_cell(None) == "-"
    assert lablib.fmt_ratio(0.5) == "0.50×" and lablib.fmt_ratio(None) == "-"


def test_ideal_wait_rps():
    # 7 s run: rounds end at 1.5, 3, 4.5, 6 -> 4 rounds of 100 requests
    assert abs(lablib.ideal_wait_rps(100, 7.0) - 400 / 7) < 1e-9
    assert lablib.ideal_wait_rps(0, 7.0) is None


def test_parse_cpu_list():
    assert lablib.parse_cpu_list("0") == [0]
    assert lablib.parse_cpu_list("0-1") == [0, 1]
    assert lablib.parse_cpu_list("0,2-3") == [0, 2, 3]


def test_compute_row():
    res = lablib.parse_wrk(WRK)
    row = lablib.compute_row(res, cpu_front_s=0.5, cpu_setup_s=0.75, client_cpu_s=1.0)
    assert abs(row["rps"] - 96691 / 1.099691) < 1e-6
    assert abs(row["us_cpu_per_req"] - 0.5e6 / 96691) < 1e-9
    assert abs(row["setup_us_per_req"] - 0.75e6 / 96691) < 1e-9
    assert abs(row["server_cpu_pct"] - 100 * 0.5 / 1.099691) < 1e-9
    assert row["errors"] == 8
    empty = lablib.compute_row(lablib._empty_result(), 0.1, 0.1, 0)
    assert empty["us_cpu_per_req"] == "" and empty["rps"] == 0


def test_tool_command():
    c = lablib.tool_command("wrk", "http://127.0.0.1:1/x", 100, 2.6, headers=["Accept-Encoding: gzip"])
    assert c[:4] == ["wrk", "-t1", "-c100", "-d3s"] and "-H" in c and c[-1] == "http://127.0.0.1:1/x"
    c = lablib.tool_command("sink", "http://127.0.0.1:8080/big.bin", 4, 3, sink_bin="/t/sink")
    assert c == ["/t/sink", "127.0.0.1:8080", "/big.bin", "3", "4"]
    c = lablib.tool_command("h2load", "http://127.0.0.1:1/x", 10000, 5)
    assert "--h1" in c and "-c10000" in c and c[c.index("-D") + 1] == "5"
    c = lablib.tool_command("ab", "http://127.0.0.1:1/x", 10, 0.2)
    assert c[c.index("-n") + 1] == "100" and c[c.index("-t") + 1] == "1"
    c = lablib.tool_command("tls-resume", "https://127.0.0.1:8443/1k.txt", 20, 3, tlsload_bin="/t/tlsload")
    assert c == ["/t/tlsload", "resume", "127.0.0.1:8443", "/1k.txt", "3", "20"]
    c = lablib.tool_command("tls-bulk", "https://127.0.0.1:8443/big.bin", 4, 3, tlsload_bin="/t/tlsload")
    assert c[1] == "bulk" and c[-1] == "4"
    c = lablib.tool_command("wrk", "https://127.0.0.1:8443/1k.txt", 100, 3)
    assert c[-1] == "https://127.0.0.1:8443/1k.txt"
    # HTTP/2: conc counts the streams in flight, STREAMS per connection
    c = lablib.tool_command("h2load-h2", "https://127.0.0.1:8443/1k.txt", 100, 3, streams=10)
    assert c[:6] == ["h2load", "-t1", "-c10", "-m10", "-D", "3"] and "--h1" not in c
    assert "--tls13-ciphers=TLS_AES_256_GCM_SHA384" in c and c[-1] == "https://127.0.0.1:8443/1k.txt"
    c = lablib.tool_command("h2load-h2", "http://127.0.0.1:8080/big.bin", 4, 3)
    assert c[2:4] == ["-c4", "-m1"] and not any(x.startswith("--tls13") for x in c)


def test_preflight_rejects_other_schemes():
    assert lablib.preflight("ftp://127.0.0.1:1/x") == "bad url ftp://127.0.0.1:1/x"
    # https is parsed (the connection to a closed port fails, not the URL)
    assert lablib.preflight("https://127.0.0.1:1/x", timeout=2).startswith("request failed")


# ------------------------------------------------------------------ preflight checks

def test_check_response():
    body = b"x" * 100
    ok = lablib.check_response(200, {"content-length": "100"}, body, length=100, expect_body=body)
    assert ok is None
    assert lablib.check_response(404, {}, b"", length=100).startswith("status 404")
    assert "Content-Length" in lablib.check_response(200, {"content-length": "99"}, body, length=100)
    assert "body of 100" in lablib.check_response(200, {}, body, length=101)
    assert "differs" in lablib.check_response(200, {}, body, expect_body=b"y" * 100)
    gz = gzip.compress(body)
    h = {"content-encoding": "gzip", "content-length": str(len(gz))}
    assert lablib.check_response(200, h, gz, expect_body=body, encoding="gzip") is None
    assert "Content-Encoding none" in lablib.check_response(200, {}, body, expect_body=body, encoding="gzip")
    assert "Content-Encoding gzip" in lablib.check_response(200, h, gz, expect_body=body)


def test_check_response_br_and_zstd_without_or_with_their_modules():
    # real frames of "hi": decoded and compared when the module is installed,
    # otherwise only the header and length are checked; right either way
    br = b"\x8b\x00\x80hi\x03"
    zst = b"\x28\xb5\x2f\xfd\x20\x02\x11\x00\x00hi"
    for enc, frame in (("br", br), ("zstd", zst)):
        h = {"content-encoding": enc, "content-length": str(len(frame))}
        assert lablib.check_response(200, h, frame, expect_body=b"hi", encoding=enc) is None, enc
        assert f"Content-Length {len(frame)} but 4" in lablib.check_response(200, h, b"1234", encoding=enc)
    h = {"content-encoding": "br", "content-length": "6"}
    assert "Content-Encoding br" in lablib.check_response(200, h, b"123456", encoding="gzip")
    assert "unknown Content-Encoding" in lablib.check_response(
        200, {"content-encoding": "lz4"}, b"x", encoding="lz4")


# ------------------------------------------------------------------ CSV, summaries, report

def _row(**kw):
    base = {"case": "A", "rep": 1, "variant": "1k.txt", "conc": 100, "workers": 1, "contender": "nginx",
            "ref": "nginx", "tool": "wrk", "duration_s": 1.0, "requests": 1000, "rps": 1000.0,
            "us_cpu_per_req": 10.0, "errors": 0, "err_status": 0, "peak_rss_kb": 10240,
            "server_cpu_pct": 95.0, "server_core_busy_pct": 96.0, "steal_pct": 0.0}
    base.update(kw)
    return base


def _write(tmp, rows):
    raw = os.path.join(tmp, "raw.csv")
    for r in rows:
        lablib.append_row(raw, r)
    return raw


def test_csv_roundtrip_and_header():
    with tempfile.TemporaryDirectory() as tmp:
        raw = _write(tmp, [_row(), _row(rep=2, rps=1200.0)])
        with open(raw) as f:
            header = next(csv.reader(f))
        assert header == lablib.FIELDS
        rows = lablib.read_rows(raw)
        assert len(rows) == 2 and rows[1]["rps"] == "1200.0" and rows[0]["contender"] == "nginx"


def test_summarize_medians_errors_and_not_yet():
    rows = [
        _row(rps="1000", errors="0"), _row(rep=2, rps="3000", errors="2"), _row(rep=3, rps="2000", errors="1"),
        _row(contender="hayate", case="C", note="not yet: supervisor", rps=""),
    ]
    rows = [{k: str(v) for k, v in r.items()} for r in rows]
    s = lablib.summarize(rows)
    assert len(s) == 2
    nginx, later = s
    assert nginx["n"] == 3 and nginx["rps"] == (2000.0, 1000.0, 3000.0)
    assert nginx["errors"][0] == 3  # errors are summed, not a median
    assert later["not_yet"] and later["n"] == 0 and later["rps"] is None


def test_ok_rps_leaves_out_error_answers_and_mostly_errors():
    rows = [_row(case="B", requests=1000, duration_s=2.0, err_status=900, errors=900, rps=500.0),
            _row(case="B", contender="hayate", requests=1000, duration_s=2.0, err_status=0, rps=500.0)]
    s = lablib.summarize([{k: str(v) for k, v in r.items()} for r in rows])
    assert s[0]["ok_rps"][0] == 50.0 and s[0]["ok_requests"][0] == 100.0
    assert s[1]["ok_rps"][0] == 500.0
    assert lablib.mostly_errors(s[0]) and not lablib.mostly_errors(s[1])
    assert "| 100 | **hayate** | 500 |" in "\n".join(lablib.case_table(s, "B"))


def test_ratio_against_reference_in_the_same_group():
    rows = [_row(), _row(contender="hayate", rps=1500.0, us_cpu_per_req=6.0),
            _row(variant="5081.png", rps=9999.0)]
    rows = [{k: str(v) for k, v in r.items()} for r in rows]
    s = lablib.summarize(rows)
    ref = lablib.find_ref(s, s[1])
    assert ref is s[0]  # same variant, not the 5081.png nginx row
    assert lablib.find_ref(s, s[0]) is None  # nginx is its own reference
    table = "\n".join(lablib.case_table(s, "A"))
    assert "| 1k.txt | 1 | **hayate** | 1,500 | 1.50× | 6.00 | 0.60× |" in table


def test_paired_ratio_is_the_median_of_each_repetitions_ratio():
    # The host slows down in repetition 2: a ratio of medians (12 / 20 = 0.6) mixes the
    # repetitions' speeds; the paired ratio compares each repetition with itself.
    rows = []
    for rep, (ngx, hay) in enumerate([(10.0, 9.0), (40.0, 36.0), (20.0, 12.0)], start=1):
        rows.append(_row(case="P", rep=rep, contender="nginx", us_cpu_per_req=ngx))
        rows.append(_row(case="P", rep=rep, contender="hayate", ref="nginx", us_cpu_per_req=hay))
    s = lablib.summarize([{k: str(v) for k, v in r.items()} for r in rows])
    nginx, hayate = s
    assert lablib.find_ref(s, hayate) is nginx
    assert lablib.paired_cpu_ratio(hayate, nginx) == 0.9
    assert lablib.ratio(lablib.med(hayate, "us_cpu_per_req"), lablib.med(nginx, "us_cpu_per_req")) == 0.6
    assert "| 0.60× | 0.90× |" in "\n".join(lablib.case_table(s, "P"))
    # A repetition the reference is missing from is left out.
    del nginx["cpu_by_rep"]["3"]
    assert lablib.paired_cpu_ratio(hayate, nginx) == 0.9


def test_report_has_tables_ceiling_not_yet_errors_and_meta():
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            _row(), _row(contender="hayate", rps=2000.0), _row(contender="ceiling", rps=3000.0, note="the floor"),
            _row(case="D", variant="1 KiB JSON", contender="nginx TCP keepalive", ref=""),
            _row(case="D", variant="1 KiB JSON", contender="hayate TCP", ref="nginx TCP keepalive",
                 errors=7, err_status=7),
            {"case": "D", "rep": 1, "variant": "1 KiB JSON", "conc": 100, "workers": 1,
             "contender": "hayate cache 5s", "ref": "nginx cache 5s", "note": "not yet: no cache"},
        ]
        _write(tmp, rows)
        Path(tmp, "meta.tsv").write_text("run\tX\nmode\tquick\nmachine\thost vm, 2 cores\ntools\tnginx/1.22.1\n")
        Path(tmp, "notes.txt").write_text("something to know\n")
        Path(tmp, "A_rps.png").write_bytes(b"")
        text = lablib.make_report(tmp)
        assert Path(tmp, "report.md").read_text() == text
        assert "## A. Static files" in text and "## D. In front of an app" in text
        assert "| 1k.txt | 1 | **hayate** | 2,000 | 2.00× |" in text
        assert "| 1k.txt | 1 | ceiling | 3,000 | 3.00× |" in text and "the floor" in text
        assert "| **hayate cache 5s** | not yet |" in text
        assert "## Not yet" in text and "no cache" in text
        assert "## Errors" in text and "hayate TCP: 7 (connect 0, read 0, write 0, status 7, timeout 0)" in text
        assert "**7**" in text
        assert "Machine: host vm, 2 cores" in text and "Tools: nginx/1.22.1" in text
        assert "- something to know" in text
        assert "![A_rps.png](A_rps.png)" in text


def test_report_has_the_https_case():
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            _row(case="T", variant="full handshake", conc=20, contender="nginx", ref="nginx", rps=1000.0,
                 us_cpu_per_req=900.0),
            _row(case="T", variant="full handshake", conc=20, contender="hayate", ref="nginx", rps=1300.0,
                 us_cpu_per_req=700.0),
            _row(case="T", variant="100 MiB", conc=4, contender="nginx", ref="nginx", rps=10.0, mb_per_s=1000.0,
                 us_cpu_per_mb=900.0),
            _row(case="T", variant="100 MiB", conc=4, contender="hayate", ref="nginx", rps=11.0, mb_per_s=1100.0,
                 us_cpu_per_mb=850.0),
        ]
        _write(tmp, rows)
        text = lablib.make_report(tmp)
        assert "## T. HTTPS" in text and "TLS 1.3" in text
        assert "| full handshake | 20 | **hayate** | 1,300 | 1.30× | 700.00 | 0.78× | 1,429 | 1.29× |  |  |  |  | per core ≥ 1.20×: met |" in text
        assert "| 100 MiB | 4 | **hayate** | 11 | 1.10× |" in text and "| 1,100 | 1.10× | 850.0 | 0.94× |" in text


def test_report_has_the_http2_case_with_its_targets():
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            _row(case="H2", variant="static 1 KiB", conc=100, contender="nginx", ref="nginx", rps=14000.0,
                 us_cpu_per_req=16.0, setup_us_per_req=16.0),
            _row(case="H2", variant="static 1 KiB", conc=100, contender="hayate", ref="nginx", rps=20000.0,
                 us_cpu_per_req=11.2, setup_us_per_req=11.2),
            _row(case="H2", variant="proxied 1 KiB", conc=100, contender="nginx", ref="nginx", rps=13000.0,
                 us_cpu_per_req=26.0, setup_us_per_req=34.0),
            _row(case="H2", variant="proxied 1 KiB", conc=100, contender="hayate", ref="nginx", rps=12000.0,
                 us_cpu_per_req=24.0, setup_us_per_req=32.0),
            _row(case="H2", variant="100 MiB", conc=4, contender="nginx", ref="nginx", rps=6.0, mb_per_s=675.0,
                 us_cpu_per_mb=900.0),
            _row(case="H2", variant="100 MiB", conc=4, contender="hayate", ref="nginx", rps=7.0, mb_per_s=700.0,
                 us_cpu_per_mb=800.0),
        ]
        _write(tmp, rows)
        text = lablib.make_report(tmp)
        assert "## H2. HTTP/2" in text and "h2load -c10 -m10" in text
        # 11.2 / 16 = 0.70: met as printed; 24 / 26 = 0.92 > 0.85: missed; 700 / 675 = 1.04 ≥ 1
        assert "| static 1 KiB | 100 | **hayate** | 20,000 | 1.43× | 11.20 | 0.70× | 11.20 |" in text
        assert "| CPU ≤ 0.70×: met |" in text
        assert "| CPU ≤ 0.85×: **missed** |" in text
        assert "| 700 | 1.04× | 800.0 | 0.89× | MB/s ≥ 1.00×: met |" in text
        # nginx rows (the reference) have no target cell
        assert "| static 1 KiB | 100 | nginx | 14,000 |  | 16.00 |  | 16.00 |  |  |  |  |  |" in text


def test_target_met():
    s = {"us_cpu_per_req": (7.0, 7.0, 7.0)}
    r = {"us_cpu_per_req": (10.0, 10.0, 10.0)}
    assert lablib.target_met("H2", "static 1 KiB", s, r) == ("CPU ≤ 0.70×", True)
    assert lablib.target_met("H2", "proxied 1 KiB", {"us_cpu_per_req": (9.0, 9.0, 9.0)}, r) == ("CPU ≤ 0.85×", False)
    assert lablib.target_met("H2", "static 1 KiB", s, None) is None
    assert lablib.target_met("H2", "keep-alive 1 KiB", s, r) is None
    assert lablib.target_met("H2", "100 MiB", {"mb_per_s": None}, {"mb_per_s": (5.0, 5.0, 5.0)}) is None
    # per core: the inverse of CPU per request, hayate's rate on one core over nginx's
    fast, slow = {"us_cpu_per_req": (200.0, 200.0, 200.0)}, {"us_cpu_per_req": (480.0, 480.0, 480.0)}
    assert lablib.target_met("T", "full handshake", fast, slow) == ("per core ≥ 1.20×", True)
    assert lablib.target_met("T", "resumed handshake", slow, fast) == ("per core ≥ 1.20×", False)


def test_legacy_line_matches_the_static_raw_csv():
    row = lablib.compute_row(lablib.parse_wrk(WRK), 0.5, 0.5, 1.0)
    row.update({"server_core_busy_pct": 97.04, "client_core_busy_pct": 90.0, "steal_pct": 0.123})
    line = lablib.legacy_line("small,1,nginx,1k.txt,keep-alive,100", row)
    cells = line.split(",")
    # lib.sh's BENCH_CSV_HEADER has 26 columns; bench_summarize reads them by position
    assert len(cells) == 26
    assert cells[:6] == ["small", "1", "nginx", "1k.txt", "keep-alive", "100"]
    assert cells[7] == "96691" and cells[8] == "87926"  # requests, rps
    assert cells[21] == "8" and cells[22] == ""  # errors, no access log
    assert cells[23:] == ["97.0", "90.0", "0.1"]


def test_load_warnings():
    s = lablib.summarize([{k: str(v) for k, v in _row(server_cpu_pct=40.0, server_core_busy_pct=90.0,
                                                        steal_pct=9.0).items()}])
    w = lablib.load_warnings(s)
    assert any("other load" in x for x in w) and any("stolen" in x for x in w)
    # H2's proxied row: the app on the same core is the setup's, not other load
    proxied = dict(case="H2", variant="proxied 1 KiB", server_cpu_pct=60.0, server_core_busy_pct=98.0,
                   setup_cpu_s=0.85, duration_s=1.0)
    assert lablib.load_warnings(lablib.summarize([{k: str(v) for k, v in _row(**proxied).items()}])) == []
    proxied["setup_cpu_s"] = 0.65
    assert lablib.load_warnings(lablib.summarize([{k: str(v) for k, v in _row(**proxied).items()}]))


if __name__ == "__main__":
    from runner import run_tests
    run_tests(globals())


# bench/h3load's summary, as it prints it (h2load's lines)
H3LOAD = """finished in 5.00s, 47942.36 req/s, 49.09MB/s
requests: 239712 total, 239712 started, 239712 done, 239700 succeeded, 2 failed, 10 errored, 0 timeout
status codes: 239700 2xx, 0 3xx, 2 4xx, 0 5xx
traffic: 245452800 bytes (245452800) total
time for request: 0us 11.72ms 2.08ms
"""


def test_h3load_command_and_summary():
    c = lablib.tool_command("h3load", "https://127.0.0.1:9/1k.txt", 100, 8, streams=10,
                            h3load=("/t/h3load", "/t/cert.pem"))
    assert c == ["/t/h3load", "-ca", "/t/cert.pem", "-c", "10", "-m", "10", "-d", "8", "https://127.0.0.1:9/1k.txt"]
    r = lablib.PARSERS["h3load"](H3LOAD)
    assert r["requests"] == 239712 and r["bytes"] == 245452800
    assert r["err_status"] == 2 and r["err_read"] == 10
    assert abs(r["duration_s"] - 239712 / 47942.36) < 1e-9
    assert abs(r["lat_mean_ms"] - 2.08) < 1e-9
