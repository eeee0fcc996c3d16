//! The upstream response head parser never panics; what it accepts has a
//! status of three digits and at most one framing, and the cache's reading
//! of its fields (Date, Age, Expires, targeted fields) stays within the
//! RFC's bounds.
#![no_main]
use std::mem::MaybeUninit;

use hayate_cache::policy::ResponseFacts;
use hayate_core::h1::body::Framing;
use hayate_core::h1::response::parse_head;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let head_request = data.first() == Some(&b'H');
    let mut slots = [const { MaybeUninit::uninit() }; 32];
    let Ok(Some(head)) = parse_head(data, &mut slots, head_request) else {
        return;
    };
    assert!(head.len <= data.len());
    assert!((100..1000).contains(&head.status.code()));
    if head_request {
        assert_eq!(head.framing, Framing::Empty);
    }
    let facts = ResponseFacts::from_fields(head.fields.iter().map(|h| (h.name.as_bytes(), h.value)));
    assert!(facts.age <= 1 << 31);
    for v in [facts.cc.max_age, facts.cc.s_maxage] {
        assert!(v.unwrap_or(0) <= 1 << 31);
    }
});
