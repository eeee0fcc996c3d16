//! The CGI response head at the start of FCGI_STDOUT (RFC 3875 §6): header
//! fields, no status line. `Status:` gives the status; a `Location:`
//! without one is a redirect (302); otherwise 200. Fields are checked by
//! the same parser and rules as an HTTP upstream's (`httparse`, hop-by-hop
//! fields, Date and Server dropped), and a Content-Length must be one
//! valid number.

use std::io;

use hayate_core::field::parse_length;
use hayate_core::{Fields, Status};

use crate::group::ProxySettings;
use crate::h1_client::copy_end_to_end;

/// Most fields accepted in a CGI head (as for an HTTP upstream).
const MAX_FIELDS: usize = 128;

/// A CGI response head.
#[derive(Debug)]
pub(crate) struct CgiHead {
    pub status: Status,
    /// End-to-end fields, without `Status`.
    pub fields: Fields,
    /// Whether the application sent a valid Date (kept among `fields`).
    pub has_date: bool,
    /// The body's length when the application gave one.
    pub len: Option<u64>,
}

/// Parses the head at the start of `stdout`: `Ok(None)` while incomplete,
/// else the head and the bytes it took.
pub(crate) fn parse(
    stdout: &[u8],
    settings: &ProxySettings,
) -> io::Result<Option<(CgiHead, usize)>> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let (used, parsed) = match httparse::parse_headers(stdout, &mut slots) {
        Ok(httparse::Status::Complete((used, parsed))) => (used, parsed),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(bad(format!("bad CGI response head: {e}"))),
    };
    let mut status = None;
    let mut location = false;
    let mut len = None;
    for h in parsed.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"status") {
            if status.is_some() {
                return Err(bad("two Status fields in a CGI response".into()));
            }
            status = Some(status_of(h.value)?);
        } else if name.eq_ignore_ascii_case(b"location") {
            location = true;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_length(h.value)
                .ok_or_else(|| bad("bad Content-Length in a CGI response".into()))?;
            if len.is_some_and(|l| l != n) {
                return Err(bad("two Content-Lengths in a CGI response".into()));
            }
            len = Some(n);
        }
    }
    let status = status.unwrap_or(if location { Status::FOUND } else { Status::OK });
    let mut fields = Fields::with_capacity(used);
    let has_date = copy_end_to_end(&mut fields, parsed).has_date;
    fields.retain(|name, _| !name.eq_ignore_ascii_case(b"status"));
    if settings.via {
        fields.push(b"Via", b"1.1 hayate");
    }
    Ok(Some((
        CgiHead {
            status,
            fields,
            has_date,
            len,
        },
        used,
    )))
}

/// `Status: 404 Not Found` → 404; a final status only (RFC 3875 §6.3.3).
fn status_of(value: &[u8]) -> io::Result<Status> {
    let code = value.get(..3).filter(|c| c.iter().all(u8::is_ascii_digit));
    let rest_ok = value.get(3).is_none_or(|&b| b == b' ');
    code.filter(|_| rest_ok)
        .and_then(|c| std::str::from_utf8(c).ok()?.parse().ok())
        .filter(|&c: &u16| c >= 200)
        .and_then(Status::any)
        .ok_or_else(|| {
            bad(format!(
                "bad CGI Status {:?}",
                String::from_utf8_lossy(value)
            ))
        })
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> io::Result<Option<(CgiHead, usize)>> {
        parse(raw.as_bytes(), &ProxySettings::default())
    }

    #[test]
    fn cgi_heads() {
        let table: [(&str, u16, &str, Option<u64>); 5] = [
            (
                "Content-type: text/html\r\n\r\nbody",
                200,
                "Content-type: text/html\r\n",
                None,
            ),
            (
                "Status: 404 Not Found\r\nX-Powered-By: PHP\r\n\r\n",
                404,
                "X-Powered-By: PHP\r\n",
                None,
            ),
            ("Location: /login\r\n\r\n", 302, "Location: /login\r\n", None),
            (
                "Status: 301\r\nLocation: https://x/\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n",
                301,
                "Location: https://x/\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n",
                None,
            ),
            (
                "Content-Length: 5\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nServer: php\r\nDate: x\r\n\r\n",
                200,
                "",
                Some(5),
            ),
        ];
        for (raw, status, wire, len) in table {
            let (h, used) = head(raw).expect(raw).expect(raw);
            assert_eq!(h.status.code(), status, "{raw}");
            assert_eq!(String::from_utf8_lossy(h.fields.wire()), wire, "{raw}");
            assert_eq!(h.len, len, "{raw}");
            assert_eq!(&raw[used..], raw.split_once("\r\n\r\n").expect("end").1);
        }
        assert!(matches!(head("Status: 200\r\nX: y\r\n"), Ok(None)));
    }

    #[test]
    fn bad_heads_are_refused() {
        for raw in [
            "Status: 100 Continue\r\n\r\n",
            "Status: abc\r\n\r\n",
            "Status: 2000\r\n\r\n",
            "Status: 200\r\nStatus: 404\r\n\r\n",
            "Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "Content-Length: -1\r\n\r\n",
            "Bad Name: x\r\n\r\n",
            "X: a\rb\r\n\r\n",
        ] {
            assert!(head(raw).is_err(), "{raw:?}");
        }
    }
}
