//! The path sanitizer never yields a path that could leave the root.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = hayate_core::path::normalize(data) {
        assert_eq!(p.first(), Some(&b'/'));
        assert!(!p.contains(&0));
        for seg in p.split(|&b| b == b'/') {
            assert!(seg != b".." && seg != b".", "dot segment survived: {:?}", p);
        }
        // Normalizing a normal path is the identity (a decoded `%` would be
        // read as an escape again, so those are skipped).
        if !p.contains(&b'%') {
            let again = hayate_core::path::normalize(&p).expect("normal path re-normalizes");
            assert_eq!(&*again, &*p);
        }
    }
});
