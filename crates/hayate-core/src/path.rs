//! Request-path normalization, the first line of defence against path
//! traversal: percent-decoding, then resolution of `.` and `..` segments and
//! merging of empty ones, so that routing and file lookup only ever see a
//! canonical path that cannot climb above `/`.
//!
//! Decoding happens before normalization, so `%2e%2e%2f` and `..%2f` are
//! resolved like `../`. An encoded slash (`%2F`) becomes a separator, as
//! nginx does after merging. NUL (raw or `%00`) is refused.

use crate::field::hex_digit;
use std::borrow::Cow;

/// Which symbolic links that lead out of a route's root are followed (the
/// `symlinks` option; links that stay under the root always are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Symlinks {
    /// When the link and what it leads to have the same owner (nginx's
    /// `disable_symlinks if_not_owner`): a packaged app's links into
    /// /usr/share are followed, a link the web user made to a file of
    /// root's is not.
    #[default]
    Owner,
    /// Never.
    Never,
    /// Always.
    Always,
}

impl Symlinks {
    /// The option's value for this setting.
    pub fn as_str(self) -> &'static str {
        match self {
            Symlinks::Owner => "owner",
            Symlinks::Never => "never",
            Symlinks::Always => "always",
        }
    }
}

/// Why a request path was refused; each maps to 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Does not start with `/`.
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// Contains NUL.
    Nul,
    /// `..` would leave the root.
    EscapesRoot,
}

impl PathError {
    /// A short description for logs and error bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            PathError::NotAbsolute => "path does not start with /",
            PathError::BadEscape => "bad percent-encoding in path",
            PathError::Nul => "NUL in path",
            PathError::EscapesRoot => "path climbs above the root",
        }
    }
}

/// Normalizes the path part of a request target (without the query).
/// Returns the decoded path: starts with `/`, has no empty, `.` or `..`
/// segments, keeps a trailing slash if the request had one (or ended in a
/// dot segment). Borrows when nothing needed changing (the common case).
pub fn normalize(raw: &[u8]) -> Result<Cow<'_, [u8]>, PathError> {
    if raw.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    if is_plain(raw) {
        return Ok(Cow::Borrowed(raw));
    }
    let decoded = decode(raw)?;
    let mut out: Vec<u8> = Vec::with_capacity(decoded.len());
    let mut trailing_slash = false;
    for seg in decoded.split(|&b| b == b'/') {
        trailing_slash = false;
        match seg {
            b"" => trailing_slash = true,
            b"." => trailing_slash = true,
            b".." => {
                let cut = out
                    .iter()
                    .rposition(|&b| b == b'/')
                    .ok_or(PathError::EscapesRoot)?;
                out.truncate(cut);
                trailing_slash = true;
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(seg);
            }
        }
    }
    if out.is_empty() || trailing_slash {
        out.push(b'/');
    }
    Ok(Cow::Owned(out))
}

/// True when `raw` is already normal: no `%`, NUL, `//`, or dot segments.
fn is_plain(raw: &[u8]) -> bool {
    let mut prev_slash = false;
    for (i, &b) in raw.iter().enumerate() {
        match b {
            b'%' | 0 => return false,
            b'/' if prev_slash => return false,
            b'.' if prev_slash => {
                // "/." followed by end, "/" or "." is a dot segment.
                match raw.get(i + 1) {
                    None | Some(b'/') | Some(b'.') => return false,
                    _ => {}
                }
            }
            _ => {}
        }
        prev_slash = b == b'/';
    }
    true
}

/// Percent-decodes `raw`; a `%` without two hex digits, or a NUL, is an
/// error. Also used for query values (the admin listener's `/purge?url=`).
pub fn decode(raw: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'%' {
            let hi = raw
                .get(i + 1)
                .and_then(|&h| hex_digit(h))
                .ok_or(PathError::BadEscape)?;
            let lo = raw
                .get(i + 2)
                .and_then(|&l| hex_digit(l))
                .ok_or(PathError::BadEscape)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    if out.contains(&0) {
        return Err(PathError::Nul);
    }
    Ok(out)
}

/// Percent-encodes a path for a `Location` header or a link: every byte
/// outside RFC 3986 `pchar` (and `/`) is escaped.
pub fn encode(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(raw: &str) -> Result<String, PathError> {
        normalize(raw.as_bytes()).map(|p| String::from_utf8_lossy(&p).into_owned())
    }

    #[test]
    fn table() {
        let ok: &[(&str, &str)] = &[
            ("/", "/"),
            ("/a/b.txt", "/a/b.txt"),
            ("/a/", "/a/"),
            ("//a///b", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/a/%2e%2E/b", "/b"),
            ("/a%2fb", "/a/b"),
            ("/a/..%2fb", "/b"),
            ("/%41", "/A"),
            ("/.well-known/x", "/.well-known/x"),
            ("/a/.hidden", "/a/.hidden"),
            ("/a..b/", "/a..b/"),
            ("/..a", "/..a"),
        ];
        for (raw, want) in ok {
            assert_eq!(n(raw).as_deref(), Ok(*want), "normalize({raw:?})");
        }
        let bad: &[(&str, PathError)] = &[
            ("a", PathError::NotAbsolute),
            ("", PathError::NotAbsolute),
            ("/..", PathError::EscapesRoot),
            ("/a/../..", PathError::EscapesRoot),
            ("/%2e%2e/etc/passwd", PathError::EscapesRoot),
            ("/..%2f..%2fetc", PathError::EscapesRoot),
            ("/a%00b", PathError::Nul),
            ("/a%zz", PathError::BadEscape),
            ("/a%2", PathError::BadEscape),
        ];
        for (raw, want) in bad {
            assert_eq!(n(raw), Err(*want), "normalize({raw:?})");
        }
    }

    #[test]
    fn plain_paths_borrow() {
        assert!(matches!(normalize(b"/assets/app.js"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn encode_escapes_unsafe_bytes() {
        assert_eq!(encode(b"/a b/\"x\"?#%"), "/a%20b/%22x%22%3F%23%25");
    }

    /// Property: a normalized path never contains a `..` segment and always
    /// starts with `/`, for any input (a smoke run of the fuzz target's check).
    #[test]
    fn never_escapes_on_generated_inputs() {
        let alphabet: &[&[u8]] = &[b"/", b"..", b".", b"%2e", b"%2f", b"a", b"%", b"%00", b"//"];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut raw = vec![b'/'];
            for _ in 0..(seed % 9) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                raw.extend_from_slice(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            if let Ok(p) = normalize(&raw) {
                assert!(
                    check_normal(&p),
                    "{:?} -> {:?}",
                    String::from_utf8_lossy(&raw),
                    String::from_utf8_lossy(&p)
                );
            }
        }
    }

    /// The invariant the fuzz target checks.
    pub(crate) fn check_normal(p: &[u8]) -> bool {
        p.first() == Some(&b'/')
            && !p.split(|&b| b == b'/').any(|s| s == b".." || s == b".")
            && !p.contains(&0)
    }
}
