"""Unit tests of the helpers in bench/cache/coalesce.py (parsing burst.c's output,
percentiles). Standard library only.

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


if __name__ == "__main__":
    from runner import run_tests
    run_tests(globals())
