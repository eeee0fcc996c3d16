//! Content types by file extension, with `charset=utf-8` for text.

use std::path::Path;

/// The Content-Type for `path`. Unknown extensions are
/// `application/octet-stream` (never sniffed, so never executed as HTML).
pub fn content_type(path: &Path) -> String {
    let guess = mime_guess::from_path(path)
        .first_raw()
        .unwrap_or("application/octet-stream");
    let textual = guess.starts_with("text/")
        || matches!(
            guess,
            "application/javascript"
                | "application/json"
                | "application/xml"
                | "image/svg+xml"
                | "application/manifest+json"
        );
    // mime_guess maps .js to application/javascript; RFC 9239 prefers text/javascript.
    let guess = if guess == "application/javascript" {
        "text/javascript"
    } else {
        guess
    };
    if textual {
        format!("{guess}; charset=utf-8")
    } else {
        guess.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        for (name, want) in [
            ("a.html", "text/html; charset=utf-8"),
            ("a.css", "text/css; charset=utf-8"),
            ("a.js", "text/javascript; charset=utf-8"),
            ("a.json", "application/json; charset=utf-8"),
            ("a.svg", "image/svg+xml; charset=utf-8"),
            ("a.txt", "text/plain; charset=utf-8"),
            ("a.png", "image/png"),
            ("a.wasm", "application/wasm"),
            ("a.woff2", "font/woff2"),
            ("noext", "application/octet-stream"),
            ("a.unknownext", "application/octet-stream"),
        ] {
            assert_eq!(content_type(Path::new(name)), want, "{name}");
        }
    }
}
