//! The upstream group of Caddyfile directives: `reverse_proxy` (with its
//! load balancing, health checks, headers and `transport http` block),
//! `php_fastcgi` and `forward_auth`, the functions `caddy_table::ROWS`
//! names for them.

use crate::caddy_apply::{block, duration_global, header_op, split, trusted};
use crate::caddy_translate::{Applied, Caddy};
use crate::caddy_values as values;
use crate::hayate_toml::{Keys, Value};
use crate::nginx_parse::Directive;
use crate::report::Kind;

/// `reverse_proxy [<matcher>] [<upstreams...>] { ... }`.
pub fn reverse_proxy(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let mut members = rest
        .iter()
        .map(|u| values::upstream(u))
        .collect::<Result<Vec<_>, _>>()?;
    let mut differences: Vec<String> = Vec::new();
    let mut route = Keys::default();
    for sub in block(d) {
        let r: Result<(), String> = match sub.name.as_str() {
            "to" => sub
                .args
                .iter()
                .map(|u| values::upstream(u))
                .collect::<Result<Vec<_>, _>>()
                .map(|more| members.extend(more)),
            "lb_policy" => balance(t, sub),
            "lb_try_duration" | "lb_try_interval" | "lb_retries" => {
                t.note(
                    sub,
                    Kind::Differs,
                    "hayate retries safe requests on another member itself",
                );
                Ok(())
            }
            "health_uri" | "health_path" => {
                route.set("proxy_health_check", Value::Str(sub.arg(0).into()));
                Ok(())
            }
            "health_interval" => duration_global(t, "proxy_health_interval", sub),
            "fail_duration" => duration_global(t, "proxy_fail_timeout", sub),
            "max_fails" => match sub.arg(0).parse::<i64>() {
                Ok(n) => t.global("proxy_max_fails", Value::Int(n)),
                Err(_) => Err(format!("max_fails {}", sub.arg(0))),
            },
            "header_up" => header_up(&mut route, sub),
            "header_down" => header_op(&mut route, "response_headers", &sub.args),
            "transport" => transport(t, &mut route, &mut members, sub),
            "trusted_proxies" => trusted(t, &sub.args),
            "flush_interval" | "buffer_requests" | "buffer_responses" | "request_buffers"
            | "response_buffers" | "stream_buffer_size" => Ok(()),
            "health_timeout" | "health_status" | "health_body" | "health_headers"
            | "health_port" | "health_passes" | "health_fails" => Ok(()),
            other => Err(format!("{other} is not carried")),
        };
        if let Err(e) = r {
            t.note(sub, Kind::NotCarried, e);
        }
    }
    if members.is_empty() {
        return Err("no upstream".into());
    }
    let (keys, difference) = t.keys_for(d, &m)?;
    keys.set("proxy", Value::List(members));
    for (k, v) in route.0 {
        match v {
            Value::Map(pairs) => pairs.into_iter().for_each(|(n, v)| keys.insert(&k, n, v)),
            v => keys.set(&k, v),
        }
    }
    differences.extend(difference.map(String::from));
    Ok((!differences.is_empty()).then(|| differences.join("; ")))
}

fn balance(t: &mut Caddy, sub: &Directive) -> Result<(), String> {
    let policy = match (sub.arg(0), sub.arg(1)) {
        ("round_robin" | "weighted_round_robin", _) => "round_robin".to_string(),
        ("least_conn", _) => "least_conn".into(),
        ("ip_hash" | "client_ip_hash", _) => "hash:ip".into(),
        ("header", name) if !name.is_empty() => format!("hash:header:{name}"),
        ("cookie", name) => format!("sticky:{}", if name.is_empty() { "lb" } else { name }),
        ("random" | "random_choose", _) => {
            t.global("proxy_balance", Value::Str("least_conn".into()))?;
            return Err("random: hayate balances by least connections instead".into());
        }
        (other, _) => return Err(format!("{other} has no hayate policy")),
    };
    t.global("proxy_balance", Value::Str(policy))
}

/// `header_up`: Host to the upstream's own (`{upstream_hostport}`) or a
/// name, fields hayate already sends left out, the rest as
/// `request_headers`.
fn header_up(route: &mut Keys, sub: &Directive) -> Result<(), String> {
    let name = sub.arg(0);
    if name.eq_ignore_ascii_case("host") {
        let host = match sub.arg(1) {
            "{upstream_hostport}" | "{http.reverse_proxy.upstream.hostport}" => "upstream",
            "{host}" | "{http.request.host}" => "pass",
            literal if !literal.contains('{') => literal,
            other => return Err(format!("Host {other}")),
        };
        route.set("proxy_host", Value::Str(host.into()));
        return Ok(());
    }
    let lower = name.trim_start_matches(['+', '-']).to_ascii_lowercase();
    if !name.starts_with('-')
        && matches!(
            lower.as_str(),
            "x-forwarded-for" | "x-forwarded-proto" | "x-forwarded-host"
        )
    {
        // hayate sends these itself, as Caddy does.
        return Ok(());
    }
    header_op(route, "request_headers", &sub.args)
}

/// `transport http { ... }`.
fn transport(
    t: &mut Caddy,
    route: &mut Keys,
    members: &mut [String],
    sub: &Directive,
) -> Result<(), String> {
    if sub.arg(0) != "http" {
        return Err(format!("the {} transport", sub.arg(0)));
    }
    for o in block(sub) {
        let r = match o.name.as_str() {
            "tls" => {
                for m in members.iter_mut() {
                    if let Some(rest) = m.strip_prefix("http://") {
                        *m = format!("https://{rest}");
                    }
                }
                Ok(())
            }
            "tls_insecure_skip_verify" => t.global("proxy_tls_verify", Value::Bool(false)),
            "tls_trusted_ca_certs" | "tls_trust_pool" => {
                let file = o
                    .args
                    .iter()
                    .find(|a| *a != "file")
                    .cloned()
                    .unwrap_or_default();
                t.global("proxy_tls_ca", Value::Str(file))
            }
            "tls_client_auth" => match &o.args[..] {
                [cert, key] => {
                    route.set("proxy_tls_cert", Value::Str(cert.clone()));
                    route.set("proxy_tls_key", Value::Str(key.clone()));
                    Ok(())
                }
                _ => Err("tls_client_auth: a certificate and key file".into()),
            },
            "dial_timeout" => duration_global(t, "proxy_connect_timeout", o),
            "response_header_timeout" | "read_timeout" => {
                route.set(
                    "proxy_timeout",
                    Value::Str(crate::values::duration(o.arg(0))?),
                );
                Ok(())
            }
            "versions" => {
                if o.args.iter().any(|v| v == "h2c") {
                    for m in members.iter_mut() {
                        if let Some(rest) = m.strip_prefix("http://") {
                            *m = format!("h2c://{rest}");
                        }
                    }
                } else if o.args.iter().any(|v| v == "2") {
                    t.global("proxy_http2", Value::Str("on".into()))?;
                }
                Ok(())
            }
            "keepalive"
            | "keepalive_idle_conns"
            | "keepalive_idle_conns_per_host"
            | "keepalive_interval"
            | "max_conns_per_host"
            | "compression"
            | "write_timeout"
            | "tls_server_name"
            | "tls_timeout"
            | "max_response_header" => Ok(()),
            other => Err(format!("{other} is not carried")),
        };
        if let Err(e) = r {
            t.note(o, Kind::NotCarried, e);
        }
    }
    Ok(())
}

/// `php_fastcgi [<matcher>] <php-fpm...> { ... }`.
pub fn php_fastcgi(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let addrs = rest
        .iter()
        .map(|a| values::fastcgi(a))
        .collect::<Result<Vec<_>, _>>()?;
    if addrs.is_empty() {
        return Err("no php-fpm address".into());
    }
    let mut differences = Vec::new();
    let mut options = Keys::default();
    for sub in block(d) {
        match sub.name.as_str() {
            "root" => options.set("root", Value::Str(sub.arg(0).into())),
            "index" if sub.arg(0) == "off" => differences
                .push("index off: hayate's FastCGI routes keep a front controller".into()),
            "index" => options.set("fastcgi_index", Value::Str(sub.arg(0).into())),
            "split" => options.set("fastcgi_extensions", Value::Str(sub.args.join(","))),
            "try_files"
            | "resolve_root_symlink"
            | "dial_timeout"
            | "read_timeout"
            | "write_timeout"
            | "capture_stderr" => {}
            "env" => t.note(
                sub,
                Kind::NotCarried,
                format!(
                    "env {}: hayate sends the standard CGI parameters only",
                    sub.arg(0)
                ),
            ),
            other => t.note(sub, Kind::NotCarried, format!("{other} is not carried")),
        }
    }
    let (keys, difference) = t.keys_for(d, &m)?;
    keys.set("fastcgi", Value::Str(addrs.join(",")));
    for (k, v) in options.0 {
        keys.set(&k, v);
    }
    differences.extend(difference.map(String::from));
    Ok((!differences.is_empty()).then(|| differences.join("; ")))
}

/// `forward_auth [<matcher>] <upstream> { uri ...; copy_headers ... }`.
pub fn forward_auth(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let [upstream] = rest else {
        return Err("expected one auth service".into());
    };
    let base = values::upstream(upstream)?;
    let mut uri = String::from("/");
    let mut copy: Vec<String> = Vec::new();
    let mut differences = vec![
        "hayate sends the auth service Cookie, Authorization and Accept (forward_auth_headers) \
         with X-Forwarded-Method/-Uri/-Host/-Proto/-For; Caddy sends every request field"
            .to_string(),
    ];
    for sub in block(d) {
        match sub.name.as_str() {
            "uri" => uri = sub.arg(0).to_string(),
            "copy_headers" => {
                for h in &sub.args {
                    if h.contains('>') {
                        differences.push(format!(
                            "copy_headers {h}: hayate copies under the same name"
                        ));
                    }
                    copy.push(h.split('>').next().unwrap_or(h).to_string());
                }
                for inner in block(sub) {
                    copy.push(
                        inner
                            .name
                            .split('>')
                            .next()
                            .unwrap_or(&inner.name)
                            .to_string(),
                    );
                }
            }
            "trusted_proxies" => trusted(t, &sub.args)?,
            other => t.note(sub, Kind::NotCarried, format!("{other} is not carried")),
        }
    }
    if base.starts_with("unix:") || base.starts_with("h2c://") {
        return Err("hayate asks an auth service over http:// or https://".into());
    }
    let url = format!(
        "{base}{}",
        values::template(&uri)?.replace("$request_uri", "")
    );
    let (keys, difference) = t.keys_for(d, &m)?;
    keys.set("forward_auth", Value::Str(url));
    if !copy.is_empty() {
        keys.set("forward_auth_copy", Value::List(copy));
    }
    differences.extend(difference.map(String::from));
    Ok(Some(differences.join("; ")))
}
