#[test]
fn changes_name_options_and_routes() {
    use std::path::Path;
    let o = super::Overrides::default();
    let old = super::load_file(
            Path::new("a.toml"),
            "proxy_keepalive = \"5s\"\n[[site]]\n[[site.route]]\nprefix = \"/api/\"\nproxy = \"http://127.0.0.1:3000\"\ncache = \"1s\"\n[[site.route]]\nprefix = \"/old/\"\nproxy = \"http://127.0.0.1:3001\"\n",
            &o,
        )
        .unwrap();
    let new = super::load_file(
            Path::new("a.toml"),
            "proxy_keepalive = \"9s\"\n[[site]]\n[[site.route]]\nprefix = \"/api/\"\nproxy = \"http://127.0.0.1:3000\"\ncache = \"60s\"\n[[site.route]]\nprefix = \"/new/\"\nproxy = \"http://127.0.0.1:3001\"\n",
            &o,
        )
        .unwrap();
    let lines = super::changes(&old, &new);
    assert_eq!(
        lines,
        [
            "proxy_keepalive: changed",
            "route /api/ of site *: cache changed",
            "route /new/ of site *: added",
            "route /old/ of site *: removed",
        ],
        "{lines:#?}"
    );
    assert!(super::changes(&old, &old).is_empty());
}

use super::*;
use crate::values::AcmeChallenge;

#[test]
fn every_default_parses() {
    // resolve() panics on a default that does not parse.
    let g = GlobalLayer::default().resolve();
    assert_eq!(g.listen.len(), 1);
    let r = RouteLayer::default().resolve();
    assert_eq!(r.index, "index.html");
    assert!(r.root.is_none() && r.fallback.is_none() && !r.listing && r.precompressed);
}

#[test]
fn http2_goaway_timeout_defaults_to_two_seconds() {
    use std::time::Duration;
    let g = GlobalLayer::default().resolve();
    assert_eq!(g.http2_goaway_timeout.0, Duration::from_secs(2));
    let cfg = load_file(
        "c.toml".as_ref(),
        "root = \"/srv/a\"\nhttp2_goaway_timeout = \"500ms\"\n",
        &Overrides::default(),
    )
    .expect("valid");
    assert_eq!(
        cfg.global.http2_goaway_timeout.0,
        Duration::from_millis(500)
    );
}

#[test]
fn http3_is_off_by_default_and_set_in_a_file() {
    assert!(!GlobalLayer::default().resolve().http3);
    let cfg = load_file(
            "c.toml".as_ref(),
            "root = \"/srv/a\"\nlisten = [\"https://127.0.0.1:8443\"]\ntls = \"internal\"\nhttp3 = true\n",
            &Overrides::default(),
        )
        .expect("valid");
    assert!(cfg.global.http3);
    let bad = load_file(
        "c.toml".as_ref(),
        "root = \"/srv/a\"\nhttp3 = \"maybe\"\n",
        &Overrides::default(),
    );
    assert!(bad.is_err());
    // Without an https listener there is no UDP port to serve it on.
    let plain = load_file(
        "c.toml".as_ref(),
        "root = \"/srv/a\"\nlisten = [\"127.0.0.1:8080\"]\nhttp3 = true\n",
        &Overrides::default(),
    );
    let e = plain.expect_err("refused").to_string();
    assert!(e.contains("c.toml:3") && e.contains("https://"), "{e}");
}

#[test]
fn client_certificates_without_a_ca_are_refused_on_the_command_line_too() {
    let mut g = GlobalLayer::default();
    g.set_strs("tls_client_auth", &["optional".into()])
        .expect("valid");
    let (key, message) = super::check_tls(&g.clone().resolve(), &[]).expect_err("no CA");
    assert_eq!(key, "tls_client_ca");
    assert!(
        message.contains("\"optional\" needs tls_client_ca"),
        "{message}"
    );
    g.set_strs("tls_client_ca", &["/etc/ca.pem".into()])
        .expect("valid");
    super::check_tls(&g.clone().resolve(), &[]).expect("a CA");
    // One setting for every name: HTTP/3 verifies it too (sites that
    // differ are refused: http3_takes_client_certificates_only_when_...).
    g.set_strs("listen", &["https://127.0.0.1:8443".into()])
        .expect("valid");
    g.set_strs("tls", &["internal".into()]).expect("valid");
    g.set_strs("http3", &["true".into()]).expect("valid");
    super::check_tls(&g.resolve(), &[]).expect("with HTTP/3");
}

#[test]
fn shared_key_is_64_hex_digits() {
    let load = |text: &str| {
        let text = format!("root = \"/srv/a\"\n{text}");
        load_file("c.toml".as_ref(), &text, &Overrides::default())
    };
    let key = "aB".repeat(32);
    assert_eq!(GlobalLayer::default().resolve().shared_key, None);
    let ok = load(&format!("shared_key = \"{key}\"\n")).expect("valid");
    assert_eq!(ok.global.shared_key.as_deref(), Some(key.as_str()));
    for bad in ["secret", &format!("{key}0"), &"g".repeat(64)] {
        let text = format!("shared_key = \"{bad}\"\n");
        let e = load(&text).expect_err(&text).to_string();
        assert!(
            e.contains("shared_key must be 64 hex digits"),
            "{text}: {e}"
        );
    }
    // A file that shares ACME may leave the key to the environment.
    let acme = "shared = \"redis://127.0.0.1:6379\"\ntls = \"acme\"\ntls_names = [\"a.test\"]\n";
    load(acme).expect("valid");
}

#[test]
fn cache_key_and_bypass_headers() {
    let r = RouteLayer::default().resolve();
    assert!(r.cache_key_headers.0.is_empty());
    assert_eq!(r.cache_bypass_headers.0, vec!["authorization", "cookie"]);
    let cfg = load_file(
        "c.toml".as_ref(),
        "[[site]]\nroot = \"/srv/a\"\ncache_key_headers = [\"X-API-Key\"]\n\
             cache_bypass_headers = \"Authorization, Cookie, X-Token\"\n",
        &Overrides::default(),
    )
    .expect("valid");
    let o = &cfg.sites[0].routes[0].options;
    assert_eq!(o.cache_key_headers.0, vec!["x-api-key"]);
    assert_eq!(
        o.cache_bypass_headers.0,
        vec!["authorization", "cookie", "x-token"]
    );
    let bad = load_file(
        "c.toml".as_ref(),
        "cache_key_headers = \"X API\"\n",
        &Overrides::default(),
    );
    assert!(bad.is_err());
}

#[test]
fn compression_defaults_and_per_route_settings() {
    use hayate_core::Coding::*;
    let r = RouteLayer::default().resolve();
    assert!(r.compress);
    assert_eq!(r.compress_encodings.0, vec![Br, Zstd, Gzip]);
    assert_eq!(r.compress_min_size.0, 1024);
    assert!(r.compress_types.0.contains(&"text/*".to_string()));
    assert_eq!(
        r.compress_static_levels.0,
        vec![(Br, 11), (Zstd, 19), (Gzip, 9)]
    );
    assert_eq!(
        r.compress_dynamic_levels.0,
        vec![(Br, 4), (Zstd, 3), (Gzip, 5)]
    );
    let g = GlobalLayer::default().resolve();
    assert_eq!(g.compress_cache_size.0, 64 << 20);
    assert_eq!(g.compress_max_file.0, 8 << 20);
    assert_eq!(g.compress_queue, 1024);
    let cfg = load_file(
        "c.toml".as_ref(),
        r#"
compress_encodings = ["gzip", "br"]
[[site]]
root = "/srv/a"
[[site.route]]
prefix = "/raw/"
root = "/srv/raw"
compress = false
compress_types = ["text/html", "application/json"]
"#,
        &Overrides::default(),
    )
    .expect("valid");
    let routes = &cfg.sites[0].routes;
    assert!(!routes[0].options.compress);
    assert_eq!(routes[0].options.compress_types.0.len(), 2);
    assert!(routes[1].options.compress);
    assert_eq!(routes[1].options.compress_encodings.0, vec![Gzip, Br]);
    let bad = load_file(
        "c.toml".as_ref(),
        "compress_static_levels = \"br:12\"\n",
        &Overrides::default(),
    );
    assert!(bad.is_err());
}

#[test]
fn fastcgi_on_the_command_line() {
    let mut o = Overrides::default();
    o.route
        .set_strs(
            "fastcgi",
            &["unix:/run/php.sock".into(), "/blog=127.0.0.1:9000".into()],
        )
        .expect("valid");
    let cfg = without_file(&o).expect("valid");
    let routes = &cfg.sites[0].routes;
    assert_eq!(routes[0].prefix, "/blog");
    assert_eq!(routes[1].prefix, "/");
    for r in routes {
        assert!(
            r.options.fastcgi.is_some() && r.options.root.is_some(),
            "{}",
            r.prefix
        );
    }
    o.route
        .set_strs("proxy", &["http://127.0.0.1:1".into()])
        .expect("valid");
    let e = without_file(&o).expect_err("two upstreams for /");
    assert_eq!(e.key.as_deref(), Some("--fastcgi"));
}

#[test]
fn keys_flags_and_envs_are_unique() {
    let mut seen = std::collections::HashSet::new();
    for o in GLOBAL_OPTIONS.iter().chain(ROUTE_OPTIONS) {
        assert!(seen.insert(o.key), "duplicate key {}", o.key);
        assert!(
            o.key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{}",
            o.key
        );
    }
}

#[test]
fn a_wildcard_with_acme_needs_dns01_named_at_its_line() {
    let site = "listen = [\"https://127.0.0.1:8443\"]\ntls = \"acme\"\n\n[[site]]\nhosts = [\"*.example.com\"]\nroot = \"/srv/a\"\n";
    let e = load_file("c.toml".as_ref(), site, &Overrides::default())
        .expect_err("a wildcard over HTTP-01")
        .to_string();
    assert!(
        e.contains("c.toml:5") && e.contains("acme_dns_server"),
        "{e}"
    );
    let names = "listen = [\"https://127.0.0.1:8443\"]\nroot = \"/srv/a\"\ntls = \"acme\"\ntls_names = [\"*.example.com\"]\n";
    let e = load_file("c.toml".as_ref(), names, &Overrides::default())
        .expect_err("a wildcard name over HTTP-01")
        .to_string();
    assert!(e.contains("c.toml:4") && e.contains("tls_names"), "{e}");
    // DNS-01 needs a way to set the record, and a hook somewhere to see it.
    let names = names.replace("*.example.com", "example.com");
    let dns01 = format!("{names}acme_challenge = \"dns-01\"\n");
    let e = load_file("c.toml".as_ref(), &dns01, &Overrides::default())
        .expect_err("no DNS server")
        .to_string();
    assert!(
        e.contains("c.toml:5") && e.contains("acme_dns_server"),
        "{e}"
    );
    let hook = format!("{dns01}acme_dns_hook = [\"/usr/local/bin/dns\"]\n");
    let e = load_file("c.toml".as_ref(), &hook, &Overrides::default())
        .expect_err("nowhere to look")
        .to_string();
    assert!(e.contains("acme_dns_resolver"), "{e}");
    let ok = format!(
        "{dns01}acme_dns_server = \"192.0.2.53\"\nacme_dns_tsig_key = \"k:hmac-sha256:aGk=\"\n"
    );
    let cfg = load_file("c.toml".as_ref(), &ok, &Overrides::default()).expect("valid");
    assert_eq!(cfg.global.acme_dns_server.map(|a| a.0.port()), Some(53));
    let bad_key = format!(
        "{dns01}acme_dns_server = \"192.0.2.53\"\nacme_dns_tsig_key = \"k:hmac-md5:aGk=\"\n"
    );
    let e = load_file("c.toml".as_ref(), &bad_key, &Overrides::default())
        .expect_err("MD5")
        .to_string();
    assert!(e.contains("c.toml:7") && e.contains("hmac-md5"), "{e}");
}

#[test]
fn wildcards_take_dns01_beside_other_challenges_and_a_site_chooses_its_own() {
    // A way to set records is enough for a wildcard: the other names keep
    // acme_challenge's (auto) challenge.
    let base =
        "listen = [\"https://127.0.0.1:8443\"]\ntls = \"acme\"\nacme_dns_server = \"192.0.2.53\"\n";
    let sites = format!("{base}\n[[site]]\nhosts = [\"*.example.com\"]\nroot = \"/srv/a\"\n\n[[site]]\nhosts = [\"example.org\"]\nroot = \"/srv/b\"\nacme_challenge = \"tls-alpn-01\"\n");
    let cfg = load_file("c.toml".as_ref(), &sites, &Overrides::default()).expect("valid");
    assert_eq!(cfg.global.acme_challenge, AcmeChallenge::Auto);
    assert_eq!(cfg.sites[0].tls.acme_challenge, None);
    assert_eq!(
        cfg.sites[1].tls.acme_challenge,
        Some(AcmeChallenge::TlsAlpn01)
    );
    // A site's dns-01 without a way to set records, named at its line.
    let no_dns = "listen = [\"https://127.0.0.1:8443\"]\ntls = \"acme\"\n\n[[site]]\nhosts = [\"example.org\"]\nroot = \"/srv/b\"\nacme_challenge = \"dns-01\"\n";
    let e = load_file("c.toml".as_ref(), no_dns, &Overrides::default())
        .expect_err("no DNS server")
        .to_string();
    assert!(
        e.contains("c.toml:7") && e.contains("acme_dns_server"),
        "{e}"
    );
    let bad = no_dns.replace("dns-01", "dns-02");
    let e = load_file("c.toml".as_ref(), &bad, &Overrides::default())
        .expect_err("no such challenge")
        .to_string();
    assert!(e.contains("c.toml:7") && e.contains("dns-02"), "{e}");
}

#[test]
fn on_demand_tls_needs_its_ask_url() {
    let base = "listen = [\"https://127.0.0.1:8443\"]\nroot = \"/srv/a\"\ntls_on_demand = true\n";
    let e = load_file("c.toml".as_ref(), base, &Overrides::default())
        .expect_err("no ask")
        .to_string();
    assert!(
        e.contains("c.toml:3") && e.contains("tls_on_demand_ask"),
        "{e}"
    );
    let https = format!("{base}tls_on_demand_ask = \"https://app/allowed\"\n");
    let e = load_file("c.toml".as_ref(), &https, &Overrides::default())
        .expect_err("not plain http")
        .to_string();
    assert!(e.contains("c.toml:4") && e.contains("http://"), "{e}");
    let ok = format!("{base}tls_on_demand_ask = \"http://127.0.0.1:3000/allowed\"\n");
    let cfg = load_file("c.toml".as_ref(), &ok, &Overrides::default()).expect("valid");
    assert_eq!(cfg.global.tls_on_demand_rate, 10);
    let slow = format!("{ok}tls_on_demand_timeout = \"30s\"\n");
    let e = load_file("c.toml".as_ref(), &slow, &Overrides::default())
        .expect_err("past the handshake timeout")
        .to_string();
    assert!(e.contains("tls_handshake_timeout"), "{e}");
}

#[test]
fn the_collectors_client_certificate_needs_its_key_and_an_https_endpoint() {
    let base = "root = \"/srv/a\"\notel_endpoint = \"https://collector:4318\"\n";
    let ok = format!("{base}otel_tls_cert = \"/etc/c.pem\"\notel_tls_key = \"/etc/k.pem\"\n");
    load_file("c.toml".as_ref(), &ok, &Overrides::default()).expect("valid");
    let alone = format!("{base}otel_tls_cert = \"/etc/c.pem\"\n");
    let e = load_file("c.toml".as_ref(), &alone, &Overrides::default())
        .expect_err("no key")
        .to_string();
    assert!(e.contains("c.toml:3") && e.contains("otel_tls_key"), "{e}");
    let plain = ok.replace("https://", "http://");
    let e = load_file("c.toml".as_ref(), &plain, &Overrides::default())
        .expect_err("plain endpoint")
        .to_string();
    assert!(e.contains("https:// otel_endpoint"), "{e}");
}

#[test]
fn http3_takes_client_certificates_only_when_every_site_asks_the_same() {
    let base = "listen = [\"https://127.0.0.1:8443\"]\ntls = \"internal\"\nhttp3 = true\ntls_client_auth = \"require\"\ntls_client_ca = \"/etc/ca.pem\"\n";
    let alike = format!("{base}\n[[site]]\nhosts = [\"a.test\"]\nroot = \"/srv/a\"\n\n[[site]]\nhosts = [\"b.test\"]\nroot = \"/srv/b\"\n");
    load_file("c.toml".as_ref(), &alike, &Overrides::default()).expect("one setting");
    let differ = format!("{alike}tls_client_auth = \"off\"\n");
    let e = load_file("c.toml".as_ref(), &differ, &Overrides::default())
        .expect_err("two settings")
        .to_string();
    assert!(
        e.contains("http3") && e.contains("every site asks the same"),
        "{e}"
    );
}
