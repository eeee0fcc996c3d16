//! The request head sent upstream over HTTP/1.1: the client's end-to-end
//! fields, hop-by-hop ones removed ([`crate::hop_by_hop`]), Host by the
//! route's policy, X-Forwarded-For/-Proto/-Host and Forwarded (the scheme
//! from the client's listener), Via, X-Request-Id, and the body's framing.

use std::cell::{Cell, RefCell};
use std::ops::Range;

use hayate_core::client_body::BodyLength;
use hayate_core::client_cert::{self, is_client_cert_field};
use hayate_core::field::name_is;
use hayate_core::h1::request::{write_field, write_framing, write_request_line};

use crate::group::{HostPolicy, ProxySettings};
use crate::hop_by_hop::is_hop_by_hop;
use crate::spares::{self, Spares};
use crate::{ProxyRequest, UpstreamAddr};

/// The forwarding fields a trusted proxy sent, kept and extended.
#[derive(Default)]
struct Incoming<'a> {
    proto: Option<&'a [u8]>,
    host: Option<&'a [u8]>,
    forwarded: Option<&'a [u8]>,
}

/// The upstream request head, built once per request so that every attempt
/// sends the same one; only the Host that [`HostPolicy::Upstream`] takes
/// from the member may differ between attempts.
pub(crate) struct RequestHead {
    bytes: Vec<u8>,
    /// Where the Host value sits in `bytes`.
    host: Range<usize>,
    /// The X-Request-Id made for it (0: the client's own was passed on).
    made_id: u64,
}

impl RequestHead {
    /// Builds the head; `listed` is what the request's Connection fields
    /// name, `upgrade` the protocol it asks to switch to. The Host value is
    /// left empty under [`HostPolicy::Upstream`], which
    /// [`RequestHead::for_member`] fills in.
    pub(crate) fn new(
        req: &ProxyRequest<'_>,
        length: BodyLength,
        settings: &ProxySettings,
        listed: &[&[u8]],
        upgrade: Option<&[u8]>,
    ) -> RequestHead {
        let mut h = head_buffer();
        write_request_line(&mut h, req.method, req.target);
        let client_host = req.host.unwrap_or_default();
        h.extend_from_slice(b"Host: ");
        let host_start = h.len();
        match &settings.host {
            HostPolicy::Pass => h.extend_from_slice(client_host),
            HostPolicy::Upstream => {}
            HostPolicy::Fixed(name) => h.extend_from_slice(name.as_bytes()),
        }
        let host_range = host_start..h.len();
        h.extend_from_slice(b"\r\n");
        // Forwarding fields from a trusted proxy (the server found the client
        // in them) are kept and extended; from anyone else they are
        // replaced, so a client cannot spoof its address.
        // The first of each, read in the one pass over the fields (three
        // more passes cost ~100 instructions a request behind a proxy).
        let trusted = req.forwarded_chain.is_some();
        let mut incoming = Incoming::default();
        let mut request_id = None;
        for &(name, value) in &req.headers {
            if is_hop_by_hop(name)
                || name_is(name, b"host")
                || listed.iter().any(|l| l.eq_ignore_ascii_case(name))
                || name_is(name, b"x-forwarded-for")
                || is_client_cert_field(name)
            {
                continue;
            }
            let kept = if name_is(name, b"x-forwarded-proto") {
                Some(&mut incoming.proto)
            } else if name_is(name, b"x-forwarded-host") {
                Some(&mut incoming.host)
            } else if name_is(name, b"forwarded") {
                Some(&mut incoming.forwarded)
            } else {
                None
            };
            if let Some(kept) = kept {
                if trusted && kept.is_none() {
                    *kept = Some(value);
                }
                continue;
            }
            if name_is(name, b"x-request-id") {
                if valid_request_id(value) {
                    request_id = Some(value);
                }
                continue;
            }
            write_field(&mut h, name, value);
        }
        // From the client to the peer: "client, proxy, ..., peer", or the
        // client alone when it is the peer.
        h.extend_from_slice(b"X-Forwarded-For: ");
        match req.forwarded_chain {
            Some(chain) => {
                h.extend_from_slice(chain.hops.as_bytes());
                h.extend_from_slice(b", ");
                h.extend_from_slice(chain.peer.as_bytes());
            }
            None => h.extend_from_slice(req.client_ip.as_bytes()),
        }
        h.extend_from_slice(b"\r\nX-Forwarded-Proto: ");
        h.extend_from_slice(incoming.proto.unwrap_or(req.scheme.as_str().as_bytes()));
        h.extend_from_slice(b"\r\n");
        let host = incoming.host.unwrap_or(client_host);
        if !host.is_empty() {
            h.extend_from_slice(b"X-Forwarded-Host: ");
            h.extend_from_slice(host);
            h.extend_from_slice(b"\r\n");
        }
        h.extend_from_slice(b"Forwarded: ");
        let peer = match req.forwarded_chain {
            None => req.client_ip,
            Some(chain) => {
                if let Some(incoming) = incoming.forwarded {
                    h.extend_from_slice(incoming);
                    h.extend_from_slice(b", ");
                } else {
                    // Split at the comma byte (then the space trimmed): str's
                    // searchers cost more in set-up than the rest of this
                    // (two-way for ", ": 327 instructions a request behind
                    // a proxy; memchr for ',': ~100; bench/instructions/run,
                    // policy-realip).
                    for hop in chain.hops.as_bytes().split(|&b| b == b',') {
                        write_forwarded_node(&mut h, hop.trim_ascii_start());
                        h.extend_from_slice(b", ");
                    }
                }
                chain.peer
            }
        }
        .as_bytes();
        write_forwarded_node(&mut h, peer);
        h.extend_from_slice(b";proto=");
        h.extend_from_slice(req.scheme.as_str().as_bytes());
        if !client_host.is_empty()
            && client_host
                .iter()
                .all(|b| b.is_ascii_graphic() && *b != b'"')
        {
            h.extend_from_slice(b";host=\"");
            h.extend_from_slice(client_host);
            h.push(b'"');
        }
        if settings.via {
            h.extend_from_slice(b"\r\nVia: 1.1 hayate");
        }
        if let Some(cert) = req.client_cert {
            h.extend_from_slice(b"\r\n");
            for (i, (name, value)) in client_cert::FIELDS.iter().enumerate() {
                if i > 0 {
                    h.extend_from_slice(b"\r\n");
                }
                h.extend_from_slice(name.as_bytes());
                h.extend_from_slice(b": ");
                h.extend_from_slice(value(cert).as_bytes());
            }
        }
        h.extend_from_slice(b"\r\nX-Request-Id: ");
        let made_id = match request_id {
            Some(id) => {
                h.extend_from_slice(id);
                0
            }
            None => {
                let n = next_request_id();
                h.extend_from_slice(&request_id_hex(n));
                n
            }
        };
        h.extend_from_slice(b"\r\n");
        if let Some(protocol) = upgrade {
            write_field(&mut h, b"Connection", b"upgrade");
            write_field(&mut h, b"Upgrade", protocol);
        }
        write_framing(&mut h, length);
        RequestHead {
            bytes: h,
            host: host_range,
            made_id,
        }
    }

    /// The X-Request-Id made for it (0: the client's own was passed on).
    pub(crate) fn made_request_id(&self) -> u64 {
        self.made_id
    }

    /// The head as it stands.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The head to send to `member`.
    pub(crate) fn for_member(&mut self, settings: &ProxySettings, member: &UpstreamAddr) -> &[u8] {
        if settings.host == HostPolicy::Upstream {
            let host: &[u8] = match member {
                UpstreamAddr::Tcp { authority, .. } => authority.as_bytes(),
                UpstreamAddr::Unix(_) | UpstreamAddr::UnixH2c(_) => b"localhost",
            };
            if self.bytes.get(self.host.clone()) != Some(host) {
                self.bytes.splice(self.host.clone(), host.iter().copied());
                self.host.end = self.host.start + host.len();
            }
        }
        &self.bytes
    }
}

impl Drop for RequestHead {
    fn drop(&mut self) {
        let mut bytes = std::mem::take(&mut self.bytes);
        if bytes.capacity() <= HEAD_CAPACITY {
            bytes.clear();
            spares::keep(&SPARE_HEADS, bytes, KEPT_HEADS);
        }
    }
}

/// Room for a usual upstream request head (request line, Host, forwarding
/// fields, request id, a few of the client's fields).
const HEAD_CAPACITY: usize = 512;

/// Head buffers a worker's thread keeps for its next requests (64 KiB at
/// most; why: `crate::spares`).
const KEPT_HEADS: usize = 128;

thread_local! {
    static SPARE_HEADS: Spares<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer to build a head in: one a finished request gave back,
/// or a new one. Heads that outgrew [`HEAD_CAPACITY`] are not kept.
fn head_buffer() -> Vec<u8> {
    spares::take(&SPARE_HEADS).unwrap_or_else(|| Vec::with_capacity(HEAD_CAPACITY))
}

thread_local! {
    static REQUEST_IDS: Cell<u64> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(std::process::id().into());
        hasher.finish()
    });
}

/// Whether a client's X-Request-Id is passed on: short printable ASCII
/// (anything else gets a new id).
pub(crate) fn valid_request_id(value: &[u8]) -> bool {
    !value.is_empty() && value.len() <= 128 && value.iter().all(|b| b.is_ascii_graphic())
}

/// A request id unique within the process (64 random-seeded bits).
pub(crate) fn next_request_id() -> u64 {
    REQUEST_IDS.with(|c| {
        let v = c.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        c.set(v);
        v
    })
}

/// A request id as 16 lower-case hex digits (how the access log writes
/// the id of [`hayate_core::UpstreamTimes::made_request_id`] too).
pub fn request_id_hex(n: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, d) in out.iter_mut().enumerate() {
        *d = b"0123456789abcdef"[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

/// `for=NODE` of a Forwarded element (RFC 7239 §6: an IPv6 node is quoted
/// and bracketed).
#[inline]
fn write_forwarded_node(h: &mut Vec<u8>, ip: &[u8]) {
    h.extend_from_slice(b"for=");
    // A byte loop, not contains(): its memchr set-up costs more than the
    // scan of an address (~60 instructions a call, bench/instructions/run,
    // policy-realip).
    #[allow(clippy::manual_contains)]
    if ip.iter().any(|&b| b == b':') {
        h.extend_from_slice(b"\"[");
        h.extend_from_slice(ip);
        h.extend_from_slice(b"]\"");
    } else {
        h.extend_from_slice(ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hop_by_hop::{connection_listed, requested_upgrade};
    use hayate_core::transport::Scheme;

    /// The head sent to `member`.
    fn build_request_head(
        req: &ProxyRequest<'_>,
        length: BodyLength,
        settings: &ProxySettings,
        member: &UpstreamAddr,
    ) -> Vec<u8> {
        let listed = connection_listed(req.headers.iter().copied());
        let upgrade = requested_upgrade(&req.headers, &listed);
        RequestHead::new(req, length, settings, &listed, upgrade)
            .for_member(settings, member)
            .to_vec()
    }

    fn req<'a>(headers: Vec<(&'a [u8], &'a [u8])>) -> ProxyRequest<'a> {
        ProxyRequest {
            method: b"POST",
            target: b"/a?b",
            headers,
            client_ip: "10.0.0.1",
            forwarded_chain: None,
            host: Some(b"example.com"),
            scheme: Scheme::Http,
            cgi: None,
            ports: Default::default(),
            client_cert: None,
        }
    }

    #[test]
    fn head_buffers_are_reused_unless_they_grew() {
        let spare = || spares::count(&SPARE_HEADS);
        let settings = ProxySettings::default();
        let head =
            |r: &ProxyRequest<'_>| RequestHead::new(r, BodyLength::None, &settings, &[], None);
        let small = req(vec![(b"Accept", b"*/*")]);
        let first = head(&small);
        let at = first.bytes().as_ptr();
        drop(first);
        assert_eq!(spare(), 1);
        let second = head(&small);
        assert_eq!(second.bytes().as_ptr(), at, "the same buffer");
        assert_eq!(spare(), 0);
        let sent = second.bytes().to_vec();
        drop(second);
        // What a reused buffer held is gone: the head is built afresh (the
        // same but for its new request id).
        let again = head(&small).bytes().to_vec();
        let id = sent
            .windows(14)
            .position(|w| w == b"X-Request-Id: ")
            .expect("id");
        assert_eq!((again.len(), &again[..id]), (sent.len(), &sent[..id]));
        assert_ne!(again, sent);
        // One that outgrew the usual size is freed, not kept.
        let long = vec![b'x'; 2 * HEAD_CAPACITY];
        let large = req(vec![(b"Cookie", &long[..])]);
        assert_eq!(spare(), 1);
        drop(head(&large));
        assert_eq!(spare(), 0, "taken, grown, then freed");
    }

    #[test]
    fn an_h2c_upgrade_offer_is_dropped_from_the_upstream_head() {
        let r = req(vec![
            (b"Host", b"example.com"),
            (b"Connection", b"Upgrade, HTTP2-Settings"),
            (b"Upgrade", b"h2c"),
            (b"HTTP2-Settings", b"AAMAAABkAAQCAAAAAAIAAAAA"),
            (b"Accept", b"*/*"),
        ]);
        let s = ProxySettings::default();
        let member = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let head = String::from_utf8(build_request_head(&r, BodyLength::None, &s, &member))
            .expect("ascii");
        for gone in ["Upgrade", "upgrade", "h2c", "HTTP2-Settings", "Connection"] {
            assert!(!head.contains(gone), "{gone} passed on:\n{head}");
        }
        assert!(head.contains("Accept: */*\r\n"), "{head}");
    }

    #[test]
    fn request_head_drops_hop_by_hop_and_sets_forwarding() {
        let r = req(vec![
            (b"Host", b"example.com"),
            (b"Connection", b"keep-alive, X-Secret"),
            (b"X-Secret", b"1"),
            (b"Keep-Alive", b"timeout=5"),
            (b"TE", b"trailers"),
            (b"X-Forwarded-For", b"6.6.6.6"),
            (b"Forwarded", b"for=6.6.6.6"),
            (b"Accept", b"*/*"),
            (b"X-Request-Id", b"abc-123"),
        ]);
        let s = ProxySettings::default();
        let member = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let head = String::from_utf8(build_request_head(&r, BodyLength::Known(3), &s, &member))
            .expect("ascii");
        assert!(
            head.starts_with("POST /a?b HTTP/1.1\r\nHost: example.com\r\n"),
            "{head}"
        );
        for gone in ["X-Secret", "Keep-Alive", "TE:", "6.6.6.6", "Connection"] {
            assert!(
                !head.contains(gone),
                "{gone} must not be forwarded:\n{head}"
            );
        }
        for kept in [
            "Accept: */*\r\n",
            "X-Forwarded-For: 10.0.0.1\r\n",
            "X-Forwarded-Proto: http\r\n",
            "X-Forwarded-Host: example.com\r\n",
            "Forwarded: for=10.0.0.1;proto=http;host=\"example.com\"\r\n",
            "X-Request-Id: abc-123\r\n",
            "Content-Length: 3\r\n\r\n",
        ] {
            assert!(head.contains(kept), "missing {kept:?}:\n{head}");
        }
        let chunked = String::from_utf8(build_request_head(
            &req(vec![]),
            BodyLength::Chunked,
            &s,
            &member,
        ))
        .expect("ascii");
        assert!(
            chunked.ends_with("Transfer-Encoding: chunked\r\n\r\n")
                && chunked.contains("X-Request-Id: ")
        );
    }

    #[test]
    fn trusted_proxies_host_policy_and_via() {
        let member = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let headers: Vec<(&[u8], &[u8])> = vec![
            (b"X-Forwarded-For", b"1.1.1.1"),
            (b"X-Forwarded-Proto", b"https"),
            (b"Forwarded", b"for=1.1.1.1;proto=https"),
        ];
        let trusting = ProxySettings {
            host: HostPolicy::Upstream,
            via: true,
            ..Default::default()
        };
        // The server found the client 1.1.1.1 in what the trusted peer
        // 10.0.0.1 sent.
        let named = ProxyRequest {
            client_ip: "1.1.1.1",
            forwarded_chain: Some(crate::ForwardedChain {
                hops: "1.1.1.1",
                peer: "10.0.0.1",
            }),
            ..req(headers.clone())
        };
        let head = String::from_utf8(build_request_head(
            &named,
            BodyLength::None,
            &trusting,
            &member,
        ))
        .expect("ascii");
        for want in [
            "Host: 127.0.0.1:9\r\n",
            "X-Forwarded-For: 1.1.1.1, 10.0.0.1\r\n",
            "X-Forwarded-Proto: https\r\n",
            "Forwarded: for=1.1.1.1;proto=https, for=10.0.0.1;proto=http",
            "Via: 1.1 hayate\r\n",
        ] {
            assert!(head.contains(want), "missing {want:?}:\n{head}");
        }
        // Without an incoming Forwarded, the chain is written as one.
        let without: Vec<(&[u8], &[u8])> = vec![(b"X-Forwarded-For", b"1.1.1.1")];
        let head = String::from_utf8(build_request_head(
            &ProxyRequest {
                client_ip: "2001:db8::1",
                forwarded_chain: Some(crate::ForwardedChain {
                    hops: "2001:db8::1",
                    peer: "10.0.0.1",
                }),
                ..req(without)
            },
            BodyLength::None,
            &trusting,
            &member,
        ))
        .expect("ascii");
        assert!(
            head.contains("Forwarded: for=\"[2001:db8::1]\", for=10.0.0.1;proto=http"),
            "{head}"
        );
        let strict = ProxySettings {
            host: HostPolicy::Fixed("app.internal".into()),
            ..Default::default()
        };
        let head = String::from_utf8(build_request_head(
            &req(headers),
            BodyLength::None,
            &strict,
            &member,
        ))
        .expect("ascii");
        assert!(
            head.contains("Host: app.internal\r\n")
                && head.contains("X-Forwarded-For: 10.0.0.1\r\n"),
            "{head}"
        );
        assert!(
            !head.contains("1.1.1.1") && !head.contains("https") && !head.contains("Via"),
            "{head}"
        );
    }

    #[test]
    fn every_attempt_sends_the_same_head_but_for_the_upstream_host() {
        let r = req(vec![(b"Accept", b"*/*")]);
        let s = ProxySettings {
            host: HostPolicy::Upstream,
            ..Default::default()
        };
        let listed = connection_listed(r.headers.iter().copied());
        let mut head = RequestHead::new(&r, BodyLength::None, &s, &listed, None);
        let a = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let b = UpstreamAddr::parse("unix:/run/app.sock").expect("addr");
        let first = String::from_utf8(head.for_member(&s, &a).to_vec()).expect("ascii");
        let second = String::from_utf8(head.for_member(&s, &b).to_vec()).expect("ascii");
        let third = String::from_utf8(head.for_member(&s, &a).to_vec()).expect("ascii");
        assert!(first.contains("\r\nHost: 127.0.0.1:9\r\n"), "{first}");
        assert!(second.contains("\r\nHost: localhost\r\n"), "{second}");
        assert_eq!(first.replace("127.0.0.1:9", "localhost"), second);
        assert_eq!(first, third);
    }

    #[test]
    fn request_ids_are_16_hex_digits_and_differ() {
        let a = request_id_hex(next_request_id());
        let b = request_id_hex(next_request_id());
        assert_ne!(a, b);
        for id in [a, b] {
            assert!(id
                .iter()
                .all(|d| d.is_ascii_hexdigit() && !d.is_ascii_uppercase()));
        }
    }

    #[test]
    fn the_scheme_sent_on_is_the_listeners() {
        let mut r = req(vec![(b"X-Forwarded-Proto", b"http")]);
        r.scheme = Scheme::Https;
        let s = ProxySettings::default();
        let member = UpstreamAddr::parse("127.0.0.1:9").expect("addr");
        let head = String::from_utf8(build_request_head(&r, BodyLength::None, &s, &member))
            .expect("ascii");
        assert!(head.contains("X-Forwarded-Proto: https\r\n"), "{head}");
        assert!(head.contains(";proto=https;"), "{head}");
    }
}
