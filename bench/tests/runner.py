"""Runs a test module's test_* functions without pytest (the standard library only):
`python3 bench/tests/test_lablib.py`. CI uses pytest."""
import sys


def run_tests(namespace):
    passed = failed = 0
    for name, fn in sorted(namespace.items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                passed += 1
            except Exception as e:  # noqa: BLE001
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
