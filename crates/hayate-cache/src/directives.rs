//! `Cache-Control` directives (RFC 9111 §5.2), of responses and of
//! requests.
//!
//! The parser never fails: unknown directives are ignored, a directive that
//! repeats keeps its first value (§4.2.1), and an invalid delta-seconds
//! counts as 0, which makes the response stale rather than fresh (§1.2.2).
//! Values are capped at 2^31 seconds, as §1.2.2 allows.

use hayate_core::field::trim_ows as trim;

/// The largest delta-seconds value kept (§1.2.2).
const MAX_DELTA: u64 = 1 << 31;

/// Directives of a response (§5.2.2) that a shared cache acts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseDirectives {
    /// `no-store`: never stored.
    pub no_store: bool,
    /// `no-cache` (qualified or not; a qualified one is treated as
    /// unqualified, which §5.2.2.4 allows): stored, validated before each use.
    pub no_cache: bool,
    /// `private` (qualified or not): never stored by a shared cache.
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`: never served stale.
    pub must_revalidate: bool,
    /// `proxy-revalidate`: never served stale by a shared cache.
    pub proxy_revalidate: bool,
    /// `no-transform`.
    pub no_transform: bool,
    /// `must-understand` (§5.2.2.3): stored only when the status code's
    /// caching rules are understood, and then `no-store` is ignored.
    pub must_understand: bool,
    /// `max-age`.
    pub max_age: Option<u64>,
    /// `s-maxage`, which also implies proxy-revalidate (§5.2.2.10).
    pub s_maxage: Option<u64>,
    /// `stale-while-revalidate` (RFC 5861).
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error` (RFC 5861).
    pub stale_if_error: Option<u64>,
}

impl ResponseDirectives {
    /// Parses every Cache-Control field value of a response.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> ResponseDirectives {
        let mut d = ResponseDirectives::default();
        for value in values {
            for (name, arg) in directives(value) {
                match name.to_ascii_lowercase().as_slice() {
                    b"no-store" => d.no_store = true,
                    b"no-cache" => d.no_cache = true,
                    b"private" => d.private = true,
                    b"public" => d.public = true,
                    b"must-revalidate" => d.must_revalidate = true,
                    b"proxy-revalidate" => d.proxy_revalidate = true,
                    b"no-transform" => d.no_transform = true,
                    b"must-understand" => d.must_understand = true,
                    b"max-age" => first(&mut d.max_age, arg),
                    b"s-maxage" => first(&mut d.s_maxage, arg),
                    b"stale-while-revalidate" => first(&mut d.stale_while_revalidate, arg),
                    b"stale-if-error" => first(&mut d.stale_if_error, arg),
                    _ => {}
                }
            }
        }
        d
    }

    /// Whether a stale copy may never be served (§4.2.4, §5.2.2.2,
    /// §5.2.2.8, §5.2.2.10).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }
}

/// Directives of a request (§5.2.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestDirectives {
    /// `no-cache` (or `Pragma: no-cache` without Cache-Control): validate.
    pub no_cache: bool,
    /// `no-store`: do not store the response to this request.
    pub no_store: bool,
    /// `max-age`: the client accepts no copy older than this.
    pub max_age: Option<u64>,
    /// `max-stale`: `Some(None)` accepts any staleness, `Some(Some(n))` up
    /// to n seconds.
    pub max_stale: Option<Option<u64>>,
    /// `min-fresh`: the copy must stay fresh this much longer.
    pub min_fresh: Option<u64>,
    /// `only-if-cached`: answer 504 rather than contact the origin.
    pub only_if_cached: bool,
}

impl RequestDirectives {
    /// Parses a request's Cache-Control values; `pragma_no_cache` is
    /// `Pragma: no-cache`, honoured only without Cache-Control (§5.4).
    pub fn parse<'a>(
        values: impl IntoIterator<Item = &'a [u8]>,
        pragma_no_cache: bool,
    ) -> RequestDirectives {
        let mut d = RequestDirectives::default();
        let mut any = false;
        for value in values {
            any = true;
            for (name, arg) in directives(value) {
                match name.to_ascii_lowercase().as_slice() {
                    b"no-cache" => d.no_cache = true,
                    b"no-store" => d.no_store = true,
                    b"only-if-cached" => d.only_if_cached = true,
                    b"max-age" => first(&mut d.max_age, arg),
                    b"min-fresh" => first(&mut d.min_fresh, arg),
                    b"max-stale" => {
                        d.max_stale.get_or_insert_with(|| arg.map(delta));
                    }
                    _ => {}
                }
            }
        }
        if !any && pragma_no_cache {
            d.no_cache = true;
        }
        d
    }
}

/// Keeps the first occurrence of a delta-seconds directive.
fn first(slot: &mut Option<u64>, arg: Option<&[u8]>) {
    if slot.is_none() {
        *slot = Some(arg.map_or(0, delta));
    }
}

/// delta-seconds; anything else counts as 0 (stale, never fresher).
fn delta(arg: &[u8]) -> u64 {
    delta_seconds(arg).unwrap_or(0)
}

/// A delta-seconds value (§1.2.2), capped at 2^31; `None` when `arg` is not
/// one (empty, a sign, anything but digits).
pub fn delta_seconds(arg: &[u8]) -> Option<u64> {
    if arg.is_empty() || !arg.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        arg.iter()
            .try_fold(0u64, |n, &d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
            .map_or(MAX_DELTA, |n| n.min(MAX_DELTA)),
    )
}

/// Splits a field value into `(name, argument)` pairs; commas inside a
/// quoted argument do not split, and the quotes are removed.
fn directives(value: &[u8]) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
    hayate_core::field::split_list(value).map(|item| match item.iter().position(|&b| b == b'=') {
        None => (item, None),
        Some(eq) => {
            let arg = trim(&item[eq + 1..]);
            let arg = arg
                .strip_prefix(b"\"")
                .and_then(|a| a.strip_suffix(b"\""))
                .unwrap_or(arg);
            (trim(&item[..eq]), Some(arg))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(v: &str) -> ResponseDirectives {
        ResponseDirectives::parse([v.as_bytes()])
    }

    fn req(v: &str) -> RequestDirectives {
        RequestDirectives::parse([v.as_bytes()], false)
    }

    #[test]
    fn response_directives() {
        let d = resp("public, max-age=60, s-maxage=\"120\", stale-while-revalidate=5");
        assert!(d.public && !d.private && !d.no_store);
        assert_eq!(
            (d.max_age, d.s_maxage, d.stale_while_revalidate),
            (Some(60), Some(120), Some(5))
        );
        assert!(d.forbids_stale(), "s-maxage implies proxy-revalidate");

        let d = resp("Private=\"Set-Cookie, X-A\", NO-STORE,no-cache=\"x\"");
        assert!(d.private && d.no_store && d.no_cache);

        // First of duplicates wins; invalid values count as 0; huge values cap.
        assert_eq!(resp("max-age=10, max-age=99").max_age, Some(10));
        assert_eq!(resp("max-age=ten").max_age, Some(0));
        assert_eq!(resp("max-age=").max_age, Some(0));
        assert_eq!(resp("max-age").max_age, Some(0));
        assert_eq!(resp("max-age=-5").max_age, Some(0));
        assert_eq!(
            resp("max-age=99999999999999999999999").max_age,
            Some(MAX_DELTA)
        );
        assert!(resp(" , ,must-revalidate,, ").must_revalidate);
        assert!(resp("x-unknown=\"a,b\", no-transform").no_transform);
        assert_eq!(resp(""), ResponseDirectives::default());
    }

    #[test]
    fn request_directives() {
        let d = req("max-age=0, min-fresh=5, only-if-cached");
        assert_eq!((d.max_age, d.min_fresh), (Some(0), Some(5)));
        assert!(d.only_if_cached && !d.no_cache);
        assert_eq!(req("max-stale").max_stale, Some(None));
        assert_eq!(req("max-stale=30").max_stale, Some(Some(30)));
        assert!(req("no-cache").no_cache && req("no-store").no_store);

        // Pragma counts only without Cache-Control.
        assert!(RequestDirectives::parse([], true).no_cache);
        assert!(!RequestDirectives::parse([&b"max-age=5"[..]], true).no_cache);
    }

    #[test]
    fn never_panics_on_bytes() {
        for v in [
            &b"\"\"\"=,=,"[..],
            b"=",
            b"max-age=\"",
            b"\xff\x00=1",
            b",,,",
        ] {
            let _ = ResponseDirectives::parse([v]);
            let _ = RequestDirectives::parse([v], true);
        }
    }
}
