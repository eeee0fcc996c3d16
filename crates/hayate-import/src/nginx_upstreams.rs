//! What carries the upstream directives over (`proxy_pass`, `upstream`
//! blocks, FastCGI and gRPC): the `apply` functions of their rows in
//! `nginx_table::ROWS`.

use crate::hayate_toml::Value;
use crate::nginx_apply::{only_options, set_global, Applied};
use crate::nginx_parse::Directive;
use crate::nginx_translate::{Kind, Target, Translation};
use crate::values;

/// `proxy_connect_timeout`.
pub fn global_duration(t: &mut Translation, d: &Directive) -> Applied {
    let v = values::duration(d.arg(0))?;
    set_global(t, "proxy_connect_timeout", Value::Str(v))
}

/// `proxy_balance` from an upstream block's method.
pub fn balance(t: &mut Translation, policy: &str) -> Applied {
    set_global(t, "proxy_balance", Value::Str(policy.into()))
        .map(|_| Some("proxy_balance is global in hayate: every group balances this way".into()))
}

/// `hash KEY [consistent]`.
pub fn hash(t: &mut Translation, d: &Directive) -> Applied {
    let key = d.arg(0);
    let policy = if matches!(key, "$remote_addr" | "$binary_remote_addr") {
        "hash:ip".to_string()
    } else if let Some(name) = key.strip_prefix("$http_") {
        format!("hash:header:{}", name.replace('_', "-"))
    } else if let Some(name) = key.strip_prefix("$cookie_") {
        format!("hash:cookie:{name}")
    } else {
        return Err(format!(
            "hayate hashes by address, a header or a cookie, not {key}"
        ));
    };
    balance(t, &policy)
}

/// `proxy_pass URL`.
pub fn proxy_pass(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let url = d.arg(0);
    if url.contains('$') {
        return Err("an upstream named by a variable".into());
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url}: expected http:// or https://"))?;
    if !matches!(scheme, "http" | "https") {
        return Err(format!("{scheme}:// upstreams"));
    }
    let (authority, uri) = if let Some(unix) = rest.strip_prefix("unix:") {
        match unix.split_once(':') {
            Some((path, uri)) => (format!("unix:{path}"), uri.to_string()),
            None => (format!("unix:{unix}"), String::new()),
        }
    } else {
        match rest.find('/') {
            Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
            None => (rest.to_string(), String::new()),
        }
    };
    let mut difference = None;
    match uri.as_str() {
        "" => {}
        "/" => {
            if let Some(Target::Route(s, r)) = t.target {
                if t.config.sites[s].routes[r].prefix != "/" {
                    t.keys().set("strip_prefix", Value::Bool(true));
                }
            }
        }
        other => {
            difference = Some(format!(
                "the URI part {other} is dropped: hayate sends the path as the client asked (with strip_prefix, without the route's prefix)"
            ))
        }
    }
    let is_group = t.config.upstreams.iter().any(|u| u.name == authority);
    if is_group {
        t.keys().set("proxy", Value::Str(authority));
    } else if authority.starts_with("unix:") {
        t.keys().set("proxy", Value::List(vec![authority]));
    } else {
        let member = values::member(&authority, scheme);
        t.keys().set("proxy", Value::List(vec![member]));
    }
    Ok(difference)
}

/// `grpc_pass grpc://HOST:PORT`.
pub fn grpc_pass(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let addr = d.arg(0);
    let member = if let Some(rest) = addr.strip_prefix("grpc://") {
        format!("h2c://{rest}")
    } else if let Some(path) = addr.strip_prefix("unix:") {
        format!("unix+h2c:{path}")
    } else if addr.starts_with("grpcs://") {
        return Err(
            "gRPC over TLS to the upstream: proxy = [\"https://...\"] with proxy_http2 = \"on\""
                .into(),
        );
    } else {
        format!("h2c://{addr}")
    };
    t.keys().set("proxy", Value::List(vec![member]));
    Ok(None)
}

/// `fastcgi_pass ADDR`: the site's FastCGI application.
pub fn fastcgi_pass(t: &mut Translation, d: &Directive) -> Applied {
    let group = t.config.upstreams.iter().find(|u| u.name == d.arg(0));
    let addr = match group {
        Some(group) => {
            let members: Vec<&str> = group
                .members
                .iter()
                .map(|m| {
                    let (url, _) = m.split_once(' ').unwrap_or((m, ""));
                    url.strip_prefix("http://").unwrap_or(url)
                })
                .collect();
            let addr = members.join(",");
            t.fastcgi_groups.push(group.name.clone());
            addr
        }
        None => d.arg(0).to_string(),
    };
    let addr = addr.as_str();
    if addr.contains('$') || !(addr.starts_with("unix:") || addr.contains(':')) {
        return Err(format!("{addr}: hayate takes unix:PATH or HOST:PORT"));
    }
    match t.target {
        Some(Target::Php(s)) => t.config.sites[s]
            .keys
            .set("fastcgi", Value::Str(addr.into())),
        _ => {
            only_options(t)?;
            t.keys().set("fastcgi", Value::Str(addr.into()))
        }
    }
    Ok(None)
}

/// The parameters hayate sends php-fpm itself, and those that mean nothing
/// beyond nginx (REDIRECT_STATUS is sent for php-cgi's force-redirect).
const FASTCGI_PARAMS: &[&str] = &[
    "SCRIPT_FILENAME",
    "SCRIPT_NAME",
    "QUERY_STRING",
    "REQUEST_METHOD",
    "CONTENT_TYPE",
    "CONTENT_LENGTH",
    "REQUEST_URI",
    "DOCUMENT_URI",
    "DOCUMENT_ROOT",
    "SERVER_PROTOCOL",
    "REQUEST_SCHEME",
    "HTTPS",
    "GATEWAY_INTERFACE",
    "SERVER_SOFTWARE",
    "REMOTE_ADDR",
    "REMOTE_PORT",
    "SERVER_ADDR",
    "SERVER_PORT",
    "SERVER_NAME",
    "REDIRECT_STATUS",
    "PATH_INFO",
    "PATH_TRANSLATED",
    "HTTP_PROXY",
    "HTTP_HOST",
];

/// `fastcgi_param NAME VALUE`.
pub fn fastcgi_param(_: &mut Translation, d: &Directive) -> Applied {
    let name = d.arg(0);
    if FASTCGI_PARAMS.contains(&name) {
        return Ok(None);
    }
    if name == "REMOTE_USER" {
        return Ok(Some(
            "hayate sends no REMOTE_USER (nginx's is the basic_auth user, empty without it)".into(),
        ));
    }
    Err(format!(
        "{name}: hayate sends the CGI/1.1 parameters only (set it in php-fpm's pool: env[{name}])"
    ))
}

/// An upstream block's `server ADDR [weight=N] [max_fails=N]
/// [fail_timeout=T] [backup] [down]`: its member, or None when down.
pub fn upstream_server(t: &mut Translation, d: &Directive) -> Result<Option<String>, String> {
    let mut member = values::member(d.arg(0), "http");
    for a in &d.args[1..] {
        let (k, v) = a.split_once('=').unwrap_or((a, ""));
        match k {
            "weight" => member.push_str(&format!(" weight={v}")),
            "max_fails" => {
                let n: i64 = v.parse().map_err(|_| format!("max_fails={v}"))?;
                set_global(t, "proxy_max_fails", Value::Int(n))?;
            }
            "fail_timeout" => {
                set_global(t, "proxy_fail_timeout", Value::Str(values::duration(v)?))?;
            }
            "down" => {
                t.note(d, Kind::NotCarried, "a member marked down is left out");
                return Ok(None);
            }
            "backup" => {
                t.note(
                    d,
                    Kind::Differs,
                    "hayate has no backup members: this one takes \
                     requests like the others",
                );
            }
            "max_conns" => {
                let n: i64 = v.parse().map_err(|_| format!("max_conns={v}"))?;
                set_global(t, "proxy_max_conns", Value::Int(n))?;
                t.note(
                    d,
                    Kind::Differs,
                    "proxy_max_conns counts per worker, for every member",
                );
            }
            other => t.note(
                d,
                Kind::NotCarried,
                format!("{other}: no hayate member option"),
            ),
        }
    }
    Ok(Some(member))
}

/// `proxy_set_header NAME VALUE`.
pub fn proxy_set_header(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let (name, value) = (d.arg(0), d.arg(1));
    let lower = name.to_ascii_lowercase();
    match (lower.as_str(), value) {
        ("host", "$host" | "$http_host") => return Ok(None),
        ("host", "$proxy_host") => {
            t.keys().set("proxy_host", Value::Str("upstream".into()));
            return Ok(None);
        }
        ("x-forwarded-for", "$proxy_add_x_forwarded_for" | "$remote_addr")
        | ("x-forwarded-proto", "$scheme")
        | ("x-forwarded-host", "$host" | "$http_host")
        | ("upgrade", "$http_upgrade")
        | ("connection", "upgrade" | "Upgrade" | "$connection_upgrade" | "") => return Ok(None),
        _ => {}
    }
    let value = values::template(value)?;
    if lower == "host" {
        t.keys().set("proxy_host", Value::Str(value));
        return Ok(None);
    }
    t.keys().insert("request_headers", name.into(), value);
    Ok(None)
}
