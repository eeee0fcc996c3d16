//! A route's upstream group as its options describe it: the members and
//! the protocol they speak, the balancing policy, the TLS client for
//! `https://` members (a route's own when it presents a client
//! certificate), FastCGI's connection share, and what a group of that
//! protocol cannot do (`grpc_web` needs HTTP/2 members).

use std::io;
use std::sync::Arc;

use hayate_config::values::{BalanceSpec, FastCgiSpec, ProxySpec, UpstreamHttp2};
use hayate_config::{Config, RouteOptions};
use hayate_proxy::{Balance, HealthProbe, ProxySettings, UpstreamAddr, UpstreamGroup};
use tokio_rustls::rustls::ClientConfig;

/// The TLS client settings for `https://` upstream members, when some route
/// has one.
pub(super) fn upstream_tls(config: &Config) -> io::Result<Option<Arc<ClientConfig>>> {
    let any_https = config.sites.iter().flat_map(|s| &s.routes).any(|r| {
        r.options.proxy.iter().flatten().any(|spec| {
            spec.members
                .iter()
                .any(|m| ProxySpec::member_weight(m).0.starts_with("https://"))
        })
    });
    if !any_https {
        return Ok(None);
    }
    let g = &config.global;
    hayate_tls::upstream_client_config(g.proxy_tls_ca.as_deref(), g.proxy_tls_verify, None)
        .map(|c| Some(Arc::new(c)))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("https upstreams: {e}")))
}

/// The TLS client of a route that presents its own client certificate to
/// https upstreams (`proxy_tls_cert`, `proxy_tls_key`); `None` when it
/// presents none. Read when the routes are built (start, reload).
pub(super) fn route_client_cert(
    prefix: &str,
    options: &RouteOptions,
    config: &Config,
) -> io::Result<Option<Arc<ClientConfig>>> {
    let invalid = |m: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("route {prefix:?}: {m}"),
        )
    };
    let pair = match (&options.proxy_tls_cert, &options.proxy_tls_key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert.as_path(), key.as_path()),
        (Some(_), None) => return Err(invalid("proxy_tls_cert needs proxy_tls_key".into())),
        (None, Some(_)) => return Err(invalid("proxy_tls_key needs proxy_tls_cert".into())),
    };
    let g = &config.global;
    hayate_tls::upstream_client_config(g.proxy_tls_ca.as_deref(), g.proxy_tls_verify, Some(pair))
        .map(|c| Some(Arc::new(c)))
        .map_err(invalid)
}

/// The balancing of `spec`, or `default` when `proxy_balance` is unset.
pub(super) fn balance(spec: Option<&BalanceSpec>, default: Balance) -> Balance {
    match spec {
        None => default,
        Some(BalanceSpec::LeastConn) => Balance::LeastOutstanding,
        Some(BalanceSpec::RoundRobin) => Balance::RoundRobin,
        Some(BalanceSpec::HashHeader(h)) => Balance::HashHeader(h.clone()),
        Some(BalanceSpec::HashCookie(c)) => Balance::HashCookie(c.clone()),
        Some(BalanceSpec::HashIp) => Balance::HashIp,
        Some(BalanceSpec::Sticky(c)) => Balance::Sticky(c.clone()),
    }
}

/// The group of `specs`' members: HTTP/2 when they are `h2c://` (or
/// `https://` under `proxy_http2 = on`), what `https://` ones choose by
/// ALPN under `auto`, HTTP/1.1 otherwise; one group speaks one protocol at
/// a time (its pool and forwarding differ).
pub(super) fn upstream_group(
    specs: &[ProxySpec],
    settings: &ProxySettings,
    http2: UpstreamHttp2,
) -> io::Result<UpstreamGroup> {
    let mut addrs = Vec::new();
    let mut weights = Vec::new();
    for member in specs.iter().flat_map(|s| &s.members) {
        let (url, weight) = ProxySpec::member_weight(member);
        addrs.push(
            UpstreamAddr::parse(url).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        );
        weights.push(weight);
    }
    let speaks_h2 =
        |a: &UpstreamAddr| a.is_h2c() || (http2 == UpstreamHttp2::On && a.tls_name().is_some());
    let h2 = addrs.iter().filter(|a| speaks_h2(a)).count();
    if h2 != 0 && h2 != addrs.len() {
        let members: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "upstream members {} mix HTTP/2 (h2c://, or https:// with proxy_http2 = on) and HTTP/1.1: put them in separate routes",
                members.join(", ")
            ),
        ));
    }
    if settings.grpc_web && h2 == 0 {
        return Err(grpc_web_needs_http2());
    }
    let mut group = UpstreamGroup::new(&addrs, settings.clone());
    group.set_weights(&weights);
    // auto: members that all speak TLS choose by ALPN; a plain http://
    // member among them could not, so such a group speaks HTTP/1.1.
    let negotiates = http2 == UpstreamHttp2::Auto && addrs.iter().all(|a| a.tls_name().is_some());
    Ok(match (h2, negotiates) {
        (0, false) => group,
        (0, true) => group.negotiating_http2(),
        _ => group.speaking_http2(),
    })
}

/// The FastCGI group of a route.
pub(super) fn fastcgi_group(
    specs: &[FastCgiSpec],
    settings: &ProxySettings,
    config: &Config,
) -> io::Result<UpstreamGroup> {
    let addrs = specs
        .iter()
        .flat_map(|s| &s.members)
        .map(|m| UpstreamAddr::parse(m).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e)))
        .collect::<io::Result<Vec<_>>>()?;
    Ok(UpstreamGroup::new(&addrs, fastcgi_settings(settings, config)).speaking_fastcgi())
}

/// The settings of a FastCGI group: `fastcgi_max_conns` shared out among
/// the workers (each has its own pool; at least one connection each), so
/// that together they hold no more php-fpm children than it allows.
pub(super) fn fastcgi_settings(settings: &ProxySettings, config: &Config) -> ProxySettings {
    let workers = config.global.workers.get().max(1) as u32;
    ProxySettings {
        max_conns: (config.global.fastcgi_max_conns / workers).max(1),
        ..settings.clone()
    }
}

/// `grpc_web` on a route whose upstream is not an HTTP/2 group: gRPC-Web
/// is translated to gRPC, which only HTTP/2 carries.
pub(super) fn grpc_web_needs_http2() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "grpc_web translates to gRPC, which needs HTTP/2 upstream members (h2c://HOST:PORT, unix+h2c:PATH, or https:// with proxy_http2 = on)",
    )
}

/// A route's health probe, if it has one, that its group can make: a GET
/// of a path, or gRPC's health protocol to HTTP/2 members.
pub(super) fn check_health_probe(prefix: &str, group: &UpstreamGroup) -> io::Result<()> {
    let Some(check) = group.health_check() else {
        return Ok(());
    };
    let why = match HealthProbe::parse(check) {
        Err(why) => why,
        Ok(HealthProbe::Grpc(_)) if !group.speaks_http2() => {
            "gRPC's health protocol needs HTTP/2 members (h2c://, unix+h2c: or https:// with proxy_http2 = on)".into()
        }
        Ok(_) => return Ok(()),
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("route {prefix:?}: proxy_health_check = {check:?}: {why}"),
    ))
}
