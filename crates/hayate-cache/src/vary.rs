//! The secondary cache key (RFC 9111 §4.1): the request's values of the
//! fields a response's Vary names, normalized so that requests that mean
//! the same thing share a variant.
//!
//! Normalization: values of repeated fields are joined, whitespace around
//! commas dropped, case folded; Accept-Encoding is reduced to the set of
//! codings hayate can serve that the client accepts (q > 0), so
//! `gzip, deflate, br` and `br,gzip` share one variant.

use hayate_core::field::trim_ows as trim;
use hayate_core::negotiate::AcceptEncoding;
use hayate_core::Coding;
use smallvec::SmallVec;

/// A request's values of one field, as the lookup closures give them
/// (inline: rarely more than one or two).
pub type FieldValues<'h> = SmallVec<[&'h [u8]; 2]>;

/// A normalized value being built (inline: `br,zstd,gzip` and most
/// language or encoding lists fit).
type Scratch = SmallVec<[u8; 32]>;

/// A field's normalized value; `None` when the request lacked it.
type Value = Option<Box<[u8]>>;

/// The Vary values a stored response was chosen for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VaryKey(Box<[(Box<[u8]>, Value)]>);

impl VaryKey {
    /// The key of a request for a response that varies on `names`
    /// (lowercase). `field(name)` gives the request's values of a field.
    pub fn new<'h, V: AsRef<[&'h [u8]]>>(names: &[Vec<u8>], field: impl Fn(&[u8]) -> V) -> VaryKey {
        VaryKey(
            names
                .iter()
                .map(|n| {
                    let mut out = Scratch::new();
                    let value =
                        normalize(n, field(n).as_ref(), &mut out).then(|| out.as_slice().into());
                    (n.clone().into_boxed_slice(), value)
                })
                .collect(),
        )
    }

    /// Whether a request with these fields selects this variant (no
    /// allocation on this path of every cache hit).
    pub fn matches<'h, V: AsRef<[&'h [u8]]>>(&self, field: &impl Fn(&[u8]) -> V) -> bool {
        self.0.iter().all(|(name, value)| {
            let mut out = Scratch::new();
            let present = normalize(name, field(name).as_ref(), &mut out);
            match value {
                Some(v) => present && **v == *out,
                None => !present,
            }
        })
    }

    /// The field names, lowercase, in the order the response named them.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(|(n, _)| &n[..])
    }

    /// Each field name with the request's normalized value (`None`: the
    /// request lacked the field), for a second tier that stores variants.
    pub fn parts(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.0.iter().map(|(n, v)| (&n[..], v.as_deref()))
    }

    /// A key from [`VaryKey::parts`] read back (values already normalized).
    pub fn from_parts(parts: Vec<(Box<[u8]>, Value)>) -> VaryKey {
        VaryKey(parts.into_boxed_slice())
    }

    /// Bytes held, for the store's budget.
    pub fn weight(&self) -> usize {
        self.0
            .iter()
            .map(|(n, v)| n.len() + v.as_ref().map_or(0, |v| v.len()) + 32)
            .sum()
    }
}

/// Writes the normalized value of a field into `out`; false when the
/// request lacked the field.
fn normalize(name: &[u8], values: &[&[u8]], out: &mut Scratch) -> bool {
    if values.is_empty() {
        return false;
    }
    if name == b"accept-encoding" {
        accepted_codings(values, out);
        return true;
    }
    for member in values
        .iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(trim)
        .filter(|m| !m.is_empty())
    {
        if !out.is_empty() {
            out.push(b',');
        }
        out.extend(member.iter().map(u8::to_ascii_lowercase));
    }
    true
}

/// The codings among br, zstd and gzip that the client accepts (q > 0, `*`
/// included, as compression negotiates them), in that order,
/// comma-separated.
fn accepted_codings(values: &[&[u8]], out: &mut Scratch) {
    let ae = AcceptEncoding::parse(values.iter().copied());
    for c in Coding::COMPRESSED.into_iter().filter(|c| ae.accepts(*c)) {
        if !out.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(c.as_str().as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(names: &[&str], fields: &[(&str, &'static str)]) -> VaryKey {
        let names: Vec<Vec<u8>> = names.iter().map(|n| n.as_bytes().to_vec()).collect();
        VaryKey::new(&names, |n| {
            fields
                .iter()
                .filter(|(f, _)| f.as_bytes().eq_ignore_ascii_case(n))
                .map(|(_, v)| v.as_bytes())
                .collect::<Vec<_>>()
        })
    }

    #[test]
    fn accept_encoding_is_normalized() {
        let ae = |v| key(&["accept-encoding"], &[("Accept-Encoding", v)]);
        assert_eq!(ae("gzip, deflate, br"), ae("br,gzip"));
        assert_eq!(ae("gzip, br;q=0"), ae("gzip"));
        assert_ne!(ae("gzip"), ae("br"));
        assert_ne!(ae("gzip"), ae("identity"));
        assert_eq!(ae("identity"), ae("deflate"));
        let codings = |v: &'static [u8]| {
            let mut out = Scratch::new();
            accepted_codings(&[v], &mut out);
            out.to_vec()
        };
        assert_eq!(codings(b"gzip, zstd;q=0.5, br"), b"br,zstd,gzip");
        assert_eq!(codings(b"zstd, gzip"), b"zstd,gzip");
        assert_eq!(codings(b"gzip;q=0.000"), b"");
        // `*` and any case: what compression would serve them
        assert_eq!(codings(b"*"), b"br,zstd,gzip");
        assert_eq!(codings(b"X-GZIP"), b"gzip");
        assert_eq!(codings(b"gzip;q=0, gzip"), b"gzip");
    }

    #[test]
    fn absent_differs_from_empty_and_values_fold() {
        let names = ["accept-language"];
        assert_ne!(key(&names, &[]), key(&names, &[("Accept-Language", "")]));
        assert_eq!(
            key(&names, &[("Accept-Language", "EN, fr")]),
            key(
                &names,
                &[("accept-language", "en"), ("accept-language", "fr")]
            )
        );
        let k = key(&names, &[("Accept-Language", "en")]);
        assert!(k.matches(&|_: &[u8]| vec![&b" en "[..]]));
        assert!(!k.matches(&|_: &[u8]| vec![]));
        assert!(VaryKey::default().matches(&|_: &[u8]| vec![]));
    }
}
