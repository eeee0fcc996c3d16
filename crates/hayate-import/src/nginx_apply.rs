//! What carries each nginx directive over: the `apply` functions of the
//! table's rows (`nginx_table::ROWS`).

use crate::hayate_toml::{Keys, Value};
use crate::nginx_parse::Directive;
use crate::nginx_translate::{Target, Translation, DEFAULT_MARK, NOT_IN_PHP, NOT_IN_RULES};
use crate::values;

use std::path::Path;

/// What the row functions return (see `nginx_table::Apply`).
pub type Applied = Result<Option<String>, String>;

/// Fails where directives cannot set options (regex locations, PHP).
pub fn only_options(t: &Translation) -> Result<(), String> {
    if t.in_php() {
        return Err(NOT_IN_PHP.into());
    }
    if !t.takes_options() {
        return Err(NOT_IN_RULES.into());
    }
    Ok(())
}

/// Sets a string option.
pub fn set_str(t: &mut Translation, key: &str, value: &str) -> Applied {
    only_options(t)?;
    t.keys().set(key, Value::Str(value.into()));
    Ok(None)
}

/// Sets a boolean option from `on`/`off`.
pub fn set_bool(t: &mut Translation, key: &str, d: &Directive) -> Applied {
    only_options(t)?;
    let on = match d.arg(0) {
        "on" => true,
        "off" => false,
        other => return Err(format!("{other:?}: expected on or off")),
    };
    t.keys().set(key, Value::Bool(on));
    Ok(None)
}

/// Sets a duration option.
pub fn set_duration(t: &mut Translation, key: &str, d: &Directive) -> Applied {
    only_options(t)?;
    let v = values::duration(d.arg(0))?;
    t.keys().set(key, Value::Str(v));
    Ok(None)
}

/// A global option set from a directive that nginx also takes in a
/// server or location.
pub fn set_global(t: &mut Translation, key: &str, value: Value) -> Applied {
    let here = t.target;
    let old = t.config.top.get(key).cloned();
    if old.as_ref().is_some_and(|o| *o != value) {
        return Err(format!(
            "{key} is global in hayate, and another place set it to {old:?}"
        ));
    }
    t.config.top.set(key, value);
    match here {
        Some(Target::Top) | None => Ok(None),
        _ => Ok(Some(format!(
            "{key} is global in hayate: it applies everywhere"
        ))),
    }
}

/// A site-level key (TLS settings).
pub fn site_key(t: &mut Translation, key: &str, value: Value) -> Applied {
    match t.target {
        Some(Target::Site(s)) => {
            t.config.sites[s].keys.set(key, value);
            Ok(None)
        }
        Some(Target::Top) | None => {
            t.config.top.set(key, value);
            Ok(None)
        }
        _ => Err("only a server's (hayate takes TLS settings per site)".into()),
    }
}

/// `ssl_certificate`, `ssl_certificate_key`, `ssl_client_certificate`.
pub fn tls_file(t: &mut Translation, key: &str, d: &Directive) -> Applied {
    let file = d.arg(0);
    if file.contains('$') {
        return Err(
            "a certificate chosen by a variable: hayate picks by SNI among tls_cert".into(),
        );
    }
    if key == "tls_client_ca" {
        return site_key(t, key, Value::Str(file.into()));
    }
    match t.target {
        Some(Target::Site(s)) => t.config.sites[s].keys.push(key, file.into()),
        Some(Target::Top) | None => t.config.top.push(key, file.into()),
        _ => return Err("only a server's (hayate takes certificates per site)".into()),
    }
    Ok(None)
}

/// `listen`: the global listener list, and `default_server`.
pub fn listen(t: &mut Translation, d: &Directive) -> Applied {
    let difference = listen_address(t, d)?;
    if d.args
        .iter()
        .any(|a| a == "default_server" || a == "default")
    {
        if let Some(site) = t.site() {
            site.keys.set(DEFAULT_MARK, Value::Bool(true));
        }
    }
    Ok(difference)
}

/// The hayate listener of a `listen` directive, added to the global list.
pub fn listen_address(t: &mut Translation, d: &Directive) -> Applied {
    let addr = d.arg(0);
    let ssl = d.args.iter().any(|a| a == "ssl");
    let mut out = if let Some(path) = addr.strip_prefix("unix:") {
        format!("unix:{path}")
    } else {
        let (host, port) = match addr.rsplit_once(':') {
            Some((h, p)) if !addr.ends_with(']') => (h.to_string(), p.to_string()),
            _ if addr.bytes().all(|b| b.is_ascii_digit()) => ("0.0.0.0".into(), addr.into()),
            _ => (addr.to_string(), "80".into()),
        };
        let host = if host == "*" { "0.0.0.0".into() } else { host };
        let scheme = if ssl { "https://" } else { "" };
        format!("{scheme}{host}:{port}")
    };
    let mut differences = Vec::new();
    for a in &d.args[1..] {
        match a.as_str() {
            "ssl" | "default_server" | "default" | "http2" | "reuseport" => {}
            "proxy_protocol" => out.push_str(" proxy_protocol"),
            "quic" => {
                t.config.top.set("http3", Value::Bool(true));
            }
            a if a.starts_with("ipv6only=") || a.starts_with("backlog=") => {}
            other => differences.push(other.to_string()),
        }
    }
    t.config.top.push("listen", out);
    if differences.is_empty() {
        Ok(None)
    } else {
        Ok(Some(format!("{} not carried", differences.join(" "))))
    }
}

/// `server_name`: exact and wildcard names; regexes are reported.
pub fn server_name(t: &mut Translation, d: &Directive) -> Applied {
    let mut left = Vec::new();
    let mut hosts = Vec::new();
    for name in &d.args {
        match name.as_str() {
            "_" | "" | "\"\"" => {}
            n if n.starts_with('~') => left.push(n.to_string()),
            n if n.starts_with('.') => {
                hosts.push(n[1..].to_string());
                hosts.push(format!("*{n}"));
            }
            n if n.ends_with(".*") || (n.contains('*') && !n.starts_with("*.")) => {
                left.push(n.to_string())
            }
            n => hosts.push(n.to_string()),
        }
    }
    let Some(site) = t.site() else {
        return Err("outside a server".into());
    };
    for h in hosts {
        if !site.hosts.contains(&h) {
            site.hosts.push(h);
        }
    }
    if left.is_empty() {
        Ok(None)
    } else {
        Err(format!(
            "{}: hayate matches exact names and *.example.com only",
            left.join(" ")
        ))
    }
}

/// `index`: one file for hayate.
pub fn index(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let (php, files): (Vec<&String>, Vec<&String>) =
        d.args.iter().partition(|a| a.ends_with(".php"));
    if php.first().is_some_and(|p| *p != "index.php") {
        t.keys()
            .set("fastcgi_index", Value::Str(php[0].to_string()));
    }
    let Some(first) = files.first() else {
        return Ok(None);
    };
    // nginx tries the names in turn; hayate serves one: the first that
    // the root holds now (Debian's default site has index.nginx-debian.html
    // and no index.html), else the first.
    let root = current_root(t);
    let chosen = files
        .iter()
        .find(|f| {
            root.as_ref()
                .is_some_and(|r| Path::new(r).join(f).is_file())
        })
        .unwrap_or(first);
    t.keys().set("index", Value::Str(chosen.to_string()));
    let dropped: Vec<&str> = files
        .iter()
        .filter(|f| *f != chosen)
        .map(|s| s.as_str())
        .collect();
    if dropped.is_empty() {
        Ok(None)
    } else {
        Ok(Some(format!(
            "hayate takes one index file: {chosen} ({} dropped)",
            dropped.join(", ")
        )))
    }
}

/// The root in force where directives go now (the route's, its site's,
/// the top level's).
fn current_root(t: &mut Translation) -> Option<String> {
    let here = t.keys().get("root").cloned();
    let site = t.site().and_then(|s| s.keys.get("root").cloned());
    match here.or(site).or_else(|| t.config.top.get("root").cloned()) {
        Some(Value::Str(root)) => Some(root),
        _ => None,
    }
}

/// `return CODE [TEXT|URL]` or `return URL`.
pub fn return_(t: &mut Translation, d: &Directive) -> Applied {
    let mut action = Keys::default();
    let (code, rest) = match d.arg(0).parse::<i64>() {
        Ok(code) => (code, d.args.get(1)),
        Err(_) => (302, d.args.first()),
    };
    match (code, rest) {
        (301 | 302 | 303 | 307 | 308, Some(url)) => {
            action.set("redirect", Value::Str(values::template(url)?));
            action.set("status", Value::Int(code));
        }
        (_, Some(text)) => {
            action.set("respond", Value::Str(values::template(text)?));
            action.set("status", Value::Int(code));
        }
        (444, None) => return Err("444 (close without an answer): hayate always answers".into()),
        (_, None) => action.set("respond", Value::Int(code)),
    }
    t.rule(d, action)?;
    Ok(None)
}

/// `rewrite REGEX REPLACEMENT [FLAG]`.
pub fn rewrite(t: &mut Translation, d: &Directive) -> Applied {
    let (regex, replacement, flag) = (d.arg(0), d.arg(1), d.arg(2));
    if regex::Regex::new(regex).is_err() {
        return Err(format!(
            "{regex}: hayate's regexes run in linear time, without look-around or back-references"
        ));
    }
    let mut action = Keys::default();
    action.set("match", Value::Str(regex.into()));
    let target = values::template(replacement)?;
    let absolute = replacement.starts_with("http://")
        || replacement.starts_with("https://")
        || replacement.starts_with("$scheme");
    let mut difference = None;
    match flag {
        "permanent" | "redirect" => {
            action.set("redirect", Value::Str(target));
            action.set(
                "status",
                Value::Int(if flag == "permanent" { 301 } else { 302 }),
            );
        }
        _ if absolute => {
            action.set("redirect", Value::Str(target));
            action.set("status", Value::Int(302));
        }
        "break" => {
            action.set("rewrite", Value::Str(target));
            action.set("last", Value::Bool(true));
        }
        "last" => action.set("rewrite", Value::Str(target)),
        "" => {
            action.set("rewrite", Value::Str(target));
            difference = Some(
                "hayate routes the rewritten path at once and runs the rules again from the top \
                 (nginx goes on with the next rewrite first)"
                    .to_string(),
            );
        }
        other => return Err(format!("flag {other:?}")),
    }
    t.rule(d, action)?;
    Ok(difference)
}

/// `add_header NAME VALUE [always]`.
pub fn add_header(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let max_age = d.arg(1).trim().strip_prefix("max-age=");
    if let (true, Some(Ok(seconds))) = (
        d.arg(0).eq_ignore_ascii_case("strict-transport-security"),
        max_age.map(str::parse::<u64>),
    ) {
        // hayate's own HSTS: on HTTPS responses only, as nginx's 443
        // server sends it.
        t.keys().set("hsts", Value::Str(format!("{seconds}s")));
        return Ok(None);
    }
    let value = values::template(d.arg(1))?;
    t.keys().insert("response_headers", d.arg(0).into(), value);
    if d.arg(2) == "always" {
        Ok(None)
    } else {
        Ok(Some(
            "hayate sets it on every status, as with always (nginx: 2xx and 3xx only)".into(),
        ))
    }
}

/// `more_set_headers "Name: value" ...`.
pub fn more_set_headers(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    for a in &d.args {
        if a.starts_with('-') {
            return Err("-s/-t options: hayate's response_headers apply to every status".into());
        }
        match a.split_once(':') {
            Some((name, value)) => {
                let value = values::template(value.trim())?;
                t.keys()
                    .insert("response_headers", name.trim().into(), value)
            }
            None => t
                .keys()
                .insert("response_headers", format!("-{}", a.trim()), String::new()),
        }
    }
    Ok(None)
}

/// `error_page CODE... [=CODE] URI`.
pub fn error_page(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let Some((uri, codes)) = d.args.split_last() else {
        return Err("no arguments".into());
    };
    if codes.iter().any(|c| c.starts_with('=')) || uri.starts_with('@') {
        return Err("a changed status or a named location: hayate answers an error page file with the error's status".into());
    }
    if uri.starts_with("http") {
        return Err("a redirect: give the status a [[site.rule]] instead".into());
    }
    if uri.ends_with(".php") || uri.contains(".php?") {
        return Err(format!(
            "{uri} is a script: hayate answers error pages from files (paths that match no file \
             already go to the FastCGI front controller)"
        ));
    }
    let Some(root) = current_root(t) else {
        return Err(format!("{uri}: no root to find it under"));
    };
    let file = format!(
        "{}/{}",
        root.trim_end_matches('/'),
        uri.trim_start_matches('/')
    );
    for code in codes {
        t.keys().insert("error_pages", code.clone(), file.clone());
    }
    Ok(Some(format!(
        "hayate reads {file} at start and reload: it must exist (nginx asks for it when needed)"
    )))
}

/// `internal`: a route only X-Accel-Redirect and rewrites reach; in the
/// PHP location, its scripts answer clients 404 (Symfony's `index.php`
/// reached only through try_files).
pub fn internal(t: &mut Translation, d: &Directive) -> Applied {
    if let Some(mut keys) = t.php_condition.clone() {
        keys.set("respond", Value::Int(404));
        t.rule_phases[2].push((d.pos.to_string(), keys));
        return Ok(None);
    }
    only_options(t)?;
    t.keys().set("internal", Value::Bool(true));
    Ok(None)
}

/// `client_max_body_size`.
pub fn client_max_body_size(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    match values::size(d.arg(0))? {
        Some(size) => {
            t.keys().set("max_body_size", Value::Str(size));
            Ok(None)
        }
        None => {
            // hayate always has a bound; 1024 GiB is as good as none.
            t.keys().set("max_body_size", Value::Str("1024GiB".into()));
            Ok(Some(
                "0 (no limit): 1024 GiB in hayate, which always has one".into(),
            ))
        }
    }
}

/// `allow` and `deny`.
pub fn access(t: &mut Translation, key: &str, d: &Directive) -> Applied {
    let who = d.arg(0);
    if who.starts_with("unix:") {
        return Err("Unix-socket clients".into());
    }
    if key == "allow" && who == "all" {
        return Ok(None);
    }
    if !t.takes_options() {
        if key == "deny" && who == "all" && !t.in_php() {
            let mut action = Keys::default();
            action.set("respond", Value::Int(403));
            t.rule(d, action)?;
            return Ok(None);
        }
        only_options(t)?;
    }
    match (key, who) {
        ("allow", "all") => Ok(None),
        ("deny", "all") => {
            if t.keys().get("allow").is_none() {
                t.keys().push("deny", "0.0.0.0/0".into());
                t.keys().push("deny", "::/0".into());
            }
            Ok(None)
        }
        _ => {
            let difference = (key == "deny" && t.keys().get("allow").is_some()).then(|| {
                "hayate's deny wins over allow whatever the order (nginx: the first that matches)"
                    .to_string()
            });
            t.keys().push(key, who.into());
            Ok(difference)
        }
    }
}

/// `limit_req_zone KEY zone=NAME:SIZE rate=N`.
pub fn limit_req_zone(t: &mut Translation, d: &Directive) -> Applied {
    let name = zone_name(d)?;
    let rate = d
        .args
        .iter()
        .find_map(|a| a.strip_prefix("rate="))
        .ok_or("no rate=")?;
    let rate = rate.replace("r/", "/");
    t.req_zones.push((name, rate, d.arg(0).to_string()));
    Ok(None)
}

fn zone_name(d: &Directive) -> Result<String, String> {
    let zone = d
        .args
        .iter()
        .find_map(|a| a.strip_prefix("zone="))
        .ok_or("no zone=")?;
    Ok(zone.split(':').next().unwrap_or_default().to_string())
}

/// The rate_limit_key of a zone's key.
fn limit_key(key: &str) -> Result<Option<String>, String> {
    match key {
        "$binary_remote_addr" | "$remote_addr" => Ok(None),
        "$server_name" | "$host" => Ok(Some("route".into())),
        k => match k.strip_prefix("$http_") {
            Some(h) => Ok(Some(format!("header:{}", h.replace('_', "-")))),
            None => match k.strip_prefix("$cookie_") {
                Some(c) => Ok(Some(format!("cookie:{c}"))),
                None => Err(format!("a limit counted by {k}")),
            },
        },
    }
}

/// `limit_req zone=NAME [burst=N] [nodelay|delay=N]`.
pub fn limit_req(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let name = zone_name(d)?;
    let Some((_, rate, key)) = t.req_zones.iter().find(|z| z.0 == name).cloned() else {
        return Err(format!("no limit_req_zone {name}"));
    };
    let burst = d.args.iter().find_map(|a| a.strip_prefix("burst="));
    let mut spec = rate;
    if let Some(b) = burst {
        spec.push_str(&format!(" burst={b}"));
        if !d.args.iter().any(|a| a == "nodelay") {
            spec.push_str(" delay");
        }
    }
    t.keys().set("rate_limit", Value::Str(spec));
    if let Some(k) = limit_key(&key)? {
        t.keys().set("rate_limit_key", Value::Str(k));
    }
    Ok(None)
}

/// `limit_conn_zone KEY zone=NAME:SIZE`.
pub fn limit_conn_zone(t: &mut Translation, d: &Directive) -> Applied {
    let name = zone_name(d)?;
    t.conn_zones.push((name, d.arg(0).to_string()));
    Ok(None)
}

/// `limit_conn NAME N`.
pub fn limit_conn(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let Some((_, key)) = t.conn_zones.iter().find(|z| z.0 == d.arg(0)).cloned() else {
        return Err(format!("no limit_conn_zone {}", d.arg(0)));
    };
    let n: i64 = d.arg(1).parse().map_err(|_| "expected a number")?;
    t.keys().set("conn_limit", Value::Int(n));
    if let Some(k) = limit_key(&key)? {
        t.keys().set("rate_limit_key", Value::Str(k));
    }
    Ok(None)
}

/// `expires TIME|max|epoch|off`.
pub fn expires(t: &mut Translation, d: &Directive) -> Applied {
    only_options(t)?;
    let value = match d.arg(0) {
        "off" => return Ok(None),
        "epoch" => "no-cache".to_string(),
        "max" => "public, max-age=31536000".to_string(),
        a if a.starts_with('-') => "no-cache".to_string(),
        a if a.starts_with("modified") || a.starts_with('@') => {
            return Err("a time from the file's date or a time of day".into())
        }
        a => format!("max-age={}", values::seconds(a)?),
    };
    t.keys().set("cache_control", Value::Str(value));
    Ok(None)
}

/// Fails below the http level: hayate has one `what` for every site.
fn only_top(t: &Translation, what: &str) -> Result<(), String> {
    match t.target {
        Some(Target::Top) | None => Ok(()),
        _ => Err(format!(
            "hayate has one {what} for every site (set it at the top level)"
        )),
    }
}

/// `access_log PATH [FORMAT] | off`.
pub fn access_log(t: &mut Translation, d: &Directive) -> Applied {
    only_top(t, "access log")?;
    let path = d.arg(0);
    let value = if path == "off" { "off" } else { path };
    if path.starts_with("syslog:") {
        return Err("syslog: hayate writes a file, stdout or stderr".into());
    }
    let format = d.arg(1);
    let mut differences = Vec::new();
    if !format.is_empty() && format != "combined" {
        differences.push(format!(
            "format {format}: hayate writes combined unless access_log_format says otherwise"
        ));
    }
    let mut result = set_global(t, "access_log", Value::Str(value.into()));
    if let Err(e) = &result {
        if e.contains("another place") {
            result = Err("hayate has one access log: another access_log set it already".into());
        }
    }
    if let Some(d) = result? {
        differences.push(d);
    }
    Ok((!differences.is_empty()).then(|| differences.join("; ")))
}

/// `error_log PATH [LEVEL]`.
pub fn error_log(t: &mut Translation, d: &Directive) -> Applied {
    only_top(t, "error log")?;
    let path = d.arg(0);
    if path != "stderr" {
        if path.starts_with("syslog:") {
            return Err("syslog: hayate writes a file or stderr (the journal)".into());
        }
        set_global(t, "error_log", Value::Str(path.into()))?;
    }
    let level = match d.arg(1) {
        "" => return Ok(None),
        "debug" => "debug",
        "info" | "notice" => "info",
        "warn" => "warn",
        _ => "error",
    };
    set_global(t, "log_level", Value::Str(level.into()))
}
