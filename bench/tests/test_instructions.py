"""Unit tests of bench/instructions/run's reading of callgrind output files (the
instruction total and the calls of clock_gettime). Standard library only.

    python3 -m pytest bench/tests -q            # with pytest
    python3 bench/tests/test_instructions.py    # without: prints "N passed, N failed"
"""

import importlib.machinery
import importlib.util
import sys
import tempfile
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside bench/instructions/run
_path = Path(__file__).resolve().parent.parent / "instructions" / "run"
_loader = importlib.machinery.SourceFileLoader("instructions_run", str(_path))
_spec = importlib.util.spec_from_loader("instructions_run", _loader)
run = importlib.util.module_from_spec(_spec)
_loader.exec_module(run)

# A trimmed callgrind file: names are given in full once ("(7) name"), by number after.
CALLGRIND = """version: 1
creator: callgrind-3.19.0
events: Ir

fl=(1) time.rs
fn=(1) std::time::Instant::now
cfl=(2) clock_gettime.c
cfn=(2) clock_gettime@@GLIBC_2.17
calls=3 0
5 30
fn=(3) hayate::forward
cfn=(1)
calls=2 0
7 80
cfn=(2)
calls=4 0
9 40
cfn=(4) __clock_gettime64
calls=1 0
9 10
cfn=(5) clock_gettime_helper
calls=100 0
9 10

totals: 12345
"""


def _counts(text):
    with tempfile.NamedTemporaryFile("w", suffix=".out") as f:
        f.write(text)
        f.flush()
        return run.callgrind_counts(Path(f.name))


def test_totals_and_clock_calls():
    # 3 + 4 calls by name and by number, 1 of the 64-bit alias; not the helper
    assert _counts(CALLGRIND) == (12345, 8)


def test_summary_line_counts_when_totals_is_missing():
    assert _counts(CALLGRIND.replace("totals:", "summary:")) == (12345, 8)


def test_no_totals_is_an_error():
    try:
        _counts("events: Ir\n")
    except RuntimeError:
        return
    raise AssertionError("expected RuntimeError")


if __name__ == "__main__":
    from runner import run_tests

    run_tests(globals())
