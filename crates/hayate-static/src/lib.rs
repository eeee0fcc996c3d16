//! Static files: resolving a normalized request path under a root without
//! ever leaving it, the open-file cache, conditional requests, ranges,
//! precompressed siblings, MIME types, index files, listings and the SPA
//! fallback (RFC 9110 semantics).
//!
//! A [`StaticRoot`] is built per worker and is not `Send`: its cache is the
//! worker's own (shared-nothing). It depends on hayate-core only; the server
//! normalizes the path (hayate-core::path), negotiates codings and supplies
//! compressed variants of files without a sibling ([`VariantSource`]).

mod cache;
pub mod conditional;
pub mod confine;
mod listing;
pub mod mime;
pub mod range;
pub mod scripts;

use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use hayate_core::error::Error;
use hayate_core::response::FileRange;
use hayate_core::{Body, Chunk, Coding, Response, Status};

pub use cache::CacheLimits;
use cache::{BuildSpec, Entry, Known, OpenFileCache, Source, Variant};
pub use conditional::{Preconditions, Verdict};
pub use confine::Symlinks;
use confine::{Refusal, Resolved};
pub use hayate_core::variant::{FileStamp, VariantState};
use range::RangeDecision;

/// How a static route serves its files.
#[derive(Debug, Clone)]
pub struct StaticOptions {
    /// Directory served.
    pub root: PathBuf,
    /// File served for directory requests.
    pub index: String,
    /// List directories without an index.
    pub listing: bool,
    /// SPA fallback file, relative to root.
    pub fallback: Option<String>,
    /// Serve dotfiles.
    pub dotfiles: bool,
    /// Which symlinks out of root are followed.
    pub symlinks: Symlinks,
    /// Cache-Control for files.
    pub cache_control: Option<String>,
    /// Long-lived, immutable Cache-Control for hashed file names.
    pub immutable: bool,
    /// Serve .br/.zst/.gz siblings.
    pub precompressed: bool,
    /// File cache settings.
    pub cache: CacheLimits,
    /// Coding preference, most preferred first (siblings and generated).
    pub encodings: Vec<Coding>,
    /// Compressed variants of files that have no sibling; `None`: off.
    pub variants: Option<Rc<dyn VariantSource>>,
}

/// Where compressed variants of files come from (the server's compress-once
/// store): built once, in the background, shared by every worker.
pub trait VariantSource: std::fmt::Debug {
    /// The codings worth generating for a file of this type and size, most
    /// preferred first; empty when none.
    fn codings(&self, content_type: &str, len: u64) -> Vec<Coding>;

    /// The bytes of the file at `fs_path`, whose content is `stamp`, in
    /// `coding`. When they are not built yet, the build is queued (once)
    /// and `Pending` returned at once: no request waits for it.
    fn variant(&self, fs_path: &Path, stamp: FileStamp, coding: Coding) -> VariantState;

    /// The file with this content changed or went away.
    fn forget(&self, stamp: FileStamp);
}

/// A request as the static handler sees it.
pub struct StaticRequest<'a> {
    /// The request method.
    pub method: &'a [u8],
    /// The normalized, decoded path within the root (starts with `/`).
    pub path: &'a [u8],
    /// The path as the client sent it, for redirects.
    pub raw_path: &'a [u8],
    /// The query string, without `?`.
    pub query: Option<&'a [u8]>,
    /// Validator headers.
    pub preconditions: Preconditions<'a>,
    /// The Range header.
    pub range: Option<&'a [u8]>,
    /// Chooses a coding among those available (server preference order);
    /// `None` means identity.
    pub choose_coding: &'a dyn Fn(&[Coding]) -> Option<Coding>,
    /// The client asked for JSON (directory listings).
    pub wants_json: bool,
    /// The time of the request (cache revalidation).
    pub now: Instant,
}

/// A static root with its per-worker file cache.
pub struct StaticRoot {
    opts: StaticOptions,
    cache: OpenFileCache,
}

/// What a path resolved to.
enum Lookup {
    File(Rc<Entry>),
    Dir,
    Missing,
    /// Behind a symlink the route does not follow: 403, never "missing"
    /// (a front controller would answer for the file).
    Refused(Refusal),
}

impl StaticRoot {
    /// Opens `opts.root`, which must be a directory; it is canonicalized so
    /// that confinement checks compare real paths.
    pub fn new(mut opts: StaticOptions) -> io::Result<StaticRoot> {
        let root = std::fs::canonicalize(&opts.root).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("static root {}: {e}", opts.root.display()),
            )
        })?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        opts.root = root;
        let cache =
            OpenFileCache::new(opts.root.clone(), opts.cache.clone(), opts.variants.clone());
        Ok(StaticRoot { opts, cache })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.opts.root
    }

    /// Answers a request; 404 when nothing under the root matches.
    pub fn serve(&self, req: &StaticRequest<'_>) -> Response {
        self.try_serve(req)
            .unwrap_or_else(|| Response::error(Status::NOT_FOUND))
    }

    /// Answers a request, or `None` when nothing under the root matches it
    /// (no file, no index, no listing, no fallback): the route may then hand
    /// it to its upstream (try_files).
    pub fn try_serve(&self, req: &StaticRequest<'_>) -> Option<Response> {
        let head = match req.method {
            b"GET" => false,
            b"HEAD" => true,
            _ => {
                return Some(
                    Response::error(Status::METHOD_NOT_ALLOWED).with_header("Allow", b"GET, HEAD"),
                )
            }
        };
        if !self.opts.dotfiles && is_hidden(req.path) {
            // Hidden as a file, not as a URL: a route with an upstream
            // hands it on (`/api/.foo` is the app's), others answer 404.
            return None;
        }
        let lookup = match self.cache.get(req.path, req.now) {
            Some(entry) => Lookup::File(entry),
            None => match self.resolve(req.path, req.path, req.now) {
                Ok(l) => l,
                Err(e) => return Some(io_error(&e)),
            },
        };
        let entry = match lookup {
            Lookup::File(entry) => entry,
            Lookup::Refused(refusal) => return Some(self.refuse(&refusal, req.path)),
            Lookup::Dir => match self.directory(req) {
                Ok(Some(Ok(entry))) => entry,
                Ok(Some(Err(response))) => return Some(response),
                Ok(None) => return None,
                Err(e) => return Some(io_error(&e)),
            },
            Lookup::Missing => match self.fallback(req) {
                Ok(Some(entry)) => entry,
                Ok(None) => return None,
                Err(e) => return Some(io_error(&e)),
            },
        };
        Some(respond(&entry, req, head, self.opts.variants.as_deref()))
    }

    /// Whether a file or directory this root would serve is at `path` (a
    /// site rule's `file` condition); the answer is cached as a request's.
    pub fn exists(&self, path: &[u8], now: Instant) -> bool {
        if !self.opts.dotfiles && is_hidden(path) {
            return false;
        }
        if self.cache.get(path, now).is_some() {
            return true;
        }
        matches!(
            self.resolve(path, path, now),
            Ok(Lookup::File(_) | Lookup::Dir)
        )
    }

    /// A directory: redirect to the slash form, its index, a listing, or
    /// `None` (nothing to serve).
    fn directory(
        &self,
        req: &StaticRequest<'_>,
    ) -> io::Result<Option<Result<Rc<Entry>, Response>>> {
        if !req.path.ends_with(b"/") {
            let mut location = req.raw_path.to_vec();
            location.push(b'/');
            if let Some(q) = req.query {
                location.push(b'?');
                location.extend_from_slice(q);
            }
            let mut r = Response::error(Status::MOVED_PERMANENTLY);
            r.header("Location", &location);
            return Ok(Some(Err(r)));
        }
        // A present index is cached under the directory's own key (a hit
        // before this point); a missing one is remembered under its path.
        // Built on the stack when it fits: `/` in front of an app comes here
        // on every request.
        let index = self.opts.index.as_bytes();
        let len = req.path.len() + index.len();
        let mut stack = [0u8; 256];
        let heap: Vec<u8>;
        let index_path: &[u8] = if len <= stack.len() {
            stack[..req.path.len()].copy_from_slice(req.path);
            stack[req.path.len()..len].copy_from_slice(index);
            &stack[..len]
        } else {
            heap = [req.path, index].concat();
            &heap
        };
        match self.resolve(req.path, index_path, req.now)? {
            Lookup::File(entry) => return Ok(Some(Ok(entry))),
            Lookup::Refused(refusal) => return Ok(Some(Err(self.refuse(&refusal, index_path)))),
            Lookup::Dir | Lookup::Missing => {}
        }
        if self.opts.listing {
            // Listed by its real path, checked now: what a remembered
            // directory's links lead to may have changed since.
            let dir = match confine::resolve(&self.opts.root, req.path, self.opts.symlinks)? {
                Resolved::Found { real, meta } if meta.is_dir() => real,
                Resolved::Refused(refusal) => {
                    return Ok(Some(Err(self.refuse(&refusal, req.path))))
                }
                _ => return Ok(None),
            };
            let body = listing::render(&dir, req.path, req.wants_json, self.opts.dotfiles)?;
            let mut r = Response::new(Status::OK);
            let ct: &[u8] = if req.wants_json {
                b"application/json"
            } else {
                b"text/html; charset=utf-8"
            };
            r.header("Content-Type", ct)
                .header("Cache-Control", b"no-cache");
            r.body = Body::Bytes(Bytes::from(body));
            return Ok(Some(Err(r)));
        }
        Ok(None)
    }

    fn fallback(&self, req: &StaticRequest<'_>) -> io::Result<Option<Rc<Entry>>> {
        let Some(fallback) = &self.opts.fallback else {
            return Ok(None);
        };
        let key = format!("/{}", fallback.trim_start_matches('/'));
        if let Some(entry) = self.cache.get(key.as_bytes(), req.now) {
            return Ok(Some(entry));
        }
        match self.lookup(key.as_bytes(), key.as_bytes(), req.now)? {
            Lookup::File(entry) => Ok(Some(entry)),
            Lookup::Refused(refusal) => {
                let _ = self.refuse(&refusal, key.as_bytes());
                Ok(None)
            }
            _ => {
                log::error!(
                    "fallback file {key} is missing under {}",
                    self.opts.root.display()
                );
                Ok(None)
            }
        }
    }

    /// Resolves `path` under the root on disk and caches a file under `key`.
    /// Where a request path lies under the root.
    fn fs_path(&self, path: &[u8]) -> PathBuf {
        let rel = Path::new(std::ffi::OsStr::from_bytes(
            path.strip_prefix(b"/").unwrap_or(path),
        ));
        self.opts.root.join(rel)
    }

    /// What `path` resolves to (a file is cached under `key`): from memory
    /// when it is known to be missing or a directory, else from the disk,
    /// remembering those two answers under `path`.
    fn resolve(&self, key: &[u8], path: &[u8], now: Instant) -> io::Result<Lookup> {
        match self.cache.known(path, now) {
            Some(Known::Missing) => return Ok(Lookup::Missing),
            Some(Known::Dir) => return Ok(Lookup::Dir),
            None => {}
        }
        let found = self.lookup(key, path, now)?;
        let known = match found {
            Lookup::Missing => Known::Missing,
            Lookup::Dir => Known::Dir,
            Lookup::File(_) | Lookup::Refused(_) => return Ok(found),
        };
        self.cache.remember(path, &self.fs_path(path), known, now);
        Ok(found)
    }

    fn lookup(&self, key: &[u8], path: &[u8], now: Instant) -> io::Result<Lookup> {
        let fs_path = self.fs_path(path);
        // Twice at most: a file replaced between its check and its opening
        // (a deploy renaming over it) is looked up once more.
        let mut opened = None;
        for _ in 0..2 {
            let (real, meta) = match confine::resolve(&self.opts.root, path, self.opts.symlinks)? {
                Resolved::Found { real, meta } => (real, meta),
                Resolved::Missing => return Ok(Lookup::Missing),
                Resolved::Refused(refusal) => return Ok(Lookup::Refused(refusal)),
            };
            if meta.is_dir() {
                return Ok(Lookup::Dir);
            }
            if !meta.is_file() {
                return Ok(Lookup::Missing);
            }
            if let Some(file) = confine::open_checked(&real, &meta)? {
                opened = Some((real, file));
                break;
            }
        }
        let Some((real, file)) = opened else {
            return Ok(Lookup::Missing);
        };
        let meta = file.metadata()?;
        let content_type = mime::content_type(&fs_path);
        let generate = match &self.opts.variants {
            Some(v) => v.codings(&content_type, meta.len()),
            None => Vec::new(),
        };
        let siblings = match self.opts.precompressed {
            true => self.siblings(path, &fs_path)?,
            false => Vec::new(),
        };
        let spec = BuildSpec {
            content_type,
            cache_control: self.cache_control_for(&fs_path),
            precompressed: self.opts.precompressed,
            generate,
            preference: &self.opts.encodings,
            watchable: real == fs_path,
            siblings,
        };
        let entry = self.cache.insert(key, &fs_path, file, &meta, spec, now)?;
        Ok(Lookup::File(entry))
    }

    /// The precompressed siblings of the file at `path` (`fs_path` on
    /// disk), each a path of its own under the symlink setting.
    fn siblings(&self, path: &[u8], fs_path: &Path) -> io::Result<Vec<(Coding, PathBuf, File)>> {
        let mut found = Vec::new();
        for coding in Coding::COMPRESSED {
            let Some(suffix) = coding.file_suffix() else {
                continue;
            };
            let name = [path, suffix.as_bytes()].concat();
            let opened = match confine::resolve(&self.opts.root, &name, self.opts.symlinks) {
                Ok(Resolved::Found { real, meta }) if meta.is_file() => {
                    confine::open_checked(&real, &meta)
                }
                Ok(Resolved::Refused(refusal)) => {
                    let _ = self.refuse(&refusal, &name);
                    Ok(None)
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            };
            let file = match opened {
                Ok(Some(f)) => f,
                // No descriptor to look: the entry would go without a
                // sibling that exists, until revalidated.
                Err(e) if hayate_core::error::is_local_shortage(&e) => return Err(e),
                Ok(None) | Err(_) => continue,
            };
            let mut sibling = fs_path.as_os_str().to_owned();
            sibling.push(suffix);
            found.push((coding, PathBuf::from(sibling), file));
        }
        Ok(found)
    }

    /// A 403 for `path`, refused by the symlink setting, with the warning
    /// that says which link and what to change.
    fn refuse(&self, refusal: &Refusal, path: &[u8]) -> Response {
        log::warn!("{}", refusal.describe("file", &self.fs_path(path)));
        Response::error(Status::FORBIDDEN)
    }

    fn cache_control_for(&self, fs_path: &Path) -> Option<&str> {
        let name = fs_path
            .file_name()
            .map(|n| n.as_bytes())
            .unwrap_or_default();
        if self.opts.immutable && looks_hashed(name) {
            return Some("public, max-age=31536000, immutable");
        }
        self.opts.cache_control.as_deref()
    }
}

/// The representation chosen for a request: one the entry owns, or a
/// generated variant.
enum Selected<'e> {
    Owned(&'e Variant),
    Generated(Rc<Variant>),
}

impl std::ops::Deref for Selected<'_> {
    type Target = Variant;
    fn deref(&self) -> &Variant {
        match self {
            Selected::Owned(v) => v,
            Selected::Generated(v) => v,
        }
    }
}

/// Negotiates among the codings the entry offers. A generated variant that
/// is not ready yet (its build is then queued) is replaced by the client's
/// best choice among what is ready: another coding, or identity.
fn select<'e>(
    entry: &'e Entry,
    req: &StaticRequest<'_>,
    source: Option<&dyn VariantSource>,
) -> Selected<'e> {
    if entry.offer.is_empty() {
        return Selected::Owned(&entry.identity);
    }
    let stored = |c: Coding| entry.encoded.iter().find(|v| v.coding == c);
    let Some(coding) = (req.choose_coding)(&entry.offer) else {
        return Selected::Owned(&entry.identity);
    };
    if let Some(v) = stored(coding) {
        return Selected::Owned(v);
    }
    if let Some(v) = source.and_then(|s| entry.generated(coding, s)) {
        return Selected::Generated(v);
    }
    // The offer holds at most the three compressed codings: no allocation
    // on this path, which a refused coding takes on every request.
    let mut ready = [Coding::Identity; Coding::COMPRESSED.len()];
    let mut n = 0;
    for c in entry.offer.iter().copied() {
        if n < ready.len() && (stored(c).is_some() || entry.generated_ready(c).is_some()) {
            ready[n] = c;
            n += 1;
        }
    }
    match (req.choose_coding)(&ready[..n]) {
        Some(c) => match stored(c) {
            Some(v) => Selected::Owned(v),
            None => entry
                .generated_ready(c)
                .map_or(Selected::Owned(&entry.identity), Selected::Generated),
        },
        None => Selected::Owned(&entry.identity),
    }
}

/// Builds the response for a resolved file.
fn respond(
    entry: &Entry,
    req: &StaticRequest<'_>,
    head_only: bool,
    source: Option<&dyn VariantSource>,
) -> Response {
    let selected = select(entry, req, source);
    let variant: &Variant = &selected;
    let validators = conditional::Validators {
        etag: &variant.etag,
        last_modified: entry.last_modified,
    };
    match req.preconditions.evaluate(&validators) {
        Verdict::Proceed => {}
        Verdict::NotModified => {
            let mut r = Response::new(Status::NOT_MODIFIED);
            r.shared = Some(variant.head_304.clone());
            return r;
        }
        Verdict::Failed => return Response::error(Status::PRECONDITION_FAILED),
    }
    let decision = match req.range {
        Some(range) if !head_only && req.preconditions.range_allowed(&validators) => {
            range::decide(range, variant.len)
        }
        _ => RangeDecision::Full,
    };
    let mut r = Response::new(Status::OK);
    match decision {
        RangeDecision::Full => {
            r.shared = Some(variant.head.clone());
            r.body = body_of(variant, 0, variant.len);
        }
        RangeDecision::Single(range) => {
            r.status = Status::PARTIAL_CONTENT;
            r.shared = Some(variant.head.clone());
            let cr = range::content_range(&range, variant.len);
            r.header("Content-Range", cr.as_bytes());
            r.body = body_of(variant, range.start, range.end - range.start);
        }
        RangeDecision::Multi(ranges) => {
            r.status = Status::PARTIAL_CONTENT;
            r.shared = Some(variant.head_no_type.clone());
            let (content_type, parts) = range::multipart(
                ranges,
                &entry.content_type,
                variant.len,
                |range| match body_of(variant, range.start, range.end - range.start) {
                    Body::Bytes(b) => Chunk::Bytes(b),
                    Body::File(f) => Chunk::File(f),
                    _ => Chunk::Bytes(Bytes::new()),
                },
            );
            r.header("Content-Type", content_type.as_bytes());
            r.body = Body::Parts(parts);
        }
        RangeDecision::Unsatisfiable => {
            let mut r = Response::error(Status::RANGE_NOT_SATISFIABLE);
            r.header(
                "Content-Range",
                format!("bytes */{}", variant.len).as_bytes(),
            );
            if !entry.offer.is_empty() {
                r.header("Vary", b"Accept-Encoding");
            }
            return r;
        }
    }
    r
}

fn body_of(variant: &Variant, offset: u64, len: u64) -> Body {
    if len == 0 {
        return Body::Empty;
    }
    match &variant.source {
        Source::Memory(b) => Body::Bytes(b.slice(offset as usize..(offset + len) as usize)),
        Source::File(f) => Body::File(FileRange {
            file: f.clone(),
            offset,
            len,
        }),
    }
}

/// Whether any segment of `path` starts with a dot, `.well-known` excepted.
fn is_hidden(path: &[u8]) -> bool {
    path.split(|&b| b == b'/')
        .any(|seg| seg.first() == Some(&b'.') && seg != b".well-known")
}

/// Whether a file name carries a content hash: a `.`- or `-`-separated part
/// before the extension of at least 8 characters of `[A-Za-z0-9_]` with a
/// digit (`app.3f9a1c2e.js`, `index-BdY5xB1c.js`).
pub fn looks_hashed(name: &[u8]) -> bool {
    let stem = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) => &name[..dot],
        None => return false,
    };
    stem.split(|&b| b == b'.' || b == b'-').skip(1).any(|part| {
        part.len() >= 8
            && part.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
            && part.iter().any(u8::is_ascii_digit)
    })
}

fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    ) || e.raw_os_error() == Some(nix::libc::ENAMETOOLONG)
        || e.raw_os_error() == Some(nix::libc::ELOOP)
}

fn io_error(e: &io::Error) -> Response {
    // The error's number kept: it tells a lack of descriptors (503 with
    // Retry-After) from a file's own failure (500).
    let cause = match e.raw_os_error() {
        Some(n) => io::Error::from_raw_os_error(n),
        None => io::Error::new(e.kind(), e.to_string()),
    };
    Error::file(cause).context("static file").into_response()
}

#[cfg(test)]
mod tests;
