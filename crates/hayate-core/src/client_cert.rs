//! The identity a verified client certificate gives a connection (mutual
//! TLS, `tls_client_auth`), as the handshake found it and as upstreams are
//! told it: HTTP fields ([`FIELDS`]) and FastCGI params named as nginx's
//! and Apache's users know them ([`ClientCert::cgi_params`]).
//!
//! Every value is printable ASCII: the TLS layer escapes anything else
//! (`\xHH`) when it makes one, so a value can go into a header as is.
//! Client-sent fields of these names are never passed on
//! ([`is_client_cert_field`]): upstreams can trust what they see.

/// A client certificate the handshake verified against the site's
/// `tls_client_ca`, described once per connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// Subject DN, RFC 4514 order as OpenSSL's `-nameopt RFC2253` prints
    /// it: `CN=alice,O=Example`.
    pub subject: String,
    /// Issuer DN, the same way.
    pub issuer: String,
    /// Subject alternative names, `DNS:a.example, email:a@example,
    /// URI:spiffe://x, IP:10.0.0.1`, comma-separated; empty when none.
    pub sans: String,
    /// Serial number, upper-case hex (nginx's `$ssl_client_serial`).
    pub serial: String,
    /// SHA-256 of the certificate's DER, lower-case hex.
    pub fingerprint: String,
    /// Its end of validity, as an HTTP date.
    pub not_after: String,
    /// What verified it: the site's `tls_client_ca` file. A request for a
    /// site that trusts another (its Host is not the handshake's SNI) is
    /// misdirected.
    pub trust: Option<std::sync::Arc<str>>,
}

/// The fields upstreams receive, each with the part of the certificate
/// it carries, in the order they are written. `X-Client-Cert-Verify` is
/// `SUCCESS` whenever the others are there.
pub const FIELDS: [(&str, Part); 7] = [
    ("X-Client-Cert-Verify", |_| "SUCCESS"),
    ("X-Client-Cert-Subject", |c| &c.subject),
    ("X-Client-Cert-Issuer", |c| &c.issuer),
    ("X-Client-Cert-SAN", |c| &c.sans),
    ("X-Client-Cert-Serial", |c| &c.serial),
    ("X-Client-Cert-Fingerprint", |c| &c.fingerprint),
    ("X-Client-Cert-Not-After", |c| &c.not_after),
];

/// Reads one part of a certificate's description.
pub type Part = fn(&ClientCert) -> &str;

/// The prefix of every field in [`FIELDS`], lower-case.
const FIELD_PREFIX: &[u8] = b"x-client-cert-";

/// Whether a client-sent field has one of the names hayate sets: such
/// fields are removed, whatever the connection (a client cannot claim a
/// certificate it did not present).
#[inline]
pub fn is_client_cert_field(name: &[u8]) -> bool {
    name.len() >= FIELD_PREFIX.len()
        && name[..FIELD_PREFIX.len()].eq_ignore_ascii_case(FIELD_PREFIX)
}

impl ClientCert {
    /// The FastCGI params of a request over a connection with `cert` (or
    /// none): `SSL_CLIENT_VERIFY` is `SUCCESS` or `NONE`, the others as
    /// Apache's mod_ssl names them (nginx users set the same names from
    /// `$ssl_client_s_dn` and the like).
    pub fn cgi_params(cert: Option<&ClientCert>) -> Vec<(&'static str, &str)> {
        match cert {
            None => vec![("SSL_CLIENT_VERIFY", "NONE")],
            Some(c) => vec![
                ("SSL_CLIENT_VERIFY", "SUCCESS"),
                ("SSL_CLIENT_S_DN", &c.subject),
                ("SSL_CLIENT_I_DN", &c.issuer),
                ("SSL_CLIENT_SAN", &c.sans),
                ("SSL_CLIENT_M_SERIAL", &c.serial),
                ("SSL_CLIENT_FINGERPRINT", &c.fingerprint),
                ("SSL_CLIENT_V_END", &c.not_after),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_hayate_sets_is_one_a_client_cannot_send() {
        for (name, _) in FIELDS {
            assert!(is_client_cert_field(name.as_bytes()), "{name}");
        }
        assert!(is_client_cert_field(b"X-CLIENT-CERT-anything"));
        assert!(!is_client_cert_field(b"X-Client-Cert"));
        assert!(!is_client_cert_field(b"X-Client"));
    }
}
