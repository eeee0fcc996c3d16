//! The value types of OpenTelemetry tracing: the collector's endpoint, the
//! protocol spoken to it, and the share of new traces sampled.

use toml::de::DeValue;

use super::OptValue;

/// `otel_endpoint`: where spans are exported,
/// `http://HOST:PORT[/PATH]` or `https://...`. For http/protobuf a URL
/// without a path gets the OTLP default, `/v1/traces` (as the
/// OpenTelemetry SDKs' `OTEL_EXPORTER_OTLP_ENDPOINT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelEndpoint {
    /// Over TLS (`https://`).
    pub tls: bool,
    /// `HOST:PORT` as given (the port defaults to 80, 443 over TLS).
    pub authority: String,
    /// The path given, `""` when none was.
    pub path: String,
}

impl OptValue for OtelEndpoint {
    fn parse_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (tls, rest) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => return Err(format!("{s:?}: expected http(s)://HOST:PORT[/PATH]")),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let plain = |b: u8| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b);
        if authority.is_empty() || !authority.bytes().all(plain) {
            return Err(format!("{s:?}: expected http(s)://HOST:PORT[/PATH]"));
        }
        if !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("{s:?}: the path must be printable ASCII"));
        }
        let authority = if authority.ends_with(']') || !authority.contains(':') {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        } else {
            authority.to_string()
        };
        Ok(OtelEndpoint {
            tls,
            authority,
            path: path.to_string(),
        })
    }
}

/// `otel_protocol`: how spans reach the collector (OTLP's two transports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtelProtocol {
    /// OTLP/HTTP with protobuf bodies, POST to `/v1/traces` (port 4318).
    HttpProtobuf,
    /// OTLP/gRPC, `TraceService/Export` over HTTP/2 (port 4317).
    Grpc,
}

impl OptValue for OtelProtocol {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "http/protobuf" | "http" => Ok(OtelProtocol::HttpProtobuf),
            "grpc" => Ok(OtelProtocol::Grpc),
            _ => Err(format!("expected grpc or http/protobuf, got {s:?}")),
        }
    }
}

/// `otel_headers`: header fields sent with every export (a SaaS
/// collector's API key), in `OTEL_EXPORTER_OTLP_HEADERS`' form:
/// `name=value` pairs separated by commas, values percent-encoded.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct OtelHeaders(pub Vec<(String, String)>);

impl std::fmt::Debug for OtelHeaders {
    /// The names, and a fingerprint of the values: they are secrets (API
    /// keys), never printed, yet a reload must see that one changed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.0.hash(&mut h);
        let names: Vec<&str> = self.0.iter().map(|(n, _)| n.as_str()).collect();
        write!(f, "OtelHeaders({names:?}, values #{:016x})", h.finish())
    }
}

impl OptValue for OtelHeaders {
    fn parse_str(s: &str) -> Result<Self, String> {
        let mut fields = Vec::new();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!(
                    "expected name=value pairs separated by commas, got {pair:?}"
                ));
            };
            let name = name.trim().to_ascii_lowercase();
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if name.is_empty() || !name.bytes().all(token) {
                return Err(format!("{name:?} is not a header field name"));
            }
            let value = percent_decoded(value.trim())
                .filter(|v| v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f)))
                .ok_or_else(|| format!("the value of {name} is not a valid field value"))?;
            fields.push((name, value));
        }
        Ok(OtelHeaders(fields))
    }
}

/// `%XX` escapes decoded (the W3C Baggage octet form OTLP's variable uses).
fn percent_decoded(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// `otel_sample`: the share of traces sampled, 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleRatio(pub f64);

impl OptValue for SampleRatio {
    fn parse_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let ratio = match s.strip_suffix('%') {
            Some(pct) => pct.trim().parse::<f64>().map(|p| p / 100.0),
            None => s.parse::<f64>(),
        };
        match ratio {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(SampleRatio(r)),
            _ => Err(format!(
                "expected a ratio from 0 to 1 (or 0% to 100%), got {s:?}"
            )),
        }
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::String(s) => Self::parse_str(s),
            DeValue::Integer(i) => Self::parse_str(i.as_str()),
            DeValue::Float(f) => Self::parse_str(f.as_str()),
            other => Err(format!("expected a number, got {}", other.type_str())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_http_urls_with_a_port() {
        let e = OtelEndpoint::parse_str("http://127.0.0.1:4318").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("127.0.0.1:4318", "")
        );
        let e = OtelEndpoint::parse_str("http://collector/otlp/v1/traces").unwrap();
        assert_eq!(e.authority, "collector:80");
        assert_eq!(e.path, "/otlp/v1/traces");
        let e = OtelEndpoint::parse_str("http://[::1]").unwrap();
        assert_eq!((e.tls, e.authority.as_str()), (false, "[::1]:80"));
        let e = OtelEndpoint::parse_str("https://otlp.example.com").unwrap();
        assert_eq!(
            (e.tls, e.authority.as_str()),
            (true, "otlp.example.com:443")
        );
        for bad in ["", "127.0.0.1:4317", "http://", "http://a b", "ftp://x"] {
            assert!(OtelEndpoint::parse_str(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn protocols_are_otlps_names() {
        assert_eq!(OtelProtocol::parse_str("grpc"), Ok(OtelProtocol::Grpc));
        let http = OtelProtocol::parse_str("http/protobuf");
        assert_eq!(http, Ok(OtelProtocol::HttpProtobuf));
        assert!(OtelProtocol::parse_str("http/json").is_err());
    }

    #[test]
    fn headers_are_otlps_name_value_pairs_and_never_printed() {
        let h = OtelHeaders::parse_str("api-key=s3cr%3Dt, X-Tenant = a b").unwrap();
        assert_eq!(
            h.0,
            [
                ("api-key".into(), "s3cr=t".into()),
                ("x-tenant".into(), "a b".into())
            ]
        );
        let shown = format!("{h:?}");
        assert!(!shown.contains("s3cr"), "{shown}");
        let other = OtelHeaders::parse_str("api-key=another").unwrap();
        assert_ne!(
            format!("{other:?}"),
            shown,
            "a changed value shows as a change"
        );
        for bad in ["key", "a b=c", "k=%zz", "k=a%0Ab", "=v"] {
            assert!(OtelHeaders::parse_str(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sample_ratios_are_0_to_1() {
        assert_eq!(SampleRatio::parse_str("0.25"), Ok(SampleRatio(0.25)));
        assert_eq!(SampleRatio::parse_str("1"), Ok(SampleRatio(1.0)));
        assert_eq!(SampleRatio::parse_str("10%"), Ok(SampleRatio(0.1)));
        for bad in ["-0.1", "1.5", "abc", "NaN", "200%"] {
            assert!(SampleRatio::parse_str(bad).is_err(), "{bad:?}");
        }
    }
}
