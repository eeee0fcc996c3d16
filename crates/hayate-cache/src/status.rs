//! What the cache did with a request: the `Cache-Status` response header
//! (RFC 9211) and the word in the access log.

use std::fmt::Write;

use smallvec::SmallVec;

/// The cache's part in one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Served fresh from the cache.
    Hit,
    /// Served stale from the cache (stale-while-revalidate, stale-if-error,
    /// max-stale).
    Stale,
    /// Fetched from the origin (stored or not).
    Miss,
    /// The stored response was confirmed by the origin (304) and served.
    Revalidated,
    /// The cache was not consulted (method, credentials, range,
    /// hit-for-miss, a body too large).
    Bypass,
}

impl CacheOutcome {
    /// The access log word.
    pub fn as_str(self) -> &'static str {
        self.name()
    }

    /// The same name, behind a thin pointer (`Response::cache_status`).
    pub fn name(self) -> &'static &'static str {
        match self {
            CacheOutcome::Hit => &"HIT",
            CacheOutcome::Stale => &"STALE",
            CacheOutcome::Miss => &"MISS",
            CacheOutcome::Revalidated => &"REVALIDATED",
            CacheOutcome::Bypass => &"BYPASS",
        }
    }
}

/// A `Cache-Status` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStatus {
    /// What happened.
    pub outcome: CacheOutcome,
    /// The RFC 9211 `fwd` reason when the origin was contacted.
    pub fwd: Option<&'static str>,
    /// The origin's status when it was contacted.
    pub fwd_status: Option<u16>,
    /// Freshness left in seconds (negative when stale).
    pub ttl: Option<i64>,
    /// The response was stored.
    pub stored: bool,
    /// The request waited for another's fetch.
    pub collapsed: bool,
    /// Why, in a word (`detail`).
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    /// A status with only the outcome set.
    pub fn new(outcome: CacheOutcome) -> CacheStatus {
        CacheStatus {
            outcome,
            fwd: None,
            fwd_status: None,
            ttl: None,
            stored: false,
            collapsed: false,
            detail: None,
        }
    }

    /// A bypass with its reason.
    pub fn bypass(fwd: &'static str, detail: &'static str) -> CacheStatus {
        CacheStatus {
            fwd: Some(fwd),
            detail: Some(detail),
            ..CacheStatus::new(CacheOutcome::Bypass)
        }
    }

    /// The header value, in a buffer on the stack (the header of every
    /// response of a caching route).
    pub fn value_bytes(&self) -> SmallVec<[u8; 128]> {
        struct Out(SmallVec<[u8; 128]>);
        impl Write for Out {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.extend_from_slice(s.as_bytes());
                Ok(())
            }
        }
        let mut out = Out(SmallVec::new());
        self.write_value(&mut out);
        out.0
    }

    fn write_value(&self, v: &mut impl Write) {
        let _ = v.write_str("hayate");
        if matches!(self.outcome, CacheOutcome::Hit | CacheOutcome::Stale) {
            let _ = v.write_str("; hit");
        }
        if let Some(fwd) = self.fwd {
            let _ = write!(v, "; fwd={fwd}");
        }
        if let Some(s) = self.fwd_status {
            let _ = write!(v, "; fwd-status={s}");
        }
        if let Some(t) = self.ttl {
            let _ = write!(v, "; ttl={t}");
        }
        if self.stored {
            let _ = v.write_str("; stored");
        }
        if self.collapsed {
            let _ = v.write_str("; collapsed");
        }
        if let Some(d) = self.detail {
            let _ = write!(v, "; detail={d}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &CacheStatus) -> String {
        String::from_utf8(s.value_bytes().to_vec()).expect("ascii")
    }

    #[test]
    fn the_longest_value_fits_and_reads_right() {
        let longest = CacheStatus {
            fwd: Some("uri-miss"),
            fwd_status: Some(200),
            ttl: Some(31_536_000),
            stored: true,
            collapsed: true,
            detail: Some("stale-while-revalidate"),
            ..CacheStatus::new(CacheOutcome::Stale)
        };
        assert_eq!(
            text(&longest),
            "hayate; hit; fwd=uri-miss; fwd-status=200; ttl=31536000; stored; collapsed; \
             detail=stale-while-revalidate"
        );
        assert_eq!(text(&CacheStatus::new(CacheOutcome::Miss)), "hayate");
    }

    #[test]
    fn header_values() {
        let hit = CacheStatus {
            ttl: Some(4),
            ..CacheStatus::new(CacheOutcome::Hit)
        };
        assert_eq!(text(&hit), "hayate; hit; ttl=4");
        let miss = CacheStatus {
            fwd: Some("uri-miss"),
            fwd_status: Some(200),
            stored: true,
            collapsed: true,
            ..CacheStatus::new(CacheOutcome::Miss)
        };
        assert_eq!(
            text(&miss),
            "hayate; fwd=uri-miss; fwd-status=200; stored; collapsed"
        );
        assert_eq!(
            text(&CacheStatus::bypass("request", "cookie")),
            "hayate; fwd=request; detail=cookie"
        );
        assert_eq!(CacheOutcome::Revalidated.as_str(), "REVALIDATED");
    }
}
