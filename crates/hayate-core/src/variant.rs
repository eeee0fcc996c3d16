//! What the static file cache and the compress-once store say to each
//! other about a file's compressed variants.

use std::os::unix::fs::MetadataExt;

use bytes::Bytes;

/// What `stat` says about a file's content: any change means new content
/// (variants are keyed by it, so a changed file never gets an old one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileStamp {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub len: u64,
    /// Modification time, seconds.
    pub mtime: i64,
    /// Modification time, nanoseconds.
    pub mtime_ns: i64,
}

impl FileStamp {
    /// The stamp of `meta`.
    pub fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.mtime(),
            mtime_ns: meta.mtime_nsec(),
        }
    }
}

/// The state of a generated (compressed once) variant of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VariantState {
    /// Its bytes.
    Ready(Bytes),
    /// Queued or being built: serve something else meanwhile.
    Pending,
    /// Never built: too large, not smaller than the file, or failed.
    Never,
}
