use super::*;

#[test]
fn prefixes() {
    assert!(prefix_matches(b"/", b"/x"));
    assert!(prefix_matches(b"/assets", b"/assets"));
    assert!(prefix_matches(b"/assets", b"/assets/x.js"));
    assert!(!prefix_matches(b"/assets", b"/assetsx"));
    assert!(prefix_matches(b"/assets/", b"/assets/x"));
    assert!(!prefix_matches(b"/assets/", b"/assets"));
}

#[test]
fn ports_are_stripped() {
    assert_eq!(strip_port(b"example.com:8080"), b"example.com");
    assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
    assert_eq!(strip_port(b"example.com"), b"example.com");
}

#[test]
fn alt_svc_names_each_https_port_once_with_http3_on() {
    let load = |text: &str| {
        let text = format!("root = \"/srv/a\"\ntls = \"internal\"\n{text}");
        let file = std::path::Path::new("c.toml");
        hayate_config::load_file(file, &text, &Default::default()).expect("valid")
    };
    let listen = "listen = [\"https://127.0.0.1:8443\", \"127.0.0.1:8080\", \"https://[::1]:8443\", \"https://127.0.0.1:9443\"]\n";
    let on = load(&format!("{listen}http3 = true\n"));
    let value = http3_alt_svc(&on).expect("a value");
    assert_eq!(
        &value[..],
        b"h3=\":8443\"; ma=86400, h3=\":9443\"; ma=86400"
    );
    assert!(http3_alt_svc(&load(listen)).is_none());
}
