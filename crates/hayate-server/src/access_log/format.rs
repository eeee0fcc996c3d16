//! The access log's lines: the presets (`combined`, `common`, `json`,
//! `ecs`) and templates of `$variables`, each value escaped for its line.
//!
//! A line is written straight into the worker's buffer: numbers through
//! `itoa`, times from the per-second cache (`hayate_core::date`), escapes
//! from a table; no value allocates (`combined` allocated a String for its
//! time before). Instructions per request (bench/instructions/run, debug
//! builds under callgrind, 320 requests, before -> after this module):
//! combined log on, static 87,443 -> 86,469 and proxied 235,365 ->
//! 236,174 (within the runs' spread); log off, 78,431 -> 77,943 and
//! 227,119 -> 226,848. A full template or `ecs` costs some 8,000
//! (static) and 16,000 (proxied) debug-build instructions over `combined`.

use hayate_config::values::{LogFormat, LogPiece, LogTemplate, LogVariable};
use hayate_core::request::{RequestHead, Version};
use hayate_proxy::request_id_hex;

use super::Entry;

/// Appends the line of one exchange in `format`.
pub(super) fn line(out: &mut Vec<u8>, format: &LogFormat, req: &RequestHead, e: &Entry<'_>) {
    match format {
        LogFormat::Combined => combined(out, req, e),
        LogFormat::Common => {
            common(out, req, e);
            out.push(b'\n');
        }
        LogFormat::Json => json(out, req, e),
        LogFormat::Ecs => ecs(out, req, e),
        LogFormat::Template(t) => template(out, t, req, e),
    }
}

/// NCSA common: `client - - [time] "request" status bytes`.
fn common(out: &mut Vec<u8>, req: &RequestHead, e: &Entry<'_>) {
    out.extend_from_slice(e.peer.as_bytes());
    out.extend_from_slice(b" - - [");
    hayate_core::date::append_clf_now(out);
    out.extend_from_slice(b"] \"");
    request_line(out, req);
    out.extend_from_slice(b"\" ");
    out.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
}

/// NCSA combined: common, then `"referer" "user agent"`, ` cache=S` on
/// routes that cache and ` grpc-status=N` for gRPC calls (GoAccess's COMBINED ignores what follows).
fn combined(out: &mut Vec<u8>, req: &RequestHead, e: &Entry<'_>) {
    common(out, req, e);
    out.extend_from_slice(b" \"");
    escape(out, req.header(b"referer").unwrap_or(b"-"));
    out.extend_from_slice(b"\" \"");
    escape(out, req.header(b"user-agent").unwrap_or(b"-"));
    out.push(b'"');
    if let Some(c) = e.cache {
        out.extend_from_slice(b" cache=");
        out.extend_from_slice(c.as_bytes());
    }
    if let Some(g) = e.grpc_status {
        out.extend_from_slice(b" grpc-status=");
        out.extend_from_slice(itoa::Buffer::new().format(g).as_bytes());
    }
    out.push(b'\n');
}

/// `METHOD TARGET VERSION`, escaped.
fn request_line(out: &mut Vec<u8>, req: &RequestHead) {
    escape(out, req.method());
    out.push(b' ');
    escape(out, req.original_target());
    out.push(b' ');
    out.extend_from_slice(req.version.as_str().as_bytes());
}

fn json(out: &mut Vec<u8>, req: &RequestHead, e: &Entry<'_>) {
    out.extend_from_slice(b"{\"time\":\"");
    hayate_core::date::append_iso_now(out);
    out.extend_from_slice(b"\",\"remote\":\"");
    json_escape(out, e.peer.as_bytes());
    out.extend_from_slice(b"\",\"method\":\"");
    json_escape(out, req.method());
    out.extend_from_slice(b"\",\"uri\":\"");
    json_escape(out, req.original_target());
    out.extend_from_slice(b"\",\"protocol\":\"");
    out.extend_from_slice(req.version.as_str().as_bytes());
    out.extend_from_slice(b"\",\"host\":\"");
    json_escape(out, req.host().unwrap_or_default());
    out.extend_from_slice(b"\",\"status\":");
    out.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
    out.extend_from_slice(b",\"bytes\":");
    out.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
    out.extend_from_slice(b",\"duration_us\":");
    out.extend_from_slice(
        itoa::Buffer::new()
            .format(e.duration.as_micros() as u64)
            .as_bytes(),
    );
    out.extend_from_slice(b",\"referer\":\"");
    json_escape(out, req.header(b"referer").unwrap_or_default());
    out.extend_from_slice(b"\",\"user_agent\":\"");
    json_escape(out, req.header(b"user-agent").unwrap_or_default());
    out.push(b'"');
    if let Some(c) = e.cache {
        out.extend_from_slice(b",\"cache\":\"");
        out.extend_from_slice(c.as_bytes());
        out.push(b'"');
    }
    if let Some(tls) = e.tls {
        out.extend_from_slice(b",\"tls\":\"");
        out.extend_from_slice(tls.version.as_bytes());
        out.push(b'"');
        // Unknown for HTTP/3 (quinn does not say): left out.
        if !tls.cipher.is_empty() {
            out.extend_from_slice(b",\"cipher\":\"");
            out.extend_from_slice(tls.cipher.as_bytes());
            out.push(b'"');
        }
    }
    if let Some(g) = e.grpc_status {
        out.extend_from_slice(b",\"grpc_status\":");
        out.extend_from_slice(itoa::Buffer::new().format(g).as_bytes());
    }
    out.extend_from_slice(b"}\n");
}

/// The ECS version whose field names [`ecs`] writes.
const ECS_VERSION: &str = "8.11.0";

/// Elastic Common Schema, nested objects as Filebeat's ECS loggers write
/// them; fields with no value are left out, as ECS wants.
fn ecs(out: &mut Vec<u8>, req: &RequestHead, e: &Entry<'_>) {
    out.extend_from_slice(b"{\"@timestamp\":\"");
    hayate_core::date::append_iso_now(out);
    out.extend_from_slice(b"\",\"ecs\":{\"version\":\"");
    out.extend_from_slice(ECS_VERSION.as_bytes());
    out.extend_from_slice(
        b"\"},\"event\":{\"kind\":\"event\",\"category\":[\"web\"],\"duration\":",
    );
    let nanos = u64::try_from(e.duration.as_nanos()).unwrap_or(u64::MAX);
    out.extend_from_slice(itoa::Buffer::new().format(nanos).as_bytes());
    out.extend_from_slice(b"},\"client\":{\"ip\":\"");
    json_escape(out, e.peer.as_bytes());
    out.extend_from_slice(b"\"},\"http\":{\"version\":\"");
    out.extend_from_slice(match req.version {
        Version::Http10 => b"1.0",
        Version::Http11 => b"1.1",
        Version::Http2 => b"2",
        Version::Http3 => b"3",
    });
    out.extend_from_slice(b"\",\"request\":{\"method\":\"");
    json_escape(out, req.method());
    out.push(b'"');
    if let Some(id) = request_id(req, e, &mut [0; 16]) {
        out.extend_from_slice(b",\"id\":\"");
        json_escape(out, id);
        out.push(b'"');
    }
    if let Some(referer) = req.header(b"referer") {
        out.extend_from_slice(b",\"referrer\":\"");
        json_escape(out, referer);
        out.push(b'"');
    }
    out.extend_from_slice(b"},\"response\":{\"status_code\":");
    out.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
    out.extend_from_slice(b",\"body\":{\"bytes\":");
    out.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
    out.extend_from_slice(b"}}},\"url\":{\"original\":\"");
    json_escape(out, req.original_target());
    out.push(b'"');
    if let Some(host) = req.host() {
        out.extend_from_slice(b",\"domain\":\"");
        json_escape(out, host);
        out.push(b'"');
    }
    out.push(b'}');
    if let Some(ua) = req.header(b"user-agent") {
        out.extend_from_slice(b",\"user_agent\":{\"original\":\"");
        json_escape(out, ua);
        out.extend_from_slice(b"\"}");
    }
    if let Some(tls) = e.tls {
        // ECS splits "TLSv1.3" into protocol and version.
        let (protocol, version) = tls.version.split_at(tls.version.find('v').unwrap_or(0));
        out.extend_from_slice(b",\"tls\":{\"version_protocol\":\"");
        out.extend_from_slice(protocol.to_ascii_lowercase().as_bytes());
        out.extend_from_slice(b"\",\"version\":\"");
        out.extend_from_slice(version.trim_start_matches('v').as_bytes());
        out.push(b'"');
        if !tls.cipher.is_empty() {
            out.extend_from_slice(b",\"cipher\":\"");
            out.extend_from_slice(tls.cipher.as_bytes());
            out.push(b'"');
        }
        out.push(b'}');
    }
    // hayate's own fields, under its name as ECS asks of custom fields.
    out.extend_from_slice(b",\"hayate\":{");
    let mut first = true;
    let mut key = |out: &mut Vec<u8>, k: &[u8]| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(k);
        out.extend_from_slice(b"\":");
    };
    if let Some((site, prefix)) = e.route {
        key(out, b"route");
        out.push(b'"');
        json_escape(out, site.as_bytes());
        json_escape(out, prefix);
        out.push(b'"');
    }
    if let Some(c) = e.cache {
        key(out, b"cache");
        out.push(b'"');
        out.extend_from_slice(c.as_bytes());
        out.push(b'"');
    }
    if let Some(u) = e.upstream {
        key(out, b"upstream");
        out.extend_from_slice(b"{\"connect_time\":");
        seconds(out, u.connect_us.into());
        out.extend_from_slice(b",\"header_time\":");
        seconds(out, u.head_us.into());
        out.push(b'}');
    }
    out.extend_from_slice(b"}}\n");
}

/// A line of a template.
fn template(out: &mut Vec<u8>, t: &LogTemplate, req: &RequestHead, e: &Entry<'_>) {
    for piece in &t.pieces {
        match piece {
            LogPiece::Text(text) => out.extend_from_slice(text.as_bytes()),
            LogPiece::Field(name) => escape(out, req.header(name.as_bytes()).unwrap_or(b"-")),
            LogPiece::Var(v) => variable(out, *v, req, e),
        }
    }
    out.push(b'\n');
}

/// One variable's value, escaped (`-` when it has none, as nginx writes).
fn variable(out: &mut Vec<u8>, v: LogVariable, req: &RequestHead, e: &Entry<'_>) {
    let dash = |out: &mut Vec<u8>| out.push(b'-');
    match v {
        LogVariable::ClientIp => escape(out, e.peer.as_bytes()),
        LogVariable::RemoteUser => match basic_user(req, &mut [0; 192]) {
            Some(user) => escape(out, user),
            None => dash(out),
        },
        LogVariable::TimeLocal => hayate_core::date::append_clf_now(out),
        LogVariable::TimeIso8601 => hayate_core::date::append_iso_now(out),
        LogVariable::Request => request_line(out, req),
        LogVariable::RequestMethod => escape(out, req.method()),
        LogVariable::RequestUri => escape(out, req.original_target()),
        LogVariable::Host => escape(out, req.host().unwrap_or(b"-")),
        LogVariable::Status => {
            out.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes())
        }
        LogVariable::BodyBytesSent => {
            out.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes())
        }
        LogVariable::RequestId => match request_id(req, e, &mut [0; 16]) {
            Some(id) => escape(out, id),
            None => dash(out),
        },
        LogVariable::TraceId => match &req.trace {
            Some(t) => out.extend_from_slice(t.trace_id_hex()),
            None => dash(out),
        },
        LogVariable::Route => match e.route {
            Some((site, prefix)) => {
                escape(out, site.as_bytes());
                escape(out, prefix);
            }
            None => dash(out),
        },
        LogVariable::Protocol => out.extend_from_slice(req.version.as_str().as_bytes()),
        LogVariable::TlsVersion => match e.tls {
            Some(tls) => out.extend_from_slice(tls.version.as_bytes()),
            None => dash(out),
        },
        LogVariable::Cache => out.extend_from_slice(e.cache.unwrap_or("-").as_bytes()),
        LogVariable::RequestTime => seconds(
            out,
            u64::try_from(e.duration.as_micros()).unwrap_or(u64::MAX),
        ),
        LogVariable::UpstreamConnectTime => match e.upstream {
            Some(u) => seconds(out, u.connect_us.into()),
            None => dash(out),
        },
        LogVariable::UpstreamHeaderTime => match e.upstream {
            Some(u) => seconds(out, u.head_us.into()),
            None => dash(out),
        },
    }
}

/// The request's id: the one hayate made for its upstream, else a valid
/// one the client sent (printable, at most 128 bytes: what the proxy
/// passes on); `hex` holds a made one's digits.
pub fn request_id<'a>(
    req: &'a RequestHead,
    e: &Entry<'_>,
    hex: &'a mut [u8; 16],
) -> Option<&'a [u8]> {
    match e.upstream {
        Some(u) if u.made_request_id != 0 => {
            *hex = request_id_hex(u.made_request_id);
            Some(&hex[..])
        }
        _ => req
            .header(b"x-request-id")
            .filter(|v| !v.is_empty() && v.len() <= 128 && v.iter().all(u8::is_ascii_graphic)),
    }
}

/// The user name of a Basic Authorization (nginx's `$remote_user`),
/// decoded into `buf`; `None` without one, or when it is not Basic or too
/// long for `buf`.
fn basic_user<'a>(req: &RequestHead, buf: &'a mut [u8; 192]) -> Option<&'a [u8]> {
    use base64::Engine;
    let value = req.header(b"authorization")?;
    let token = match value.split_at_checked(6) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"basic ") => rest.trim_ascii(),
        _ => return None,
    };
    let n = base64::engine::general_purpose::STANDARD
        .decode_slice(token, buf)
        .ok()?;
    let credential = &buf[..n];
    let user = credential.split(|&b| b == b':').next()?;
    (!user.is_empty()).then_some(user)
}

/// Seconds with milliseconds (`0.042`), from microseconds, as nginx
/// writes `$request_time`.
fn seconds(out: &mut Vec<u8>, us: u64) {
    let ms = us / 1000;
    out.extend_from_slice(itoa::Buffer::new().format(ms / 1000).as_bytes());
    let frac = ms % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `\xHH` for quotes, backslashes, control and non-ASCII bytes, as nginx
/// escapes its log (so a value cannot end its field or its line).
fn escape(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.push(b);
        }
    }
}

/// A JSON string's content: quotes and backslashes escaped, control and
/// non-ASCII bytes as `\u00HH` (a value's bytes may not be UTF-8).
fn json_escape(out: &mut Vec<u8>, s: &[u8]) {
    const LOWER: &[u8; 16] = b"0123456789abcdef";
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b if !(0x20..0x7f).contains(&b) => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                LOWER[usize::from(b >> 4)],
                LOWER[usize::from(b & 0xf)],
            ]),
            b => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::h1::request::{parse, HeadLimits, Parsed};
    use hayate_core::transport::TlsInfo;
    use hayate_core::UpstreamTimes;
    use std::time::Duration;

    fn request(raw: &str) -> RequestHead {
        let limits = HeadLimits {
            max_request_line: 1000,
            max_header_bytes: 1000,
            max_headers: 10,
            max_body_size: 0,
        };
        match parse(
            &mut bytes::BytesMut::from(raw.as_bytes()),
            &limits,
            &mut Default::default(),
            hayate_core::transport::Scheme::Http,
        ) {
            Parsed::Request(r) => r.head,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lines_escape_client_values() {
        let req = request(
            "GET /a?\"x\" HTTP/1.1\r\nHost: h\r\nUser-Agent: evil\"\\ agent\r\nReferer: r\r\n\r\n",
        );
        let e = Entry {
            peer: "127.0.0.1",
            status: 200,
            bytes: 12,
            duration: Duration::from_micros(7),
            cache: None,
            tls: None,
            upstream: None,
            route: None,
            grpc_status: None,
        };
        let mut out = Vec::new();
        combined(&mut out, &req, &e);
        let line = String::from_utf8(out).expect("ascii");
        assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
        assert!(
            line.ends_with(
                "] \"GET /a?\\x22x\\x22 HTTP/1.1\" 200 12 \"r\" \"evil\\x22\\x5C agent\"\n"
            ),
            "{line}"
        );
        let mut out = Vec::new();
        combined(
            &mut out,
            &req,
            &Entry {
                cache: Some("HIT"),
                tls: None,
                ..e
            },
        );
        assert!(out.ends_with(b"agent\" cache=HIT\n"));
        let mut out = Vec::new();
        json(
            &mut out,
            &req,
            &Entry {
                cache: Some("MISS"),
                tls: Some(TlsInfo {
                    version: "TLSv1.3",
                    cipher: "TLS13_AES_128_GCM_SHA256",
                }),
                ..e
            },
        );
        assert!(out.ends_with(
            b",\"cache\":\"MISS\",\"tls\":\"TLSv1.3\",\"cipher\":\"TLS13_AES_128_GCM_SHA256\"}\n"
        ));
        // HTTP/3: the version, no cipher (quinn does not say which).
        let mut out = Vec::new();
        let h3 = TlsInfo {
            version: "TLSv1.3",
            cipher: "",
        };
        json(&mut out, &req, &Entry { tls: Some(h3), ..e });
        assert!(out.ends_with(b",\"tls\":\"TLSv1.3\"}\n"), "{out:?}");
        let mut out = Vec::new();
        json(&mut out, &req, &e);
        let line = String::from_utf8(out).expect("ascii");
        assert!(line.contains("\"uri\":\"/a?\\\"x\\\"\""), "{line}");
        assert!(
            line.contains("\"user_agent\":\"evil\\\"\\\\ agent\""),
            "{line}"
        );
        assert!(
            line.contains("\"status\":200,\"bytes\":12,\"duration_us\":7"),
            "{line}"
        );
    }

    fn render(format: &str, req: &RequestHead, e: &Entry<'_>) -> String {
        use hayate_config::values::OptValue;
        let mut out = Vec::new();
        line(
            &mut out,
            &LogFormat::parse_str(format).expect("format"),
            req,
            e,
        );
        String::from_utf8(out).expect("ascii")
    }

    fn entry() -> Entry<'static> {
        Entry {
            peer: "10.0.0.1",
            status: 502,
            bytes: 0,
            duration: Duration::from_micros(1_234_567),
            cache: None,
            tls: None,
            upstream: None,
            route: Some(("*", b"/api")),
            grpc_status: None,
        }
    }

    #[test]
    fn templates_render_each_variable() {
        let req = request(
            "POST /api/x?y=1 HTTP/1.1\r\nHost: ex.com\r\nAuthorization: Basic YWxpY2U6c2VjcmV0\r\nX-Request-Id: abc-1\r\nX-Thing: t\r\n\r\n",
        );
        let e = Entry {
            upstream: Some(UpstreamTimes {
                connect_us: 1_500,
                head_us: 42_000,
                made_request_id: 0,
                attempt_started: std::time::Instant::now(),
                member: 0,
                queued_us: 0,
            }),
            tls: Some(TlsInfo {
                version: "TLSv1.3",
                cipher: "TLS13_AES_128_GCM_SHA256",
            }),
            ..entry()
        };
        let line = render(
            "$client_ip|$remote_user|$request|$request_method|$request_uri|$host|$status|\
             $body_bytes_sent|$http_referer|$http_x_thing|$request_id|$trace_id|$route|$protocol|\
             $tls_version|$cache|$request_time|$upstream_connect_time|$upstream_header_time",
            &req,
            &e,
        );
        assert_eq!(
            line,
            "10.0.0.1|alice|POST /api/x?y=1 HTTP/1.1|POST|/api/x?y=1|ex.com|502|0|-|t|abc-1|-|*/api|\
             HTTP/1.1|TLSv1.3|-|1.234|0.001|0.042\n"
        );
        // A made id wins over none; no upstream: dashes.
        let made = Entry {
            upstream: Some(UpstreamTimes {
                connect_us: 0,
                head_us: 1,
                made_request_id: 0xab,
                attempt_started: std::time::Instant::now(),
                member: 0,
                queued_us: 0,
            }),
            ..entry()
        };
        let bare = request("GET / HTTP/1.0\r\n\r\n");
        assert_eq!(
            render(
                "$request_id $remote_user $upstream_header_time",
                &bare,
                &made
            ),
            "00000000000000ab - 0.000\n"
        );
        assert_eq!(
            render("$request_id $upstream_connect_time $host", &bare, &entry()),
            "- - -\n"
        );
        let time = render("[$time_local] $time_iso8601", &bare, &entry());
        assert!(
            time.starts_with('[') && time.contains(" +0000] 20"),
            "{time}"
        );
    }

    #[test]
    fn no_value_can_forge_a_line() {
        // As HTTP/2 hands values over: any byte but CR, LF and NUL.
        let mut req = RequestHead::new(
            b"GET",
            b"/\"q",
            hayate_core::request::Version::Http2,
            hayate_core::transport::Scheme::Http,
        );
        req.push_field(b"user-agent", b"a\"\t\x7f\xc3\xa9 \" 200 0 \"x");
        for format in [
            "combined",
            "common",
            "$http_user_agent $request",
            "json",
            "ecs",
        ] {
            let line = render(format, &req, &entry());
            assert_eq!(line.matches('\n').count(), 1, "{format}: {line}");
            assert!(line.ends_with('\n'));
            assert!(
                !line.bytes().any(|b| b < 0x20 && b != b'\n' || b >= 0x7f),
                "{format}: {line}"
            );
        }
        let line = render("$http_user_agent", &req, &entry());
        assert_eq!(line, "a\\x22\\x09\\x7F\\xC3\\xA9 \\x22 200 0 \\x22x\n");
        let combined = render("combined", &req, &entry());
        assert!(combined.contains("\"GET /\\x22q HTTP/2"), "{combined}");
        let ecs = render("ecs", &req, &entry());
        assert!(
            ecs.contains("\"user_agent\":{\"original\":\"a\\\"\\u0009\\u007f\\u00c3\\u00a9 \\\" 200 0 \\\"x\"}"),
            "{ecs}"
        );
    }

    #[test]
    fn common_is_combined_without_referer_and_agent() {
        let req = request("GET /a HTTP/1.1\r\nHost: h\r\nUser-Agent: u\r\n\r\n");
        let common = render("common", &req, &entry());
        let combined = render("combined", &req, &entry());
        assert_eq!(format!("{} \"-\" \"u\"\n", common.trim_end()), combined);
        assert!(common.ends_with("\"GET /a HTTP/1.1\" 502 0\n"), "{common}");
    }

    #[test]
    fn ecs_names_tls_upstream_times_and_the_route() {
        let req = request("GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
        let e = Entry {
            tls: Some(TlsInfo {
                version: "TLSv1.3",
                cipher: "TLS13_AES_128_GCM_SHA256",
            }),
            cache: Some("HIT"),
            upstream: Some(UpstreamTimes {
                connect_us: 2_000,
                head_us: 31_000,
                made_request_id: 0x1234,
                attempt_started: std::time::Instant::now(),
                member: 0,
                queued_us: 0,
            }),
            ..entry()
        };
        let line = render("ecs", &req, &e);
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(v["tls"]["version_protocol"], "tls", "{line}");
        assert_eq!(v["tls"]["version"], "1.3", "{line}");
        assert_eq!(v["http"]["request"]["id"], "0000000000001234");
        assert_eq!(v["http"]["response"]["status_code"], 502);
        assert_eq!(v["event"]["duration"], 1_234_567_000u64);
        assert_eq!(v["url"]["domain"], "h");
        assert_eq!(v["hayate"]["route"], "*/api");
        assert_eq!(v["hayate"]["cache"], "HIT");
        assert_eq!(v["hayate"]["upstream"]["connect_time"], 0.002);
        assert_eq!(v["hayate"]["upstream"]["header_time"], 0.031);
        assert!(v.get("user_agent").is_none(), "no value, no field: {line}");
        // HTTP/3: no cipher known, no cipher field.
        let h3 = TlsInfo {
            version: "TLSv1.3",
            cipher: "",
        };
        let line = render("ecs", &req, &Entry { tls: Some(h3), ..e });
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(v["tls"]["version"], "1.3", "{line}");
        assert!(v["tls"].get("cipher").is_none(), "{line}");
    }
}
