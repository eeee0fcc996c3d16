//! The open-file cache: per worker (shared-nothing, no locks on the hot
//! path), it keeps for each hot request path the resolved file's metadata,
//! its precomputed validators and header block, the body of small files and
//! an open descriptor for large ones, and its precompressed siblings.
//!
//! Fresh: every directory an entry (or a remembered miss) lives under is
//! watched with inotify, and queued events are applied before every lookup
//! (by a read of the queue, or, in a worker, by the event loop's readiness
//! of it when that covers the request: [`queue`]). The kernel queues an
//! event inside the syscall that changes the file, so a change completed
//! before a request's first byte reached the server's socket is seen by
//! that request. A directory watched for the first time is looked at again
//! after the watch, since nothing reports what changed before it. Entries
//! inotify cannot cover (a symlink, whose target's directory is not
//! watched; a watch limit reached) are re-checked with `stat` on every hit,
//! and misses through a dangling symlink are not remembered. Every entry is
//! re-checked at least every `revalidate`, for changes inotify does not
//! report: network and FUSE file systems, writes through a shared `mmap`
//! or through a hard link outside the watched tree. `stat` sees a new
//! inode, size or mtime: a same-size rewrite within one timestamp tick is
//! invisible to it where the file system's timestamps are coarse.
//!
//! Compressed variants of files without a sibling come from the route's
//! [`VariantSource`] (the process-wide compress-once store): an entry asks
//! for them until they are ready and then keeps its own reference, with
//! its preformatted head. Those references count against this cache's
//! budget too: the store may evict a variant that an entry still holds, and
//! that memory must be inside some budget. An entry whose variant does not
//! fit serves it without keeping it. An entry dropped because its file
//! changed tells the source, so the old variants go too.

mod entry;
mod queue;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use hayate_core::variant::FileStamp;
use hayate_core::{Coding, Fields};

use crate::VariantSource;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use queue::Queue;

/// Bound on the number of entries, so descriptors of large files stay few.
const MAX_ENTRIES: usize = 8192;
/// Bound on remembered misses. A miss costs a `stat` and a `realpath`
/// (about 1.3 µs CPU per proxied request behind a static root, measured
/// with bench/run case D: 8.8 µs per cache hit before, see the note of the
/// response cache issue).
const MAX_MISSING: usize = 4096;

/// Where a representation's bytes are.
#[derive(Debug)]
pub(crate) enum Source {
    Memory(Bytes),
    File(Arc<File>),
}

/// One representation of a file: identity, a precompressed sibling or a
/// generated variant.
#[derive(Debug)]
pub(crate) struct Variant {
    pub coding: Coding,
    pub len: u64,
    /// Strong entity tag with quotes, distinct per variant.
    pub etag: String,
    /// Fields of 200 and single-range 206 responses (built once: a hit
    /// copies their HTTP/1 form whole).
    pub head: Arc<Fields>,
    /// Fields without Content-Type (multipart 206).
    pub head_no_type: Arc<Fields>,
    /// Fields of 304 responses.
    pub head_304: Arc<Fields>,
    pub source: Source,
}

/// A cached file.
#[derive(Debug)]
pub(crate) struct Entry {
    pub fs_path: PathBuf,
    pub content_type: String,
    pub last_modified: SystemTime,
    pub identity: Variant,
    /// Precompressed siblings.
    pub encoded: Vec<Variant>,
    /// Every coding the file is offered in (siblings and codings the
    /// variant source may generate), in the route's preference order.
    pub offer: Vec<Coding>,
    /// Generated variants obtained so far, or refused by the source.
    generated: RefCell<Vec<(Coding, Option<Rc<Variant>>)>>,
    cache_control: Option<String>,
    /// What `stat` said when the entry was built (identity and siblings).
    stamps: Vec<(PathBuf, FileStamp)>,
    checked: Cell<Instant>,
    /// Whether inotify covers every file of the entry.
    watched: bool,
    /// Bytes this entry holds (bodies read at build, generated variants
    /// kept since), counted in `held`.
    mem_bytes: Cell<u64>,
    held: Rc<Held>,
    /// In its cache's map (a request may still hold an entry that left it;
    /// such an entry keeps nothing more).
    resident: Cell<bool>,
}

/// Bytes held by a cache's entries, and its budget (shared with the
/// entries, which add the variants they keep).
#[derive(Debug)]
struct Held {
    bytes: Cell<u64>,
    budget: u64,
    /// Descriptors held by the entries (large files), and their bound.
    files: Cell<usize>,
    max_open: usize,
}

/// Settings of a cache.
#[derive(Debug, Clone)]
pub struct CacheLimits {
    /// Bytes of file bodies kept in memory.
    pub budget: u64,
    /// Largest file kept in memory.
    pub max_file: u64,
    /// Most descriptors the entries hold (a larger file is served from
    /// one): part of the open-file limit's reserve for what requests open
    /// (issue 43), so the cache cannot take the descriptors that upstream
    /// connections and other files need.
    pub max_open: usize,
    /// Fallback re-check interval.
    pub revalidate: Duration,
}

/// What a request path that is not a cached file resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// No file (nor directory) there.
    Missing,
    /// A directory (its index, listing or fallback is decided per request).
    Dir,
}

/// A remembered [`Known`]: the path it resolved to and when it was checked.
struct KnownPath {
    fs_path: PathBuf,
    known: Known,
    checked: Instant,
}

/// The per-worker open-file cache of one static root.
pub(crate) struct OpenFileCache {
    /// The canonical root; watches are added from it downwards.
    root: PathBuf,
    /// Keyed by request path. Only paths of existing files become keys, so a
    /// fast non-DoS-resistant hash is fine (foldhash, still seeded).
    entries: RefCell<HashMap<Vec<u8>, Rc<Entry>, foldhash::fast::RandomState>>,
    held: Rc<Held>,
    /// The input epoch (hayate-core::epoch) of the last inotify check.
    checked_epoch: Cell<u64>,
    limits: CacheLimits,
    watch: Option<Watch>,
    /// Request paths known to match no file (try_files in front of an app
    /// asks for each proxied path) or to be a directory (`/` without an
    /// index in front of an app), with the path they resolved to and when
    /// that was checked. Only kept while the nearest existing directory is
    /// watched, so a change there drops the entry; bounded by
    /// [`MAX_MISSING`] (cleared whole when full: request paths are chosen by
    /// clients).
    missing: RefCell<HashMap<Vec<u8>, KnownPath, foldhash::fast::RandomState>>,
    /// Told when an entry with generated variants goes stale.
    variants: Option<Rc<dyn VariantSource>>,
}

struct Watch {
    events: Queue,
    dirs: RefCell<HashMap<WatchDescriptor, PathBuf>>,
    watched: RefCell<HashSet<PathBuf>>,
}

const WATCH_MASK: AddWatchFlags = AddWatchFlags::IN_MODIFY
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF);

/// What a build needs to know besides the file.
pub(crate) struct BuildSpec<'a> {
    pub content_type: String,
    pub cache_control: Option<&'a str>,
    pub precompressed: bool,
    /// Codings the variant source may generate for this file.
    pub generate: Vec<Coding>,
    /// The route's coding preference.
    pub preference: &'a [Coding],
    /// Whether inotify can cover the file (it is reached without symlinks).
    pub watchable: bool,
    /// Precompressed siblings found, each opened as the file was (under
    /// the route's symlink setting): its coding, its path as requested
    /// (re-checked by `stat`), the open file.
    pub siblings: Vec<(Coding, PathBuf, File)>,
}

impl OpenFileCache {
    pub fn new(
        root: PathBuf,
        limits: CacheLimits,
        variants: Option<Rc<dyn VariantSource>>,
    ) -> OpenFileCache {
        let watch = match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(inotify) => Some(Watch {
                events: Queue::new(inotify),
                dirs: RefCell::default(),
                watched: RefCell::default(),
            }),
            Err(e) => {
                log::warn!("inotify unavailable ({e}); cached files are re-checked with stat on every request");
                None
            }
        };
        OpenFileCache {
            root,
            entries: RefCell::default(),
            held: Rc::new(Held {
                bytes: Cell::new(0),
                budget: limits.budget,
                files: Cell::new(0),
                max_open: limits.max_open,
            }),
            checked_epoch: Cell::new(u64::MAX),
            limits,
            watch,
            missing: RefCell::default(),
            variants,
        }
    }

    /// Looks up a fresh entry for `key`.
    pub fn get(&self, key: &[u8], now: Instant) -> Option<Rc<Entry>> {
        self.drain_events();
        let entry = self.entries.borrow().get(key).cloned()?;
        let due =
            !entry.watched || now.duration_since(entry.checked.get()) >= self.limits.revalidate;
        if due {
            if entry.still_current() {
                entry.checked.set(now);
            } else {
                self.remove_stale(key);
                return None;
            }
        }
        Some(entry)
    }

    /// What `key` is known to be when it is not a cached file: missing or
    /// a directory (checked within `revalidate`, and nothing changed in its
    /// directory since).
    pub fn known(&self, key: &[u8], now: Instant) -> Option<Known> {
        self.drain_events();
        let missing = self.missing.borrow();
        missing
            .get(key)
            .filter(|k| now.duration_since(k.checked) < self.limits.revalidate)
            .map(|k| k.known)
    }

    /// Remembers what `key` (resolving to `fs_path`) is, when the nearest
    /// existing directory (for a directory: itself) can be watched.
    pub fn remember(&self, key: &[u8], fs_path: &Path, known: Known, now: Instant) {
        if self.watch.is_none() {
            return;
        }
        let skip = usize::from(known == Known::Missing);
        let Some(dir) = fs_path
            .ancestors()
            .skip(skip)
            .take_while(|d| d.starts_with(&self.root))
            .find(|d| d.is_dir())
        else {
            return;
        };
        // A miss ends with an event in `dir` when the next name down is
        // created; not when that name is a dangling symlink, whose target
        // may appear anywhere.
        let below = fs_path.ancestors().take_while(|a| *a != dir).last();
        if below.is_some_and(|b| b.symlink_metadata().is_ok_and(|m| m.is_symlink())) {
            return;
        }
        // watch_dirs watches the ancestors of its argument: give it a child
        // of the directory.
        let (watched, new_watch) = self.watch_dirs(&dir.join("-"));
        if !watched {
            return;
        }
        // A directory watched only now sent no event for a change made
        // since `fs_path` was looked at: look once more.
        if new_watch {
            let now_dir = std::fs::metadata(fs_path).map(|m| m.is_dir());
            let same = match known {
                Known::Missing => now_dir.is_err(),
                Known::Dir => matches!(now_dir, Ok(true)),
            };
            if !same {
                return;
            }
        }
        let mut missing = self.missing.borrow_mut();
        if missing.len() >= MAX_MISSING {
            missing.clear();
        }
        missing.insert(
            key.to_vec(),
            KnownPath {
                fs_path: fs_path.to_path_buf(),
                known,
                checked: now,
            },
        );
    }

    /// Builds an entry for the open file `file` at `fs_path` and caches it
    /// under `key`.
    pub fn insert(
        &self,
        key: &[u8],
        fs_path: &Path,
        file: File,
        meta: &Metadata,
        mut spec: BuildSpec<'_>,
        now: Instant,
    ) -> std::io::Result<Rc<Entry>> {
        let mut stamps = vec![(fs_path.to_path_buf(), FileStamp::of(meta))];
        let last_modified = meta.modified()?;
        let vary = spec.precompressed;
        let mut encoded = Vec::new();
        let siblings = std::mem::take(&mut spec.siblings);
        for (coding, sibling, f) in siblings {
            let Ok(m) = f.metadata() else { continue };
            // A sibling older than the file is stale: never serve it.
            if !m.is_file() || m.modified()? < last_modified {
                continue;
            }
            stamps.push((sibling, FileStamp::of(&m)));
            encoded.push(self.variant(coding, f, &m, &spec, last_modified, vary)?);
        }
        // Siblings and generated codings in the route's order (codings it
        // does not list last): a preferred coding is generated even next to
        // a sibling in another one, which is served until it is ready.
        let rank = |c: &Coding| {
            spec.preference
                .iter()
                .position(|p| p == c)
                .unwrap_or(usize::MAX)
        };
        let mut offer: Vec<Coding> = encoded.iter().map(|v| v.coding).collect();
        for c in &spec.generate {
            if !offer.contains(c) && *c != Coding::Identity {
                offer.push(*c);
            }
        }
        offer.sort_by_key(rank);
        // Identity varies only when the file is offered in some coding.
        let vary = !offer.is_empty();
        let identity = self.variant(Coding::Identity, file, meta, &spec, last_modified, vary)?;
        let mem_bytes = [&identity]
            .into_iter()
            .chain(&encoded)
            .map(|v| v.mem_len())
            .sum();
        let (watched, new_watch) = match spec.watchable {
            true => self.watch_dirs(fs_path),
            false => (false, false),
        };
        let entry = Rc::new(Entry {
            fs_path: fs_path.to_path_buf(),
            content_type: spec.content_type,
            last_modified,
            identity,
            encoded,
            offer,
            generated: RefCell::default(),
            cache_control: spec.cache_control.map(str::to_string),
            stamps,
            checked: Cell::new(now),
            watched,
            mem_bytes: Cell::new(mem_bytes),
            held: self.held.clone(),
            resident: Cell::new(true),
        });
        self.remove(key);
        // A directory watched only now sent no event for a change made
        // between the file's stat (or its siblings' opening) and the watch:
        // one more look, and an entry that changed meanwhile answers this
        // request only.
        if new_watch && !entry.still_current() {
            entry.resident.set(false);
            return Ok(entry);
        }
        let files = entry.open_files();
        self.make_room(mem_bytes, files);
        self.held.bytes.set(self.held.bytes.get() + mem_bytes);
        self.held.files.set(self.held.files.get() + files);
        self.entries
            .borrow_mut()
            .insert(key.to_vec(), entry.clone());
        Ok(entry)
    }

    fn variant(
        &self,
        coding: Coding,
        mut file: File,
        meta: &Metadata,
        spec: &BuildSpec<'_>,
        last_modified: SystemTime,
        vary: bool,
    ) -> std::io::Result<Variant> {
        let len = meta.len();
        let source = if len <= self.limits.max_file {
            let mut buf = Vec::with_capacity(len as usize);
            file.read_to_end(&mut buf)?;
            Source::Memory(Bytes::from(buf))
        } else {
            Source::File(Arc::new(file))
        };
        // The length actually read wins over a racing stat.
        let len = match &source {
            Source::Memory(b) => b.len() as u64,
            Source::File(_) => len,
        };
        let etag = match coding {
            Coding::Identity => format!("\"{:x}.{:x}-{:x}\"", meta.mtime(), meta.mtime_nsec(), len),
            c => format!(
                "\"{:x}.{:x}-{:x}-{}\"",
                meta.mtime(),
                meta.mtime_nsec(),
                len,
                c.as_str()
            ),
        };
        Ok(Variant::new(
            coding,
            len,
            etag,
            source,
            &spec.content_type,
            spec.cache_control,
            last_modified,
            vary,
        ))
    }

    /// Adds inotify watches on every directory from `root` down to the
    /// file's parent. Whether every one is watched, and whether any watch
    /// was added now.
    fn watch_dirs(&self, fs_path: &Path) -> (bool, bool) {
        let Some(watch) = &self.watch else {
            return (false, false);
        };
        let mut ok = true;
        let mut added = false;
        for dir in fs_path.ancestors().skip(1) {
            if !dir.starts_with(&self.root) {
                break;
            }
            if watch.watched.borrow().contains(dir) {
                continue;
            }
            match watch.events.inotify().add_watch(dir, WATCH_MASK) {
                // The same directory by another name (a symlink): its events
                // keep the name it was first watched under, or entries under
                // that name would be served stale; this name is not watched.
                Ok(wd) if watch.dirs.borrow().get(&wd).is_some_and(|d| d != dir) => {
                    ok = false;
                }
                Ok(wd) => {
                    watch.dirs.borrow_mut().insert(wd, dir.to_path_buf());
                    watch.watched.borrow_mut().insert(dir.to_path_buf());
                    added = true;
                }
                Err(e) => {
                    log::warn!(
                        "cannot watch {}: {e}; its files are re-checked on every request",
                        dir.display()
                    );
                    ok = false;
                }
            }
        }
        (ok, added)
    }

    /// Applies queued file-system events, at most once per input epoch
    /// (see [`queue`] for when that costs a read).
    fn drain_events(&self) {
        let Some(watch) = &self.watch else { return };
        let epoch = hayate_core::epoch::current();
        if self.checked_epoch.replace(epoch) == epoch {
            return;
        }
        let drained = watch.events.drain(epoch, |events| {
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    self.clear();
                    continue;
                }
                let Some(dir) = watch.dirs.borrow().get(&ev.wd).cloned() else {
                    continue;
                };
                match &ev.name {
                    Some(name) => {
                        let target = dir.join(name);
                        self.invalidate(&target);
                        // A sibling (x.gz) changing invalidates x.
                        for suffix in [".br", ".zst", ".gz"] {
                            if let Some(base) = target.to_str().and_then(|t| t.strip_suffix(suffix))
                            {
                                self.invalidate(Path::new(base));
                            }
                        }
                    }
                    None => self.invalidate(&dir),
                }
                if ev.mask.intersects(
                    AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_IGNORED,
                ) {
                    watch.dirs.borrow_mut().remove(&ev.wd);
                    watch.watched.borrow_mut().remove(&dir);
                    if !ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                        let _ = watch.events.inotify().rm_watch(ev.wd);
                    }
                    // Watches below a moved directory point elsewhere now.
                    self.forget_watches_under(watch, &dir);
                }
            }
        });
        if let Err(e) = drained {
            log::warn!("inotify read failed ({e}); dropping the file cache");
            self.clear();
        }
    }

    fn forget_watches_under(&self, watch: &Watch, dir: &Path) {
        let stale: Vec<WatchDescriptor> = watch
            .dirs
            .borrow()
            .iter()
            .filter(|(_, d)| d.starts_with(dir))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in stale {
            if let Some(d) = watch.dirs.borrow_mut().remove(&wd) {
                watch.watched.borrow_mut().remove(&d);
                let _ = watch.events.inotify().rm_watch(wd);
                self.invalidate(&d);
            }
        }
    }

    /// Drops every entry at or below `path`, and every entry whose file is a
    /// sibling named `path`.
    fn invalidate(&self, path: &Path) {
        self.missing
            .borrow_mut()
            .retain(|_, k| !k.fs_path.starts_with(path));
        let doomed: Vec<Vec<u8>> = self
            .entries
            .borrow()
            .iter()
            .filter(|(_, e)| e.stamps.iter().any(|(p, _)| p.starts_with(path)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in doomed {
            self.remove_stale(&key);
        }
    }

    /// Removes an entry whose file may have changed; if its content did
    /// (a `stat` on this slow path tells), its generated variants go too.
    fn remove_stale(&self, key: &[u8]) {
        let entry = self.entries.borrow().get(key).cloned();
        if let (Some(entry), Some(source)) = (entry, &self.variants) {
            let (path, stamp) = &entry.stamps[0];
            let unchanged = std::fs::metadata(path).is_ok_and(|m| FileStamp::of(&m) == *stamp);
            if entry.offer.len() > entry.encoded.len() && !unchanged {
                source.forget(*stamp);
            }
        }
        self.remove(key);
    }

    fn remove(&self, key: &[u8]) {
        if let Some(old) = self.entries.borrow_mut().remove(key) {
            old.resident.set(false);
            let bytes = &self.held.bytes;
            bytes.set(bytes.get().saturating_sub(old.mem_bytes.get()));
            let files = &self.held.files;
            files.set(files.get().saturating_sub(old.open_files()));
        }
    }

    fn clear(&self) {
        self.missing.borrow_mut().clear();
        for e in self.entries.borrow_mut().drain() {
            e.1.resident.set(false);
        }
        self.held.bytes.set(0);
        self.held.files.set(0);
    }

    /// Evicts arbitrary entries (HashMap order is randomized) until `incoming`
    /// bytes fit in the budget, `files` descriptors in theirs, and the
    /// entry count is under its bound.
    fn make_room(&self, incoming: u64, files: usize) {
        loop {
            let over_budget = self.held.bytes.get() + incoming > self.limits.budget;
            let over_files = files > 0 && self.held.files.get() + files > self.held.max_open;
            let over_count = self.entries.borrow().len() >= MAX_ENTRIES;
            if !(over_budget || over_files || over_count) {
                return;
            }
            let entries = self.entries.borrow();
            // Past the descriptor bound only, an entry that holds one goes.
            let victim = match over_budget || over_count {
                true => entries.keys().next().cloned(),
                false => entries
                    .iter()
                    .find(|(_, e)| e.open_files() > 0)
                    .map(|(k, _)| k.clone()),
            };
            drop(entries);
            match victim {
                Some(k) => self.remove(&k),
                None => return,
            }
        }
    }

    /// Whether the inotify descriptor is registered with an event loop.
    #[cfg(test)]
    pub fn in_event_loop(&self) -> bool {
        self.watch
            .as_ref()
            .is_some_and(|w| w.events.in_event_loop())
    }

    /// Waits until the event loop reports inotify events.
    #[cfg(test)]
    pub async fn events_reported(&self) {
        if let Some(w) = &self.watch {
            w.events.reported().await;
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// Bytes counted against the budget.
    #[cfg(test)]
    pub fn held_bytes(&self) -> u64 {
        self.held.bytes.get()
    }

    /// Descriptors the entries hold.
    #[cfg(test)]
    pub fn held_files(&self) -> usize {
        self.held.files.get()
    }
}
