//! Small helpers for header field values, shared by every parser.

/// Strips optional whitespace (RFC 9110 OWS: spaces and tabs) from both ends.
pub fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

/// Whether `b` may appear in a field name (RFC 9110 §5.6.2 `tchar`).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether the field name `name` is `lower` (lower-case letters and `-`)
/// in any case, as `eq_ignore_ascii_case` tells, faster: on the hot paths
/// every field's name is compared with a few known ones. Setting bit 5 of
/// a byte lowers a letter and keeps `-`; only CR, never in a field, would
/// become `-` too. The bytes are folded without an early exit, so the
/// compiler compares them a vector at a time.
#[inline]
pub fn name_is(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(lower.iter().all(|b| b.is_ascii_lowercase() || *b == b'-'));
    name.len() == lower.len()
        && name
            .iter()
            .zip(lower)
            .fold(0, |diff, (a, b)| diff | ((a | 0x20) ^ b))
            == 0
}

/// Whether the list-valued field `value` holds `lower` (a token in lower
/// case: letters and `-`), in any case. A value of one member, as
/// `Connection: keep-alive` is, is compared whole without splitting it.
pub fn list_contains(value: &[u8], lower: &[u8]) -> bool {
    name_is(trim_ows(value), lower)
        || (value.contains(&b',') && split_list(value).any(|t| name_is(t, lower)))
}

/// The `(name, value)` pairs of a preformatted block of header lines
/// (`Name: value\r\n`, as responses carry them), values trimmed.
pub fn header_lines(block: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    block.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], trim_ows(&line[colon + 1..])))
    })
}

/// Splits a list-valued field (RFC 9110 §5.6.1) on commas outside quoted
/// strings, trimming OWS and skipping empty members: entity-tag lists,
/// Cache-Control directives.
pub fn split_list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = value;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let mut in_quotes = false;
        let mut end = rest.len();
        for (i, &b) in rest.iter().enumerate() {
            match b {
                b'"' => in_quotes = !in_quotes,
                b',' if !in_quotes => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let item = trim_ows(&rest[..end]);
        rest = rest.get(end + 1..).unwrap_or_default();
        if !item.is_empty() {
            return Some(item);
        }
    })
}

/// A Content-Length value (or one member of its list): ASCII digits only,
/// at most 19 of them and no overflow. `str::parse` would also take a
/// leading `+`, which another parser on the path may read differently.
pub fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// How two entity tags are compared (RFC 9110 §8.8.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// Both strong and equal (If-Match, If-Range).
    Strong,
    /// Equal once `W/` is ignored on either side (If-None-Match).
    Weak,
}

/// Whether entity tag `a` matches `b` (each with quotes, maybe `W/`).
pub fn etag_matches(a: &[u8], b: &[u8], cmp: Comparison) -> bool {
    fn split(t: &[u8]) -> (bool, &[u8]) {
        match t.strip_prefix(b"W/") {
            Some(rest) => (true, rest),
            None => (false, t),
        }
    }
    let ((weak_a, a), (weak_b, b)) = (split(trim_ows(a)), split(trim_ows(b)));
    a == b && (cmp == Comparison::Weak || !(weak_a || weak_b))
}

/// Whether an If-Match / If-None-Match value (`*` or a list of tags)
/// matches `etag`.
pub fn etag_list_matches(list: &[u8], etag: &[u8], cmp: Comparison) -> bool {
    trim_ows(list) == b"*" || split_list(list).any(|t| etag_matches(t, etag, cmp))
}

/// The value of a hexadecimal digit.
pub fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The host of a Host value, without its port (`[::1]:80` gives `[::1]`).
pub fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return host
            .iter()
            .position(|&b| b == b']')
            .map_or(host, |e| &host[..=e]);
    }
    host.iter()
        .rposition(|&b| b == b':')
        .map_or(host, |c| &host[..c])
}

#[cfg(test)]
mod tests {
    use super::{
        etag_list_matches, hex_digit, list_contains, name_is, parse_length, split_list, trim_ows,
        Comparison,
    };

    #[test]
    fn list_members() {
        assert!(list_contains(b"Keep-Alive", b"keep-alive"));
        assert!(list_contains(b" close ", b"close"));
        assert!(list_contains(b"x, CLOSE", b"close"));
        assert!(list_contains(b"close,", b"close"));
        assert!(!list_contains(b"closed", b"close"));
        assert!(!list_contains(b"\"close\"", b"close"));
        assert!(!list_contains(b"\"a,close\"", b"close"));
        assert!(!list_contains(b"", b"close"));
    }

    #[test]
    fn name_is_agrees_with_eq_ignore_ascii_case() {
        let known = [
            "content-length",
            "connection",
            "te",
            "x-forwarded-for",
            "date",
        ];
        // Every byte a field may hold (no CR, LF or NUL), in every place
        // of every known name, and the names in any case.
        for k in known {
            assert!(name_is(k.to_ascii_uppercase().as_bytes(), k.as_bytes()));
            for i in 0..k.len() {
                for b in (1..=255u8).filter(|b| !matches!(b, b'\r' | b'\n')) {
                    let mut name = k.as_bytes().to_vec();
                    name[i] = b;
                    assert_eq!(
                        name_is(&name, k.as_bytes()),
                        name.eq_ignore_ascii_case(k.as_bytes()),
                        "{k} with byte {b:#x} at {i}"
                    );
                }
            }
            assert!(!name_is(&k.as_bytes()[1..], k.as_bytes()));
            assert!(!name_is(format!("{k}-").as_bytes(), k.as_bytes()));
        }
    }

    #[test]
    fn entity_tags() {
        use Comparison::{Strong, Weak};
        assert!(etag_list_matches(b"\"a\", W/\"b\"", b"\"b\"", Weak));
        assert!(!etag_list_matches(b"\"a\", W/\"b\"", b"\"b\"", Strong));
        assert!(etag_list_matches(b"\"b\"", b"W/\"b\"", Weak));
        assert!(!etag_list_matches(b"\"b\"", b"W/\"b\"", Strong));
        assert!(etag_list_matches(b" * ", b"\"x\"", Strong));
        assert!(!etag_list_matches(b"\"c\"", b"\"b\"", Weak));
    }

    #[test]
    fn lists_split_outside_quotes() {
        let items: Vec<&[u8]> = split_list(b" a, \"b,c\" ,, W/\"d\",").collect();
        assert_eq!(items, [&b"a"[..], b"\"b,c\"", b"W/\"d\""]);
        assert_eq!(split_list(b" , ").count(), 0);
    }

    #[test]
    fn lengths_are_plain_digits() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"0042"), Some(42));
        assert_eq!(
            parse_length(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"+5",
            b"-5",
            b" 5",
            b"5 ",
            b"0x5",
            b"5,5",
            b"99999999999999999999",
        ] {
            assert_eq!(
                parse_length(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn hex_digits() {
        assert_eq!(
            (
                hex_digit(b'0'),
                hex_digit(b'a'),
                hex_digit(b'F'),
                hex_digit(b'g')
            ),
            (Some(0), Some(10), Some(15), None)
        );
    }

    #[test]
    fn trims_spaces_and_tabs_only() {
        assert_eq!(trim_ows(b" \ta b\t "), b"a b");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"\r\nx"), b"\r\nx");
    }
}
