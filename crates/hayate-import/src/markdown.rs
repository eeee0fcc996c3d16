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
         configuration (following `include`, globs included, relative paths from nginx's \
         configuration prefix: the nearest directory at or above the file's that holds an \
         `nginx.conf`, or `--prefix DIR`) and writes a hayate config. On stderr it reports, one \
         line each (`file:line: directive: what`), every directive not carried over or carried \
         over with a difference. It exits 0 when everything was carried over (the report may \
         still say what was not needed or differs), 2 when something was not carried over or \
         not supported (the config is still written), 1 when the nginx files cannot be read or \
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
         ## Differences in every site\n\n\
         What hayate does by default that nginx does not, found by the differential tests \
         (`crates/hayate/tests/import_nginx.rs`, which run nginx with a config and hayate \
         with its import side by side):\n\n\
         - hayate hides dotfiles (`.env`, `.git/`; 404), which nginx serves unless a location \
         denies them; the report says so for each server with files (`dotfiles = true` serves \
         them).\n\
         - hayate names `charset=utf-8` in the Content-Type of text files; nginx does with its \
         `charset` directive only. JavaScript is `text/javascript` (RFC 9239), where \
         nginx's older `mime.types` says `application/javascript`.\n\
         - Error pages and redirect bodies are each server's own text; nginx writes a \
         redirect's Location absolute (`http://host:port/dir/`), hayate relative (`/dir/`): \
         the same place for a client.\n\
         - Plain HTTP is redirected to HTTPS by hayate itself (308) when there is an https \
         listener: nginx's redirecting server blocks are reported as not needed. The setting \
         (`https_redirect`) is global: a config serving content on plain HTTP with no \
         redirecting server gets `https_redirect = false`.\n\
         - hayate picks a site by Host alone: server blocks with the same names on different \
         ports become one site (what differs between them is reported).\n\n\
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
