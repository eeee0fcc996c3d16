"""Unit tests of the helpers in bench/cache/coalesce.py (parsing burst.c's output,
percentiles, the time-to-first-byte report). Standard library only.

    python3 -m pytest bench/tests -q        # with pytest
    python3 bench/tests/test_coalesce.py    # without: prints "N passed, N failed"
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "coalesce", Path(__file__).resolve().parent.parent / "cache" / "coalesce.py")
coalesce = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(coalesce)

BURST = """req round=0 conn=0 status=200 latency_us=201500 cache=other
req round=0 conn=1 status=200 latency_us=202250 cache=collapsed
req round=1 conn=0 status=404 latency_us=900 cache=none
done requests=3 errors=1
"""


def test_parse_burst():
    reqs, done = coalesce.parse_burst(BURST)
    assert len(reqs) == 3
    assert reqs[1] == {"round": 0, "conn": 1, "status": 200, "latency_us": 202250, "cache": "collapsed"}
    assert reqs[2]["status"] == 404 and reqs[2]["cache"] == "none"
    assert done == {"requests": 3, "errors": 1}


def test_parse_burst_without_done_line():
    reqs, done = coalesce.parse_burst(BURST.rsplit("done", 1)[0])
    assert len(reqs) == 3 and done is None


def test_percentile_nearest_rank():
    v = list(range(1, 101))  # 1..100
    assert coalesce.percentile(v, 50) == 51
    assert coalesce.percentile(v, 99) == 100
    assert coalesce.percentile(v, 100) == 100
    assert coalesce.percentile([7], 99) == 7


TTFB = """req round=0 conn=0 status=200 latency_us=230000 ttfb_us=201000 cache=other
req round=0 conn=1 status=200 latency_us=231000 ttfb_us=202000 cache=collapsed
req round=0 conn=2 status=200 latency_us=232000 ttfb_us=204500 cache=collapsed
req round=1 conn=0 status=200 latency_us=230000 ttfb_us=210000 cache=collapsed
req round=1 conn=1 status=200 latency_us=230000 ttfb_us=200000 cache=other
req round=2 conn=0 status=200 latency_us=230000 ttfb_us=200000 cache=collapsed
done requests=6 errors=0
"""


def test_ttfb_report_compares_each_rounds_waiters_with_its_leader():
    reqs, _ = coalesce.parse_burst(TTFB)
    lines = coalesce.ttfb_report(reqs)
    assert lines[0].startswith("time to first byte ms (leader): p50 201.0")
    assert lines[1].startswith("time to first byte ms (coalesced):")
    # round 0: 204.5 - 201.0; round 1: 210 - 200; round 2 has no leader
    assert lines[2] == "waiters' worst TTFB minus the leader's, ms, over 2 rounds: p50 10.0  max 10.0"


def test_ttfb_report_without_ttfb_fields_is_empty():
    reqs, _ = coalesce.parse_burst(BURST)
    assert coalesce.ttfb_report(reqs) == []


if __name__ == "__main__":
    from runner import run_tests
    run_tests(globals())
