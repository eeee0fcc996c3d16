//! The CGI/1.1 environment a FastCGI responder receives (RFC 3875 §4.1,
//! with the names nginx's `fastcgi_params` adds and PHP reads): the script
//! the server resolved ([`CgiScript`]), the request line, the body's type
//! and length, who asked and on which port, and each request field as
//! `HTTP_*`.
//!
//! Field names are mapped as CGI does (upper case, `-` to `_`), so two
//! names could meet on one variable: a field whose name has an `_` is
//! dropped (nginx's `underscores_in_headers off`), or `X_Forwarded_For`
//! would pass for `X-Forwarded-For`. `Proxy` is never passed (httpoxy,
//! CVE-2016-5385: it would become `HTTP_PROXY`, which HTTP clients in the
//! app take for their proxy setting).

use hayate_core::client_cert::{is_client_cert_field, ClientCert};
use hayate_core::field::strip_port;
use hayate_core::transport::Scheme;

use super::record::{push_lengths, push_pair, push_pair_parts};
use crate::request::CgiScript;
use crate::ProxyRequest;

/// The name-value pairs of one request (`record::push_pair` encoding).
/// `content_length`: the body's length (none for a request without body);
/// `request_id`: the X-Request-Id the error log and the app share.
pub(crate) fn request_params(
    req: &ProxyRequest<'_>,
    script: &CgiScript<'_>,
    content_length: Option<u64>,
    request_id: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    let root = script.document_root.as_bytes();
    // Pairs whose values are parts joined are written in place.
    let (prefix, name, info) = (script.url_prefix, script.script_name, script.path_info);
    push_pair_parts(&mut out, b"SCRIPT_FILENAME", &[root, name]);
    push_pair_parts(&mut out, b"SCRIPT_NAME", &[prefix, name]);
    push_pair_parts(&mut out, b"DOCUMENT_URI", &[prefix, name, info]);
    if !info.is_empty() {
        push_pair_parts(&mut out, b"PATH_TRANSLATED", &[root, info]);
    }
    let mut pair = |name: &str, value: &[u8]| push_pair(&mut out, name.as_bytes(), value);
    pair("GATEWAY_INTERFACE", b"CGI/1.1");
    pair("SERVER_SOFTWARE", b"hayate");
    pair("SERVER_PROTOCOL", script.protocol.as_bytes());
    pair("REQUEST_METHOD", req.method);
    pair("REQUEST_URI", script.request_uri);
    let query = req
        .target
        .iter()
        .position(|&b| b == b'?')
        .map_or(&b""[..], |q| &req.target[q + 1..]);
    pair("QUERY_STRING", query);
    pair("DOCUMENT_ROOT", root);
    pair("PATH_INFO", info);
    if let Some(t) = req.field(b"content-type") {
        pair("CONTENT_TYPE", t);
    }
    if let Some(n) = content_length {
        pair("CONTENT_LENGTH", itoa::Buffer::new().format(n).as_bytes());
    }
    let host = req.host.unwrap_or_default();
    pair("SERVER_NAME", strip_port(host));
    pair(
        "SERVER_PORT",
        itoa::Buffer::new().format(script.server_port).as_bytes(),
    );
    pair("REMOTE_ADDR", req.client_ip.as_bytes());
    if let Some(port) = script.remote_port {
        pair("REMOTE_PORT", itoa::Buffer::new().format(port).as_bytes());
    }
    if req.scheme == Scheme::Https {
        pair("HTTPS", b"on");
        for (name, value) in ClientCert::cgi_params(req.client_cert) {
            pair(name, value.as_bytes());
        }
    }
    pair("REQUEST_SCHEME", req.scheme.as_str().as_bytes());
    // PHP built with --enable-force-cgi-redirect runs only with it.
    pair("REDIRECT_STATUS", b"200");
    pair("HTTP_X_REQUEST_ID", request_id);
    // The authority the request was routed by: the Host field on HTTP/1.1,
    // `:authority` on HTTP/2, which has no Host field (without it, apps
    // that read HTTP_HOST, WordPress among them, build `http:///` URLs).
    if let Some(host) = req.host {
        pair("HTTP_HOST", host);
    }
    push_http_variables(&mut out, &req.headers);
    out
}

/// `HTTP_*` for each request field passed, repeated fields joined into one
/// value (`, `, or `; ` for Cookie as RFC 9110 §5.3 and RFC 6265 §5.4 say),
/// written in place: a browser's dozen fields were two allocations each.
/// Names map one to one (upper case, `-` to `_`; names with `_` are
/// dropped), so fields of one name are the fields of one variable.
fn push_http_variables(out: &mut Vec<u8>, fields: &[(&[u8], &[u8])]) {
    for (i, &(name, value)) in fields.iter().enumerate() {
        if !passed(name) {
            continue;
        }
        let same_name = |(other, _): &&(&[u8], &[u8])| other.eq_ignore_ascii_case(name);
        // A repeated field went out with the first of its name.
        if fields[..i].iter().any(|f| same_name(&f)) {
            continue;
        }
        let later = || fields[i + 1..].iter().filter(same_name);
        let sep: &[u8] = if name.eq_ignore_ascii_case(b"cookie") {
            b"; "
        } else {
            b", "
        };
        let value_len = value.len() + later().map(|(_, v)| sep.len() + v.len()).sum::<usize>();
        push_lengths(out, b"HTTP_".len() + name.len(), value_len);
        out.extend_from_slice(b"HTTP_");
        out.extend(name.iter().map(|&b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        out.extend_from_slice(value);
        for (_, v) in later() {
            out.extend_from_slice(sep);
            out.extend_from_slice(v);
        }
    }
}

/// Whether a request field becomes an `HTTP_*` variable: not one CGI
/// names otherwise (Host, Content-Type, Content-Length), hayate's own
/// (X-Request-Id, client certificate fields), `Proxy` (httpoxy) or a name
/// with `_`.
fn passed(name: &[u8]) -> bool {
    !(name.contains(&b'_')
        || name.eq_ignore_ascii_case(b"proxy")
        || name.eq_ignore_ascii_case(b"host")
        || name.eq_ignore_ascii_case(b"content-type")
        || name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"x-request-id")
        || is_client_cert_field(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairs back as (name, value) strings.
    fn decode(mut b: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let len = |b: &mut &[u8]| {
            if b[0] < 128 {
                let n = b[0] as usize;
                *b = &b[1..];
                n
            } else {
                let n = u32::from_be_bytes([b[0] & 0x7f, b[1], b[2], b[3]]) as usize;
                *b = &b[4..];
                n
            }
        };
        while !b.is_empty() {
            let (n, v) = (len(&mut b), len(&mut b));
            let name = String::from_utf8_lossy(&b[..n]).into_owned();
            let value = String::from_utf8_lossy(&b[n..n + v]).into_owned();
            b = &b[n + v..];
            out.push((name, value));
        }
        out
    }

    #[test]
    fn the_cgi_environment() {
        let req = ProxyRequest {
            method: b"POST",
            target: b"/index.php/a/b?x=1&y=2",
            headers: vec![
                (&b"Host"[..], &b"example.com:8080"[..]),
                (b"Content-Type", b"application/x-www-form-urlencoded"),
                (b"Content-Length", b"3"),
                (b"Proxy", b"http://evil:1"),
                (b"X_Forwarded_For", b"6.6.6.6"),
                (b"Cookie", b"a=1"),
                (b"cookie", b"b=2"),
                (b"Accept", b"text/html"),
                (b"X-Request-Id", b"spoofed"),
            ],
            client_ip: "10.0.0.9",
            forwarded_chain: None,
            host: Some(b"example.com:8080"),
            scheme: Scheme::Https,
            cgi: None,
            ports: Default::default(),
            client_cert: None,
        };
        let script = CgiScript {
            document_root: "/srv/app",
            request_uri: req.target,
            url_prefix: b"",
            script_name: b"/index.php",
            path_info: b"/a/b",
            server_port: 8080,
            remote_port: Some(51000),
            protocol: "HTTP/1.1",
        };
        let vars = decode(&request_params(&req, &script, Some(3), b"abc"));
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        for (k, v) in [
            ("GATEWAY_INTERFACE", "CGI/1.1"),
            ("REQUEST_METHOD", "POST"),
            ("REQUEST_URI", "/index.php/a/b?x=1&y=2"),
            ("QUERY_STRING", "x=1&y=2"),
            ("DOCUMENT_ROOT", "/srv/app"),
            ("SCRIPT_FILENAME", "/srv/app/index.php"),
            ("SCRIPT_NAME", "/index.php"),
            ("PATH_INFO", "/a/b"),
            ("PATH_TRANSLATED", "/srv/app/a/b"),
            ("CONTENT_TYPE", "application/x-www-form-urlencoded"),
            ("CONTENT_LENGTH", "3"),
            ("SERVER_NAME", "example.com"),
            ("SERVER_PORT", "8080"),
            ("SERVER_PROTOCOL", "HTTP/1.1"),
            ("REMOTE_ADDR", "10.0.0.9"),
            ("REMOTE_PORT", "51000"),
            ("HTTPS", "on"),
            ("HTTP_HOST", "example.com:8080"),
            ("HTTP_COOKIE", "a=1; b=2"),
            ("HTTP_ACCEPT", "text/html"),
            ("HTTP_X_REQUEST_ID", "abc"),
        ] {
            assert_eq!(get(k), Some(v), "{k}");
        }
        for absent in [
            "HTTP_PROXY",
            "HTTP_X_FORWARDED_FOR",
            "HTTP_CONTENT_TYPE",
            "HTTP_CONTENT_LENGTH",
        ] {
            assert_eq!(get(absent), None, "{absent}");
        }
        assert_eq!(
            vars.iter()
                .filter(|(n, _)| n == "HTTP_X_REQUEST_ID")
                .count(),
            1
        );
    }

    /// A verified client certificate as mod_ssl names it, on HTTPS only;
    /// a client's own X-Client-Cert-* fields never become HTTP_* params.
    #[test]
    fn client_certificates_become_ssl_client_params() {
        let script = CgiScript {
            document_root: "/srv/app",
            request_uri: b"/",
            url_prefix: b"",
            script_name: b"/index.php",
            path_info: b"",
            server_port: 443,
            remote_port: None,
            protocol: "HTTP/1.1",
        };
        let cert = ClientCert {
            subject: "CN=alice,O=Example".into(),
            issuer: "CN=ca".into(),
            sans: "email:alice@example.test".into(),
            serial: "1234".into(),
            fingerprint: "ab".repeat(32),
            not_after: "Sun, 06 Nov 2044 08:49:37 GMT".into(),
            trust: None,
        };
        let req = ProxyRequest {
            method: b"GET",
            target: b"/",
            headers: vec![(&b"X-Client-Cert-Subject"[..], &b"CN=mallory"[..])],
            client_ip: "10.0.0.9",
            forwarded_chain: None,
            host: Some(b"api.example"),
            scheme: Scheme::Https,
            cgi: None,
            ports: Default::default(),
            client_cert: Some(&cert),
        };
        let vars = decode(&request_params(&req, &script, None, b"id"));
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("SSL_CLIENT_VERIFY"), Some("SUCCESS"));
        assert_eq!(get("SSL_CLIENT_S_DN"), Some("CN=alice,O=Example"));
        assert_eq!(get("SSL_CLIENT_I_DN"), Some("CN=ca"));
        assert_eq!(get("SSL_CLIENT_M_SERIAL"), Some("1234"));
        assert_eq!(get("HTTP_X_CLIENT_CERT_SUBJECT"), None);
        let without = ProxyRequest {
            client_cert: None,
            ..req
        };
        let vars = decode(&request_params(&without, &script, None, b"id"));
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("SSL_CLIENT_VERIFY"), Some("NONE"));
        assert_eq!(get("SSL_CLIENT_S_DN"), None);
        let plain = ProxyRequest {
            scheme: Scheme::Http,
            ..without
        };
        let vars = decode(&request_params(&plain, &script, None, b"id"));
        assert!(!vars.iter().any(|(n, _)| n.starts_with("SSL_")));
    }

    /// HTTP/2 has no Host field: HTTP_HOST comes from `:authority`, once,
    /// and a Host field never gives a second one.
    #[test]
    fn http_host_over_http2_is_the_authority() {
        let script = CgiScript {
            document_root: "/srv/app",
            request_uri: b"/",
            url_prefix: b"",
            script_name: b"/index.php",
            path_info: b"",
            server_port: 443,
            remote_port: None,
            protocol: "HTTP/2.0",
        };
        let h2 = ProxyRequest {
            method: b"GET",
            target: b"/",
            headers: vec![(&b"accept"[..], &b"*/*"[..])],
            client_ip: "10.0.0.9",
            forwarded_chain: None,
            host: Some(b"blog.example"),
            scheme: Scheme::Https,
            cgi: None,
            ports: Default::default(),
            client_cert: None,
        };
        let vars = decode(&request_params(&h2, &script, None, b"id"));
        let all = |k: &str| -> Vec<&str> {
            vars.iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(all("HTTP_HOST"), ["blog.example"]);
        assert_eq!(all("SERVER_NAME"), ["blog.example"]);
        assert_eq!(all("SERVER_PROTOCOL"), ["HTTP/2.0"]);
        assert_eq!(all("REQUEST_SCHEME"), ["https"]);

        let with_field = ProxyRequest {
            headers: vec![(&b"host"[..], &b"blog.example"[..])],
            ..h2
        };
        let vars = decode(&request_params(&with_field, &script, None, b"id"));
        assert_eq!(vars.iter().filter(|(n, _)| n == "HTTP_HOST").count(), 1);
    }

    /// A route that serves a prefix from another directory (`--root
    /// /wp-content/=DIR`): the file is under that directory, the URL keeps
    /// the prefix.
    #[test]
    fn a_stripped_prefix_stays_in_the_script_name() {
        let req = ProxyRequest {
            method: b"GET",
            target: b"/wp-content/plugins/x.php/more",
            headers: vec![],
            client_ip: "10.0.0.9",
            forwarded_chain: None,
            host: Some(b"blog.example"),
            scheme: Scheme::Http,
            cgi: None,
            ports: Default::default(),
            client_cert: None,
        };
        let script = CgiScript {
            document_root: "/var/lib/wordpress/wp-content",
            request_uri: req.target,
            url_prefix: b"/wp-content",
            script_name: b"/plugins/x.php",
            path_info: b"/more",
            server_port: 80,
            remote_port: None,
            protocol: "HTTP/1.1",
        };
        let vars = decode(&request_params(&req, &script, None, b"id"));
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("SCRIPT_NAME"), Some("/wp-content/plugins/x.php"));
        assert_eq!(
            get("SCRIPT_FILENAME"),
            Some("/var/lib/wordpress/wp-content/plugins/x.php")
        );
        assert_eq!(get("DOCUMENT_URI"), Some("/wp-content/plugins/x.php/more"));
        assert_eq!(get("PATH_INFO"), Some("/more"));
    }
}
