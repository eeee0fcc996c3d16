//! What a cached file is made of: its entry's generated variants and
//! checks of freshness, and a variant's header blocks.

use std::collections::HashSet;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::SystemTime;

use hayate_core::variant::FileStamp;
use hayate_core::{Coding, Fields};

use super::{Entry, Source, Variant};
use crate::{VariantSource, VariantState};

impl Entry {
    /// Descriptors the entry holds: one per variant served from its file
    /// (larger than `max_file`).
    pub(super) fn open_files(&self) -> usize {
        std::iter::once(&self.identity)
            .chain(&self.encoded)
            .filter(|v| matches!(v.source, Source::File(_)))
            .count()
    }

    /// The generated variant in `coding`, asking `source` when this entry
    /// has none yet (which queues its build); `None` while it is not ready.
    pub fn generated(&self, coding: Coding, source: &dyn VariantSource) -> Option<Rc<Variant>> {
        if let Some((_, v)) = self.generated.borrow().iter().find(|(c, _)| *c == coding) {
            return v.clone();
        }
        let (fs_path, stamp) = &self.stamps[0];
        let bytes = match source.variant(fs_path, *stamp, coding) {
            VariantState::Ready(b) => b,
            VariantState::Pending => return None,
            VariantState::Never => {
                self.generated.borrow_mut().push((coding, None));
                return None;
            }
        };
        // The file suffix names the coding in the tag: -br, -zst, -gz.
        let suffix = coding.file_suffix()?.trim_start_matches('.');
        // The identity tag with the coding inside the quotes.
        let base = self.identity.etag.trim_end_matches('"');
        let etag = format!("{base}-{suffix}\"");
        let len = bytes.len() as u64;
        let variant = Rc::new(Variant::new(
            coding,
            len,
            etag,
            Source::Memory(bytes),
            &self.content_type,
            self.cache_control.as_deref(),
            self.last_modified,
            true,
        ));
        // Kept only within the budget; otherwise served this once, and
        // asked for again next time.
        let held = &self.held.bytes;
        if self.resident.get() && held.get() + len <= self.held.budget {
            held.set(held.get() + len);
            self.mem_bytes.set(self.mem_bytes.get() + len);
            self.generated
                .borrow_mut()
                .push((coding, Some(variant.clone())));
        }
        Some(variant)
    }

    /// The generated variant in `coding` if this entry already holds it.
    pub fn generated_ready(&self, coding: Coding) -> Option<Rc<Variant>> {
        self.generated
            .borrow()
            .iter()
            .find(|(c, _)| *c == coding)
            .and_then(|(_, v)| v.clone())
    }

    /// Re-checks every file of the entry with `stat`.
    pub(super) fn still_current(&self) -> bool {
        self.stamps
            .iter()
            .all(|(path, stamp)| std::fs::metadata(path).is_ok_and(|m| FileStamp::of(&m) == *stamp))
            && self.no_new_siblings()
    }

    /// A sibling created after the entry was built makes it outdated too;
    /// only checked on the slow (stat) path.
    pub(super) fn no_new_siblings(&self) -> bool {
        if self.encoded.len() + 1 == self.stamps.len() && !self.stamps.is_empty() {
            let have: HashSet<Coding> = self.encoded.iter().map(|v| v.coding).collect();
            return Coding::COMPRESSED
                .iter()
                .filter(|c| !have.contains(c))
                .all(|c| {
                    let mut name = self.fs_path.as_os_str().to_owned();
                    name.push(c.file_suffix().unwrap_or_default());
                    std::fs::metadata(PathBuf::from(name)).is_err()
                });
        }
        true
    }
}

impl Variant {
    /// A variant with its header blocks.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        coding: Coding,
        len: u64,
        etag: String,
        source: Source,
        content_type: &str,
        cache_control: Option<&str>,
        last_modified: SystemTime,
        vary: bool,
    ) -> Variant {
        let lm = httpdate::fmt_http_date(last_modified);
        let mut common = Fields::with_capacity(160);
        common.push(b"Last-Modified", lm.as_bytes());
        common.push(b"ETag", etag.as_bytes());
        if let Some(cc) = cache_control {
            common.push(b"Cache-Control", cc.as_bytes());
        }
        if vary {
            common.push(b"Vary", b"Accept-Encoding");
        }
        let mut no_type = common.clone();
        no_type.push(b"Accept-Ranges", b"bytes");
        if coding != Coding::Identity {
            no_type.push(b"Content-Encoding", coding.as_str().as_bytes());
        }
        let mut head = Fields::with_capacity(no_type.wire().len() + 64);
        head.push(b"Content-Type", content_type.as_bytes());
        head.extend(&no_type);
        Variant {
            coding,
            len,
            etag,
            head: Arc::new(head),
            head_no_type: Arc::new(no_type),
            head_304: Arc::new(common),
            source,
        }
    }

    pub(super) fn mem_len(&self) -> u64 {
        match &self.source {
            Source::Memory(b) => b.len() as u64,
            Source::File(_) => 0,
        }
    }
}
