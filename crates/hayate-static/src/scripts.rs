//! Which request paths run a script, for a route whose scripts a FastCGI
//! application (php-fpm) executes: nginx's `fastcgi_split_path_info
//! ^(.+\.php)(/.*)$` with `try_files $fastcgi_script_name =404`, under the
//! same confinement as files.
//!
//! A path names a script when one of its segments ends with a script
//! extension (`.php`, compared without case so `x.PHP` is never sent as
//! source): the path up to that segment is the script, the rest its
//! PATH_INFO. The script must be a regular file under the root, reached
//! through symlinks the route's setting follows (`crate::confine`: a link
//! it refuses makes a 403, with a warning), and no segment up to it may be
//! hidden; otherwise the path is a 404 and nothing runs. php-fpm opens the
//! script itself, by its path: a link swapped after the check (within
//! [`RECHECK_AFTER`] for a script found before) is followed by php-fpm,
//! which hayate cannot see; only a user who may write the tree can do so.
//! So `/uploads/evil.jpg/x.php` is a missing script, not `evil.jpg` run as
//! PHP, and `/uploads/evil.jpg` names no script at all (a file, at most).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::confine::{self, Resolved, Symlinks};

/// How long a script found runnable is believed without looking again.
/// Checking costs a `realpath` (a readlink per path component) and a stat:
/// 5 of the 9 system calls of a PHP request with a kept connection
/// (strace, `/index.php` three directories deep). A script removed or
/// replaced by a link out of the root may still be handed to php-fpm for
/// this long (php-fpm then answers its own 404); a new one runs at once.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// Most scripts remembered per worker and route; past it the memory starts
/// over.
const MAX_REMEMBERED: usize = 4096;

/// The scripts of a route: its root and what runs there.
#[derive(Debug)]
pub struct ScriptRoot {
    /// The canonical root, as text (DOCUMENT_ROOT).
    root: String,
    /// File name endings that run, lower case (`.php`).
    extensions: Vec<Vec<u8>>,
    /// Scripts under hidden directories or named with a dot run too.
    dotfiles: bool,
    /// Which symlinks out of the root are followed.
    symlinks: Symlinks,
    /// Scripts found runnable, and when (this worker's; see
    /// [`RECHECK_AFTER`]).
    runnable: RefCell<HashMap<Vec<u8>, Instant>>,
}

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// The script `path[..end]`, an existing file; `path[end..]` is its
    /// PATH_INFO.
    Found {
        /// Where the script's path ends.
        end: usize,
    },
    /// A script that does not exist, or that may not run: 404.
    Missing,
    /// Behind a symlink the route does not follow: 403 (warned).
    Refused,
    /// No script: a file, a directory, or the front controller's.
    NotAScript,
}

impl ScriptRoot {
    /// Scripts ending with one of `extensions` under `root`, which must be
    /// a directory with a UTF-8 path (PHP reads it as text).
    pub fn new(
        root: &Path,
        extensions: &[String],
        dotfiles: bool,
        symlinks: Symlinks,
    ) -> io::Result<ScriptRoot> {
        let real = std::fs::canonicalize(root).map_err(|e| {
            io::Error::new(e.kind(), format!("FastCGI root {}: {e}", root.display()))
        })?;
        let text = real.to_str().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("FastCGI root {}: not UTF-8", real.display()),
            )
        })?;
        let extensions: Vec<Vec<u8>> = extensions
            .iter()
            .filter(|e| !e.is_empty())
            .map(|e| e.to_ascii_lowercase().into_bytes())
            .collect();
        if extensions.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "fastcgi_extensions is empty: no script could run",
            ));
        }
        Ok(ScriptRoot {
            root: text.to_string(),
            extensions,
            dotfiles,
            symlinks,
            runnable: RefCell::new(HashMap::new()),
        })
    }

    /// The canonical root (DOCUMENT_ROOT).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Whether `name` ends with a script extension.
    pub fn is_script_name(&self, name: &[u8]) -> bool {
        self.extensions
            .iter()
            .any(|e| name.len() > e.len() && name[name.len() - e.len()..].eq_ignore_ascii_case(e))
    }

    /// What the normalized `path` names, at `now`.
    pub fn find(&self, path: &[u8], now: Instant) -> Script {
        let mut start = 0;
        while start < path.len() {
            let end = path[start + 1..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(path.len(), |i| start + 1 + i);
            let segment = &path[start + 1..end];
            if self.is_script_name(segment) {
                return self.check(path, end, now);
            }
            start = end;
        }
        Script::NotAScript
    }

    /// `path[..end]` as a script: found if it may run.
    fn check(&self, path: &[u8], end: usize, now: Instant) -> Script {
        let script = &path[..end];
        if !self.dotfiles && crate::is_hidden(script) {
            return Script::Missing;
        }
        let mut runnable = self.runnable.borrow_mut();
        if runnable
            .get(script)
            .is_some_and(|&at| now.saturating_duration_since(at) < RECHECK_AFTER)
        {
            return Script::Found { end };
        }
        let runs = match confine::resolve(Path::new(&self.root), script, self.symlinks) {
            Ok(Resolved::Found { meta, .. }) => meta.is_file(),
            Ok(Resolved::Refused(refusal)) => {
                runnable.remove(script);
                log::warn!("{}", refusal.describe("script", &self.fs_path(script)));
                return Script::Refused;
            }
            Ok(Resolved::Missing) | Err(_) => false,
        };
        if !runs {
            runnable.remove(script);
            return Script::Missing;
        }
        if runnable.len() >= MAX_REMEMBERED {
            runnable.clear();
        }
        runnable.insert(script.to_vec(), now);
        Script::Found { end }
    }

    fn fs_path(&self, path: &[u8]) -> PathBuf {
        let rel = std::ffi::OsStr::from_bytes(path.strip_prefix(b"/").unwrap_or(path));
        Path::new(&self.root).join(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_split_path_info_and_refuse_what_may_not_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("uploads")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        std::fs::create_dir_all(root.join("dir.php")).expect("mkdir");
        for f in ["index.php", "uploads/evil.jpg", ".git/x.php", "A.PHP"] {
            std::fs::write(root.join(f), "<?php").expect("write");
        }
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("out.php"), "<?php").expect("write");
        std::os::unix::fs::symlink(outside.path().join("out.php"), root.join("link.php"))
            .expect("symlink");
        let scripts =
            ScriptRoot::new(root, &[".php".into()], false, Symlinks::Never).expect("root");
        let table: [(&str, Script); 13] = [
            ("/index.php", Script::Found { end: 10 }),
            ("/index.php/a/b", Script::Found { end: 10 }),
            ("/index.php/", Script::Found { end: 10 }),
            ("/A.PHP", Script::Found { end: 6 }),
            ("/missing.php", Script::Missing),
            ("/new.php", Script::Missing),
            ("/uploads/evil.jpg/x.php", Script::Missing),
            ("/uploads/evil.jpg", Script::NotAScript),
            ("/uploads/", Script::NotAScript),
            ("/.git/x.php", Script::Missing),
            ("/dir.php", Script::Missing),
            ("/link.php", Script::Refused),
            ("/index.phpx", Script::NotAScript),
        ];
        let now = Instant::now();
        for (path, want) in table {
            assert_eq!(scripts.find(path.as_bytes(), now), want, "{path}");
        }
        assert!(ScriptRoot::new(root, &[], false, Symlinks::Never).is_err());

        // Found is believed for a second; after it, a removed script is gone.
        std::fs::remove_file(root.join("A.PHP")).expect("rm");
        assert_eq!(scripts.find(b"/A.PHP", now), Script::Found { end: 6 });
        let later = now + RECHECK_AFTER;
        assert_eq!(scripts.find(b"/A.PHP", later), Script::Missing);
        // A new script runs at once (missing ones are never remembered).
        std::fs::write(root.join("new.php"), "<?php").expect("write");
        assert_eq!(scripts.find(b"/new.php", now), Script::Found { end: 8 });
    }
}
