//! Table tests of every value parser in `values.rs`.

use super::*;

#[test]
fn cache_specs() {
    let off = CacheSpec::parse_str("off").expect("off");
    assert!(!off.enabled);
    let on = CacheSpec::parse_str("on").expect("on");
    assert!(on.enabled && on.ttl.is_none());
    let s = CacheSpec::parse_str(
        "5s, set-cookie, cookie, stale-while-revalidate=10s, stale-if-error=1m",
    )
    .expect("full");
    assert_eq!(
        s,
        CacheSpec {
            enabled: true,
            ttl: Some(Duration::from_secs(5)),
            set_cookie: true,
            with_cookie: true,
            with_authorization: false,
            stale_while_revalidate: Duration::from_secs(10),
            stale_if_error: Duration::from_secs(60),
            by_prefix: Vec::new(),
        }
    );
    assert!(
        CacheSpec::parse_str("on,authorization")
            .expect("auth")
            .with_authorization
    );
    for bad in [
        "sometimes",
        "on,cookies",
        "on,stale-if-error",
        "5x",
        "/api=5s",
    ] {
        assert!(CacheSpec::parse_str(bad).is_err(), "{bad}");
    }
}

#[test]
fn cache_specs_by_prefix_on_the_command_line() {
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let s = CacheSpec::parse_many(&args(&["/api=5s", "on", "/img=on,cookie", "/api=10s"]))
        .expect("valid");
    assert!(s.enabled && s.ttl.is_none());
    let prefixes: Vec<(&str, Option<u64>)> = s
        .by_prefix
        .iter()
        .map(|(p, c)| (p.as_str(), c.ttl.map(|t| t.as_secs())))
        .collect();
    assert_eq!(prefixes, vec![("/img", None), ("/api", Some(10))]);
    assert!(s.by_prefix[0].1.with_cookie);
    let only = CacheSpec::parse_many(&args(&["/api=5s"])).expect("valid");
    assert!(!only.enabled, "no cache outside /api");
    for bad in [&["/api"][..], &["/api=sometimes"], &["/api=5s", "never"]] {
        assert!(CacheSpec::parse_many(&args(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn durations() {
    assert_eq!(Dur::parse_str("10s"), Ok(Dur(Duration::from_secs(10))));
    assert_eq!(Dur::parse_str("250ms"), Ok(Dur(Duration::from_millis(250))));
    assert_eq!(Dur::parse_str("2m"), Ok(Dur(Duration::from_secs(120))));
    assert_eq!(Dur::parse_str("3"), Ok(Dur(Duration::from_secs(3))));
    assert!(Dur::parse_str("10 parsecs").is_err());
    assert!(Dur::parse_str("s").is_err());
}

#[test]
fn sizes() {
    assert_eq!(Size::parse_str("8KiB"), Ok(Size(8192)));
    assert_eq!(Size::parse_str("1m"), Ok(Size(1 << 20)));
    assert_eq!(Size::parse_str("100"), Ok(Size(100)));
    assert!(Size::parse_str("99999999999999999999G").is_err());
    assert!(Size::parse_str("5 furlongs").is_err());
}

#[test]
fn listen_addresses() {
    assert_eq!(
        ListenAddr::parse_str("127.0.0.1:80"),
        Ok(ListenAddr::Tcp("127.0.0.1:80".parse().expect("addr")))
    );
    assert_eq!(
        ListenAddr::parse_str("[::1]:8080"),
        Ok(ListenAddr::Tcp("[::1]:8080".parse().expect("addr")))
    );
    assert_eq!(
        ListenAddr::parse_str("unix:/tmp/h.sock"),
        Ok(ListenAddr::Unix("/tmp/h.sock".into()))
    );
    assert_eq!(
        ListenAddr::parse_str("8080"),
        Ok(ListenAddr::Tcp("0.0.0.0:8080".parse().expect("addr")))
    );
    assert!(ListenAddr::parse_str("unix:").is_err());
    assert!(ListenAddr::parse_str("example.com:80").is_err());
}

#[test]
fn balance_and_nets() {
    assert_eq!(
        BalanceSpec::parse_str("hash:header:X-User"),
        Ok(BalanceSpec::HashHeader("x-user".into()))
    );
    assert_eq!(
        BalanceSpec::parse_str("hash:cookie:sid"),
        Ok(BalanceSpec::HashCookie("sid".into()))
    );
    assert_eq!(
        BalanceSpec::parse_str("sticky"),
        Ok(BalanceSpec::Sticky("hayate_sticky".into()))
    );
    assert_eq!(
        BalanceSpec::parse_str("sticky:route"),
        Ok(BalanceSpec::Sticky("route".into()))
    );
    assert!(BalanceSpec::parse_str("sticky:a;b").is_err());
    assert!(BalanceSpec::parse_str("hash:header:").is_err());
    assert!(BalanceSpec::parse_str("random").is_err());
    let net = IpNet::parse_str("10.0.0.0/8").expect("valid");
    assert!(net.contains("10.1.2.3".parse().expect("ip")));
    assert!(!net.contains("11.0.0.1".parse().expect("ip")));
    assert!(IpNet::parse_str("::1")
        .expect("valid")
        .contains("::1".parse().expect("ip")));
    assert!(IpNet::parse_str("0.0.0.0/0")
        .expect("valid")
        .contains("8.8.8.8".parse().expect("ip")));
    assert!(IpNet::parse_str("10.0.0.0/33").is_err());
}

#[test]
fn proxy_specs() {
    let spec = ProxySpec::parse_str("/api=http://127.0.0.1:3000,unix:/run/a.sock").expect("valid");
    assert_eq!(spec.prefix.as_deref(), Some("/api"));
    assert_eq!(
        spec.members,
        vec!["http://127.0.0.1:3000", "unix:/run/a.sock"]
    );
    assert_eq!(
        ProxySpec::parse_str("localhost:3000")
            .expect("valid")
            .prefix,
        None
    );
    for good in [
        "https://a:1",
        "https://api.example.com",
        "https://[::1]:8443/",
    ] {
        assert!(ProxySpec::parse_str(good).is_ok(), "{good:?}");
    }
    for bad in [
        "",
        "http://",
        "unix:",
        "https://",
        "https://a:1/x",
        "http://a:1/x",
        "http://a",
        "/api=",
    ] {
        assert!(ProxySpec::parse_str(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn workers_and_bools() {
    assert_eq!(Workers::parse_str("auto"), Ok(Workers::Auto));
    assert_eq!(Workers::parse_str("4"), Ok(Workers::Count(4)));
    assert!(Workers::parse_str("0").is_err());
    assert!(Workers::Auto.get() >= 1);
    assert_eq!(bool::parse_str("on"), Ok(true));
    assert!(bool::parse_str("maybe").is_err());
    assert!(String::parse_str("a\r\nb").is_err());
    assert_eq!(
        NonZeroU32::parse_str(" 2"),
        Ok(NonZeroU32::new(2).expect("2"))
    );
    assert!(NonZeroU32::parse_str("0").is_err());
    assert!(NonZeroU32::parse_str("-1").is_err());
}

#[test]
fn codings_levels_and_media_types() {
    use hayate_core::Coding::*;
    assert_eq!(Codings::parse_str("zstd, br"), Ok(Codings(vec![Zstd, Br])));
    assert_eq!(Codings::parse_str(""), Ok(Codings(vec![])));
    for bad in ["identity", "deflate", "br,br"] {
        assert!(Codings::parse_str(bad).is_err(), "{bad}");
    }
    assert_eq!(
        CodingLevels::parse_str("br:5,gzip:1"),
        Ok(CodingLevels(vec![(Br, 5), (Gzip, 1)]))
    );
    for bad in ["br", "br:12", "zstd:0", "gzip:x", "identity:1", "lz4:1"] {
        assert!(CodingLevels::parse_str(bad).is_err(), "{bad}");
    }
    assert_eq!(
        MediaTypes::parse_str("Text/*, application/json"),
        Ok(MediaTypes(vec!["text/*".into(), "application/json".into()]))
    );
    for bad in ["text", "/json", "text/ html;x", "a/b c"] {
        assert!(MediaTypes::parse_str(bad).is_err(), "{bad}");
    }
}

#[test]
fn fastcgi_addresses() {
    assert_eq!(
        FastCgiSpec::parse_str("unix:/run/php/fpm.sock"),
        Ok(FastCgiSpec {
            prefix: None,
            members: vec!["unix:/run/php/fpm.sock".into()],
        })
    );
    assert_eq!(
        FastCgiSpec::parse_str("/blog=127.0.0.1:9000, 127.0.0.1:9001"),
        Ok(FastCgiSpec {
            prefix: Some("/blog".into()),
            members: vec!["127.0.0.1:9000".into(), "127.0.0.1:9001".into()],
        })
    );
    for bad in [
        "",
        "unix:",
        "http://127.0.0.1:9000",
        "localhost",
        ":9000",
        "host:x",
    ] {
        assert!(FastCgiSpec::parse_str(bad).is_err(), "{bad}");
    }
}

#[test]
fn app_protocols() {
    use crate::app::AppProtocol;
    assert_eq!(AppProtocol::parse_str("fastcgi"), Ok(AppProtocol::FastCgi));
    assert_eq!(AppProtocol::parse_str(" http"), Ok(AppProtocol::Http));
    assert!(AppProtocol::parse_str("fcgi").is_err());
}

#[test]
fn field_names() {
    assert_eq!(
        FieldNames::parse_str(" X-API-Key, x-api-key ,Cookie,"),
        Ok(FieldNames(vec!["x-api-key".into(), "cookie".into()]))
    );
    assert_eq!(FieldNames::parse_str(""), Ok(FieldNames::default()));
    for bad in ["X API", "a:b", "x\u{e9}", "a\r\nb"] {
        assert!(FieldNames::parse_str(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn proxy_http2_is_off_on_or_auto_and_h2c_members_parse() {
    assert_eq!(UpstreamHttp2::parse_str("on"), Ok(UpstreamHttp2::On));
    assert_eq!(UpstreamHttp2::parse_str(" off "), Ok(UpstreamHttp2::Off));
    assert_eq!(UpstreamHttp2::parse_str("auto"), Ok(UpstreamHttp2::Auto));
    let err = UpstreamHttp2::parse_str("h2").expect_err("not a mode");
    assert!(err.contains("off, on or auto"), "{err}");
    let spec = ProxySpec::parse_str("/grpc/=h2c://127.0.0.1:50051").expect("h2c member");
    assert_eq!(spec.members, vec!["h2c://127.0.0.1:50051".to_string()]);
    assert!(ProxySpec::parse_str("unix+h2c:/run/grpc.sock").is_ok());
    let mixed = ProxySpec::parse_str("h2c://127.0.0.1:1,http://127.0.0.1:2").expect_err("mixed");
    assert!(mixed.contains("cannot share a group"), "{mixed}");
    assert!(
        ProxySpec::parse_str("h2c://127.0.0.1").is_err(),
        "h2c needs a port"
    );
}
