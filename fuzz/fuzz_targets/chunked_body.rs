//! The chunked decoder never panics, never consumes more than it was given,
//! and decodes the same whatever the split of its input.
#![no_main]
use hayate_core::h1::chunked::ChunkedDecoder;
use libfuzzer_sys::fuzz_target;

fn run(data: &[u8], step: usize) -> Option<(Vec<u8>, usize)> {
    let mut d = ChunkedDecoder::default();
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() && !d.is_done() {
        let end = at.saturating_add(step).min(data.len());
        let n = d.decode(&data[at..end], |c| out.extend_from_slice(c)).ok()?;
        assert!(n <= end - at);
        at += n;
    }
    Some((out, at))
}

fuzz_target!(|data: &[u8]| {
    let whole = run(data, usize::MAX);
    let bytewise = run(data, 1);
    assert_eq!(whole, bytewise);
});
