//! The "Coming from nginx" page, printed from the importer's own table
//! (`hayate import --table-markdown`; a test keeps docs/import-nginx.md
//! equal to it).

use crate::nginx_table::{How, ROWS};

/// The page, in Markdown.
pub fn table_markdown() -> String {
    let mut out = String::from(
        "# Coming from nginx\n\n\
         Generated from the importer's table (`crates/hayate-import/src/nginx_table.rs`) by \
         `hayate import --table-markdown`; a test keeps this file equal to its output.\n\n\
         `hayate import nginx /etc/nginx/nginx.conf -o hayate.toml` reads an nginx \
         configuration (following `include`, globs included, relative to the main file's \
         directory as nginx's prefix) and writes a hayate config. On stderr it reports, one \
         line each (`file:line: directive: what`), every directive not carried over or carried \
         over with a difference. It exits 0 when everything was carried over, 2 when something \
         was reported (the config is still written), 1 when the nginx files cannot be read or \
         parsed (with the position). `--check` also runs the result through `hayate check`.\n\n\
         ## How locations map\n\n\
         nginx picks a location in this order: `=` exact, then the longest prefix (final if it \
         is `^~`), then the regex locations in file order, then that longest prefix. hayate runs \
         its `[[site.rule]]`s first, in order, then picks the longest prefix `[[site.route]]`. \
         So an exact or regex location that answers by itself (`return`, `rewrite`, `deny all`) \
         becomes a rule (exact ones first); the PHP location (`~ \\.php$` with `fastcgi_pass`) \
         becomes the site's `fastcgi`, which runs `.php` scripts under every route; prefix \
         locations become routes, whose prefixes end at a path segment. Regex locations with \
         content of their own (`expires`, `proxy_pass`) have no hayate form and are reported.\n\n\
         ## Directives\n\n\
         | nginx | hayate | status |\n|---|---|---|\n",
    );
    for row in ROWS {
        let (hayate, status) = match row.how {
            How::Translated => (row.hayate.to_string(), "carried over".to_string()),
            How::Differs(text) => (
                row.hayate.to_string(),
                format!("carried over; differs: {text}"),
            ),
            How::NotNeeded(text) => ("—".to_string(), format!("not needed: {text}")),
            How::Unsupported(text) => ("—".to_string(), format!("not supported: {text}")),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            row.directive,
            hayate.replace('|', "\\|"),
            status.replace('|', "\\|")
        ));
    }
    out.push_str("\nAny other directive is reported as not supported: hayate has no equivalent.\n");
    out
}
