//! Accept-Encoding parsing never panics and only chooses what is available
//! and accepted.
#![no_main]
use hayate_compress::AcceptEncoding;
use hayate_core::Coding;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ae = AcceptEncoding::parse([data]);
    let available = [Coding::Br, Coding::Gzip];
    if let Some(c) = ae.choose(available) {
        assert!(available.contains(&c));
        assert!(ae.accepts(c));
    }
});
