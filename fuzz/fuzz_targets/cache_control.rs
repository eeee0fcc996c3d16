//! Cache-Control and response-head parsing never panic, and what they
//! produce stays within the RFC's bounds (delta-seconds capped, a
//! stale-forbidding response never gets a stale answer).
#![no_main]
use hayate_cache::policy::{Freshness, ResponseFacts};
use hayate_cache::{RequestDirectives, ResponseDirectives, Use};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (first, rest) = data.split_at(data.len() / 2);
    let resp = ResponseDirectives::parse([first]);
    let req = RequestDirectives::parse([rest], rest.first() == Some(&b'P'));
    for v in [resp.max_age, resp.s_maxage, resp.stale_if_error, req.max_age, req.min_fresh] {
        assert!(v.unwrap_or(0) <= 1 << 31);
    }
    let facts = ResponseFacts::from_fields(hayate_core::field::header_lines(data));
    assert!(facts.age <= 1 << 31);
    let f = Freshness {
        lifetime: u64::from(data.first().copied().unwrap_or(0)),
        age: u64::from(data.last().copied().unwrap_or(0)),
        cc: facts.cc,
        swr_default: 0,
        sie_default: 0,
    };
    let use_ = f.decide(&req);
    if f.cc.forbids_stale() && f.age >= f.lifetime {
        assert!(matches!(use_, Use::Revalidate { .. }));
    }
});
