//! Preconditions (RFC 9110 §13.2.2), evaluated in the order the RFC gives:
//! If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since; and
//! If-Range (§13.1.5), which decides whether a Range is honoured.

use hayate_core::field::trim_ows as trim;
use hayate_core::field::{etag_list_matches, etag_matches, Comparison};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The validator headers of a request (raw field values).
#[derive(Debug, Default, Clone, Copy)]
pub struct Preconditions<'a> {
    /// `If-Match`
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Modified-Since`
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`
    pub if_unmodified_since: Option<&'a [u8]>,
    /// `If-Range`
    pub if_range: Option<&'a [u8]>,
}

/// The outcome of the preconditions for a GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Serve the representation.
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// The current representation's validators.
#[derive(Debug, Clone, Copy)]
pub struct Validators<'a> {
    /// The strong entity tag, with quotes.
    pub etag: &'a str,
    /// Modification time, whole seconds.
    pub last_modified: SystemTime,
}

impl Preconditions<'_> {
    /// Evaluates the preconditions for a GET or HEAD.
    pub fn evaluate(&self, v: &Validators<'_>) -> Verdict {
        // 1. If-Match (strong comparison), else 2. If-Unmodified-Since.
        if let Some(im) = self.if_match {
            if !etag_list_matches(im, v.etag.as_bytes(), Comparison::Strong) {
                return Verdict::Failed;
            }
        } else if let Some(date) = self.if_unmodified_since.and_then(hayate_core::date::parse) {
            if seconds(v.last_modified) > seconds(date) {
                return Verdict::Failed;
            }
        }
        // 3. If-None-Match (weak comparison), else 4. If-Modified-Since.
        if let Some(inm) = self.if_none_match {
            if etag_list_matches(inm, v.etag.as_bytes(), Comparison::Weak) {
                return Verdict::NotModified;
            }
        } else if let Some(date) = self.if_modified_since.and_then(hayate_core::date::parse) {
            if seconds(v.last_modified) <= seconds(date) {
                return Verdict::NotModified;
            }
        }
        Verdict::Proceed
    }

    /// Whether a Range header may be honoured: true without If-Range, or when
    /// If-Range matches (strong comparison for tags; exact date otherwise).
    pub fn range_allowed(&self, v: &Validators<'_>) -> bool {
        let Some(ir) = self.if_range else { return true };
        let ir = trim(ir);
        if ir.first() == Some(&b'"') || ir.starts_with(b"W/") {
            return etag_matches(ir, v.etag.as_bytes(), Comparison::Strong);
        }
        hayate_core::date::parse(ir).is_some_and(|d| seconds(d) == seconds(v.last_modified))
    }
}

fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

#[cfg(test)]
mod tests {
    use super::Verdict::*;
    use super::*;

    const TAG: &str = "\"abc\"";
    const LM: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
    const AFTER: &str = "Sun, 06 Nov 1994 08:49:38 GMT";

    fn v() -> Validators<'static> {
        Validators {
            etag: TAG,
            last_modified: httpdate::parse_http_date(LM).expect("date"),
        }
    }

    fn eval(headers: &[(&str, &str)]) -> Verdict {
        let mut p = Preconditions::default();
        for (name, value) in headers {
            let value = Some(value.as_bytes());
            match *name {
                "if-match" => p.if_match = value,
                "if-none-match" => p.if_none_match = value,
                "if-modified-since" => p.if_modified_since = value,
                "if-unmodified-since" => p.if_unmodified_since = value,
                _ => unreachable!(),
            }
        }
        p.evaluate(&v())
    }

    #[test]
    fn table() {
        let cases: &[(&[(&str, &str)], Verdict)] = &[
            (&[], Proceed),
            (&[("if-match", "\"abc\"")], Proceed),
            (&[("if-match", "\"x\", \"abc\"")], Proceed),
            (&[("if-match", "*")], Proceed),
            (&[("if-match", "\"x\"")], Failed),
            (&[("if-match", "W/\"abc\"")], Failed),
            (&[("if-unmodified-since", LM)], Proceed),
            (&[("if-unmodified-since", BEFORE)], Failed),
            (&[("if-unmodified-since", "garbage")], Proceed),
            // If-Match takes precedence over If-Unmodified-Since.
            (
                &[("if-match", "\"abc\""), ("if-unmodified-since", BEFORE)],
                Proceed,
            ),
            (&[("if-none-match", "\"abc\"")], NotModified),
            (&[("if-none-match", "W/\"abc\"")], NotModified),
            (&[("if-none-match", "\"x\", W/\"abc\"")], NotModified),
            (&[("if-none-match", "*")], NotModified),
            (&[("if-none-match", "\"x\"")], Proceed),
            (&[("if-modified-since", LM)], NotModified),
            (&[("if-modified-since", AFTER)], NotModified),
            (&[("if-modified-since", BEFORE)], Proceed),
            (
                &[("if-modified-since", "Sunday, 06-Nov-94 08:49:37 GMT")],
                NotModified,
            ),
            (
                &[("if-modified-since", "Sun Nov  6 08:49:37 1994")],
                NotModified,
            ),
            // If-Modified-Since is ignored when If-None-Match is present.
            (
                &[("if-none-match", "\"x\""), ("if-modified-since", AFTER)],
                Proceed,
            ),
            // 412 beats 304.
            (
                &[("if-match", "\"x\""), ("if-none-match", "\"abc\"")],
                Failed,
            ),
            (&[("if-none-match", "\"a,b\", \"abc\"")], NotModified),
        ];
        for (headers, want) in cases {
            assert_eq!(eval(headers), *want, "{headers:?}");
        }
    }

    #[test]
    fn if_range() {
        let check = |ir: &str| {
            Preconditions {
                if_range: Some(ir.as_bytes()),
                ..Default::default()
            }
            .range_allowed(&v())
        };
        assert!(Preconditions::default().range_allowed(&v()));
        assert!(check("\"abc\""));
        assert!(!check("W/\"abc\""));
        assert!(!check("\"old\""));
        assert!(check(LM));
        assert!(!check(BEFORE));
        assert!(!check("nonsense"));
    }
}
