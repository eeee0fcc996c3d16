//! A process's resident memory, for the tests that bound what idle
//! connections hold.

use std::time::{Duration, Instant};

/// Process `pid`'s resident memory now, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// hayate's RSS once it has not changed for 300 ms (polled every 10 ms; at
/// most 10 s): its connections are done with what they were doing.
pub fn settled_rss_kib(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = rss_kib(pid);
    let mut since = Instant::now();
    loop {
        std::thread::park_timeout(Duration::from_millis(10));
        let now = rss_kib(pid);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(300) {
            return now;
        }
        assert!(Instant::now() < deadline, "hayate's RSS never settled");
    }
}

/// Bytes of RSS growth per one of `count` things held, from RSS `before`
/// and `after` them in KiB.
pub fn growth_per(before_kib: u64, after_kib: u64, count: usize) -> u64 {
    after_kib.saturating_sub(before_kib) * 1024 / count as u64
}
