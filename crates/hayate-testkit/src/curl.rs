//! curl as the tests' HTTP/1.1 and h2c client (installed by scripts/test).

use std::process::Command;

/// curl's status code for `path` (sent as written: `--path-as-is`) on
/// `port` of 127.0.0.1, over h2c with prior knowledge (`http2`) or
/// HTTP/1.1, with `headers` (`Name: value`).
pub fn status(port: u16, path: &str, http2: bool, headers: &[&str]) -> u16 {
    let url = format!("http://127.0.0.1:{port}{path}");
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--path-as-is",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ]);
    cmd.arg(if http2 {
        "--http2-prior-knowledge"
    } else {
        "--http1.1"
    });
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(&url).output().expect("curl (installed by .ci/run)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .parse()
        .expect("status")
}
