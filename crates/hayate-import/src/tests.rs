//! The translator, directive by directive: nginx text in, hayate TOML and
//! report out.

use std::path::Path;

use crate::nginx_parse::parse_str;
use crate::nginx_translate::translate;

/// The TOML (without its header) and the report lines (`line: directive:
/// kind: what`) of an nginx text.
fn import(text: &str) -> (String, Vec<String>) {
    let main = parse_str(text, Path::new("t.conf"), Path::new("")).expect("parses");
    let t = translate(&main);
    let notes = t
        .notes
        .iter()
        .map(|n| format!("{}: {}: {}", n.pos.line, n.directive, n.kind.as_str()))
        .collect();
    (t.config.to_toml(""), notes)
}

#[test]
fn locations_become_rules_in_nginx_order_and_routes() {
    let (toml, notes) = import(
        "server {\n listen 80;\n server_name a.example;\n root /srv/a;\n\
         location ~ \\.bak$ { deny all; }\n\
         location = /old { return 301 /new; }\n\
         rewrite ^/p/(\\d+)$ /post.php?id=$1 last;\n\
         location /api/ { proxy_pass http://127.0.0.1:3000/; }\n\
         location ^~ /static/ { alias /srv/static/; }\n}\n",
    );
    // Server rewrites, then exact, then regex locations, as nginx checks them.
    let rewrite = toml.find("match = \"^/p/(\\\\d+)$\"").expect(&toml);
    let exact = toml.find("match = \"^/old$\"").expect(&toml);
    let regex = toml.find("match = \"\\\\.bak$\"").expect(&toml);
    assert!(rewrite < exact && exact < regex, "{toml}");
    assert!(toml.contains("rewrite = \"/post.php?id=$1\"\n"), "{toml}");
    assert!(toml.contains("redirect = \"/new\"\nstatus = 301"), "{toml}");
    assert!(
        toml.contains("match = \"\\\\.bak$\"\nrespond = 403"),
        "{toml}"
    );
    // proxy_pass with the URI "/": the prefix is stripped.
    assert!(
        toml.contains(
            "prefix = \"/api/\"\nstrip_prefix = true\nproxy = [\"http://127.0.0.1:3000\"]"
        ),
        "{toml}"
    );
    // A regex location that answers by itself gets no 404 rule of files.
    assert_eq!(toml.matches("file = \"missing\"").count(), 0, "{toml}");
    assert!(
        toml.contains("prefix = \"/static/\"\nroot = \"/srv/static/\"\nstrip_prefix = true"),
        "{toml}"
    );
    assert_eq!(
        notes,
        [
            "1: server: carried with a difference",   // dotfiles
            "9: location: carried with a difference", // ^~: rules come first
        ]
    );
}

#[test]
fn rewrite_flags() {
    let (toml, notes) = import(
        "server {\n root /srv;\n location /dotfiles/ { deny all; }\n\
         rewrite ^/a$ /b break;\n rewrite ^/c$ /d redirect;\n rewrite ^/e$ /f permanent;\n\
         rewrite ^/g$ https://x.example/g;\n rewrite ^/h$ /i;\n rewrite ^/(?=j) /k last;\n}\n",
    );
    assert!(toml.contains("rewrite = \"/b\"\nlast = true"), "{toml}");
    assert!(toml.contains("redirect = \"/d\"\nstatus = 302"), "{toml}");
    assert!(toml.contains("redirect = \"/f\"\nstatus = 301"), "{toml}");
    assert!(
        toml.contains("redirect = \"https://x.example/g\"\nstatus = 302"),
        "{toml}"
    );
    assert!(
        toml.contains("match = \"^/h$\"\nrewrite = \"/i\""),
        "{toml}"
    );
    assert!(
        notes.contains(&"8: rewrite: carried with a difference".to_string()),
        "{notes:?}"
    );
    // Look-ahead: hayate's regexes have none.
    assert!(
        notes.contains(&"9: rewrite: not carried".to_string()),
        "{notes:?}"
    );
}

#[test]
fn listen_forms_and_names() {
    let (toml, notes) = import(
        "server {\n listen 443 ssl http2;\n listen unix:/run/a.sock;\n\
         listen 127.0.0.1:8080 proxy_protocol;\n listen [::]:8443 ssl default_server;\n\
         server_name .example.com www.example.* ~^(?<u>.+)\\.example\\.net$;\n\
         ssl_certificate /etc/ssl/a.pem;\n ssl_certificate_key /etc/ssl/a.key;\n\
         proxy_pass http://127.0.0.1:3000;\n}\n",
    );
    assert!(
        toml.contains(
            "listen = [\"https://0.0.0.0:443\", \"unix:/run/a.sock\", \"127.0.0.1:8080 proxy_protocol\", \"https://[::]:8443\"]"
        ),
        "{toml}"
    );
    assert!(
        toml.contains("hosts = [\"example.com\", \"*.example.com\"]"),
        "{toml}"
    );
    assert!(
        toml.contains("tls_cert = [\"/etc/ssl/a.pem\"]\ntls_key = [\"/etc/ssl/a.key\"]"),
        "{toml}"
    );
    assert_eq!(
        notes,
        [
            // default_server on a named server
            "1: listen: carried with a difference",
            // the regex name and the tail wildcard
            "6: server_name: not carried",
        ]
    );
}

#[test]
fn upstream_members_and_policies() {
    let (toml, notes) = import(
        "http {\n upstream app {\n  least_conn;\n  server 10.0.0.1:3000 weight=3 max_fails=2 fail_timeout=30s;\n\
         server unix:/run/app.sock;\n  server 10.0.0.2:3000 backup;\n  server 10.0.0.3:3000 down;\n\
         keepalive 32;\n }\n server {\n  location / { proxy_pass http://app; }\n }\n}\n",
    );
    assert!(
        toml.contains(
            "members = [\"http://10.0.0.1:3000 weight=3\", \"unix:/run/app.sock\", \"http://10.0.0.2:3000\"]"
        ),
        "{toml}"
    );
    assert!(toml.contains("proxy_balance = \"least_conn\""), "{toml}");
    assert!(
        toml.contains("proxy_max_fails = 2\nproxy_fail_timeout = \"30s\""),
        "{toml}"
    );
    assert!(toml.contains("proxy = \"app\""), "{toml}");
    assert_eq!(
        notes,
        [
            "3: least_conn: carried with a difference",
            "6: server: carried with a difference", // backup
            "7: server: not carried",               // down
            "8: keepalive: not needed",
        ]
    );
}

#[test]
fn policies_limits_and_headers() {
    let (toml, notes) = import(
        "http {\n limit_req_zone $binary_remote_addr zone=one:10m rate=5r/s;\n\
         limit_conn_zone $binary_remote_addr zone=addr:10m;\n set_real_ip_from 10.0.0.0/8;\n\
         server {\n  root /srv;\n   client_max_body_size 64m;\n\
         location /login/ { limit_req zone=one burst=10; limit_conn addr 2; }\n\
         location /admin/ { allow 192.0.2.0/24; deny all; auth_basic \"Admins\"; \
         auth_basic_user_file /etc/nginx/htpasswd; }\n\
         location /api/ { limit_req zone=one burst=20 nodelay; \
         proxy_pass http://127.0.0.1:3000; proxy_set_header X-Real-IP $remote_addr; \
         proxy_read_timeout 5m; add_header X-Frame-Options DENY always; expires 1h; \
         add_header Strict-Transport-Security \"max-age=63072000\" always; }\n }\n}\n",
    );
    assert!(
        toml.contains("trusted_proxies = [\"10.0.0.0/8\"]"),
        "{toml}"
    );
    assert!(toml.contains("max_body_size = \"64MiB\""), "{toml}");
    assert!(
        toml.contains("rate_limit = \"5/s burst=10 delay\"\nconn_limit = 2"),
        "{toml}"
    );
    assert!(toml.contains("rate_limit = \"5/s burst=20\"\n"), "{toml}");
    assert!(
        toml.contains("allow = [\"192.0.2.0/24\"]\nbasic_auth_realm = \"Admins\"\nbasic_auth = \"/etc/nginx/htpasswd\""),
        "{toml}"
    );
    assert!(
        toml.contains("request_headers = { \"X-Real-IP\" = \"$client_ip\" }"),
        "{toml}"
    );
    assert!(toml.contains("proxy_timeout = \"300s\""), "{toml}");
    assert!(
        toml.contains("response_headers = { \"X-Frame-Options\" = \"DENY\" }"),
        "{toml}"
    );
    assert!(toml.contains("cache_control = \"max-age=3600\""), "{toml}");
    assert!(toml.contains("hsts = \"63072000s\""), "{toml}");
    assert_eq!(
        notes,
        [
            "5: server: carried with a difference", // dotfiles
            "8: limit_req: carried with a difference",
            "8: limit_conn: carried with a difference",
            "9: auth_basic: carried with a difference",
            "9: auth_basic_user_file: carried with a difference",
            "10: limit_req: carried with a difference",
            "10: expires: carried with a difference",
        ]
    );
}

#[test]
fn try_files_shapes() {
    let (toml, notes) = import(
        "server {\n root /srv;\n\
         location /spa/ { try_files $uri $uri/ /spa/index.html; }\n\
         location / { try_files $uri @app; }\n\
         location @app { proxy_pass http://127.0.0.1:3000; proxy_set_header Host $host; }\n\
         location /x/ { try_files $uri $uri.html =403; }\n}\n",
    );
    assert!(
        toml.contains("prefix = \"/spa/\"\nfallback = \"spa/index.html\""),
        "{toml}"
    );
    assert!(
        toml.contains("prefix = \"/\"\nproxy = [\"http://127.0.0.1:3000\"]"),
        "{toml}"
    );
    assert_eq!(
        notes,
        [
            "1: server: carried with a difference",
            "6: try_files: not carried"
        ]
    );
}

#[test]
fn unknown_and_unsupported_directives_are_reported() {
    let (_, notes) = import(
        "server {\n root /srv;\n if ($host = a) { return 404; }\n\
         sub_filter a b;\n frobnicate on;\n sendfile on;\n}\n",
    );
    assert_eq!(
        notes,
        [
            "1: server: carried with a difference",
            "3: if: not supported",
            "4: sub_filter: not supported",
            "5: frobnicate: not supported",
            "6: sendfile: not needed",
        ]
    );
}

#[test]
fn every_row_in_every_place_translates_or_reports() {
    // Each directive of the table, with arguments of every kind, at every
    // level a config can hold it: an answer or a report line, never a panic.
    for row in crate::nginx_table::ROWS {
        let name = row.directive;
        if matches!(
            name,
            "server" | "location" | "upstream" | "http" | "events" | "types" | "include"
        ) {
            continue;
        }
        for args in [
            "",
            " on",
            " off",
            " 10m 5s",
            " a b always",
            " zone=z:1m rate=1r/s",
            " =404",
        ] {
            let d = format!("{name}{args};");
            let text = format!(
                "http {{\n {d}\n upstream u {{ server 127.0.0.1:1; {d} }}\n server {{\n  {d}\n  \
                 location /x/ {{ {d} }}\n  location ~ \\.php$ {{ fastcgi_pass unix:/a; {d} }}\n  \
                 location = /e {{ {d} }}\n  location ~* \\.png$ {{ {d} }}\n  location @n {{ {d} }}\n }}\n}}\n"
            );
            let (toml, _) = import(&text);
            assert!(toml.contains("[[site]]"), "{d}: {toml}");
        }
    }
}

#[test]
fn a_site_file_includes_from_the_directory_of_nginx_conf() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("sites-available")).expect("mkdir");
    std::fs::create_dir_all(root.join("snippets")).expect("mkdir");
    std::fs::write(root.join("nginx.conf"), "events {}\n").expect("write");
    std::fs::write(
        root.join("snippets/php.conf"),
        "fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n",
    )
    .expect("write");
    let site = root.join("sites-available/site");
    std::fs::write(
        &site,
        "server {\n root /srv;\n location ~ \\.php$ {\n  include snippets/php.conf;\n  \
         fastcgi_pass unix:/run/php.sock;\n }\n}\n",
    )
    .expect("write");
    assert_eq!(crate::conf_prefix(&site), root);
    let import = crate::nginx(&site, None).expect("imports");
    assert!(
        import.toml.contains("fastcgi = \"unix:/run/php.sock\""),
        "{}",
        import.toml
    );
    // Another prefix: the include is not there.
    let e = crate::nginx(&site, Some(&root.join("sites-available"))).unwrap_err();
    assert_eq!(e.pos.line, 4, "{e}");
}

#[test]
fn plain_http_content_and_hayates_https_redirect() {
    // Content on 80 and 443, no redirecting server: both keep serving.
    let (toml, _) = import(
        "server { listen 80; listen 443 ssl; server_name a.example; proxy_pass http://127.0.0.1:1; \
         ssl_certificate /c; ssl_certificate_key /k; }\n",
    );
    assert!(toml.contains("https_redirect = false"), "{toml}");
    // A redirecting server for one name, content on plain HTTP for another:
    // hayate's one setting redirects both, which is reported.
    let (toml, notes) = import(
        "server { listen 80; server_name a.example; return 301 https://$host$request_uri; }\n\
         server { listen 443 ssl; server_name a.example; proxy_pass http://127.0.0.1:1; \
         ssl_certificate /c; ssl_certificate_key /k; }\n\
         server { listen 80; server_name b.example; proxy_pass http://127.0.0.1:2; }\n",
    );
    assert!(!toml.contains("https_redirect"), "{toml}");
    assert_eq!(
        notes,
        [
            "1: server: not needed",
            "3: server: carried with a difference",
        ]
    );
}

#[test]
fn a_prefix_location_that_only_returns_is_a_rule_and_no_route() {
    let (toml, _) = import(
        "server {\n root /srv;\n client_max_body_size 0;\n\
         location /old/ { return 301 /new/; }\n location / { return 302 https://example.com$request_uri; }\n}\n",
    );
    assert!(!toml.contains("[[site.route]]"), "{toml}");
    assert!(
        toml.contains("prefix = \"/old/\"\nredirect = \"/new/\"\nstatus = 301"),
        "{toml}"
    );
    assert!(
        toml.contains("[[site.rule]]               # t.conf:5\nmatch = \"!^(?:/old/)\"\nredirect = \"https://example.com$request_uri\"\nstatus = 302"),
        "{toml}"
    );
    // (The `/` rule leaves /old/... alone: nginx's longest prefix wins.)
    // 0, no limit in nginx: hayate's largest sensible bound, in a unit it reads.
    assert!(toml.contains("max_body_size = \"1024GiB\""), "{toml}");
}
