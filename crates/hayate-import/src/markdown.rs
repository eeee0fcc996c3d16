//! The "Coming from nginx" and "Coming from Caddy" pages, printed from the
//! importers' own tables (`hayate import --table-markdown [caddy]`; a test
//! keeps docs/import-nginx.md and docs/import-caddy.md equal to them).

use crate::nginx_table::How;

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
    out.push_str(&rows(
        crate::nginx_table::ROWS
            .iter()
            .map(|r| (r.directive, r.how, r.hayate)),
    ));
    out.push_str("\nAny other directive is reported as not supported: hayate has no equivalent.\n");
    out
}

/// A table's rows: directive, hayate, status.
fn rows<'a>(rows: impl Iterator<Item = (&'a str, How, &'a str)>) -> String {
    let mut out = String::new();
    for (directive, how, hayate) in rows {
        let (hayate, status) = match how {
            How::Translated => (hayate.to_string(), "carried over".to_string()),
            How::Differs(text) => (hayate.to_string(), format!("carried over; differs: {text}")),
            How::NotNeeded(text) => ("—".to_string(), format!("not needed: {text}")),
            How::Unsupported(text) => ("—".to_string(), format!("not supported: {text}")),
        };
        out.push_str(&format!(
            "| `{directive}` | {} | {} |\n",
            hayate.replace('|', "\\|"),
            status.replace('|', "\\|")
        ));
    }
    out
}

/// The "Coming from Caddy" page, in Markdown.
pub fn caddy_table_markdown() -> String {
    let mut out = String::from(
        "# Coming from Caddy\n\n\
         Generated from the importer's table (`crates/hayate-import/src/caddy_table.rs`) by \
         `hayate import --table-markdown caddy`; a test keeps this file equal to its output.\n\n\
         `hayate import caddy Caddyfile -o hayate.toml` reads a Caddyfile (snippets, `import` of \
         snippets and files, `{$ENV}` variables, heredocs) and writes a hayate config, and beside \
         it the htpasswd files that `basic_auth` users go to. On stderr it reports, one line each \
         (`file:line: directive: what`), every directive not carried over or carried over with a \
         difference. It exits 0 when everything was carried over, 2 when something was not (the \
         config is still written), 1 when the Caddyfile cannot be read or parsed (with the \
         position). `--check` also runs the result through `hayate check`.\n\n\
         ## How sites and matchers map\n\n\
         Each site block is a `[[site]]`: its names are the site's `hosts`, its ports the \
         `listen` addresses. Caddy's automatic HTTPS becomes `tls = \"acme\"` for public names \
         and `tls = \"internal\"` (hayate's local CA) for localhost, `.local` names and IP \
         addresses, with plain HTTP redirected to HTTPS and HTTP/3 on, as Caddy does.\n\n\
         Caddy runs a site's directives in a fixed order, not the file's; the importer sorts them \
         the same way, so the rules it writes (`redir`, `rewrite`, `respond`, `error`) come in \
         the order Caddy tries them. A matcher on one of those becomes the rule's conditions: \
         `path` and `path_regexp` (`match`; Caddy's path matching ignores case, and so does the \
         regex written), `method`, `header`, `header_regexp`, `host`, `query`, `protocol`, \
         `file`, and `not` of one of them. Other directives are scoped the way hayate scopes \
         options: for every request (the site's options), or for a path prefix (`/api/*`, a \
         `handle` or `handle_path` block) as a `[[site.route]]`. A `respond 403`, `error 403` or \
         `abort` for a `remote_ip` matcher is `deny`; for `not remote_ip` it is `allow`.\n\n\
         ## Differences in every site\n\n\
         - Caddy accepts request bodies of any size unless `request_body` limits them; hayate \
         refuses bodies over `max_body_size` (1 MiB by default) with 413. Raise it for uploads.\n\
         - hayate compresses text answers by default (files once, at the best level); Caddy only \
         with `encode`.\n\
         - hayate hides dotfiles (`.env`, `.git/`: 404); Caddy serves them unless `hide` names them.\n\
         - Caddy's path matchers ignore case; hayate's route prefixes do not.\n\
         - A route inherits the site's `root`: a route that proxies also serves the files under \
         it first (Caddy's `handle` blocks do not).\n\n\
         ## Directives\n\n\
         | Caddyfile | hayate | status |\n|---|---|---|\n",
    );
    out.push_str(&rows(
        crate::caddy_table::ROWS
            .iter()
            .map(|r| (r.directive, r.how, r.hayate)),
    ));
    out.push_str("\n## Global options\n\n| Caddyfile | hayate | status |\n|---|---|---|\n");
    out.push_str(&rows(
        crate::caddy_table::GLOBAL_ROWS
            .iter()
            .map(|r| (r.directive, r.how, r.hayate)),
    ));
    out.push_str(
        "\nAny other directive or global option is reported as not supported: hayate has no \
         equivalent.\n",
    );
    out
}
