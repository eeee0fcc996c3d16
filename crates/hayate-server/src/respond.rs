//! Serializing a response head: status line, Date, Server, the handler's
//! header blocks, Content-Length and Connection, into the connection's
//! write buffer (one write for head and small body).

use std::time::SystemTime;

use hayate_core::{Response, Status};

/// The exchange-level facts the head needs.
#[derive(Debug, Clone, Copy)]
pub struct HeadContext {
    /// The request was HEAD: announce the length, send no body.
    pub head_request: bool,
    /// The request was HTTP/1.0.
    pub http10: bool,
    /// The connection stays open after this response.
    pub keep_alive: bool,
}

/// Appends the head of `resp` to `out`. Returns whether a body follows.
pub fn write_head(out: &mut Vec<u8>, resp: &Response, cx: HeadContext, now: SystemTime) -> bool {
    resp.status.append_status_line(out);
    hayate_core::date::append_date_line(out, now);
    out.extend_from_slice(b"Server: hayate\r\n");
    if let Some(shared) = &resp.shared {
        out.extend_from_slice(shared.wire());
    }
    out.extend_from_slice(resp.fields.wire());
    let body_allowed = !resp.status.forbids_body();
    if body_allowed {
        match resp.body.known_len() {
            Some(len) => {
                out.extend_from_slice(b"Content-Length: ");
                out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            // HTTP/1.0 gets a close-delimited body instead.
            None if !cx.http10 => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            None => {}
        }
    }
    if resp.status == Status::SWITCHING_PROTOCOLS {
        // The handler's own `Connection: upgrade` stands.
    } else if !cx.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if cx.http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    body_allowed && !cx.head_request
}

/// The interim `100 Continue` response.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The response sent, without reading the request, to a connection over the
/// limit.
pub const OVER_CAPACITY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Length: 24\r\nRetry-After: 1\r\nConnection: close\r\n\r\n503 Service Unavailable\n";

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hayate_core::Body;

    #[test]
    fn heads() {
        let mut r = Response::new(Status::OK);
        r.header("Content-Type", b"text/plain");
        r.body = Body::Bytes(Bytes::from_static(b"hi"));
        let mut out = Vec::new();
        let body = write_head(
            &mut out,
            &r,
            HeadContext {
                head_request: false,
                http10: true,
                keep_alive: true,
            },
            SystemTime::now(),
        );
        let s = String::from_utf8(out).expect("ascii");
        assert!(body);
        assert!(s.starts_with("HTTP/1.1 200 OK\r\nDate: "), "{s}");
        assert!(s.ends_with("Server: hayate\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"), "{s}");

        let r = Response::new(Status::NOT_MODIFIED);
        let mut out = Vec::new();
        let body = write_head(
            &mut out,
            &r,
            HeadContext {
                head_request: false,
                http10: false,
                keep_alive: false,
            },
            SystemTime::now(),
        );
        let s = String::from_utf8(out).expect("ascii");
        assert!(
            !body && !s.contains("Content-Length") && s.ends_with("Connection: close\r\n\r\n"),
            "{s}"
        );
        assert_eq!(
            OVER_CAPACITY.len()
                - OVER_CAPACITY
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .expect("end")
                - 4,
            24
        );
    }
}
