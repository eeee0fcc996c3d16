//! Which fields belong to one connection (hop-by-hop) and are never
//! forwarded, in either direction: one table, and the names a message's
//! Connection fields add to it.

use hayate_core::field::split_list;
use smallvec::SmallVec;

/// Hop-by-hop fields (RFC 9110 §7.6.1), never forwarded in either
/// direction, plus the framing and identity fields hayate sets itself.
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 9] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"expect",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Names listed in Connection fields, which are hop-by-hop too (inline:
/// rarely more than `keep-alive` or `close`).
pub(crate) fn connection_listed<'h>(
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> SmallVec<[&'h [u8]; 4]> {
    headers
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, v)| split_list(v))
        .collect()
}

/// The protocol a client asks to switch to (`Upgrade` with `Connection:
/// upgrade`), e.g. `websocket`; `listed` is what its Connection fields name.
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
}
