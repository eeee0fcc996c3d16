//! Identify: who the client is. Behind a CDN or a load balancer the peer
//! is the proxy; the client is what the proxy says in X-Forwarded-For (or
//! `Forwarded: for=`), believed only from peers in `trusted_proxies`.
//!
//! The chain is read from the right, the end the proxies we trust wrote:
//! the client is the right-most address that is not itself trusted (each
//! hop appends the address it saw, so everything left of that is whatever
//! the client chose to send). An entry that is not an address (`unknown`,
//! an obfuscated `_name`, garbage) stops the walk at the hop to its right,
//! which is then the client: a proxy's address, never a spoofed one.
//!
//! The result is decided once per request and read by everything after:
//! the access log, `hash:ip`, allow/deny, and what is forwarded upstream.

use std::net::{IpAddr, SocketAddr};

use hayate_core::field::name_is;
use hayate_core::net::IpNet;
use hayate_core::request::RequestHead;
use hayate_core::transport::Peer;

/// Most hops of a chain read (right to left): a chain longer than any real
/// path of proxies costs no more than this.
const MAX_HOPS: usize = 32;

/// The peers trusted to name the client (`trusted_proxies`).
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

/// The client a trusted proxy named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedClient {
    /// Its address.
    pub ip: IpAddr,
    /// The chain from the client to the last proxy before the peer (what
    /// the client itself prepended is dropped): X-Forwarded-For upstream
    /// is this, then the peer. The client's address as text is its start.
    pub chain: String,
    /// Where the client's address ends in `chain`.
    client_len: usize,
}

impl ForwardedClient {
    /// The client's address as text (the access log, REMOTE_ADDR).
    pub fn text(&self) -> &str {
        &self.chain[..self.client_len]
    }
}

impl TrustedProxies {
    /// Trusts `nets`.
    pub fn new(nets: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies { nets }
    }

    /// Whether no peer is trusted (nothing to read in any request).
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(ip))
    }

    /// The client `peer` names in `head`, when `peer` is trusted and names
    /// one; `None`: the client is the peer. `reuse` is the connection's
    /// previous request's, whose memory it takes: a new box and string
    /// per request cost ~250 instructions in the allocator
    /// (bench/instructions/run, policy-realip).
    #[inline(never)]
    pub fn client_of(
        &self,
        head: &RequestHead,
        peer: &Peer,
        reuse: Option<Box<ForwardedClient>>,
    ) -> Option<Box<ForwardedClient>> {
        if self.nets.is_empty() {
            return None;
        }
        if !peer.ip.is_some_and(|ip| self.trusts(ip)) {
            return None;
        }
        // On the stack for the usual chains (a CDN and a balancer or two):
        // this runs for every request behind a trusted proxy.
        let mut hops: smallvec::SmallVec<[&[u8]; 8]> = smallvec::SmallVec::new();
        // name_is, not headers_named's eq_ignore_ascii_case: lowering
        // both sides byte by byte cost ~100 instructions a request.
        for (_, value) in head
            .fields()
            .filter(|(n, _)| name_is(n, b"x-forwarded-for"))
        {
            hops.extend(value.split(|&b| b == b',').map(trim));
        }
        if hops.is_empty() {
            for (name, value) in head.fields() {
                if name_is(name, b"forwarded") {
                    hops.extend(value.split(|&b| b == b',').map(forwarded_for));
                }
            }
        }
        let first = hops.len().saturating_sub(MAX_HOPS);
        let mut client: Option<(usize, Hop<'_>)> = None;
        for (i, hop) in hops.iter().enumerate().skip(first).rev() {
            let Some(parsed) = parse_hop(hop) else {
                break;
            };
            client = Some((i, parsed));
            if !self.trusts(parsed.ip) {
                break;
            }
        }
        let (from, client) = client?;
        let mut named = reuse.unwrap_or_else(|| {
            Box::new(ForwardedClient {
                ip: client.ip,
                chain: String::with_capacity(64),
                client_len: 0,
            })
        });
        named.ip = client.ip;
        let chain = &mut named.chain;
        chain.clear();
        push_address(chain, client);
        named.client_len = chain.len();
        for hop in &hops[from + 1..] {
            if let Some(parsed) = parse_hop(hop) {
                chain.push_str(", ");
                push_address(chain, parsed);
            }
        }
        Some(named)
    }
}

/// Appends a hop's address as text: the hop's own text when it is a plain
/// IPv4 address (Rust's parser takes only the canonical form of those: no
/// leading zeros), else the address formatted (a port or brackets dropped,
/// IPv6 in its canonical form), which costs core::fmt's machinery.
fn push_address(chain: &mut String, hop: Hop<'_>) {
    match hop.plain {
        Some(text) => chain.push_str(text),
        None => {
            use std::fmt::Write;
            let _ = write!(chain, "{}", hop.ip);
        }
    }
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// The `for=` node of one `Forwarded` element (RFC 7239 §4), quotes
/// removed; empty when it has none.
fn forwarded_for(element: &[u8]) -> &[u8] {
    element
        .split(|&b| b == b';')
        .map(trim)
        .find_map(|pair| {
            let (name, value) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            name.eq_ignore_ascii_case(b"for").then(|| {
                let value = &value[1..];
                value
                    .strip_prefix(b"\"")
                    .and_then(|v| v.strip_suffix(b"\""))
                    .unwrap_or(value)
            })
        })
        .unwrap_or_default()
}

/// A hop of a chain, read.
#[derive(Clone, Copy)]
struct Hop<'a> {
    /// Its address (IPv4-mapped IPv6 ones as IPv4).
    ip: IpAddr,
    /// Its text, when that is a plain IPv4 address (its canonical form).
    plain: Option<&'a str>,
}

/// One hop's address: `192.0.2.1`, `2001:db8::1`, with a port
/// (`192.0.2.1:4711`, `[2001:db8::1]:4711`) or bracketed; IPv4-mapped IPv6
/// addresses as IPv4. `None` for anything else.
fn parse_hop(hop: &[u8]) -> Option<Hop<'_>> {
    let text = std::str::from_utf8(hop).ok()?;
    if let Some(v4) = plain_ipv4(hop) {
        return Some(Hop {
            ip: IpAddr::V4(v4),
            plain: Some(text),
        });
    }
    let ip = text
        .parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| text.strip_prefix('[')?.strip_suffix(']')?.parse().ok())?;
    Some(Hop {
        ip: ip.to_canonical(),
        plain: None,
    })
}

/// A dotted-quad IPv4 address in the only form Rust's parser takes (four
/// decimal octets, no leading zeros, nothing else); `None` for anything
/// else, which [`parse_hop`] then gives to the general parsers. By hand:
/// core's parser cost ~165 instructions a hop (bench/instructions/run,
/// policy-realip), for what is almost every hop of a real chain.
fn plain_ipv4(text: &[u8]) -> Option<std::net::Ipv4Addr> {
    let mut octets = [0u8; 4];
    // One pass: the octet being read, its value and digits so far.
    let (mut i, mut n, mut digits) = (0usize, 0u16, 0u8);
    for &b in text {
        match b {
            b'0'..=b'9' if digits < 3 && !(digits == 1 && n == 0) => {
                n = n * 10 + u16::from(b - b'0');
                digits += 1;
            }
            b'.' if digits > 0 && i < 3 && n <= 255 => {
                octets[i] = n as u8;
                (i, n, digits) = (i + 1, 0, 0);
            }
            _ => return None,
        }
    }
    if i != 3 || digits == 0 || n > 255 {
        return None;
    }
    octets[3] = n as u8;
    Some(octets.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::request::Version;
    use hayate_core::transport::Scheme;

    fn net(s: &str) -> IpNet {
        let (addr, bits) = s.split_once('/').expect("cidr");
        IpNet {
            addr: addr.parse().expect("addr"),
            bits: bits.parse().expect("bits"),
        }
    }

    fn peer(ip: &str) -> Peer {
        let ip: IpAddr = ip.parse().expect("ip");
        Peer {
            addr: ip.to_string(),
            ip: Some(ip),
            port: Some(1234),
            local_port: Some(80),
            client_cert: None,
        }
    }

    fn head(fields: &[(&str, &str)]) -> RequestHead {
        let mut h = RequestHead::new(b"GET", b"/", Version::Http11, Scheme::Http);
        for (n, v) in fields {
            h.push_field(n.as_bytes(), v.as_bytes());
        }
        h
    }

    fn trusted() -> TrustedProxies {
        TrustedProxies::new(vec![net("10.0.0.0/8"), net("2001:db8:ffff::/48")])
    }

    /// The client named, and the X-Forwarded-For sent upstream (the chain,
    /// then the peer).
    fn client(fields: &[(&str, &str)], from: &str) -> Option<(String, String)> {
        trusted()
            .client_of(&head(fields), &peer(from), None)
            .map(|c| (c.text().to_string(), format!("{}, {from}", c.chain)))
    }

    #[test]
    fn a_reused_answer_holds_only_the_new_request() {
        let t = trusted();
        let first = t.client_of(
            &head(&[("X-Forwarded-For", "2001:db8::5, 10.0.0.2, 10.0.0.3")]),
            &peer("10.0.0.1"),
            None,
        );
        let second = t
            .client_of(
                &head(&[("X-Forwarded-For", "203.0.113.7")]),
                &peer("10.0.0.1"),
                first,
            )
            .expect("named");
        assert_eq!(
            (second.text(), second.chain.as_str()),
            ("203.0.113.7", "203.0.113.7")
        );
        assert_eq!(second.ip, "203.0.113.7".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn the_right_most_untrusted_address_from_a_trusted_peer() {
        let some = |a: &str, c: &str| Some((a.to_string(), c.to_string()));
        // One proxy: the client is what it appended.
        assert_eq!(
            client(&[("X-Forwarded-For", "203.0.113.7")], "10.0.0.1"),
            some("203.0.113.7", "203.0.113.7, 10.0.0.1")
        );
        // Octets of one, two and three digits, and zeros, written back as
        // they came.
        assert_eq!(
            client(&[("X-Forwarded-For", "0.9.10.255, 10.0.0.2")], "10.0.0.1"),
            some("0.9.10.255", "0.9.10.255, 10.0.0.2, 10.0.0.1")
        );
        // A spoofed left part is skipped and dropped from the chain.
        assert_eq!(
            client(
                &[("X-Forwarded-For", "1.1.1.1, 203.0.113.7, 10.0.0.2")],
                "10.0.0.1"
            ),
            some("203.0.113.7", "203.0.113.7, 10.0.0.2, 10.0.0.1")
        );
        // Repeated fields are one list, in order.
        assert_eq!(
            client(
                &[
                    ("X-Forwarded-For", "1.1.1.1"),
                    ("X-Forwarded-For", "203.0.113.7")
                ],
                "10.0.0.1"
            ),
            some("203.0.113.7", "203.0.113.7, 10.0.0.1")
        );
        // Ports, brackets and IPv4-mapped addresses.
        assert_eq!(
            client(&[("X-Forwarded-For", "[2001:db8::5]:443")], "10.0.0.1"),
            some("2001:db8::5", "2001:db8::5, 10.0.0.1")
        );
        assert_eq!(
            client(&[("X-Forwarded-For", "::ffff:203.0.113.9")], "10.0.0.1"),
            some("203.0.113.9", "203.0.113.9, 10.0.0.1")
        );
        // Forwarded when there is no X-Forwarded-For.
        assert_eq!(
            client(
                &[(
                    "Forwarded",
                    "for=1.1.1.1, for=\"[2001:db8::7]:80\";proto=https"
                )],
                "2001:db8:ffff::1"
            ),
            some("2001:db8::7", "2001:db8::7, 2001:db8:ffff::1")
        );
        // Every hop trusted: the left-most.
        assert_eq!(
            client(&[("X-Forwarded-For", "10.1.1.1, 10.2.2.2")], "10.0.0.1"),
            some("10.1.1.1", "10.1.1.1, 10.2.2.2, 10.0.0.1")
        );
    }

    #[test]
    fn never_from_an_untrusted_peer_or_past_garbage() {
        // From an untrusted peer the field is ignored.
        assert_eq!(
            client(&[("X-Forwarded-For", "203.0.113.7")], "198.51.100.1"),
            None
        );
        // Nothing named.
        assert_eq!(client(&[], "10.0.0.1"), None);
        // An unparseable hop stops the walk at the trusted hop to its right.
        assert_eq!(
            client(
                &[("X-Forwarded-For", "203.0.113.7, unknown, 10.0.0.2")],
                "10.0.0.1"
            ),
            Some(("10.0.0.2".to_string(), "10.0.0.2, 10.0.0.1".to_string()))
        );
        assert_eq!(
            client(&[("X-Forwarded-For", "not an address")], "10.0.0.1"),
            None
        );
        assert_eq!(client(&[("Forwarded", "for=unknown")], "10.0.0.1"), None);
        // A Unix socket's peer is never trusted by address.
        let unix = Peer {
            addr: "unix".into(),
            ip: None,
            port: None,
            local_port: None,
            client_cert: None,
        };
        let h = head(&[("X-Forwarded-For", "203.0.113.7")]);
        assert_eq!(trusted().client_of(&h, &unix, None), None);
        // No list: nothing is read.
        assert_eq!(
            TrustedProxies::default().client_of(&h, &peer("10.0.0.1"), None),
            None
        );
    }

    #[test]
    fn plain_ipv4_takes_what_cores_parser_takes() {
        for text in [
            "0.0.0.0",
            "203.0.113.7",
            "255.255.255.255",
            "1.2.3.4",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4.5",
            "256.1.1.1",
            "1..2.3",
            "1.2.3.4 ",
            "+1.2.3.4",
            "1.2.3.-4",
            "1.2.3.4:80",
            "1000.1.1.1",
            "",
            "::1",
            "1.2.3.٤",
        ] {
            assert_eq!(
                plain_ipv4(text.as_bytes()),
                text.parse::<std::net::Ipv4Addr>().ok(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_long_chain_is_read_only_so_far() {
        let long = vec!["10.9.9.9"; 1000].join(", ");
        let c = trusted()
            .client_of(
                &head(&[("X-Forwarded-For", &long)]),
                &peer("10.0.0.1"),
                None,
            )
            .expect("client");
        assert_eq!(c.text(), "10.9.9.9");
        // MAX_HOPS hops, then the peer is added upstream.
        assert_eq!(c.chain.matches(", ").count(), MAX_HOPS - 1);
    }
}
