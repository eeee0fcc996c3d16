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

/// The locations of a server (nested ones too) that an `auth_request`
/// in it names.
pub fn auth_locations(body: &[Directive]) -> Vec<Directive> {
    fn walk<'a>(body: &'a [Directive], out: &mut Vec<&'a Directive>) {
        for d in body {
            out.push(d);
            if let Some(inner) = &d.block {
                walk(inner, out);
            }
        }
    }
    let mut all = Vec::new();
    walk(body, &mut all);
    let named: Vec<&str> = all
        .iter()
        .filter(|d| d.name == "auth_request" && d.arg(0) != "off")
        .map(|d| d.arg(0))
        .collect();
    all.iter()
        .filter(|d| d.name == "location" && named.contains(&location_path(d)))
        .map(|d| (*d).clone())
        .collect()
}

/// The path of an exact or prefix location.
fn location_path(d: &Directive) -> &str {
    match d.args.as_slice() {
        [p] => p,
        [m, p] if m == "=" || m == "^~" => p,
        _ => "",
    }
}

/// `auth_request URI`: the auth service its location proxies to, asked
/// by hayate directly (`forward_auth`).
pub fn auth_request(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    if d.arg(0) == "off" {
        t.keys().set("forward_auth", Value::Str("off".into()));
        return Ok(None);
    }
    let location = t
        .auth_locations
        .iter()
        .find(|l| location_path(l) == d.arg(0))
        .cloned()
        .ok_or_else(|| format!("{}: no location of this server serves it", d.arg(0)))?;
    let body = location.block.as_deref().unwrap_or_default();
    let pass = body
        .iter()
        .find(|i| i.name == "proxy_pass")
        .ok_or_else(|| format!("{}: its location has no proxy_pass", d.arg(0)))?;
    let mut url = pass.arg(0).to_string();
    if url.starts_with('$') {
        // `set $upstream_authelia URL; proxy_pass $upstream_authelia;`
        url = body
            .iter()
            .find(|i| i.name == "set" && i.arg(0) == url)
            .map(|s| s.arg(1).to_string())
            .ok_or_else(|| format!("proxy_pass {url}: no set of that variable in its location"))?;
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("proxy_pass {url}: not an http:// or https:// URL"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        // Without a URI part nginx passes the subrequest's own path.
        None => (rest, location_path(&location)),
    };
    let base = match t.config.upstreams.iter().find(|u| u.name == authority) {
        Some(group) => group
            .members
            .first()
            .map(|m| m.split_whitespace().next().unwrap_or(m).to_string())
            .ok_or_else(|| format!("upstream {authority} has no member"))?,
        None if scheme == "http" || scheme == "https" => values::member(authority, scheme),
        None => return Err(format!("proxy_pass {url}: not an http:// or https:// URL")),
    };
    let mut what = String::from(
        "hayate asks the auth service itself, with Cookie, Authorization and Accept \
         (forward_auth_headers) and X-Forwarded-Method/-Uri/-Host/-Proto/-For and X-Original-URL; \
         its 401 or redirect goes back to the client as it came",
    );
    // Authelia answers nginx's endpoint with a 401 that nginx's
    // error_page turns into the portal's redirect; its endpoint for
    // proxies that ask themselves (Caddy, Traefik, hayate) redirects.
    let path = match path.strip_suffix("/api/authz/auth-request") {
        Some(root) => {
            what.push_str(
                "; Authelia's /api/authz/forward-auth, which redirects to its portal itself",
            );
            format!("{root}/api/authz/forward-auth")
        }
        None => path.to_string(),
    };
    t.keys()
        .set("forward_auth", Value::Str(format!("{base}{path}")));
    Ok(Some(what))
}

/// `auth_request_set $var $upstream_http_NAME`: remembered for the
/// `proxy_set_header` that passes it on (`forward_auth_copy`).
pub fn auth_request_set(t: &mut Translation, d: &Directive) -> Applied {
    let Some(field) = d.arg(1).strip_prefix("$upstream_http_") else {
        return Err(format!(
            "{}: hayate copies fields of the auth answer only",
            d.arg(1)
        ));
    };
    let name = field
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("-");
    t.auth_vars.push((d.arg(0).to_string(), name));
    Ok(None)
}

/// `proxy_set_header NAME VALUE`.
pub fn proxy_set_header(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let (name, value) = (d.arg(0), d.arg(1));
    if let Some((_, field)) = t.auth_vars.iter().find(|(var, _)| var == value).cloned() {
        t.keys().push("forward_auth_copy", field.clone());
        return match field.eq_ignore_ascii_case(name) {
            true => Ok(None),
            false => Ok(Some(format!(
                "hayate copies the auth answer's {field} under its own name, not as {name}"
            ))),
        };
    }
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
