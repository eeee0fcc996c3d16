//! Directory listings (off by default): HTML, or JSON when the client asks
//! for `application/json`. Names are escaped for their format; hidden files
//! are left out unless dotfiles are served.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use hayate_core::path::encode;

struct Item {
    name: Vec<u8>,
    dir: bool,
    size: u64,
    mtime: u64,
}

/// Lists `dir`. `url_path` is the decoded request path (ends with `/`).
pub(crate) fn render(
    dir: &Path,
    url_path: &[u8],
    json: bool,
    dotfiles: bool,
) -> std::io::Result<String> {
    let mut items = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().as_bytes().to_vec();
        if name.first() == Some(&b'.') && !dotfiles {
            continue;
        }
        // Follows symlinks, like the file lookup; broken links are skipped.
        let Ok(meta) = fs::metadata(entry.path()) else {
            continue;
        };
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        items.push(Item {
            name,
            dir: meta.is_dir(),
            size: meta.len(),
            mtime,
        });
    }
    items.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
    Ok(if json {
        render_json(&items)
    } else {
        render_html(&items, url_path)
    })
}

fn render_json(items: &[Item]) -> String {
    let mut out = String::from("[");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        json_string(&mut out, &String::from_utf8_lossy(&it.name));
        out.push_str(&format!(
            ",\"type\":\"{}\",\"size\":{},\"mtime\":{}}}",
            if it.dir { "directory" } else { "file" },
            it.size,
            it.mtime
        ));
    }
    out.push_str("]\n");
    out
}

fn render_html(items: &[Item], url_path: &[u8]) -> String {
    let title = html_escape(&String::from_utf8_lossy(url_path));
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n\
         <body><h1>Index of {title}</h1>\n<ul>\n"
    );
    if url_path != b"/" {
        out.push_str("<li><a href=\"../\">../</a></li>\n");
    }
    for it in items {
        let mut href = encode(&it.name);
        let mut label = html_escape(&String::from_utf8_lossy(&it.name));
        if it.dir {
            href.push('/');
            label.push('/');
        }
        // `./` keeps a name with a colon from being read as a URL scheme.
        out.push_str(&format!(
            "<li><a href=\"./{}\">{}</a> {}</li>\n",
            html_escape(&href),
            label,
            it.size
        ));
    }
    out.push_str("</ul></body></html>\n");
    out
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_names() {
        let items = [Item {
            name: b"<script>\"a\".txt".to_vec(),
            dir: false,
            size: 1,
            mtime: 0,
        }];
        let html = render_html(&items, b"/x/");
        assert!(html.contains("&lt;script&gt;&quot;a&quot;.txt"), "{html}");
        assert!(!html.contains("<script>"));
        let json = render_json(&items);
        assert_eq!(
            json,
            "[{\"name\":\"<script>\\\"a\\\".txt\",\"type\":\"file\",\"size\":1,\"mtime\":0}]\n"
        );
    }
}
