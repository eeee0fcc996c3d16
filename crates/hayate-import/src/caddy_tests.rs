//! The Caddyfile translator, directive by directive: Caddyfile text in,
//! hayate TOML, report and companion files out.

use std::path::Path;

use crate::caddy_parse::parse_str;
use crate::caddy_translate::{translate, Caddy};

fn run(text: &str) -> Caddy {
    translate(&parse_str(text, Path::new("C")).expect("parses"))
}

/// The TOML (without its header) and the report lines (`line: directive:
/// kind`) of a Caddyfile text.
fn import(text: &str) -> (String, Vec<String>) {
    let t = run(text);
    let notes = t
        .notes
        .iter()
        .map(|n| format!("{}: {}: {}", n.pos.line, n.directive, n.kind.as_str()))
        .collect();
    (t.config.to_toml(""), notes)
}

#[test]
fn automatic_https_as_caddy_decides_it() {
    let (toml, notes) =
        import("localhost {\n\trespond \"hi\"\n}\nexample.com {\n\trespond ok\n}\n");
    assert!(notes.is_empty(), "{notes:?}");
    assert!(
        toml.starts_with("listen = [\"https://0.0.0.0:443\", \"0.0.0.0:80\"]\nhttp3 = true\n"),
        "{toml}"
    );
    let local = toml
        .find("hosts = [\"localhost\"]\ntls = \"internal\"")
        .expect(&toml);
    let public = toml
        .find("hosts = [\"example.com\"]\ntls = \"acme\"")
        .expect(&toml);
    assert!(local < public);

    // A port alone is plain HTTP; auto_https off and a named HTTP port.
    let (toml, _) = import(
        "{\n\tauto_https off\n\thttp_port 8080\n\tservers {\n\t\tprotocols h1 h2\n\t}\n}\n\
         :9000 {\n\trespond a\n}\nhttp://b.test {\n\trespond b\n}\nc.test {\n\ttls c.pem c.key\n}\n",
    );
    assert!(
        toml.starts_with(
            "listen = [\"0.0.0.0:9000\", \"0.0.0.0:8080\", \"https://0.0.0.0:443\"]\n"
        ),
        "{toml}"
    );
    assert!(toml.contains("https_redirect = false"), "{toml}");
    assert!(!toml.contains("http3"), "{toml}");
    assert!(
        !toml.contains("tls = "),
        "no automatic certificates: {toml}"
    );
    assert!(
        toml.contains("tls_cert = [\"c.pem\"]\ntls_key = [\"c.key\"]"),
        "{toml}"
    );
}

#[test]
fn directives_run_in_caddys_order_not_the_files() {
    let (toml, notes) = import(
        "a.test {\n\trespond /x 404\n\trewrite /r /target\n\tredir /old /new permanent\n\
         \tfile_server\n\troot * /srv\n}\n",
    );
    assert_eq!(notes, ["5: file_server: carried with a difference"]);
    let redir = toml.find("redirect = \"/new?\"").expect(&toml);
    let rewrite = toml.find("rewrite = \"/target\"").expect(&toml);
    let respond = toml.find("respond = 404").expect(&toml);
    assert!(redir < rewrite && rewrite < respond, "{toml}");
    assert!(toml.contains("root = \"/srv\""), "{toml}");
    assert!(
        toml.contains("match = \"(?i)^(?:/old)$\"\nredirect = \"/new?\"\nstatus = 301"),
        "{toml}"
    );
}

#[test]
fn handle_blocks_are_routes_and_their_rules_keep_the_prefix() {
    let (toml, notes) = import(
        "a.test {\n\thandle_path /api/* {\n\t\trespond /secret 403\n\t\treverse_proxy :3000\n\t}\n\
         \thandle /docs/* {\n\t\tredir /docs/v1/* /docs/v2/\n\t\troot * /srv/docs\n\t\tfile_server browse\n\t}\n\
         \thandle {\n\t\trespond \"fallback\"\n\t}\n}\n",
    );
    assert_eq!(
        notes,
        [
            "3: respond: not carried",
            "9: file_server: carried with a difference",
        ],
        "{toml}"
    );
    assert!(
        toml.contains(
            "prefix = \"/api/\"\nstrip_prefix = true\nproxy = [\"http://localhost:3000\"]"
        ),
        "{toml}"
    );
    assert!(
        toml.contains(
            "match = \"(?i)^(?:/docs/v1/.*)$\"\nprefix = \"/docs/\"\nredirect = \"/docs/v2/?\""
        ),
        "{toml}"
    );
    assert!(
        toml.contains("prefix = \"/docs/\"\nroot = \"/srv/docs\"\nlisting = true"),
        "{toml}"
    );
    // The handle for the rest answers outside the other handles' prefixes.
    assert!(
        toml.contains("[[site.rule]]               # C:12\nmatch = \"!^(?:/docs/|/api/)\"\nrespond = \"fallback\""),
        "{toml}"
    );
}

#[test]
fn basic_auth_users_go_to_an_htpasswd_file() {
    // Caddy before 2.8 wrote the hash base64-encoded.
    let hash = "$2a$04$VSkGCvqpbeINgrlPnjE/guxMhBw4EuTNWZ.4GJIBwHWeR8LELfgDS";
    let encoded =
        "JDJhJDA0JFZTa0dDdnFwYmVJTmdybFBuakUvZ3V4TWhCdzRFdVROV1ouNEdKSUJ3SFdlUjhMRUxmZ0RT";
    let t = run(&format!(
        "a.test {{\n\tbasicauth /admin/* bcrypt Staff {{\n\t\talice {hash}\n\t\tbob {encoded}\n\t}}\n\
         \tbasic_auth {{\n\t\tcarol {hash}\n\t}}\n\tbasic_auth scrypt {{\n\t\tdan x\n\t}}\n}}\n"
    ));
    assert_eq!(
        t.files,
        [
            (
                "a.test.htpasswd".to_string(),
                format!("alice:{hash}\nbob:{hash}\n")
            ),
            ("a.test-2.htpasswd".to_string(), format!("carol:{hash}\n")),
        ]
    );
    let toml = t.config.to_toml("");
    assert!(
        toml.contains(
            "prefix = \"/admin/\"\nbasic_auth = \"a.test.htpasswd\"\nbasic_auth_realm = \"Staff\""
        ),
        "{toml}"
    );
    let kinds: Vec<&str> = t.notes.iter().map(|n| n.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "carried with a difference",
            "carried with a difference",
            "not carried"
        ]
    );
}

#[test]
fn tls_client_auth_and_on_demand() {
    let (toml, notes) = import(
        "{\n\ton_demand_tls {\n\t\task http://127.0.0.1:5555/check\n\t\tinterval 2m\n\t}\n}\n\
         a.test {\n\ttls {\n\t\ton_demand\n\t\tclient_auth {\n\t\t\tmode require_and_verify\n\
         \t\t\ttrusted_ca_cert_file /etc/ca.pem\n\t\t}\n\t\tdns cloudflare {env.TOKEN}\n\t}\n}\n",
    );
    assert_eq!(
        notes,
        [
            "4: interval: carried with a difference",
            "14: dns: not carried"
        ]
    );
    for want in [
        "tls_on_demand_ask = \"http://127.0.0.1:5555/check\"",
        "tls_on_demand = true",
        "tls_client_auth = \"require\"\ntls_client_ca = \"/etc/ca.pem\"",
    ] {
        assert!(toml.contains(want), "{want} in {toml}");
    }
}

#[test]
fn unknown_directives_and_matchers_are_reported() {
    let (_, notes) = import(
        "a.test {\n\t@x expression {path} == '/a'\n\tfrobnicate on\n\trespond @x 404\n\
         \trespond @nope 404\n\treverse_proxy @x :1\n\ttemplates\n}\n",
    );
    assert_eq!(
        notes,
        [
            "3: frobnicate: not supported",
            "4: respond: not carried",
            "5: respond: not carried",
            "6: reverse_proxy: not carried",
            "7: templates: not supported",
        ]
    );
}

#[test]
fn allow_and_deny_from_client_address_answers() {
    let (toml, notes) = import(
        "a.test {\n\t@office not remote_ip 10.0.0.0/8\n\trespond @office 403\n\
         \t@bad {\n\t\tremote_ip 192.0.2.0/24\n\t\tpath /login*\n\t}\n\tabort @bad\n\
         \tredir @office /away\n}\n",
    );
    assert_eq!(
        notes,
        [
            "8: abort: carried with a difference",
            "9: redir: not carried"
        ]
    );
    assert!(toml.contains("allow = [\"10.0.0.0/8\"]"), "{toml}");
    assert!(
        toml.contains("prefix = \"/login\"\ndeny = [\"192.0.2.0/24\"]"),
        "{toml}"
    );
}
