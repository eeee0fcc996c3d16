//! What the cache's freshness rests on, one condition at a time: inside an
//! event loop (as in a worker) the inotify descriptor's readiness stands in
//! for a read only for input the event loop reported; a directory watched
//! only after a file was looked at is looked at again.
//!
//! The input epoch is advanced by hand here, as the connection loop does:
//! `advance_reported` for a read that waited for the event loop, `advance`
//! for one that did not, `pipelined` for a request already buffered.

use super::*;
use hayate_core::epoch;
use std::future::Future;

/// Runs `test` on a current-thread runtime with I/O, as a worker does: a
/// fixture built inside registers its inotify descriptor with the loop.
fn on_event_loop(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(test);
}

/// The body (or the status, when not 200) of `path`, without advancing
/// the epoch.
fn fetch(f: &Fixture, path: &str) -> String {
    let r = f.root.serve(&plain(path, Instant::now()));
    match r.status {
        Status::OK => String::from_utf8(body(&r)).expect("utf8"),
        s => s.code().to_string(),
    }
}

/// A fixture inside the event loop with `/hello.txt` cached and the loop's
/// view of the inotify queue current.
async fn warm() -> Fixture {
    let f = fixture(|_| {});
    assert!(f.root.cache.in_event_loop());
    epoch::advance();
    assert_eq!(fetch(&f, "/hello.txt"), "hello world\n");
    assert_eq!(f.root.cache.len(), 1);
    f
}

#[test]
fn a_reported_request_trusts_readiness_and_sees_what_the_loop_reported() {
    on_event_loop(async {
        let f = warm().await;
        let p = f.dir.path().join("hello.txt");
        std::fs::write(&p, "HELLO WORLD\n").expect("write");
        // No epoll_wait since the change: a request the loop reported was
        // in the socket before the change, and the cache spends no read on
        // it (this is the syscall the readiness saves).
        epoch::advance_reported();
        assert_eq!(fetch(&f, "/hello.txt"), "hello world\n");
        // Once the loop reported the event, the next reported request sees it.
        f.root.cache.events_reported().await;
        epoch::advance_reported();
        assert_eq!(fetch(&f, "/hello.txt"), "HELLO WORLD\n");
    });
}

#[test]
fn input_read_without_waiting_for_the_loop_reads_the_queue() {
    on_event_loop(async {
        let f = warm().await;
        let p = f.dir.path().join("hello.txt");
        // A read that found the socket still readable: its bytes may have
        // come after the last epoll_wait, so the queue is read.
        std::fs::write(&p, "a longer body than before\n").expect("write");
        epoch::advance();
        assert_eq!(fetch(&f, "/hello.txt"), "a longer body than before\n");
        let tmp = f.dir.path().join("tmp");
        std::fs::write(&tmp, "renamed in\n").expect("write");
        std::fs::rename(&tmp, &p).expect("rename");
        epoch::advance();
        assert_eq!(fetch(&f, "/hello.txt"), "renamed in\n");
        std::fs::remove_file(&p).expect("rm");
        epoch::advance();
        assert_eq!(fetch(&f, "/hello.txt"), "404");
        // The read cleared nothing it should not have: a later reported
        // request still learns of events from the loop.
        std::fs::write(&p, "back\n").expect("write");
        f.root.cache.events_reported().await;
        epoch::advance_reported();
        assert_eq!(fetch(&f, "/hello.txt"), "back\n");
    });
}

#[test]
fn a_pipelined_request_reads_the_queue() {
    on_event_loop(async {
        let f = warm().await;
        // The first request of a reported read: readiness, nothing queued.
        epoch::advance_reported();
        assert_eq!(fetch(&f, "/hello.txt"), "hello world\n");
        // The next request of the same read may have been sent after a
        // change that the loop has not reported yet.
        std::fs::write(f.dir.path().join("hello.txt"), "HELLO WORLD\n").expect("write");
        epoch::pipelined();
        assert_eq!(fetch(&f, "/hello.txt"), "HELLO WORLD\n");
    });
}

#[test]
fn without_coop_budget_the_queue_is_read() {
    on_event_loop(async {
        let f = warm().await;
        std::fs::write(f.dir.path().join("hello.txt"), "HELLO WORLD\n").expect("write");
        f.root.cache.events_reported().await;
        epoch::advance_reported();
        // A task that spent its budget (a long pipelined batch) gets Pending
        // from tokio whatever the descriptor's readiness.
        while tokio::task::coop::has_budget_remaining() {
            tokio::task::coop::consume_budget().await;
        }
        assert_eq!(fetch(&f, "/hello.txt"), "HELLO WORLD\n");
    });
}

#[test]
fn a_file_changed_before_its_directory_was_watched_is_not_kept() {
    let f = fixture(|_| {});
    let dir = f.dir.path().join("late");
    std::fs::create_dir(&dir).expect("mkdir");
    let path = dir.join("f.txt");
    std::fs::write(&path, "old\n").expect("write");
    // Opened and looked at, then replaced before the cache watches `late/`.
    let file = File::open(&path).expect("open");
    let meta = file.metadata().expect("stat");
    std::fs::write(dir.join("tmp"), "new\n").expect("write");
    std::fs::rename(dir.join("tmp"), &path).expect("rename");
    let now = Instant::now();
    let spec = BuildSpec {
        content_type: "text/plain".into(),
        cache_control: None,
        precompressed: false,
        generate: Vec::new(),
        preference: &[],
        watchable: true,
        siblings: Vec::new(),
    };
    let served = f
        .root
        .cache
        .insert(b"/late/f.txt", &path, file, &meta, spec, now)
        .expect("insert");
    assert!(matches!(&served.identity.source, Source::Memory(b) if b == "old\n"));
    epoch::advance();
    assert!(f.root.cache.get(b"/late/f.txt", now).is_none());
    assert_eq!(fetch(&f, "/late/f.txt"), "new\n");
}

#[test]
fn a_miss_that_became_a_file_before_its_directory_was_watched_is_not_kept() {
    let f = fixture(|_| {});
    let dir = f.dir.path().join("late");
    std::fs::create_dir(&dir).expect("mkdir");
    let path = dir.join("f.txt");
    // Found missing, then created before the cache watches `late/`.
    std::fs::write(&path, "new\n").expect("write");
    let now = Instant::now();
    f.root
        .cache
        .remember(b"/late/f.txt", &path, Known::Missing, now);
    epoch::advance();
    assert_eq!(f.root.cache.known(b"/late/f.txt", now), None);
    assert_eq!(fetch(&f, "/late/f.txt"), "new\n");
}

#[test]
fn a_miss_through_a_dangling_symlink_ends_when_its_target_appears() {
    // The target's directory is not watched: such misses are not kept.
    let f = fixture(|_| {});
    let p = f.dir.path();
    std::os::unix::fs::symlink("docs/later.txt", p.join("link.txt")).expect("symlink");
    std::os::unix::fs::symlink("later", p.join("alias")).expect("symlink");
    for _ in 0..2 {
        epoch::advance();
        assert_eq!(fetch(&f, "/link.txt"), "404");
        assert_eq!(fetch(&f, "/alias/x.txt"), "404");
    }
    std::fs::write(p.join("docs/later.txt"), "later\n").expect("write");
    std::fs::create_dir(p.join("later")).expect("mkdir");
    std::fs::write(p.join("later/x.txt"), "x\n").expect("write");
    epoch::advance();
    assert_eq!(fetch(&f, "/link.txt"), "later\n");
    assert_eq!(fetch(&f, "/alias/x.txt"), "x\n");
}
