//! Header fields as protocol modules hand them to the semantics (routing,
//! files, cache, compression) and take them back: a list of `(name, value)`
//! pairs, looked up by name without parsing text.
//!
//! A [`Fields`] keeps its pairs in their HTTP/1 wire form (`Name: value\r\n`
//! lines) beside an index of where each name and value sits. The index is
//! the structure every reader uses; the text is the HTTP/1 serialisation,
//! cached: the HTTP/1 writer copies it whole (a file's or a stored
//! response's fields are one `memcpy`, the fast path of static files and
//! cache hits), while another protocol (HTTP/2) walks the pairs.
//!
//! Values are never checked for CR or LF here in release builds: callers
//! push names and values they built or that a protocol parser validated
//! (debug builds assert it).

use smallvec::SmallVec;

/// Where one field sits in [`Fields::wire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    name_end: u32,
    value_start: u32,
    value_end: u32,
}

/// A list of header fields, in order, names as given (compared without
/// case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    wire: Vec<u8>,
    /// Inline for the few fields most responses add themselves (Age and
    /// Cache-Status on a hit, Vary on a compressed one).
    spans: SmallVec<[Span; 4]>,
}

impl Fields {
    /// No fields.
    pub fn new() -> Fields {
        Fields::default()
    }

    /// No fields, with room for `bytes` of them in wire form.
    pub fn with_capacity(bytes: usize) -> Fields {
        Fields {
            wire: Vec::with_capacity(bytes),
            spans: SmallVec::new(),
        }
    }

    /// Appends a field.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        debug_assert!(
            !name.is_empty() && !name.iter().chain(value).any(|&b| b == b'\r' || b == b'\n'),
            "header injection"
        );
        if self.wire.capacity() == 0 {
            // One allocation for the usual few fields instead of growing
            // 8 → 16 → … → 128 bytes.
            self.wire.reserve(256);
        }
        let start = self.wire.len();
        self.wire.extend_from_slice(name);
        let name_end = self.wire.len();
        self.wire.extend_from_slice(b": ");
        let value_start = self.wire.len();
        self.wire.extend_from_slice(value);
        let value_end = self.wire.len();
        self.wire.extend_from_slice(b"\r\n");
        self.spans.push(Span {
            start: offset(start),
            name_end: offset(name_end),
            value_start: offset(value_start),
            value_end: offset(value_end),
        });
    }

    /// Appends every field of `other`.
    pub fn extend(&mut self, other: &Fields) {
        for (name, value) in other.iter() {
            self.push(name, value);
        }
    }

    /// The fields, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.spans.iter().map(|s| {
            (
                &self.wire[s.start as usize..s.name_end as usize],
                &self.wire[s.value_start as usize..s.value_end as usize],
            )
        })
    }

    /// The first value of field `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every value of field `name`, in order.
    pub fn get_all<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Whether field `name` is present.
    pub fn contains(&self, name: &[u8]) -> bool {
        self.get(name).is_some()
    }

    /// Keeps only the fields `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        if self.iter().all(|(n, v)| keep(n, v)) {
            return;
        }
        let mut kept = Fields::with_capacity(self.wire.len());
        for (name, value) in self.iter() {
            if keep(name, value) {
                kept.push(name, value);
            }
        }
        *self = kept;
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Fields from a block of HTTP/1 header lines (`Name: value\r\n`),
    /// values trimmed: for blocks written as text (tests, constants).
    pub fn parse_wire(block: &[u8]) -> Fields {
        crate::field::header_lines(block).collect()
    }

    /// The HTTP/1 serialisation: `Name: value\r\n` per field.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }
}

impl<'a> FromIterator<(&'a [u8], &'a [u8])> for Fields {
    fn from_iter<I: IntoIterator<Item = (&'a [u8], &'a [u8])>>(pairs: I) -> Fields {
        let mut f = Fields::new();
        for (name, value) in pairs {
            f.push(name, value);
        }
        f
    }
}

/// Offsets fit in 32 bits: heads are limited to a few tens of KiB.
fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("a head under 4 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_lookups_and_the_wire_form() {
        let mut f = Fields::new();
        f.push(b"Content-Type", b"text/plain");
        f.push(b"Vary", b"Accept-Encoding");
        f.push(b"vary", b"Cookie");
        assert_eq!(f.len(), 3);
        assert_eq!(f.get(b"content-type"), Some(&b"text/plain"[..]));
        assert_eq!(
            f.get_all(b"VARY").collect::<Vec<_>>(),
            [&b"Accept-Encoding"[..], b"Cookie"]
        );
        assert!(!f.contains(b"etag"));
        assert_eq!(
            f.wire(),
            b"Content-Type: text/plain\r\nVary: Accept-Encoding\r\nvary: Cookie\r\n"
        );
        f.retain(|n, _| !n.eq_ignore_ascii_case(b"vary"));
        assert_eq!(f.wire(), b"Content-Type: text/plain\r\n");
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [(&b"Content-Type"[..], &b"text/plain"[..])]
        );
        let copy: Fields = f.iter().collect();
        assert_eq!(copy, f);
        assert!(Fields::new().is_empty());
    }
}
