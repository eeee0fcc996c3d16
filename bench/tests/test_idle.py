"""Unit tests of the helpers in bench/idle/idle.py (reading VmRSS, the
per-connection figure). Standard library only.

    python3 -m pytest bench/tests -q     # with pytest
    python3 bench/tests/test_idle.py     # without: prints "N passed, N failed"
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "idle", Path(__file__).resolve().parent.parent / "idle" / "idle.py")
idle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(idle)

STATUS = """Name:\thayate
VmPeak:\t  100000 kB
VmHWM:\t   20000 kB
VmRSS:\t   17908 kB
RssAnon:\t   12000 kB
"""


def test_vmrss_kib():
    assert idle.vmrss_kib(STATUS) == 17908


def test_vmrss_missing():
    try:
        idle.vmrss_kib("Name:\thayate\n")
    except ValueError:
        return
    raise AssertionError("no error")


def test_per_conn_bytes():
    assert idle.per_conn_bytes(5540, 17908, 9000) == 1407
    assert idle.per_conn_bytes(100, 100, 10) == 0


if __name__ == "__main__":
    from runner import run_tests
    run_tests(globals())
