//! The targeted-field (RFC 9213, Structured Field Dictionary) check never
//! panics, and a value it accepts still parses as directives.
#![no_main]
use hayate_cache::targeted::{is_nonempty_dictionary, select};
use hayate_cache::ResponseDirectives;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let valid = is_nonempty_dictionary(data);
    let (a, b) = data.split_at(data.len() / 2);
    let chosen = select([&[a], &[b]]);
    if valid {
        let d = ResponseDirectives::parse([data]);
        assert!(d.max_age.unwrap_or(0) <= 1 << 31);
        // A valid dictionary has no control bytes and no bytes past ASCII.
        assert!(data.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)));
    }
    if let Some(v) = chosen {
        assert!(is_nonempty_dictionary(&v));
    }
});
