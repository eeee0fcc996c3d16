//! The request parser never panics; what it accepts has consistent framing.
#![no_main]
use bytes::BytesMut;
use hayate_core::transport::Scheme;
use hayate_core::h1::request::{parse, Framing, HeadLimits, Parsed, Spare};
use libfuzzer_sys::fuzz_target;

const LIMITS: HeadLimits =
    HeadLimits { max_request_line: 1024, max_header_bytes: 4096, max_headers: 32, max_body_size: 1 << 20 };

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let mut spare = Spare::default();
    for _ in 0..8 {
        match parse(&mut buf, &LIMITS, &mut spare, Scheme::Http) {
            Parsed::Request(r) => {
                assert!(!r.head.method().is_empty());
                if let Framing::Length(n) = r.framing {
                    assert!(n > 0 && n <= LIMITS.max_body_size);
                }
                if r.framing == Framing::Chunked {
                    assert!(r.head.header(b"content-length").is_none());
                }
                spare.reclaim(r);
            }
            Parsed::Partial | Parsed::Refused(_) => break,
        }
    }
});
