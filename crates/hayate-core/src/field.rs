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
    use super::{hex_digit, trim_ows};

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
