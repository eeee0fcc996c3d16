//! What a FastCGI application answers (records, the CGI head, the body to
//! FCGI_END_REQUEST) is read without a panic, whatever the bytes and however
//! they are split, and the result does not depend on the split.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, answer)) = data.split_first() else {
        return;
    };
    let whole = hayate_proxy::read_fastcgi_answer(answer, answer.len().max(1));
    let pieces = hayate_proxy::read_fastcgi_answer(answer, usize::from(split) + 1);
    assert_eq!(whole, pieces);
    if let Some((status, _)) = whole {
        assert!((200..=999).contains(&status));
    }
});
