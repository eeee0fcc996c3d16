//! The FastCGI 1.0 record codec (the specification's §3 and §8), client
//! side of the responder role: records are written with no padding and one
//! request at a time per connection (request id 1, multiplexing off, as
//! php-fpm and nginx do), and read whole from a buffer.
//!
//! Pure functions over byte buffers: no I/O, so the exchange (`fastcgi.rs`)
//! owns every socket and timer.

use bytes::{Buf, Bytes, BytesMut};
use std::io;

/// `FCGI_VERSION_1`.
const VERSION: u8 = 1;
/// The one request id used on a connection (multiplexing off).
const REQUEST_ID: u16 = 1;
/// The largest content of one record (its length is 16 bits).
pub(crate) const MAX_CONTENT: usize = 65_535;
/// A record header's size.
pub(crate) const HEADER_LEN: usize = 8;

const BEGIN_REQUEST: u8 = 1;
const ABORT_REQUEST: u8 = 2;
const END_REQUEST: u8 = 3;
const PARAMS: u8 = 4;
const STDIN: u8 = 5;
const STDOUT: u8 = 6;
const STDERR: u8 = 7;

/// `FCGI_RESPONDER`.
const ROLE_RESPONDER: u16 = 1;
/// `FCGI_KEEP_CONN`: the application keeps the connection open after the
/// request, for the next one.
const KEEP_CONN: u8 = 1;
/// `FCGI_REQUEST_COMPLETE`: the protocol status of a normal end.
const REQUEST_COMPLETE: u8 = 0;

/// The header of a record of `kind` carrying `len` bytes (no padding).
fn header(kind: u8, len: usize) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_CONTENT);
    let [id_hi, id_lo] = REQUEST_ID.to_be_bytes();
    let [len_hi, len_lo] = (len as u16).to_be_bytes();
    [VERSION, kind, id_hi, id_lo, len_hi, len_lo, 0, 0]
}

/// The header of an FCGI_STDIN record of `len` bytes (0: the end of the
/// body).
pub(crate) fn stdin_header(len: usize) -> [u8; HEADER_LEN] {
    header(STDIN, len)
}

/// FCGI_ABORT_REQUEST, sent when the client went away mid-response.
pub(crate) fn abort_request() -> [u8; HEADER_LEN] {
    header(ABORT_REQUEST, 0)
}

/// The records that open a request: FCGI_BEGIN_REQUEST (responder, keep
/// the connection) then `params` (name-value pairs built with
/// [`push_pair`]) in FCGI_PARAMS records, closed by an empty one.
pub(crate) fn request_start(params: &[u8]) -> Vec<u8> {
    let records = params.len().div_ceil(MAX_CONTENT) + 2;
    let mut out = Vec::with_capacity(params.len() + records * HEADER_LEN + 8);
    out.extend_from_slice(&header(BEGIN_REQUEST, 8));
    let [role_hi, role_lo] = ROLE_RESPONDER.to_be_bytes();
    out.extend_from_slice(&[role_hi, role_lo, KEEP_CONN, 0, 0, 0, 0, 0]);
    for part in params.chunks(MAX_CONTENT) {
        out.extend_from_slice(&header(PARAMS, part.len()));
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&header(PARAMS, 0));
    out
}

/// Appends one name-value pair (§3.4: lengths below 128 in one byte, others
/// in four with the top bit set).
pub(crate) fn push_pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    push_lengths(out, name.len(), value.len());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Appends a pair whose value is `parts` one after another, written in
/// place rather than joined first (each join was an allocation).
pub(crate) fn push_pair_parts(out: &mut Vec<u8>, name: &[u8], parts: &[&[u8]]) {
    push_lengths(out, name.len(), parts.iter().map(|p| p.len()).sum());
    out.extend_from_slice(name);
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// A pair's name and value lengths, the bytes of both to follow.
pub(crate) fn push_lengths(out: &mut Vec<u8>, name_len: usize, value_len: usize) {
    for len in [name_len, value_len] {
        if len < 128 {
            out.push(len as u8);
        } else {
            out.extend_from_slice(&(len as u32 | 0x8000_0000).to_be_bytes());
        }
    }
}

/// A record read from the application.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// FCGI_STDOUT content: the CGI response (empty: the stream's end).
    Stdout(Bytes),
    /// FCGI_STDERR content: the application's error output.
    Stderr(Bytes),
    /// FCGI_END_REQUEST: the request is over; `complete` unless the
    /// application refused it (overloaded, unknown role, multiplexing).
    End {
        /// The application's exit status.
        app_status: u32,
        /// Whether the protocol status is FCGI_REQUEST_COMPLETE.
        complete: bool,
    },
}

/// Takes the next whole record from `buf`; `Ok(None)` until one is whole.
/// Records of other types the specification lets an application send
/// (FCGI_GET_VALUES_RESULT, FCGI_UNKNOWN_TYPE) are skipped; a record of
/// another request or version is an error (one request per connection).
pub(crate) fn next_record(buf: &mut BytesMut) -> io::Result<Option<Record>> {
    loop {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let (version, kind) = (buf[0], buf[1]);
        let id = u16::from_be_bytes([buf[2], buf[3]]);
        let len = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
        let padding = usize::from(buf[6]);
        if version != VERSION {
            return Err(bad(format!("FastCGI record of version {version}")));
        }
        if buf.len() < HEADER_LEN + len + padding {
            return Ok(None);
        }
        let management = id == 0;
        if id != REQUEST_ID && !management {
            return Err(bad(format!("FastCGI record for request {id}")));
        }
        buf.advance(HEADER_LEN);
        let content = buf.split_to(len).freeze();
        buf.advance(padding);
        match kind {
            _ if management => continue,
            STDOUT => return Ok(Some(Record::Stdout(content))),
            STDERR => return Ok(Some(Record::Stderr(content))),
            END_REQUEST => {
                if content.len() < 8 {
                    return Err(bad("FastCGI end of request too short".into()));
                }
                let app_status =
                    u32::from_be_bytes([content[0], content[1], content[2], content[3]]);
                return Ok(Some(Record::End {
                    app_status,
                    complete: content[4] == REQUEST_COMPLETE,
                }));
            }
            other => return Err(bad(format!("unexpected FastCGI record type {other}"))),
        }
    }
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, id: u16, content: &[u8], padding: u8) -> Vec<u8> {
        let mut r = vec![VERSION, kind];
        r.extend_from_slice(&id.to_be_bytes());
        r.extend_from_slice(&(content.len() as u16).to_be_bytes());
        r.extend_from_slice(&[padding, 0]);
        r.extend_from_slice(content);
        r.extend(std::iter::repeat_n(0, padding.into()));
        r
    }

    #[test]
    fn pairs_use_one_or_four_length_bytes() {
        let mut out = Vec::new();
        push_pair(&mut out, b"A", b"xy");
        assert_eq!(out, b"\x01\x02Axy");
        let long = vec![b'v'; 200];
        let mut out = Vec::new();
        push_pair(&mut out, b"N", &long);
        assert_eq!(&out[..5], b"\x01\x80\x00\x00\xc8");
        assert_eq!(out.len(), 5 + 1 + 200);
    }

    #[test]
    fn a_request_starts_with_begin_then_params_split_at_64_kib_and_closed() {
        let params = vec![7u8; MAX_CONTENT + 10];
        let out = request_start(&params);
        assert_eq!(&out[..8], &[1, BEGIN_REQUEST, 0, 1, 0, 8, 0, 0]);
        assert_eq!(&out[8..16], &[0, 1, KEEP_CONN, 0, 0, 0, 0, 0]);
        assert_eq!(&out[16..24], &[1, PARAMS, 0, 1, 0xff, 0xff, 0, 0]);
        let second = 24 + MAX_CONTENT;
        assert_eq!(&out[second..second + 8], &[1, PARAMS, 0, 1, 0, 10, 0, 0]);
        assert_eq!(&out[out.len() - 8..], &[1, PARAMS, 0, 1, 0, 0, 0, 0]);
        assert_eq!(out.len(), 16 + 3 * 8 + params.len());
    }

    #[test]
    fn records_are_read_whole_with_padding_and_management_records_skipped() {
        let mut wire = record(STDOUT, 1, b"Status: 200\r\n\r\nhi", 6);
        wire.extend(record(9, 0, b"\x00\x00\x00\x00\x00\x00\x00\x00", 0));
        wire.extend(record(STDERR, 1, b"warning", 1));
        wire.extend(record(END_REQUEST, 1, &[0, 0, 0, 3, 0, 0, 0, 0], 0));
        let mut buf = BytesMut::new();
        // Byte by byte: nothing comes out before a record is whole.
        let mut got = Vec::new();
        for b in wire {
            buf.extend_from_slice(&[b]);
            while let Some(r) = next_record(&mut buf).expect("valid") {
                got.push(r);
            }
        }
        assert_eq!(
            got,
            vec![
                Record::Stdout(Bytes::from_static(b"Status: 200\r\n\r\nhi")),
                Record::Stderr(Bytes::from_static(b"warning")),
                Record::End {
                    app_status: 3,
                    complete: true
                },
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn foreign_requests_versions_and_types_are_errors() {
        for wire in [
            record(STDOUT, 2, b"x", 0),
            record(BEGIN_REQUEST, 1, b"12345678", 0),
            record(END_REQUEST, 1, b"1234", 0),
            {
                let mut r = record(STDOUT, 1, b"x", 0);
                r[0] = 2;
                r
            },
        ] {
            let mut buf = BytesMut::from(&wire[..]);
            assert!(next_record(&mut buf).is_err(), "{wire:?}");
        }
    }
}
