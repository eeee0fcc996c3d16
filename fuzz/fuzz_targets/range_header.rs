//! Range decisions stay inside the representation and never amplify it.
#![no_main]
use hayate_static::range::{decide, RangeDecision, MAX_RANGES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u32, &[u8])| {
    let (len, header) = (u64::from(input.0), input.1);
    match decide(header, len) {
        RangeDecision::Full | RangeDecision::Unsatisfiable => {}
        RangeDecision::Single(r) => assert!(r.start < r.end && r.end <= len),
        RangeDecision::Multi(rs) => {
            assert!(rs.len() >= 2 && rs.len() <= MAX_RANGES);
            let total: u64 = rs.iter().map(|r| r.end - r.start).sum();
            assert!(total <= len);
            for r in &rs {
                assert!(r.start < r.end && r.end <= len);
            }
        }
    }
});
