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


def test_h2_request_is_preface_settings_and_one_get():
    out = idle.h2_request("/1k.txt", "https")
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    assert out.startswith(preface)
    rest = out[len(preface):]
    assert rest[:9] == bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # empty SETTINGS
    head, block = rest[9:18], rest[18:]
    assert int.from_bytes(head[:3], "big") == len(block)
    assert head[3:5] == bytes([1, 0x5])  # HEADERS, END_STREAM | END_HEADERS
    assert int.from_bytes(head[5:9], "big") == 1
    assert block[:2] == bytes([0x82, 0x87])  # GET, https
    assert b"/1k.txt" in block and b"bench" in block


def test_h2_request_scheme_http():
    assert idle.h2_request("/", "http")[24 + 9 + 9 + 1] == 0x86


def test_hpack_status():
    assert idle.hpack_status(bytes([0x88])) == 200
    assert idle.hpack_status(bytes([0x8D])) == 404
    # Literal without indexing, name 8 (:status), "503".
    assert idle.hpack_status(bytes([0x08, 3]) + b"503") == 503
    # Literal with incremental indexing, name 8.
    assert idle.hpack_status(bytes([0x48, 3]) + b"302") == 302
    # Huffman-coded value: not decoded.
    assert idle.hpack_status(bytes([0x08, 0x82, 0x64, 0x02])) is None
    # Another field first.
    assert idle.hpack_status(bytes([0x0F, 0x10, 1]) + b"x") is None


def test_markdown_row_judges_the_target():
    row = idle.markdown_row("h2", 10000, 10912, 132392)
    assert "HTTP/2 over TLS" in row and "12,440" in row and "118.6" in row
    assert row.rstrip().endswith("| met |")
    assert idle.markdown_row("http1", 9000, 5540, 17908).rstrip().endswith("| met |")
    assert idle.markdown_row("http1", 9000, 5540, 65540).rstrip().endswith("| missed |")


if __name__ == "__main__":
    from runner import run_tests
    run_tests(globals())
