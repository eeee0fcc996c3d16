//! `hayate import`: any nginx configuration or Caddyfile text (the first
//! byte picks which) is imported or refused with a position, never a
//! panic, and what is imported is TOML that parses: no directive's value
//! (quotes, newlines, control characters) can break out of its string.
//! Text that includes or imports files is skipped: those are read from
//! the disk, and a fuzzer naming /dev/zero would only measure that.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if text.contains("include") || text.contains("import") {
        return;
    }
    let empty = Path::new("/nonexistent-hayate-fuzz");
    let name = empty.join("site.conf");
    let imported = match which % 2 {
        0 => hayate_import::nginx_text(text, &name, empty),
        _ => hayate_import::caddy_text(text, &name),
    };
    if let Ok(import) = imported {
        if let Err(e) = import.toml.parse::<toml::Table>() {
            panic!("the import is not TOML: {e}\n{}", import.toml);
        }
    }
});
