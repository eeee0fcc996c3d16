//! Confinement of file lookups to a root, symbolic links included: a
//! request path is resolved under the root one component at a time (the
//! kernel's `realpath` would not say which links it crossed), and every
//! link met, in the request path or in another link's target, is judged by
//! the route's [`Symlinks`] setting when what it leads to lies outside the
//! root: `owner` follows it only if the link and that object have the same
//! owner (nginx's `disable_symlinks if_not_owner`, checked for each link,
//! not only the last), `never` refuses it, `always` follows it.
//!
//! What was checked is what gets served: a file is opened by the real path
//! found (no link left in it), without following a last link and without
//! blocking on a FIFO, and the opened file must be the very inode that was
//! checked (`fstat` against the walk's `lstat`). A link swapped between the
//! check and the open thus makes the open fail or return another inode,
//! never a file the setting refuses. Request paths come here normalized
//! (hayate-core::path): decoded, without `.` or `..` segments, so no
//! encoding reaches the walk; link targets may hold `..`, which the walk
//! resolves against the real directory it stands in.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

pub use hayate_core::path::Symlinks;

/// Links followed in one lookup before it counts as a loop (Linux's own
/// bound, MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// What a path under a root resolved to.
#[derive(Debug)]
pub(crate) enum Resolved {
    /// An object whose path holds no link, and its `lstat`.
    Found {
        /// The real path.
        real: PathBuf,
        /// What `lstat` said of it during the walk.
        meta: Metadata,
    },
    /// Nothing there (or a dangling link, a loop, a name too long).
    Missing,
    /// A link the setting does not follow.
    Refused(Refusal),
}

/// Why a link was not followed, for the warning that names it.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The link.
    pub link: PathBuf,
    /// What it leads to.
    pub target: PathBuf,
    /// The link's owner and its target's (`owner`'s reason).
    pub owners: Option<(u32, u32)>,
    /// The setting that refused it.
    pub setting: Symlinks,
}

impl Refusal {
    /// One line for the log: what was refused, why, and what to change.
    pub fn describe(&self, what: &str, requested: &Path) -> String {
        let (why, change) = match self.owners {
            Some((link, target)) => (
                format!(", and its owner (uid {link}) is not its target's (uid {target})"),
                "symlinks = \"always\" follows it; or give the link its target's owner",
            ),
            None => (
                String::new(),
                "symlinks = \"owner\" follows a link that has its target's owner, \"always\" any",
            ),
        };
        format!(
            "refused {what} {}: the symlink {} -> {} leaves the root{why}, and the route has \
             symlinks = \"{}\" ({change})",
            requested.display(),
            self.link.display(),
            self.target.display(),
            self.setting.as_str(),
        )
    }
}

/// One step of the walk: a name to enter, or the end of a link's target
/// (the link is judged once what it leads to is known).
enum Step {
    Name(OsString),
    /// A link target's `..` (a request path has none: it is normalized).
    Parent,
    EndOfLink {
        link: PathBuf,
        uid: u32,
    },
}

/// Resolves `rel` (a normalized request path, leading `/` allowed) under
/// the canonical `root`.
pub(crate) fn resolve(root: &Path, rel: &[u8], setting: Symlinks) -> io::Result<Resolved> {
    let mut steps: VecDeque<Step> = rel
        .split(|&b| b == b'/')
        .filter(|s| !s.is_empty())
        .map(|s| Step::Name(OsStr::from_bytes(s).to_owned()))
        .collect();
    let mut cur = root.to_path_buf();
    let mut meta = std::fs::symlink_metadata(&cur)?;
    let mut links = 0;
    while let Some(step) = steps.pop_front() {
        let name = match step {
            Step::Name(name) => Some(name),
            Step::Parent => None,
            Step::EndOfLink { link, uid } => {
                if let Some(refusal) = judge(root, &link, uid, &cur, &meta, setting) {
                    return Ok(Resolved::Refused(refusal));
                }
                continue;
            }
        };
        if !meta.is_dir() {
            return Ok(Resolved::Missing);
        }
        let Some(name) = name else {
            cur.pop();
            meta = std::fs::symlink_metadata(&cur)?;
            continue;
        };
        if name == "." || name == ".." {
            // Not from a normalized path: nothing climbs out unseen.
            return Ok(Resolved::Missing);
        }
        let next = cur.join(&name);
        let next_meta = match std::fs::symlink_metadata(&next) {
            Ok(m) => m,
            Err(e) if crate::is_missing(&e) => return Ok(Resolved::Missing),
            Err(e) => return Err(e),
        };
        if !next_meta.file_type().is_symlink() {
            cur = next;
            meta = next_meta;
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Ok(Resolved::Missing);
        }
        let target = match std::fs::read_link(&next) {
            Ok(t) => t,
            // Removed since its lstat: as missing as it now is.
            Err(e) if crate::is_missing(&e) => return Ok(Resolved::Missing),
            Err(e) => return Err(e),
        };
        steps.push_front(Step::EndOfLink {
            link: next,
            uid: next_meta.uid(),
        });
        for part in target.components().rev() {
            match part {
                Component::Normal(n) => steps.push_front(Step::Name(n.to_owned())),
                Component::ParentDir => steps.push_front(Step::Parent),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        if target.is_absolute() {
            cur = PathBuf::from("/");
            meta = std::fs::symlink_metadata(&cur)?;
        }
    }
    Ok(Resolved::Found { real: cur, meta })
}

/// Whether the link `link` (owned by `uid`), which leads to `to`, may be
/// followed; `None` when it may.
fn judge(
    root: &Path,
    link: &Path,
    uid: u32,
    to: &Path,
    to_meta: &Metadata,
    setting: Symlinks,
) -> Option<Refusal> {
    if to.starts_with(root) {
        return None;
    }
    let refusal = |owners| Refusal {
        link: link.to_path_buf(),
        target: to.to_path_buf(),
        owners,
        setting,
    };
    match setting {
        Symlinks::Always => None,
        Symlinks::Never => Some(refusal(None)),
        Symlinks::Owner if to_meta.uid() == uid => None,
        Symlinks::Owner => Some(refusal(Some((uid, to_meta.uid())))),
    }
}

/// Opens the regular file found at `real`, checked as `meta`: `None` when
/// what opens there is not that file any more (replaced since: the caller
/// looks again), never another file.
pub(crate) fn open_checked(real: &Path, meta: &Metadata) -> io::Result<Option<File>> {
    let file = match File::options()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(real)
    {
        Ok(f) => f,
        Err(e) if crate::is_missing(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let opened = file.metadata()?;
    let same = opened.dev() == meta.dev() && opened.ino() == meta.ino() && opened.is_file();
    Ok(same.then_some(file))
}

#[cfg(test)]
mod tests;
