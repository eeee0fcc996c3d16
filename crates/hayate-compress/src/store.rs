//! The compress-once store: compressed variants of files, shared by every
//! worker of the process and built by one background thread, so a file is
//! compressed once per process (not once per worker) and no request ever
//! waits for a high-level compression.
//!
//! Keyed by file (device, inode); each file's slot remembers the [`FileStamp`]
//! its variants were built from, and a lookup with any other stamp (the file
//! changed: new size, mtime or inode) finds nothing and replaces the slot, so
//! an old variant is never served. The bytes of ready variants are bounded by
//! a budget; the least recently looked-up variants are evicted first.
//!
//! Locking: one mutex over the map, held for lookups and inserts only (never
//! while reading or compressing a file).
//!
//! The thread runs while there is work: it starts with the first job and
//! ends after [`COMPRESSOR_IDLE`] without one; the next job starts it again.
//! A thread that outlived its work would keep a one-worker hayate from being
//! a process of one thread, whose socket calls the kernel makes without a
//! reference count on the file (decision 0005).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use hayate_core::variant::{FileStamp, VariantState};
use hayate_core::Coding;

use crate::encode;

/// Settings of the store.
#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    /// Bytes of compressed variants kept.
    pub budget: u64,
    /// Largest file compressed.
    pub max_file: u64,
    /// Files that may wait for the compressor; more are retried later.
    pub queue: usize,
}

/// Counters of the background compressor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Variants built.
    pub variants: u64,
    /// CPU time spent building them (the compressor thread's clock).
    pub cpu: Duration,
    /// Bytes read.
    pub bytes_in: u64,
    /// Bytes produced.
    pub bytes_out: u64,
}

/// How long the compressor thread waits for a job before it ends: a site
/// deployed or warmed up asks for its variants within seconds of each other.
pub const COMPRESSOR_IDLE: Duration = Duration::from_secs(10);

/// The shared store; clone the `Arc` into every worker.
pub struct VariantStore {
    shared: Arc<Shared>,
    /// [`COMPRESSOR_IDLE`]; shorter in tests.
    idle: Duration,
}

struct Shared {
    map: Mutex<Map>,
    limits: StoreLimits,
    variants: AtomicU64,
    cpu_ns: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

#[derive(Default)]
struct Map {
    files: HashMap<(u64, u64), FileSlot>,
    /// Bytes of ready variants.
    bytes: u64,
    /// VariantState counter, for recency.
    clock: u64,
    /// The compressor thread's queue while the thread runs. Sent on and
    /// taken away under the map's lock, so a job is never sent to a thread
    /// that is ending.
    jobs: Option<SyncSender<Job>>,
}

struct FileSlot {
    stamp: FileStamp,
    variants: Vec<VariantSlot>,
}

struct VariantSlot {
    coding: Coding,
    level: i32,
    state: State,
    used: u64,
}

enum State {
    Pending,
    Ready(Bytes),
    Never,
}

struct Job {
    path: PathBuf,
    stamp: FileStamp,
    coding: Coding,
    level: i32,
}

impl VariantStore {
    /// An empty store; its thread starts with the first variant asked for.
    pub fn new(limits: StoreLimits) -> VariantStore {
        VariantStore {
            shared: Arc::new(Shared {
                map: Mutex::default(),
                limits,
                variants: AtomicU64::new(0),
                cpu_ns: AtomicU64::new(0),
                bytes_in: AtomicU64::new(0),
                bytes_out: AtomicU64::new(0),
            }),
            idle: COMPRESSOR_IDLE,
        }
    }

    /// The limits the store was built with.
    pub fn limits(&self) -> StoreLimits {
        self.shared.limits
    }

    /// The variant of the file at `path` whose content is `stamp`, in
    /// `coding` at `level`. When it does not exist yet it is queued for the
    /// background thread (once: later lookups see `Pending`).
    pub fn get(&self, path: &Path, stamp: FileStamp, coding: Coding, level: i32) -> VariantState {
        if stamp.len > self.shared.limits.max_file {
            return VariantState::Never;
        }
        let mut guard = self.shared.lock();
        let map = &mut *guard;
        map.clock += 1;
        let clock = map.clock;
        let key = (stamp.dev, stamp.ino);
        let stale = map.files.get(&key).is_some_and(|f| f.stamp != stamp);
        if stale {
            map.drop_file(key);
        }
        let file = map.files.entry(key).or_insert_with(|| FileSlot {
            stamp,
            variants: Vec::new(),
        });
        if let Some(v) = file
            .variants
            .iter_mut()
            .find(|v| v.coding == coding && v.level == level)
        {
            v.used = clock;
            return match &v.state {
                State::Ready(b) => VariantState::Ready(b.clone()),
                State::Pending => VariantState::Pending,
                State::Never => VariantState::Never,
            };
        }
        let job = Job {
            path: path.to_path_buf(),
            stamp,
            coding,
            level,
        };
        match self.send(&mut map.jobs, job) {
            Ok(()) => file.variants.push(VariantSlot {
                coding,
                level,
                state: State::Pending,
                used: clock,
            }),
            // A full queue: not recorded, so a later request asks again.
            Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => {
                log::error!("the background compressor is gone; serving files uncompressed");
                file.variants.push(VariantSlot {
                    coding,
                    level,
                    state: State::Never,
                    used: clock,
                });
                return VariantState::Never;
            }
        }
        VariantState::Pending
    }

    /// Drops every variant of the file with this content (it changed).
    pub fn forget(&self, stamp: FileStamp) {
        let mut map = self.shared.lock();
        let key = (stamp.dev, stamp.ino);
        if map.files.get(&key).is_some_and(|f| f.stamp == stamp) {
            map.drop_file(key);
        }
    }

    /// Bytes of ready variants held.
    pub fn bytes(&self) -> u64 {
        self.shared.lock().bytes
    }

    /// What the compressor has done so far.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        Stats {
            variants: s.variants.load(Ordering::Relaxed),
            cpu: Duration::from_nanos(s.cpu_ns.load(Ordering::Relaxed)),
            bytes_in: s.bytes_in.load(Ordering::Relaxed),
            bytes_out: s.bytes_out.load(Ordering::Relaxed),
        }
    }

    /// Queues `job` for the compressor thread, starting it if it is not
    /// running.
    fn send(&self, queue: &mut Option<SyncSender<Job>>, job: Job) -> Result<(), TrySendError<Job>> {
        if let Some(jobs) = queue {
            return jobs.try_send(job);
        }
        let (tx, rx) = sync_channel(self.shared.limits.queue.max(1));
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("hayate-compress".into())
            .spawn({
                let idle = self.idle;
                move || compressor(&shared, &rx, idle)
            });
        if let Err(e) = spawned {
            log::error!("cannot start the background compressor: {e}");
            return Err(TrySendError::Disconnected(job));
        }
        let sent = tx.try_send(job);
        *queue = Some(tx);
        sent
    }
}

impl std::fmt::Debug for VariantStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VariantStore")
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Map> {
        // A panic while holding the lock cannot leave the map inconsistent
        // in a way that matters more than losing compression.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores the outcome of a job, if its slot still waits for it.
    fn finish(&self, job: &Job, outcome: Option<Bytes>) {
        let mut map = self.lock();
        let key = (job.stamp.dev, job.stamp.ino);
        let waiting = |map: &Map| {
            map.files.get(&key).is_some_and(|f| {
                f.stamp == job.stamp
                    && f.variants
                        .iter()
                        .any(|v| v.coding == job.coding && v.level == job.level)
            })
        };
        // The file changed or was forgotten meanwhile: drop the result.
        if !waiting(&map) {
            return;
        }
        let len = outcome.as_ref().map_or(0, |b| b.len() as u64);
        let fits = outcome.is_some() && len <= self.limits.budget;
        if fits {
            map.make_room(len, self.limits.budget);
        }
        let Some(slot) = map.files.get_mut(&key).and_then(|f| {
            f.variants
                .iter_mut()
                .find(|v| v.coding == job.coding && v.level == job.level)
        }) else {
            return;
        };
        slot.state = match outcome {
            Some(b) if fits => State::Ready(b),
            _ => State::Never,
        };
        if fits {
            map.bytes += len;
        }
    }
}

impl Map {
    fn drop_file(&mut self, key: (u64, u64)) {
        if let Some(file) = self.files.remove(&key) {
            self.bytes -= file
                .variants
                .iter()
                .map(VariantSlot::ready_len)
                .sum::<u64>();
        }
    }

    /// Evicts the least recently used ready variants until `incoming` fits.
    fn make_room(&mut self, incoming: u64, budget: u64) {
        while self.bytes + incoming > budget {
            let victim = self
                .files
                .iter()
                .flat_map(|(k, f)| f.variants.iter().enumerate().map(move |(i, v)| (k, i, v)))
                .filter(|(_, _, v)| v.ready_len() > 0)
                .min_by_key(|(_, _, v)| v.used)
                .map(|(k, i, _)| (*k, i));
            let Some((key, i)) = victim else { return };
            if let Some(file) = self.files.get_mut(&key) {
                let v = file.variants.remove(i);
                self.bytes -= v.ready_len();
                if file.variants.is_empty() {
                    self.files.remove(&key);
                }
            }
        }
    }
}

impl VariantSlot {
    fn ready_len(&self) -> u64 {
        match &self.state {
            State::Ready(b) => b.len() as u64,
            _ => 0,
        }
    }
}

/// The background thread: one job at a time, until `idle` passes without
/// one.
fn compressor(shared: &Shared, jobs: &Receiver<Job>, idle: Duration) {
    loop {
        let job = match jobs.recv_timeout(idle) {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                // Jobs are sent under the lock: none can arrive once the
                // queue is taken away.
                let mut map = shared.lock();
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(_) => {
                        map.jobs = None;
                        return;
                    }
                }
            }
        };
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(shared, &job)))
                .unwrap_or_else(|_| {
                    log::error!("compressing {} panicked", job.path.display());
                    None
                });
        shared.finish(&job, outcome);
    }
}

/// Reads and compresses one file; `None` when it changed, cannot be read or
/// does not shrink.
fn build(shared: &Shared, job: &Job) -> Option<Bytes> {
    let mut file = File::open(&job.path).ok()?;
    let meta = file.metadata().ok()?;
    if FileStamp::of(&meta) != job.stamp {
        log::debug!("{} changed before it was compressed", job.path.display());
        return None;
    }
    let mut data = Vec::with_capacity(job.stamp.len as usize);
    (&mut file)
        .take(shared.limits.max_file + 1)
        .read_to_end(&mut data)
        .ok()?;
    if data.len() as u64 != job.stamp.len {
        return None;
    }
    let start = thread_cpu();
    let packed = match encode::compress(job.coding, job.level, &data) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("compressing {}: {e}", job.path.display());
            return None;
        }
    };
    let cpu = thread_cpu().saturating_sub(start);
    shared.variants.fetch_add(1, Ordering::Relaxed);
    shared
        .cpu_ns
        .fetch_add(cpu.as_nanos() as u64, Ordering::Relaxed);
    shared
        .bytes_in
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    shared
        .bytes_out
        .fetch_add(packed.len() as u64, Ordering::Relaxed);
    log::debug!(
        "compressed {} with {} level {}: {} -> {} bytes in {:.1} ms CPU",
        job.path.display(),
        job.coding.as_str(),
        job.level,
        data.len(),
        packed.len(),
        cpu.as_secs_f64() * 1e3
    );
    // A variant that does not shrink is worse than identity.
    (packed.len() < data.len()).then(|| Bytes::from(packed))
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)]

    use super::*;
    use std::io::Write;

    fn limits() -> StoreLimits {
        StoreLimits {
            budget: 1 << 20,
            max_file: 1 << 20,
            queue: 16,
        }
    }

    fn stamp(path: &Path) -> FileStamp {
        FileStamp::of(&std::fs::metadata(path).unwrap())
    }

    /// Polls until the variant is no longer pending (bounded).
    fn wait(store: &VariantStore, path: &Path, coding: Coding, level: i32) -> VariantState {
        wait_stamp(store, path, stamp(path), coding, level)
    }

    /// Polls until the variant for stamp `s` is built or refused: 10 s at
    /// most, returned from as soon as it is (the compressor thread can be
    /// starved for seconds when the whole suite runs on 2 cores).
    fn wait_stamp(
        store: &VariantStore,
        path: &Path,
        s: FileStamp,
        coding: Coding,
        level: i32,
    ) -> VariantState {
        for _ in 0..1000 {
            match store.get(path, s, coding, level) {
                VariantState::Pending => std::thread::sleep(Duration::from_millis(10)),
                other => return other,
            }
        }
        VariantState::Pending
    }

    #[test]
    fn builds_once_in_the_background_and_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.js");
        let data = "let x = 1;\n".repeat(500);
        std::fs::write(&path, &data).unwrap();
        let store = VariantStore::new(limits());
        assert_eq!(
            store.get(&path, stamp(&path), Coding::Gzip, 9),
            VariantState::Pending
        );
        let VariantState::Ready(b) = wait(&store, &path, Coding::Gzip, 9) else {
            panic!("not built")
        };
        assert_eq!(
            encode::decompress(Coding::Gzip, &b).unwrap(),
            data.as_bytes()
        );
        let again = wait(&store, &path, Coding::Gzip, 9);
        assert_eq!(again, VariantState::Ready(b.clone()));
        assert_eq!(store.stats().variants, 1, "compressed once");
        assert_eq!(store.bytes(), b.len() as u64);
    }

    #[test]
    fn the_thread_ends_when_idle_and_the_next_job_starts_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.js"), dir.path().join("b.js"));
        std::fs::write(&a, "let a = 1;\n".repeat(200)).unwrap();
        std::fs::write(&b, "let b = 2;\n".repeat(200)).unwrap();
        let mut store = VariantStore::new(limits());
        store.idle = Duration::from_millis(20);
        store.get(&a, stamp(&a), Coding::Gzip, 6);
        assert!(matches!(
            wait(&store, &a, Coding::Gzip, 6),
            VariantState::Ready(_)
        ));
        let running = || store.shared.lock().jobs.is_some();
        for _ in 0..1000 {
            if !running() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!running(), "the compressor thread did not end when idle");
        assert_eq!(
            store.get(&b, stamp(&b), Coding::Gzip, 6),
            VariantState::Pending
        );
        assert!(matches!(
            wait(&store, &b, Coding::Gzip, 6),
            VariantState::Ready(_)
        ));
        assert_eq!(store.stats().variants, 2);
    }

    #[test]
    fn a_changed_file_never_gets_the_old_variant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.css");
        std::fs::write(&path, "a { color: red }\n".repeat(100)).unwrap();
        let store = VariantStore::new(limits());
        store.get(&path, stamp(&path), Coding::Br, 5);
        assert!(matches!(
            wait(&store, &path, Coding::Br, 5),
            VariantState::Ready(_)
        ));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"b { color: blue }\n").unwrap();
        drop(f);
        let new_data = std::fs::read(&path).unwrap();
        let VariantState::Ready(b) = wait(&store, &path, Coding::Br, 5) else {
            panic!("not rebuilt")
        };
        assert_eq!(encode::decompress(Coding::Br, &b).unwrap(), new_data);
        assert_eq!(store.stats().variants, 2);
    }

    #[test]
    fn stamp_mismatch_at_build_time_is_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "x".repeat(4000)).unwrap();
        let store = VariantStore::new(limits());
        let mut old = stamp(&path);
        old.mtime -= 10;
        store.get(&path, old, Coding::Gzip, 1);
        assert_eq!(
            wait_stamp(&store, &path, old, Coding::Gzip, 1),
            VariantState::Never
        );
    }

    #[test]
    fn incompressible_and_too_large_files_are_never_built() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("noise.txt");
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(&path, &noise).unwrap();
        let store = VariantStore::new(limits());
        store.get(&path, stamp(&path), Coding::Gzip, 9);
        assert_eq!(wait(&store, &path, Coding::Gzip, 9), VariantState::Never);
        let small = VariantStore::new(StoreLimits {
            max_file: 100,
            ..limits()
        });
        assert_eq!(
            small.get(&path, stamp(&path), Coding::Gzip, 9),
            VariantState::Never
        );
    }

    #[test]
    fn budget_evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        // Letters a-d at random: about 2 bits each, so 2000 bytes pack to
        // roughly 700 with gzip's Huffman codes.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut text = || -> Vec<u8> {
            (0..2000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    b'a' + (x % 4) as u8
                })
                .collect()
        };
        let store = VariantStore::new(StoreLimits {
            budget: 1600,
            ..limits()
        });
        let mut paths = Vec::new();
        for i in 0..3 {
            let p = dir.path().join(format!("{i}.txt"));
            std::fs::write(&p, text()).unwrap();
            store.get(&p, stamp(&p), Coding::Gzip, 9);
            let VariantState::Ready(b) = wait(&store, &p, Coding::Gzip, 9) else {
                panic!("not built")
            };
            assert!((400..800).contains(&b.len()), "{}", b.len());
            paths.push(p);
        }
        assert!(store.bytes() <= 1600, "{}", store.bytes());
        // Reading the second file makes the third the least recently used.
        assert!(matches!(
            store.get(&paths[1], stamp(&paths[1]), Coding::Gzip, 9),
            VariantState::Ready(_)
        ));
        // The first file was evicted: asking again queues it anew, and
        // storing it evicts the third.
        assert_eq!(
            store.get(&paths[0], stamp(&paths[0]), Coding::Gzip, 9),
            VariantState::Pending
        );
        let VariantState::Ready(first) = wait(&store, &paths[0], Coding::Gzip, 9) else {
            panic!("not rebuilt")
        };
        assert!(store.bytes() <= 1600, "{}", store.bytes());
        store.forget(stamp(&paths[1]));
        assert_eq!(store.bytes(), first.len() as u64, "the third is gone");
    }
}
