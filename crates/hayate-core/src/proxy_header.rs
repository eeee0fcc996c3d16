//! The PROXY protocol's header (HAProxy's spec, versions 1 and 2): what a
//! load balancer in front says about the client before the connection's
//! own bytes (HTTP, or a TLS ClientHello). Parsed on listeners (whether to
//! believe it is the listener's business: only from `trusted_proxies`),
//! and written, version 2, ahead of an upstream connection's bytes for a
//! route with `proxy_protocol = "v2"` ([`v2_header`]).
//!
//! Version 1 is one text line of at most 107 bytes; version 2 a 16-byte
//! binary head and its announced length of addresses and TLVs. TLVs are
//! skipped unread: nothing in them decides anything here. A header longer
//! than [`MAX_HEADER`] is refused rather than buffered.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Version 2's signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Version 1's longest line, CRLF included (the spec's figure).
const V1_MAX: usize = 107;
/// The longest header accepted, TLVs included: what load balancers send is
/// far shorter (AWS's NLB adds a VPC endpoint TLV of ~30 bytes), and a
/// worker peeks at most this much.
pub const MAX_HEADER: usize = 1024;

/// What the bytes received so far are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyHeader {
    /// The start of a header: more bytes are needed.
    Incomplete,
    /// Not a PROXY protocol header, or a malformed or oversized one.
    Invalid(&'static str),
    /// A whole header of `len` bytes; `source` is the client it names
    /// (`None`: a health check's LOCAL or an UNKNOWN connection, where the
    /// peer itself is the client).
    Complete {
        /// The header's length: the connection's own bytes follow it.
        len: usize,
        /// The client.
        source: Option<SocketAddr>,
    },
}

/// Reads the header at the start of `buf`.
pub fn parse(buf: &[u8]) -> ProxyHeader {
    if buf.len() < V2_SIGNATURE.len() && V2_SIGNATURE.starts_with(buf) {
        return ProxyHeader::Incomplete;
    }
    if buf.starts_with(V2_SIGNATURE) {
        return parse_v2(buf);
    }
    const V1: &[u8] = b"PROXY ";
    if buf.len() < V1.len() && V1.starts_with(buf) {
        return ProxyHeader::Incomplete;
    }
    if buf.starts_with(V1) {
        return parse_v1(buf);
    }
    ProxyHeader::Invalid("not a PROXY protocol header")
}

fn parse_v1(buf: &[u8]) -> ProxyHeader {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() >= V1_MAX {
            ProxyHeader::Invalid("PROXY v1 line longer than 107 bytes")
        } else {
            ProxyHeader::Incomplete
        };
    };
    let len = end + 2;
    let Ok(line) = std::str::from_utf8(&buf[..end]) else {
        return ProxyHeader::Invalid("PROXY v1 line not ASCII");
    };
    let words: Vec<&str> = line.split(' ').collect();
    let source = match words.as_slice() {
        ["PROXY", "UNKNOWN", ..] => None,
        ["PROXY", family @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let v4 = *family == "TCP4";
            let addr = |s: &str| {
                s.parse::<IpAddr>()
                    .ok()
                    .filter(|ip| ip.is_ipv4() == v4 && !s.contains(['[', '%']))
            };
            // Ports are plain decimal, no sign, no leading zero.
            let port = |s: &str| {
                let plain = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
                s.parse::<u16>()
                    .ok()
                    .filter(|_| plain && (s == "0" || !s.starts_with('0')))
            };
            match (addr(src), addr(dst), port(sport), port(dport)) {
                (Some(ip), Some(_), Some(port), Some(_)) => Some(SocketAddr::new(ip, port)),
                _ => return ProxyHeader::Invalid("PROXY v1 addresses malformed"),
            }
        }
        _ => return ProxyHeader::Invalid("PROXY v1 line malformed"),
    };
    ProxyHeader::Complete { len, source }
}

fn parse_v2(buf: &[u8]) -> ProxyHeader {
    if buf.len() < 16 {
        return ProxyHeader::Incomplete;
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return ProxyHeader::Invalid("PROXY v2 header of another version");
    }
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let len = 16 + body;
    if len > MAX_HEADER {
        return ProxyHeader::Invalid("PROXY v2 header too long");
    }
    if buf.len() < len {
        return ProxyHeader::Incomplete;
    }
    let addrs = &buf[16..len];
    let source = match command {
        // LOCAL: the proxy's own connection (a health check).
        0 => None,
        1 => match buf[13] {
            // TCP or UDP over IPv4: source, destination, their ports.
            0x11 | 0x12 if addrs.len() >= 12 => {
                let ip = Ipv4Addr::new(addrs[0], addrs[1], addrs[2], addrs[3]);
                let port = u16::from_be_bytes([addrs[8], addrs[9]]);
                Some(SocketAddr::new(IpAddr::V4(ip), port))
            }
            0x21 | 0x22 if addrs.len() >= 36 => {
                let octets: [u8; 16] = addrs[..16].try_into().expect("16 bytes");
                let port = u16::from_be_bytes([addrs[32], addrs[33]]);
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(octets)), port))
            }
            0x11 | 0x12 | 0x21 | 0x22 => {
                return ProxyHeader::Invalid("PROXY v2 addresses shorter than their family")
            }
            // UNSPEC, Unix sockets: no address of use.
            _ => None,
        },
        _ => return ProxyHeader::Invalid("PROXY v2 command unknown"),
    };
    ProxyHeader::Complete { len, source }
}

/// The version 2 header of a connection made for `client` (PROXY, TCP):
/// the client as the source, and as the destination the port it
/// connected to (`local_port`) on the unspecified address of its family
/// (which of hayate's addresses it reached is not asked of the kernel per
/// connection). Without a client address (a Unix socket's peer): LOCAL,
/// which tells the upstream to take the connection's own ends.
pub fn v2_header(client: Option<SocketAddr>, local_port: u16) -> Vec<u8> {
    let mut h = V2_SIGNATURE.to_vec();
    // Version 2 and PROXY (or LOCAL), then the family: TCP over IPv4 or 6.
    let (command_family, mut addrs): (u16, Vec<u8>) = match client.map(|c| c.ip()) {
        None => (0x2000, Vec::new()),
        Some(IpAddr::V4(ip)) => (
            0x2111,
            [ip.octets(), Ipv4Addr::UNSPECIFIED.octets()].concat(),
        ),
        Some(IpAddr::V6(ip)) => (
            0x2121,
            [ip.octets(), Ipv6Addr::UNSPECIFIED.octets()].concat(),
        ),
    };
    if let Some(c) = client {
        addrs.extend_from_slice(&c.port().to_be_bytes());
        addrs.extend_from_slice(&local_port.to_be_bytes());
    }
    h.extend_from_slice(&command_family.to_be_bytes());
    h.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    h.extend_from_slice(&addrs);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_written_read_back_as_the_client_they_name() {
        for client in ["192.0.2.7:51000", "[2001:db8::7]:443"] {
            let addr: SocketAddr = client.parse().expect("addr");
            let h = v2_header(Some(addr), 8443);
            assert_eq!(complete(&h), (h.len(), Some(addr.to_string())));
        }
        let local = v2_header(None, 80);
        assert_eq!(complete(&local), (16, None));
        assert_eq!(local[12], 0x20, "LOCAL");
    }

    fn complete(buf: &[u8]) -> (usize, Option<String>) {
        match parse(buf) {
            ProxyHeader::Complete { len, source } => (len, source.map(|s| s.to_string())),
            other => panic!("{other:?} for {buf:?}"),
        }
    }

    fn v2(command: u8, family: u8, addrs: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&u16::try_from(addrs.len()).expect("len").to_be_bytes());
        h.extend_from_slice(addrs);
        h
    }

    #[test]
    fn version_1() {
        let line = b"PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(complete(line), (44, Some("203.0.113.7:56324".into())));
        let line = b"PROXY TCP6 2001:db8::7 2001:db8::1 1 443\r\n\x16\x03\x01";
        assert_eq!(complete(line), (42, Some("[2001:db8::7]:1".into())));
        assert_eq!(complete(b"PROXY UNKNOWN\r\n"), (15, None));
        assert_eq!(complete(b"PROXY UNKNOWN ffff::1 ::1 1 2\r\n").1, None);
        for partial in [&b"PRO"[..], b"PROXY TCP4 203.0.113.7", b"PROXY "] {
            assert_eq!(parse(partial), ProxyHeader::Incomplete, "{partial:?}");
        }
        for bad in [
            &b"PROXY TCP4 2001:db8::1 192.0.2.1 1 2\r\n"[..],
            b"PROXY TCP4 203.0.113.7 192.0.2.1 65536 443\r\n",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 -1 443\r\n",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 0443 443\r\n",
            b"PROXY TCP4 203.0.113.7  192.0.2.1 1 443\r\n",
            b"PROXY TCP5 203.0.113.7 192.0.2.1 1 443\r\n",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 1\r\n",
            b"GET / HTTP/1.1\r\n",
            b"\x16\x03\x01\x02\x00",
        ] {
            assert!(matches!(parse(bad), ProxyHeader::Invalid(_)), "{bad:?}");
        }
        let long = [&b"PROXY UNKNOWN "[..], &[b'x'; 200]].concat();
        assert!(matches!(parse(&long), ProxyHeader::Invalid(_)));
    }

    #[test]
    fn version_2() {
        let v4 = [203, 0, 113, 7, 192, 0, 2, 1, 0xdc, 0x04, 0x01, 0xbb];
        let h = v2(1, 0x11, &v4);
        assert_eq!(complete(&h), (28, Some("203.0.113.7:56324".into())));
        // TLVs after the addresses are skipped; what follows is not read.
        let mut with_tlv = v2(
            1,
            0x11,
            &[&v4[..], &[0x04, 0x00, 0x02, b'i', b'd']].concat(),
        );
        with_tlv.extend_from_slice(b"\x16\x03\x01");
        assert_eq!(complete(&with_tlv).0, 33);
        let mut v6 = [0u8; 36];
        v6[..16].copy_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().expect("ip").octets());
        v6[32..34].copy_from_slice(&443u16.to_be_bytes());
        assert_eq!(
            complete(&v2(1, 0x21, &v6)).1,
            Some("[2001:db8::7]:443".into())
        );
        assert_eq!(complete(&v2(0, 0x00, &[])), (16, None), "LOCAL");
        assert_eq!(complete(&v2(1, 0x31, &[0; 216])).1, None, "unix");
        // Incomplete at every cut.
        for cut in 1..h.len() {
            assert_eq!(parse(&h[..cut]), ProxyHeader::Incomplete, "{cut}");
        }
        // Refused: another version, command, short addresses, oversized.
        let mut other = h.clone();
        other[12] = 0x11;
        assert!(matches!(parse(&other), ProxyHeader::Invalid(_)));
        assert!(matches!(parse(&v2(2, 0x11, &v4)), ProxyHeader::Invalid(_)));
        assert!(matches!(
            parse(&v2(1, 0x11, &v4[..8])),
            ProxyHeader::Invalid(_)
        ));
        let huge = v2(1, 0x11, &vec![0; MAX_HEADER]);
        assert!(
            matches!(parse(&huge[..16]), ProxyHeader::Invalid(_)),
            "told by its length"
        );
    }
}
