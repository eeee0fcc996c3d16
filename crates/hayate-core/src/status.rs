//! HTTP status codes with their preformatted status lines.

/// An HTTP status code that hayate sends. Every value has a static status line,
/// so writing one never formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(u16);

macro_rules! statuses {
    ($($name:ident = $code:literal $reason:literal;)*) => {
        impl Status {
            $(
                #[doc = concat!("`", $code, " ", $reason, "`")]
                pub const $name: Status = Status($code);
            )*

            /// Looks up a known status by its code.
            pub fn from_code(code: u16) -> Option<Status> {
                match code {
                    $($code => Some(Status($code)),)*
                    _ => None,
                }
            }

            /// The reason phrase; empty for codes hayate does not name
            /// (an upstream's 299, say), which RFC 9112 allows.
            pub fn reason(self) -> &'static str {
                match self.0 {
                    $($code => $reason,)*
                    _ => "",
                }
            }

            /// The whole status line of a known status, `HTTP/1.1 200 OK\r\n`.
            fn static_line(self) -> Option<&'static [u8]> {
                match self.0 {
                    $($code => Some(concat!("HTTP/1.1 ", $code, " ", $reason, "\r\n").as_bytes()),)*
                    _ => None,
                }
            }
        }
    };
}

statuses! {
    CONTINUE = 100 "Continue";
    SWITCHING_PROTOCOLS = 101 "Switching Protocols";
    PROCESSING = 102 "Processing";
    EARLY_HINTS = 103 "Early Hints";
    OK = 200 "OK";
    NO_CONTENT = 204 "No Content";
    PARTIAL_CONTENT = 206 "Partial Content";
    MOVED_PERMANENTLY = 301 "Moved Permanently";
    FOUND = 302 "Found";
    NOT_MODIFIED = 304 "Not Modified";
    TEMPORARY_REDIRECT = 307 "Temporary Redirect";
    PERMANENT_REDIRECT = 308 "Permanent Redirect";
    BAD_REQUEST = 400 "Bad Request";
    UNAUTHORIZED = 401 "Unauthorized";
    FORBIDDEN = 403 "Forbidden";
    NOT_FOUND = 404 "Not Found";
    METHOD_NOT_ALLOWED = 405 "Method Not Allowed";
    NOT_ACCEPTABLE = 406 "Not Acceptable";
    REQUEST_TIMEOUT = 408 "Request Timeout";
    LENGTH_REQUIRED = 411 "Length Required";
    PRECONDITION_FAILED = 412 "Precondition Failed";
    CONTENT_TOO_LARGE = 413 "Content Too Large";
    URI_TOO_LONG = 414 "URI Too Long";
    RANGE_NOT_SATISFIABLE = 416 "Range Not Satisfiable";
    EXPECTATION_FAILED = 417 "Expectation Failed";
    MISDIRECTED_REQUEST = 421 "Misdirected Request";
    TOO_EARLY = 425 "Too Early";
    TOO_MANY_REQUESTS = 429 "Too Many Requests";
    REQUEST_HEADER_FIELDS_TOO_LARGE = 431 "Request Header Fields Too Large";
    CLIENT_CLOSED_REQUEST = 499 "Client Closed Request";
    INTERNAL_SERVER_ERROR = 500 "Internal Server Error";
    NOT_IMPLEMENTED = 501 "Not Implemented";
    BAD_GATEWAY = 502 "Bad Gateway";
    SERVICE_UNAVAILABLE = 503 "Service Unavailable";
    GATEWAY_TIMEOUT = 504 "Gateway Timeout";
    HTTP_VERSION_NOT_SUPPORTED = 505 "HTTP Version Not Supported";
}

impl Status {
    /// Any three-digit status (100-999), as an upstream may send.
    pub fn any(code: u16) -> Option<Status> {
        (100..=999).contains(&code).then_some(Status(code))
    }

    /// Appends the status line, `HTTP/1.1 200 OK\r\n`; static for known codes.
    pub fn append_status_line(self, out: &mut Vec<u8>) {
        match self.static_line() {
            Some(line) => out.extend_from_slice(line),
            None => {
                out.extend_from_slice(b"HTTP/1.1 ");
                out.extend_from_slice(itoa::Buffer::new().format(self.0).as_bytes());
                out.extend_from_slice(b" \r\n");
            }
        }
    }

    /// Whether it is a 2xx.
    pub fn is_success(self) -> bool {
        (200..300).contains(&self.code())
    }

    /// The numeric code.
    pub fn code(self) -> u16 {
        self.0
    }

    /// Whether a response with this status never carries a body
    /// (RFC 9110 §6.4.1: 1xx, 204, 304).
    pub fn forbids_body(self) -> bool {
        self.0 < 200 || self.0 == 204 || self.0 == 304
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_well_formed() {
        let line = |s: Status| {
            let mut out = Vec::new();
            s.append_status_line(&mut out);
            String::from_utf8(out).expect("ascii")
        };
        assert_eq!(line(Status::OK), "HTTP/1.1 200 OK\r\n");
        assert_eq!(
            line(Status::RANGE_NOT_SATISFIABLE),
            "HTTP/1.1 416 Range Not Satisfiable\r\n"
        );
        assert_eq!(line(Status::any(299).expect("valid")), "HTTP/1.1 299 \r\n");
        assert_eq!(Status::any(99), None);
        assert_eq!(
            Status::from_code(431),
            Some(Status::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        assert_eq!(Status::from_code(299), None);
        assert!(Status::NOT_MODIFIED.forbids_body());
        assert!(!Status::OK.forbids_body());
    }
}
