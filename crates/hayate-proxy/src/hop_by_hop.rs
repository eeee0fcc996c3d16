//! Which fields belong to one connection (hop-by-hop) and are never
//! forwarded, in either direction: one table, and the names a message's
//! Connection fields add to it.

use hayate_core::field::{name_is, split_list};
use smallvec::SmallVec;

/// Hop-by-hop fields (RFC 9110 §7.6.1: Connection, Keep-Alive,
/// Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade), never
/// forwarded in either direction, plus the framing and expectation fields
/// hayate sets itself (Content-Length, Expect).
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    // The names, grouped by length: most fields are told apart by their
    // length alone, and the rest compared with one or two names, not nine
    // (every field of every proxied request and response comes here; the
    // scan of all nine cost 380 of a proxied request's 20,800
    // instructions, bench/instructions/run).
    let names: &[&[u8]] = match name.len() {
        2 => &[b"te"],
        6 => &[b"expect"],
        7 => &[b"trailer", b"upgrade"],
        10 => &[b"connection", b"keep-alive"],
        14 => &[b"content-length"],
        16 => &[b"proxy-connection"],
        17 => &[b"transfer-encoding"],
        _ => return false,
    };
    names.iter().any(|n| name_is(name, n))
}

/// Names listed in Connection fields, which are hop-by-hop too (inline:
/// rarely more than `keep-alive` or `close`).
pub(crate) fn connection_listed<'h>(
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> SmallVec<[&'h [u8]; 4]> {
    headers
        .filter(|(n, _)| name_is(n, b"connection"))
        .flat_map(|(_, v)| split_list(v))
        .collect()
}

/// The protocol a client asks to switch to (`Upgrade` with `Connection:
/// upgrade`), e.g. `websocket`; `listed` is what its Connection fields name.
///
/// Never `h2c`: that asks hayate itself for HTTP/2 on this connection
/// (RFC 7540 §3.2, withdrawn by RFC 9113 §3.1), which hayate declines by
/// answering in HTTP/1.1 as RFC 9110 §7.8 allows; passed on, it would ask
/// the upstream to switch the pooled connection to HTTP/2. An offer that
/// names it among others is declined whole (an Upgrade may be ignored).
pub(crate) fn requested_upgrade<'h>(
    headers: &[(&'h [u8], &'h [u8])],
    listed: &[&[u8]],
) -> Option<&'h [u8]> {
    if !listed.iter().any(|t| t.eq_ignore_ascii_case(b"upgrade")) {
        return None;
    }
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"upgrade"))
        .map(|(_, v)| *v)
        .filter(|v| !split_list(v).any(|p| p.eq_ignore_ascii_case(b"h2c")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_to_h2c_is_never_passed_on() {
        let ask = |connection: &'static [u8], upgrade: &'static [u8]| {
            let headers: Vec<(&[u8], &[u8])> = vec![
                (b"Connection", connection),
                (b"Upgrade", upgrade),
                (b"HTTP2-Settings", b"AAMAAABkAAQCAAAAAAIAAAAA"),
            ];
            let listed = connection_listed(headers.iter().copied());
            requested_upgrade(&headers, &listed)
        };
        assert_eq!(ask(b"Upgrade, HTTP2-Settings", b"h2c"), None);
        assert_eq!(ask(b"upgrade", b"H2C"), None);
        assert_eq!(ask(b"upgrade", b"websocket, h2c"), None);
        assert_eq!(
            ask(b"keep-alive, Upgrade", b"websocket"),
            Some(&b"websocket"[..])
        );
        assert_eq!(ask(b"keep-alive", b"websocket"), None, "not listed");
    }

    #[test]
    fn hop_by_hop_names_in_any_case_and_nothing_else() {
        for name in [
            "Connection",
            "KEEP-ALIVE",
            "proxy-connection",
            "TE",
            "Trailer",
            "transfer-encoding",
            "Upgrade",
            "Content-Length",
            "expect",
        ] {
            assert!(is_hop_by_hop(name.as_bytes()), "{name}");
        }
        for name in [
            "",
            "t",
            "tf",
            "connectio",
            "connections",
            "date",
            "server",
            "x-upgrade",
            "content-type",
            "trailers",
            "expect-ct",
            "proxy-connection-x",
            "a-name-longer-than-thirty-two-bytes-in-all",
        ] {
            assert!(!is_hop_by_hop(name.as_bytes()), "{name}");
        }
    }
}
