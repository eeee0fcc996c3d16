//! The admin listener's status page (`GET /`): one self-contained HTML file
//! (`status_page.html`, inline style and script, no outside resources)
//! that polls `/status.json` about once a second and fills its tables.
//!
//! Built once when the admin listener starts: the gzip body (the page is
//! ~12 KiB, ~4 KiB compressed) and a Content-Security-Policy that allows
//! only this page's own style and script (by SHA-256) and fetches to the
//! same origin, so nothing injected into it could run or load anything.
//! The script inserts every value with `textContent`, never as markup.

use base64::Engine;
use bytes::Bytes;
use hayate_core::negotiate::AcceptEncoding;
use hayate_core::request::RequestHead;
use hayate_core::{Body, Coding, Response, Status};

const HTML: &str = include_str!("status_page.html");

/// The page, ready to serve.
pub struct StatusPage {
    html: Bytes,
    gzip: Option<Bytes>,
    csp: String,
}

impl StatusPage {
    /// Compresses the page and hashes its style and script.
    pub fn build() -> StatusPage {
        let gzip = hayate_compress::encode::compress(Coding::Gzip, 9, HTML.as_bytes())
            .map(Bytes::from)
            .ok();
        let hash = |open: &str, close: &str| {
            let start = HTML.find(open).map_or(0, |i| i + open.len());
            let end = HTML[start..].find(close).map_or(start, |i| start + i);
            format!("'sha256-{}'", sha256_base64(&HTML[start..end]))
        };
        let csp = format!(
            "default-src 'none'; style-src {}; script-src {}; connect-src 'self'; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            hash("<style>", "</style>"),
            hash("<script>", "</script>"),
        );
        StatusPage {
            html: Bytes::from_static(HTML.as_bytes()),
            gzip,
            csp,
        }
    }

    /// The page for this request: gzip when the client takes it.
    pub fn response(&self, req: &RequestHead) -> Response {
        let mut r = Response::new(Status::OK);
        r.header("Content-Type", b"text/html; charset=utf-8");
        r.header("Cache-Control", b"no-store");
        r.header("Content-Security-Policy", self.csp.as_bytes());
        r.header("X-Content-Type-Options", b"nosniff");
        r.header("Referrer-Policy", b"no-referrer");
        r.header("Vary", b"Accept-Encoding");
        let accept = AcceptEncoding::parse(req.headers_named(b"accept-encoding"));
        r.body = match &self.gzip {
            Some(gz) if accept.q(Coding::Gzip) > 0 => {
                r.header("Content-Encoding", b"gzip");
                Body::Bytes(gz.clone())
            }
            _ => Body::Bytes(self.html.clone()),
        };
        r
    }
}

/// SHA-256 through rustls' provider (aws-lc-rs), the digest hayate already
/// links, rather than one more crate for one hash at startup.
fn sha256_base64(text: &str) -> String {
    use tokio_rustls::rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let digest = TLS13_AES_128_GCM_SHA256
        .tls13()
        .map(|s| s.common.hash_provider.hash(text.as_bytes()));
    match digest {
        Some(d) => base64::engine::general_purpose::STANDARD.encode(d.as_ref()),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use hayate_core::h1::request::{self, HeadLimits, Parsed, Spare};
    use hayate_core::transport::Scheme;

    fn head(raw: &[u8]) -> RequestHead {
        let mut buf = BytesMut::from(raw);
        let limits = HeadLimits {
            max_request_line: 1024,
            max_header_bytes: 4096,
            max_headers: 16,
            max_body_size: 0,
        };
        match request::parse(&mut buf, &limits, &mut Spare::default(), Scheme::Http) {
            Parsed::Request(r) => r.head,
            _ => panic!("parse"),
        }
    }

    fn field<'a>(r: &'a Response, name: &str) -> Option<&'a [u8]> {
        r.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    #[test]
    fn gzip_when_accepted_identity_otherwise() {
        let page = StatusPage::build();
        let r = page.response(&head(
            b"GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: br, gzip\r\n\r\n",
        ));
        assert_eq!(field(&r, "content-encoding"), Some(&b"gzip"[..]));
        let Body::Bytes(gz) = &r.body else { panic!() };
        assert!(gz.len() * 2 < HTML.len(), "{} of {}", gz.len(), HTML.len());
        let back = hayate_compress::encode::decompress(Coding::Gzip, gz).expect("gunzip");
        assert_eq!(back, HTML.as_bytes());
        let r = page.response(&head(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert_eq!(field(&r, "content-encoding"), None);
        let Body::Bytes(plain) = &r.body else {
            panic!()
        };
        assert_eq!(plain, HTML.as_bytes());
        assert_eq!(field(&r, "x-content-type-options"), Some(&b"nosniff"[..]));
    }

    #[test]
    fn csp_allows_only_the_pages_own_style_and_script() {
        // The known digest of "" proves the hash is SHA-256 in base64.
        assert_eq!(
            sha256_base64(""),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
        let csp = StatusPage::build().csp;
        assert!(csp.starts_with("default-src 'none'; "), "{csp}");
        assert!(csp.contains("connect-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert!(
            !csp.contains(&sha256_base64("")),
            "both blocks found: {csp}"
        );
        // Self-contained: nothing refers outside the page.
        for outside in ["http://", "https://", "src=", "href=", "@import", "url("] {
            let uses = HTML.matches(outside).count();
            let allowed = HTML.matches("http://www.w3.org/2000/svg").count();
            let uses = if outside == "http://" {
                uses - allowed
            } else {
                uses
            };
            assert_eq!(uses, 0, "{outside} in the page");
        }
        assert!(!HTML.contains("innerHTML"), "values go in as text only");
    }
}
