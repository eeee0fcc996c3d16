//! The PROXY protocol header a load balancer sends before a connection's
//! bytes: any input is Incomplete, Invalid or a header no longer than the
//! input, and a complete header parses the same with any bytes after it.
#![no_main]

use hayate_core::proxy_header::{parse, ProxyHeader, MAX_HEADER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let ProxyHeader::Complete { len, source } = parse(data) {
        assert!(len <= data.len() && len <= MAX_HEADER);
        assert_eq!(parse(&data[..len]), ProxyHeader::Complete { len, source });
    }
});
