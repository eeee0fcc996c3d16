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

#[cfg(test)]
mod tests {
    use super::trim_ows;

    #[test]
    fn trims_spaces_and_tabs_only() {
        assert_eq!(trim_ows(b" \ta b\t "), b"a b");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"\r\nx"), b"\r\nx");
    }
}
