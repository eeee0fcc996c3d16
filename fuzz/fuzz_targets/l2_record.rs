//! A value read from the shared tier (Redis is shared: it may hold
//! anything) never panics the reader, and a response it accepts is one the
//! writer can write again and read back the same.
#![no_main]
use std::time::Instant;

use hayate_shared::record::{decode, encode_response, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(Value::Response(r)) = decode(data) else {
        return;
    };
    let now = Instant::now();
    let stored = r.into_stored(0, now);
    let again = encode_response(&stored, stored.age(now) * 1000, 1000);
    let Some(Value::Response(back)) = decode(&again) else {
        panic!("a response read back is not readable once written again");
    };
    let back = back.into_stored(1000, now);
    assert_eq!(back.head.wire(), stored.head.wire());
    assert_eq!(back.body, stored.body);
    assert_eq!(back.vary, stored.vary);
});
