//! Restarts on file changes (`watch`, `ignore`, `hayate run --watch`): an
//! inotify instance of the app's supervisor watches the app's directories,
//! waits until its files stay unchanged for the debounce, runs the build
//! step if there is one, then asks for the rolling reload `hayate reload
//! APP` does, logging which file changed.
//!
//! inotify directly (nix, as the static file cache does) rather than the
//! notify crate: it is the only backend hayate needs (Linux), its watches
//! are counted here against `app_watch_max_dirs` and the user's
//! `fs.inotify.max_user_watches`, and running out of either is told, with
//! the directory it stopped at, instead of changes going unseen.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

use crate::{build, AppSpec, Restarter};

/// What an app's files are watched for, and what runs before a restart.
#[derive(Debug, Clone, Default)]
pub struct WatchSpec {
    /// Directories, files or file-name patterns (`*.js`) relative to the
    /// app's directory; empty: all of it.
    pub paths: Vec<String>,
    /// Names or patterns of path parts (`dist`, `*.log`), or paths from the
    /// app's directory, whose changes never count.
    pub ignore: Vec<String>,
    /// How long the files must stay unchanged before the restart.
    pub debounce: Duration,
    /// Most directories watched.
    pub max_dirs: usize,
    /// Run before the restart; empty: none.
    pub build: Vec<String>,
    /// Longest build.
    pub build_timeout: Duration,
}

/// Path parts whose changes never count: version control and installed
/// packages (a `node_modules` holds 10^4 to 10^5 directories).
pub const ALWAYS_IGNORED: &[&str] = &[".git", "node_modules"];

/// The longest a restart waits for the files to settle: ten debounces
/// (a file written without pause, a log say, would otherwise hold it off
/// for ever).
const MOST_DEBOUNCES: u32 = 10;

/// Which changes count, from the app's directory (pure: tested alone).
#[derive(Debug)]
struct Rules {
    /// `watch` entries that are paths.
    paths: Vec<PathBuf>,
    /// `watch` entries that are name patterns.
    patterns: Vec<String>,
    /// `ignore` entries (and [`ALWAYS_IGNORED`]) matched against each part.
    ignore_parts: Vec<String>,
    /// `ignore` entries with a `/`: paths from the app's directory, each
    /// part a name or a pattern (`logs/*.log`).
    ignore_paths: Vec<PathBuf>,
}

impl Rules {
    fn new(spec: &WatchSpec) -> Rules {
        let (patterns, paths): (Vec<&String>, Vec<&String>) =
            spec.paths.iter().partition(|p| is_pattern(p));
        let (ignore_paths, ignore_parts): (Vec<&String>, Vec<&String>) = spec
            .ignore
            .iter()
            .partition(|p| p.trim_end_matches('/').contains('/'));
        Rules {
            paths: paths.into_iter().map(|p| clean(p)).collect(),
            patterns: patterns.into_iter().cloned().collect(),
            ignore_parts: ignore_parts
                .into_iter()
                .map(|p| p.trim_end_matches('/').to_string())
                .chain(ALWAYS_IGNORED.iter().map(|s| s.to_string()))
                .collect(),
            ignore_paths: ignore_paths.into_iter().map(|p| clean(p)).collect(),
        }
    }

    /// Whether `rel` (a file or directory) is ignored.
    fn ignored(&self, rel: &Path) -> bool {
        rel.iter().any(|part| {
            let part = part.as_encoded_bytes();
            self.ignore_parts.iter().any(|i| glob(i.as_bytes(), part))
        }) || self.ignore_paths.iter().any(|p| under(p, rel))
    }

    /// Whether a change of `rel` restarts the app.
    fn counts(&self, rel: &Path) -> bool {
        if self.ignored(rel) {
            return false;
        }
        if self.paths.is_empty() && self.patterns.is_empty() {
            return true;
        }
        let name = rel.file_name().map_or(&[][..], |n| n.as_encoded_bytes());
        self.paths.iter().any(|p| rel.starts_with(p))
            || self.patterns.iter().any(|p| match p.contains('/') {
                true => under(&clean(p), rel),
                false => glob(p.as_bytes(), name),
            })
    }

    /// The directories to watch, each with whether everything under it is
    /// watched too: the app's directory when patterns may match anywhere,
    /// else each watched directory, and the directory of each watched file.
    fn roots(&self, root: &Path) -> Vec<(PathBuf, bool)> {
        if self.paths.is_empty() || !self.patterns.is_empty() {
            return vec![(PathBuf::new(), true)];
        }
        self.paths
            .iter()
            .map(|p| match root.join(p).is_dir() {
                true => (p.clone(), true),
                false => (p.parent().map(Path::to_path_buf).unwrap_or_default(), false),
            })
            .collect()
    }
}

/// Whether a `watch` entry is a name pattern.
fn is_pattern(entry: &str) -> bool {
    entry.contains(['*', '?'])
}

/// `./src/` as `src`.
fn clean(entry: &str) -> PathBuf {
    Path::new(entry)
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// Whether `rel` is `entry` or under it, each part of `entry` a name or a
/// pattern.
fn under(entry: &Path, rel: &Path) -> bool {
    let mut parts = rel.iter();
    entry.iter().all(|e| {
        parts
            .next()
            .is_some_and(|part| glob(e.as_encoded_bytes(), part.as_encoded_bytes()))
    })
}

/// Matches `name` against `pattern`: `*` any run of bytes, `?` one byte.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| glob(rest, &name[i..])),
        Some((b'?', rest)) => !name.is_empty() && glob(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && glob(rest, &name[1..]),
    }
}

/// The inotify instance, for [`AsyncFd`].
struct Events(Inotify);

impl AsRawFd for Events {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The events a watched directory reports: a file written and closed,
/// moved in or out, deleted; a directory made (to watch it too).
fn event_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_ONLYDIR
}

/// An app's watched directories.
struct Watcher {
    app: Arc<str>,
    events: AsyncFd<Events>,
    root: PathBuf,
    rules: Rules,
    /// Each watch: its directory (from the app's) and whether what is made
    /// under it is watched too.
    dirs: HashMap<WatchDescriptor, (PathBuf, bool)>,
    max_dirs: usize,
    /// A limit was met and told (once).
    told_limit: bool,
}

impl Watcher {
    fn new(app: Arc<str>, root: PathBuf, spec: &WatchSpec) -> io::Result<Watcher> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(|e| {
            let hint = match e {
                Errno::EMFILE => " (the user's fs.inotify.max_user_instances are used up: raise it with sysctl)",
                _ => "",
            };
            io::Error::other(format!("inotify: {e}{hint}"))
        })?;
        // The safe constructor is deprecated for types that do not own
        // their descriptor; `Events` owns it, so it stays open and the same
        // for the AsyncFd's whole life (as the static file cache's queue).
        #[allow(deprecated)]
        let events = AsyncFd::new(Events(inotify))?;
        let mut watcher = Watcher {
            app,
            events,
            rules: Rules::new(spec),
            root,
            dirs: HashMap::new(),
            max_dirs: spec.max_dirs,
            told_limit: false,
        };
        for (dir, recursive) in watcher.rules.roots(&watcher.root) {
            watcher.add_tree(&dir, recursive);
        }
        Ok(watcher)
    }

    /// Watches `rel` and, if `recursive`, every directory under it that is
    /// not ignored (symbolic links not followed), up to the limits.
    fn add_tree(&mut self, rel: &Path, recursive: bool) {
        let mut stack = vec![rel.to_path_buf()];
        while let Some(dir) = stack.pop() {
            if self.rules.ignored(&dir) || !self.add_one(&dir, recursive) {
                continue;
            }
            if !recursive {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(self.root.join(&dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(dir.join(entry.file_name()));
                }
            }
        }
    }

    /// Watches one directory; false when it is not watched.
    fn add_one(&mut self, rel: &Path, recursive: bool) -> bool {
        if self.dirs.len() >= self.max_dirs {
            self.tell_limit(
                rel,
                format!(
                    "{} directories are watched, its app_watch_max_dirs: raise it, or narrow watch or ignore",
                    self.max_dirs
                ),
            );
            return false;
        }
        match self
            .events
            .get_ref()
            .0
            .add_watch(&self.root.join(rel), event_mask())
        {
            Ok(wd) => {
                self.dirs.insert(wd, (rel.to_path_buf(), recursive));
                true
            }
            Err(Errno::ENOSPC) => {
                let max = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_else(|_| "?".into());
                self.tell_limit(
                    rel,
                    format!(
                        "the user's inotify watches are used up (fs.inotify.max_user_watches = {max}, shared by every program of the user; {} are this app's): raise it, as in sysctl fs.inotify.max_user_watches=524288, or narrow watch or ignore",
                        self.dirs.len()
                    ),
                );
                false
            }
            // Gone already, or not a directory: nothing to watch.
            Err(_) => false,
        }
    }

    fn tell_limit(&mut self, rel: &Path, why: String) {
        if !std::mem::replace(&mut self.told_limit, true) {
            log::error!(
                "{}: {} and what follows are not watched, changes there restart nothing: {why}",
                self.app,
                shown(rel)
            );
        }
    }

    /// The next changes that count, from one read of the queue (waiting
    /// for one that has some).
    async fn changes(&mut self) -> io::Result<Vec<PathBuf>> {
        loop {
            let mut ready = self.events.readable().await?;
            match ready.get_inner().0.read_events() {
                Ok(events) => {
                    let changed = self.take(events);
                    if !changed.is_empty() {
                        return Ok(changed);
                    }
                }
                Err(Errno::EAGAIN) => ready.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads what is queued now, without waiting: the build step's own
    /// output, not a reason for another restart.
    fn discard_queued(&mut self) {
        while let Ok(events) = self.events.get_ref().0.read_events() {
            self.take(events);
        }
    }

    /// The changes that count among `events`; new directories get watched.
    fn take(&mut self, events: Vec<nix::sys::inotify::InotifyEvent>) -> Vec<PathBuf> {
        let mut changed = Vec::new();
        for e in events {
            if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                // Events were lost: something changed, which is unknown.
                changed.push(PathBuf::from("(many files: the inotify queue overflowed)"));
                continue;
            }
            if e.mask.contains(AddWatchFlags::IN_IGNORED) {
                self.dirs.remove(&e.wd);
                continue;
            }
            let (Some((dir, recursive)), Some(name)) = (self.dirs.get(&e.wd), e.name) else {
                continue;
            };
            let (rel, recursive) = (dir.join(name), *recursive);
            let is_dir = e.mask.contains(AddWatchFlags::IN_ISDIR);
            let made = e
                .mask
                .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO);
            if is_dir && made && recursive {
                self.add_tree(&rel, true);
            }
            // A file made is counted once written (IN_CLOSE_WRITE), a
            // directory made once something is written in it.
            if e.mask.contains(AddWatchFlags::IN_CREATE) {
                continue;
            }
            if self.rules.counts(&rel) {
                changed.push(rel);
            }
        }
        changed
    }
}

fn shown(rel: &Path) -> String {
    match rel.as_os_str().is_empty() {
        true => ".".into(),
        false => rel.display().to_string(),
    }
}

/// `src/a.js changed`, `src/a.js and 2 more files changed`.
fn why(changed: &[PathBuf]) -> String {
    let mut files: Vec<&PathBuf> = changed.iter().collect();
    files.sort();
    files.dedup();
    match files.len() {
        1 => format!("{} changed", shown(files[0])),
        n => format!("{} and {} more files changed", shown(files[0]), n - 1),
    }
}

/// Watches the app's files until the supervisor stops: after each change
/// that counts and the debounce, the build (if any), then a restart.
pub(crate) async fn run(spec: WatchSpec, app: Arc<ArcSwap<AppSpec>>, restarter: Restarter) {
    let name = restarter.name.clone();
    let cwd = app.load().cwd.clone();
    let root = match std::fs::canonicalize(&cwd) {
        Ok(root) => root,
        Err(e) => {
            log::error!("{name}: not watching {}: {e}", cwd.display());
            return;
        }
    };
    let mut watcher = match Watcher::new(name.clone(), root.clone(), &spec) {
        Ok(w) => w,
        Err(e) => {
            log::error!("{name}: not watching its files: {e}");
            return;
        }
    };
    for missing in spec
        .paths
        .iter()
        .filter(|p| !is_pattern(p) && !root.join(p).exists())
    {
        log::warn!(
            "{name}: watch names {missing:?}, which is not in {} (yet): a file made there restarts the app, a directory's contents do not",
            root.display()
        );
    }
    let what = match spec.paths.is_empty() {
        true => "its directory".to_string(),
        false => spec.paths.join(", "),
    };
    let watching = format!(
        "{what} in {} ({} directories), changes settle {:?}",
        root.display(),
        watcher.dirs.len(),
        spec.debounce
    );
    log::info!("{name}: watching {watching}");
    restarter.notes(|n| n.watching = Some(watching));
    loop {
        let mut changed = match watcher.changes().await {
            Ok(c) => c,
            Err(e) => {
                log::error!("{name}: watching its files failed, no more restarts on changes: {e}");
                return;
            }
        };
        let settle_by = tokio::time::Instant::now() + spec.debounce * MOST_DEBOUNCES;
        loop {
            tokio::select! {
                more = watcher.changes() => changed.extend(more.unwrap_or_default()),
                _ = tokio::time::sleep(spec.debounce) => break,
                _ = tokio::time::sleep_until(settle_by) => break,
            }
        }
        let why = why(&changed);
        if restarter.is_stopped() {
            log::info!("{name}: {why}; not restarted: the app is stopped (hayate start {name})");
            continue;
        }
        if !spec.build.is_empty() {
            let command = spec.build.join(" ");
            log::info!("{name}: {why}; building first: {command}");
            let built = build::run(&spec.build, &app.load(), spec.build_timeout).await;
            watcher.discard_queued();
            if let Err(e) = built.result {
                let output: String = built.output.lines().map(|l| format!("\n  | {l}")).collect();
                log::error!(
                    "{name}: build `{command}` failed after {:.1}s: {e}; the running instances keep serving. Its output:{output}",
                    built.took.as_secs_f64()
                );
                continue;
            }
            log::info!(
                "{name}: build `{command}` done in {:.1}s",
                built.took.as_secs_f64()
            );
        }
        restarter.restart(&why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(paths: &[&str], ignore: &[&str]) -> Rules {
        Rules::new(&WatchSpec {
            paths: paths.iter().map(|s| s.to_string()).collect(),
            ignore: ignore.iter().map(|s| s.to_string()).collect(),
            ..WatchSpec::default()
        })
    }

    #[test]
    fn patterns_match_names() {
        assert!(glob(b"*.js", b"server.js") && glob(b"*", b"") && glob(b"a?c", b"abc"));
        assert!(!glob(b"*.js", b"server.json") && !glob(b"a?c", b"ac"));
    }

    #[test]
    fn what_counts() {
        let all = rules(&[], &[]);
        assert!(all.counts(Path::new("src/a.js")));
        assert!(!all.counts(Path::new("node_modules/x/index.js")));
        assert!(!all.counts(Path::new(".git/index")));
        let some = rules(&["src", "*.json"], &["*.log", "src/generated/"]);
        assert!(some.counts(Path::new("src/a.ts")) && some.counts(Path::new("conf/app.json")));
        assert!(
            !some.counts(Path::new("lib/a.ts")),
            "neither under src nor *.json"
        );
        assert!(!some.counts(Path::new("src/debug.log")), "ignored by name");
        assert!(
            !some.counts(Path::new("src/generated/x.ts")),
            "ignored by path"
        );
        let own = rules(&["src/*.ts"], &["run/hayate.*"]);
        assert!(own.counts(Path::new("src/a.ts")) && !own.counts(Path::new("lib/a.ts")));
        assert!(!rules(&[], &["run/hayate.*"]).counts(Path::new("run/hayate.pid.42")));
        assert!(rules(&[], &["run/hayate.*"]).counts(Path::new("run/other")));
        let dist = rules(&[], &["dist"]);
        assert!(!dist.counts(Path::new("dist/app.js")) && !dist.counts(Path::new("a/dist/b")));
        assert!(dist.counts(Path::new("distant.js")));
    }

    #[test]
    fn roots_watch_what_is_needed() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("src")).expect("mkdir");
        let r = rules(&["./src/", "server.js"], &[]);
        assert_eq!(
            r.roots(dir.path()),
            vec![(PathBuf::from("src"), true), (PathBuf::new(), false)]
        );
        assert_eq!(
            rules(&["src", "*.js"], &[]).roots(dir.path()),
            vec![(PathBuf::new(), true)]
        );
    }

    #[test]
    fn reasons_name_a_file() {
        assert_eq!(why(&[PathBuf::from("src/a.js")]), "src/a.js changed");
        let two = [
            PathBuf::from("b.js"),
            PathBuf::from("a.js"),
            PathBuf::from("a.js"),
        ];
        assert_eq!(why(&two), "a.js and 1 more files changed");
    }
}
