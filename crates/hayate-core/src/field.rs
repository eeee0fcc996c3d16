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

/// The value of a hexadecimal digit.
pub fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{hex_digit, split_list, trim_ows};

    #[test]
    fn lists_split_outside_quotes() {
        let items: Vec<&[u8]> = split_list(b" a, \"b,c\" ,, W/\"d\",").collect();
        assert_eq!(items, [&b"a"[..], b"\"b,c\"", b"W/\"d\""]);
        assert_eq!(split_list(b" , ").count(), 0);
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
