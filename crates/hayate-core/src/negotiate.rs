//! Accept-Encoding parsing and choice.
//!
//! q-values are kept in thousandths, as the grammar allows at most three
//! decimals. Malformed members are ignored (a client sending garbage gets
//! identity, never an error).

use crate::field::trim_ows as trim;
use crate::Coding;

/// A client's acceptance of each coding hayate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptEncoding {
    br: Option<u16>,
    zstd: Option<u16>,
    gzip: Option<u16>,
    identity: Option<u16>,
    any: Option<u16>,
}

impl Default for AcceptEncoding {
    /// No Accept-Encoding header: identity only (we never guess that a client
    /// decodes something it did not ask for).
    fn default() -> Self {
        AcceptEncoding {
            br: None,
            zstd: None,
            gzip: None,
            identity: None,
            any: None,
        }
    }
}

impl AcceptEncoding {
    /// Parses every Accept-Encoding field value of a request.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> AcceptEncoding {
        let mut ae = AcceptEncoding::default();
        for value in values {
            for member in value.split(|&b| b == b',') {
                let mut parts = member.split(|&b| b == b';');
                let token = trim(parts.next().unwrap_or_default());
                if token.is_empty() {
                    continue;
                }
                let mut q = Some(1000);
                for param in parts {
                    let param = trim(param);
                    if param.len() >= 2 && param[0].eq_ignore_ascii_case(&b'q') && param[1] == b'='
                    {
                        q = parse_q(trim(&param[2..]));
                    }
                }
                let Some(q) = q else { continue };
                let slot = if token == b"*" {
                    &mut ae.any
                } else {
                    match Coding::from_token(token) {
                        Some(Coding::Br) => &mut ae.br,
                        Some(Coding::Zstd) => &mut ae.zstd,
                        Some(Coding::Gzip) => &mut ae.gzip,
                        Some(Coding::Identity) => &mut ae.identity,
                        None => continue,
                    }
                };
                // A repeated member keeps its highest weight.
                *slot = Some(slot.map_or(q, |old| old.max(q)));
            }
        }
        ae
    }

    /// The weight (0-1000) the client gives `coding`.
    pub fn q(&self, coding: Coding) -> u16 {
        let explicit = match coding {
            Coding::Br => self.br,
            Coding::Zstd => self.zstd,
            Coding::Gzip => self.gzip,
            Coding::Identity => self.identity,
        };
        match (explicit, coding) {
            (Some(q), _) => q,
            // Identity is acceptable unless refused, explicitly or by `*;q=0`.
            (None, Coding::Identity) => match self.any {
                Some(0) => 0,
                _ => 1,
            },
            (None, _) => self.any.unwrap_or(0),
        }
    }

    /// Whether the client accepts `coding` at all.
    pub fn accepts(&self, coding: Coding) -> bool {
        self.q(coding) > 0
    }

    /// Chooses among `available` compressed codings (in server preference
    /// order) the one with the highest client weight; ties go to the server's
    /// order. `None` means identity, which is served even when the client
    /// refused it, rather than a 406.
    pub fn choose(&self, available: impl IntoIterator<Item = Coding>) -> Option<Coding> {
        let identity_q = self.q(Coding::Identity);
        let mut best: Option<(Coding, u16)> = None;
        for c in available {
            let q = self.q(c);
            if q > 0 && best.is_none_or(|(_, bq)| q > bq) {
                best = Some((c, q));
            }
        }
        match best {
            // Identity wins only when the client weighs it strictly higher.
            Some((c, q)) if q >= identity_q || identity_q == 0 => Some(c),
            Some((c, _)) if identity_q <= 1 => Some(c),
            _ => None,
        }
    }
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`
fn parse_q(s: &[u8]) -> Option<u16> {
    let (int, frac) = match s.iter().position(|&b| b == b'.') {
        Some(dot) => (&s[..dot], &s[dot + 1..]),
        None => (s, &[][..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    fn choose(header: &str, available: &[Coding]) -> Option<Coding> {
        AcceptEncoding::parse([header.as_bytes()]).choose(available.iter().copied())
    }

    #[test]
    fn table() {
        let all = [Br, Zstd, Gzip];
        let cases: &[(&str, &[Coding], Option<Coding>)] = &[
            ("", &all, None),
            ("gzip", &all, Some(Gzip)),
            ("gzip, deflate, br", &all, Some(Br)),
            ("gzip, br", &[Gzip], Some(Gzip)),
            ("br;q=0.5, gzip", &all, Some(Gzip)),
            ("br;q=0, gzip;q=0", &all, None),
            ("*", &all, Some(Br)),
            ("*;q=0.1, gzip;q=0", &all, Some(Br)),
            ("identity;q=0, gzip;q=0.2", &all, Some(Gzip)),
            ("GZIP;Q=1.000", &all, Some(Gzip)),
            ("gzip;q=1.5", &all, None),
            ("gzip;q=0.1234", &all, None),
            ("x-gzip", &all, Some(Gzip)),
            ("zstd, gzip", &all, Some(Zstd)),
            ("identity, gzip;q=0.5", &all, None),
            (" , ;, gzip ; q=0.9 ,", &all, Some(Gzip)),
            ("br", &[], None),
        ];
        for (header, available, want) in cases {
            assert_eq!(
                choose(header, available),
                *want,
                "Accept-Encoding: {header:?}"
            );
        }
    }

    #[test]
    fn identity_refusal() {
        let ae = AcceptEncoding::parse([&b"identity;q=0"[..]]);
        assert!(!ae.accepts(Identity));
        let ae = AcceptEncoding::parse([&b"*;q=0"[..]]);
        assert!(!ae.accepts(Identity) && !ae.accepts(Gzip));
        let ae = AcceptEncoding::parse([&b"*;q=0, identity"[..]]);
        assert!(ae.accepts(Identity));
        assert!(AcceptEncoding::default().accepts(Identity));
    }

    #[test]
    fn several_fields_combine() {
        let ae = AcceptEncoding::parse([&b"gzip;q=0.2"[..], &b"br"[..]]);
        assert_eq!(ae.choose([Br, Gzip]), Some(Br));
    }
}
