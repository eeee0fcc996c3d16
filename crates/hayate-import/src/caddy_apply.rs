//! How each Caddyfile site directive the table carries is carried over:
//! the functions `caddy_table::ROWS` names, and the helpers the upstream
//! group (`caddy_proxy`) and the global options (`caddy_global`) share
//! with them.

use crate::caddy_matchers::{self as matchers, Matcher};
use crate::caddy_translate::{self as translate, Applied, Caddy};
use crate::caddy_values as values;
use crate::hayate_toml::{Keys, Value};
use crate::nginx_parse::Directive;
use crate::report::Kind;

/// The directive's matcher and its other arguments.
pub(crate) fn split<'a>(t: &Caddy, d: &'a Directive) -> Result<(Matcher, &'a [String]), String> {
    matchers::split(d, &t.sets)
}

/// The lines of a directive's block.
pub(crate) fn block(d: &Directive) -> &[Directive] {
    d.block.as_deref().unwrap_or_default()
}

/// Sets `key` in the options `d`'s matcher scopes it to.
fn scoped(t: &mut Caddy, d: &Directive, m: &Matcher, key: &str, value: Value) -> Applied {
    let (keys, difference) = t.keys_for(d, m)?;
    keys.set(key, value);
    Ok(difference.map(String::from))
}

/// `[+|-|?|>]Field [value]` into a header-rules table.
pub(crate) fn header_op(keys: &mut Keys, key: &str, args: &[String]) -> Result<(), String> {
    match args {
        [field] if field.starts_with('-') => {
            keys.insert(key, field.clone(), String::new());
            Ok(())
        }
        [field, value] => {
            let field = field.strip_prefix('>').unwrap_or(field);
            keys.insert(key, field.into(), values::template(value)?);
            Ok(())
        }
        [_, _, _] => Err("a find-and-replace header rule has no hayate form".into()),
        _ => Err("expected a field and a value".into()),
    }
}

/// Sets the global option `key` to the duration `sub` names.
pub(crate) fn duration_global(t: &mut Caddy, key: &str, sub: &Directive) -> Result<(), String> {
    let d = crate::values::duration(sub.arg(0))?;
    t.global(key, Value::Str(d))
}

/// `trusted_proxies <ranges...>` (`static` left out, Caddy's `private_ranges`
/// spelled out) added to hayate's `trusted_proxies`.
pub(crate) fn trusted(t: &mut Caddy, args: &[String]) -> Result<(), String> {
    let cidrs: Vec<String> = args
        .iter()
        .filter(|a| *a != "static")
        .flat_map(|a| {
            matchers::private_ranges(a)
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    for c in cidrs {
        t.config.top.push("trusted_proxies", c);
    }
    Ok(())
}

/// `root [<matcher>] <path>`.
pub fn root(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let [path] = rest else {
        return Err("expected one directory".into());
    };
    scoped(t, d, &m, "root", Value::Str(path.clone()))
}

/// `file_server [<matcher>] [browse] { ... }`.
pub fn file_server(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let mut differences = Vec::new();
    let (keys, difference) = t.keys_for(d, &m)?;
    differences.extend(difference.map(String::from));
    if rest.iter().any(|a| a == "browse") {
        keys.set("listing", Value::Bool(true));
    }
    let mut hidden_dotfiles = false;
    let mut t_notes: Vec<(Directive, String)> = Vec::new();
    for sub in block(d) {
        match sub.name.as_str() {
            "root" => keys.set("root", Value::Str(sub.arg(0).into())),
            "browse" => keys.set("listing", Value::Bool(true)),
            "index" => {
                keys.set("index", Value::Str(sub.arg(0).into()));
                if sub.args.len() > 1 {
                    differences.push("hayate tries one index file (the first)".into());
                }
            }
            "hide" => {
                hidden_dotfiles = sub.args.iter().all(|h| {
                    let name = h.rsplit('/').next().unwrap_or(h);
                    name.starts_with('.')
                });
                if !hidden_dotfiles {
                    differences.push("hide: hayate hides dotfiles, not named files".into());
                }
            }
            "precompressed" => keys.set("precompressed", Value::Bool(true)),
            "pass_thru" => {}
            other => t_notes.push((sub.clone(), format!("{other} is not carried"))),
        }
    }
    let has_root = keys.get("root").is_some();
    for (sub, why) in t_notes {
        t.note(&sub, Kind::NotCarried, why);
    }
    let site_root = t.site_mut().keys.get("root").is_some();
    if !has_root && !site_root {
        let (keys, _) = t.keys_for(d, &m)?;
        // Caddy's root is its working directory when none is set.
        keys.set("root", Value::Str(".".into()));
        differences.push(
            "no root: Caddy serves its working directory, hayate \".\" relative to the config"
                .into(),
        );
    }
    if !hidden_dotfiles {
        differences.push(
            "hayate hides dotfiles (.env, .git; 404) that Caddy serves unless hide names them \
             (dotfiles = true serves them)"
                .into(),
        );
    }
    Ok((!differences.is_empty()).then(|| differences.join("; ")))
}

/// `encode [<matcher>] [<formats...>] { ... }`.
pub fn encode(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let mut codings: Vec<String> = rest.to_vec();
    let mut min_size = None;
    for sub in block(d) {
        match sub.name.as_str() {
            "gzip" | "zstd" | "br" => codings.push(sub.name.clone()),
            "minimum_length" => min_size = Some(sub.arg(0).to_string()),
            _ => {}
        }
    }
    let (keys, difference) = t.keys_for(d, &m)?;
    keys.set("compress", Value::Bool(true));
    let known: Vec<String> = codings
        .iter()
        .filter(|c| matches!(c.as_str(), "gzip" | "zstd" | "br"))
        .cloned()
        .collect();
    if !known.is_empty() {
        keys.set("compress_encodings", Value::List(known));
    }
    if let Some(n) = min_size {
        keys.set("compress_min_size", Value::Str(n));
    }
    Ok(difference.map(String::from))
}

/// `header [<matcher>] [[+|-|?|>]<field> [<value>]] { ... }`.
pub fn header(t: &mut Caddy, d: &Directive) -> Applied {
    headers(t, d, "response_headers")
}

/// `request_header [<matcher>] [+|-]<field> [<value>]`.
pub fn request_header(t: &mut Caddy, d: &Directive) -> Applied {
    headers(t, d, "request_headers")
}

fn headers(t: &mut Caddy, d: &Directive, key: &str) -> Applied {
    let (m, rest) = split(t, d)?;
    let mut ops: Vec<Vec<String>> = Vec::new();
    if !rest.is_empty() {
        ops.push(rest.to_vec());
    }
    for sub in block(d) {
        if sub.name == "defer" {
            continue;
        }
        let mut op = vec![sub.name.clone()];
        op.extend(sub.args.iter().cloned());
        ops.push(op);
    }
    let mut table = Keys::default();
    for op in &ops {
        header_op(&mut table, key, op)?;
    }
    let (keys, difference) = t.keys_for(d, &m)?;
    if let Some(Value::Map(pairs)) = table.get(key) {
        for (n, v) in pairs {
            keys.insert(key, n.clone(), v.clone());
        }
    }
    Ok(difference.map(String::from))
}

/// `redir [<matcher>] <to> [<code>]`.
pub fn redir(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let (to, code) = match rest {
        [to] => (to, "302"),
        [to, code] => (to, code.as_str()),
        _ => return Err("expected a target and maybe a status".into()),
    };
    let status = match code {
        "temporary" => 302,
        "permanent" => 301,
        "html" => return Err("html (a page with a meta refresh) has no hayate form".into()),
        n => match n.parse::<i64>() {
            Ok(s @ (301 | 302 | 303 | 307 | 308)) => s,
            _ => {
                return Err(format!(
                    "status {n}: a redirect is 301, 302, 303, 307 or 308"
                ))
            }
        },
    };
    if matchers::addresses(&m).is_some() {
        return Err("a redirect for some client addresses has no hayate rule".into());
    }
    let mut target = values::template(to)?;
    if !(target.contains('?') || target.contains("$request_uri") || target.contains("$query")) {
        // Caddy's redirect drops the request's query unless the target
        // names it; hayate's keeps it unless the template has a `?`.
        target.push('?');
    }
    let mut action = Keys::default();
    action.set("redirect", Value::Str(target));
    action.set("status", Value::Int(status));
    t.rule(d, &m, action)?;
    Ok(None)
}

/// `rewrite [<matcher>] <to>`.
pub fn rewrite(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let [to] = rest else {
        return Err("expected one target".into());
    };
    if t.stripped {
        return Err("inside handle_path the path is seen without its prefix; hayate's rules see the whole path".into());
    }
    let mut action = Keys::default();
    action.set("rewrite", Value::Str(values::template(to)?));
    t.rule(d, &m, action)?;
    Ok(None)
}

/// `uri [<matcher>] strip_prefix <prefix>` inside or for its route.
pub fn uri(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    match rest {
        [op, prefix] if op == "strip_prefix" => {
            let prefix = prefix.trim_end_matches('/');
            let m = match (&m, t.route) {
                (Matcher::All, None) => {
                    Matcher::When(vec![matchers::Cond::Path(vec![format!("{prefix}/*")])])
                }
                _ => m,
            };
            let (keys, _) = t.keys_for(d, &m)?;
            keys.set("strip_prefix", Value::Bool(true));
            let site = t.site;
            let matches_route = t.config.sites[site]
                .routes
                .iter()
                .any(|r| r.prefix.trim_end_matches('/') == prefix);
            match matches_route {
                true => Ok(None),
                false => Err(format!(
                    "strip_prefix {prefix}: hayate strips only its route's own prefix"
                )),
            }
        }
        _ => Err(format!(
            "uri {}: only strip_prefix of a route's prefix has a hayate form",
            rest.first().map_or("", |s| s)
        )),
    }
}

/// `try_files <files...>`: the shapes hayate has a setting for.
pub fn try_files(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let files: Vec<&str> = rest.iter().map(String::as_str).collect();
    let last = files.last().copied().unwrap_or_default();
    let leading_ok = files[..files.len().saturating_sub(1)].iter().all(|f| {
        matches!(
            *f,
            "{path}" | "{path}/" | "{path}.html" | "{path}/index.html"
        )
    });
    if !leading_ok || !last.starts_with('/') {
        return Err("hayate serves the path, then its directory's index, then a fallback file or the front controller".into());
    }
    if last.starts_with("/index.php") {
        // php_fastcgi's route runs its front controller for what matches
        // no file, which is this.
        return Ok(None);
    }
    let (keys, difference) = t.keys_for(d, &m)?;
    keys.set("fallback", Value::Str(last.trim_start_matches('/').into()));
    Ok(difference.map(String::from))
}

/// `handle [<matcher>] { ... }` and `route`: the block's directives for
/// the matcher's route.
pub fn handle(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, _) = split(t, d)?;
    scoped_block(t, d, &m, false)
}

/// `handle_path <path> { ... }`: a route whose prefix is stripped.
pub fn handle_path(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, _) = split(t, d)?;
    if m == Matcher::All {
        return Err("handle_path needs a path".into());
    }
    scoped_block(t, d, &m, true)
}

fn scoped_block(t: &mut Caddy, d: &Directive, m: &Matcher, strip: bool) -> Applied {
    if t.route.is_some() {
        return Err("handle inside handle: hayate's routes do not nest".into());
    }
    let scope = matchers::scope(m)?;
    let difference = match scope {
        // The handle for everything the others do not take.
        matchers::Scope::Site => {
            t.outside = t.handle_prefixes.clone();
            None
        }
        matchers::Scope::Prefix(prefix, difference) => {
            let r = t.route_for(&prefix, d);
            t.route = Some(r);
            if strip {
                t.site_mut().routes[r]
                    .keys
                    .set("strip_prefix", Value::Bool(true));
            }
            difference
        }
    };
    t.stripped = strip;
    translate::directives(t, block(d));
    t.route = None;
    t.stripped = false;
    t.outside.clear();
    Ok(difference.map(String::from))
}

/// `basic_auth [<matcher>] [<hash_algorithm> [<realm>]] { <user> <hash> }`:
/// the users go to an htpasswd file written beside the config.
pub fn basic_auth(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    if let Some(alg) = rest.first().filter(|a| *a != "bcrypt") {
        return Err(format!(
            "{alg} hashes: hayate takes bcrypt, SHA-crypt and argon2id"
        ));
    }
    let mut lines = String::new();
    for user in block(d) {
        let hash = user.arg(0);
        let hash = if hash.starts_with('$') {
            hash.to_string()
        } else {
            // Caddy before 2.8 wrote the hash base64-encoded.
            base64(hash)
                .and_then(|b| String::from_utf8(b).ok())
                .filter(|h| h.starts_with('$'))
                .ok_or_else(|| format!("user {}: not a bcrypt hash", user.name))?
        };
        lines.push_str(&format!("{}:{hash}\n", user.name));
    }
    if lines.is_empty() {
        return Err("no users".into());
    }
    let site = t.site_mut();
    let stem = site
        .hosts
        .first()
        .map_or("default", String::as_str)
        .replace('*', "_");
    let mut name = format!("{stem}.htpasswd");
    let mut n = 2;
    while t.files.iter().any(|(f, _)| *f == name) {
        name = format!("{stem}-{n}.htpasswd");
        n += 1;
    }
    t.files.push((name.clone(), lines));
    let (keys, difference) = t.keys_for(d, &m)?;
    keys.set("basic_auth", Value::Str(name.clone()));
    if let Some(realm) = rest.get(1) {
        keys.set("basic_auth_realm", Value::Str(realm.clone()));
    }
    let mut what = format!("the users are written to {name} (htpasswd), beside the config");
    if let Some(d) = difference {
        what.push_str("; ");
        what.push_str(d);
    }
    Ok(Some(what))
}

/// Standard base64 (with or without padding).
fn base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// `tls internal|<email>|<cert> <key> { ... }`.
pub fn tls(t: &mut Caddy, d: &Directive) -> Applied {
    let site = t.site;
    match &d.args[..] {
        [] => {}
        [internal] if internal == "internal" => t.config.sites[site]
            .keys
            .set("tls", Value::Str("internal".into())),
        [email] if email.contains('@') => t.global("acme_email", Value::Str(email.clone()))?,
        [cert, key] => {
            let keys = &mut t.config.sites[site].keys;
            keys.remove("tls");
            keys.set("tls_cert", Value::List(vec![cert.clone()]));
            keys.set("tls_key", Value::List(vec![key.clone()]));
        }
        _ => return Err("expected internal, an email, or a certificate and key file".into()),
    }
    for sub in block(d) {
        let r: Result<(), String> = match sub.name.as_str() {
            "protocols" | "ciphers" | "curves" | "alpn" | "key_type" => Ok(()),
            "on_demand" => t.global("tls_on_demand", Value::Bool(true)),
            "ca" => t.global("acme_directory", Value::Str(sub.arg(0).into())),
            "ca_root" => t.global("acme_ca_root", Value::Str(sub.arg(0).into())),
            "dns" => Err(format!(
                "dns {}: hayate's DNS-01 goes over RFC 2136 (acme_dns_server) or a hook (acme_dns_hook)",
                sub.arg(0)
            )),
            "client_auth" => client_auth(t, sub),
            other => Err(format!("{other} is not carried")),
        };
        if let Err(e) = r {
            t.note(sub, Kind::NotCarried, e);
        }
    }
    Ok(None)
}

fn client_auth(t: &mut Caddy, sub: &Directive) -> Result<(), String> {
    let site = t.site;
    let mut mode = "require";
    let mut ca = None;
    for o in block(sub) {
        match (o.name.as_str(), o.arg(0)) {
            ("mode", "require_and_verify") => mode = "require",
            ("mode", "verify_if_given") => mode = "optional",
            ("mode", other) => {
                return Err(format!(
                    "client_auth mode {other}: hayate verifies every client certificate it takes"
                ))
            }
            ("trusted_ca_cert_file", file) => ca = Some(file.to_string()),
            ("trust_pool", "file") => ca = o.args.get(1).cloned(),
            (other, _) => return Err(format!("client_auth {other} is not carried")),
        }
    }
    let Some(ca) = ca else {
        return Err("client_auth without a CA file".into());
    };
    let keys = &mut t.config.sites[site].keys;
    keys.set("tls_client_auth", Value::Str(mode.into()));
    keys.set("tls_client_ca", Value::Str(ca));
    Ok(())
}

/// `respond [<matcher>] [<status>|<body> [<status>]] { ... }`.
pub fn respond(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let mut body = None;
    let mut status = None;
    for a in rest {
        match a.parse::<i64>() {
            Ok(s) if status.is_none() && (100..=999).contains(&s) => status = Some(s),
            _ if body.is_none() => body = Some(a.clone()),
            _ => return Err("expected a body and a status".into()),
        }
    }
    for sub in block(d) {
        match sub.name.as_str() {
            "body" => body = Some(sub.arg(0).to_string()),
            "close" => return Err("close: hayate always answers".into()),
            other => return Err(format!("{other} is not carried")),
        }
    }
    answer(t, d, &m, body, status.unwrap_or(200))
}

/// `error [<matcher>] [<message>] <status>`: the status, as hayate's own
/// error page says it.
pub fn error(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, rest) = split(t, d)?;
    let status = rest
        .iter()
        .find_map(|a| a.parse::<i64>().ok())
        .unwrap_or(500);
    answer(t, d, &m, None, status)
}

/// `abort [<matcher>]`: the connection closed, which hayate does not do;
/// for client addresses it refuses them (403).
pub fn abort(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, _) = split(t, d)?;
    if matchers::addresses(&m).is_some() {
        answer(t, d, &m, None, 403)?;
        return Ok(Some(
            "hayate answers 403 where Caddy closed the connection".into(),
        ));
    }
    Err("hayate always answers (it does not drop connections)".into())
}

/// A rule answering `status` (with `body`); a 403 for client addresses is
/// allow/deny.
fn answer(t: &mut Caddy, d: &Directive, m: &Matcher, body: Option<String>, status: i64) -> Applied {
    if let Some((deny, cidrs, rest)) = matchers::addresses(m) {
        if status != 403 || body.is_some() {
            return Err(
                "an answer for some client addresses other than 403: hayate has allow and deny"
                    .into(),
            );
        }
        let key = if deny { "deny" } else { "allow" };
        let (keys, difference) = t.keys_for(d, &rest)?;
        for c in cidrs {
            keys.push(key, c);
        }
        return Ok(difference.map(String::from));
    }
    let mut action = Keys::default();
    match body {
        Some(text) => {
            action.set("respond", Value::Str(values::template(&text)?));
            if status != 200 {
                action.set("status", Value::Int(status));
            }
        }
        None if status == 200 => action.set("respond", Value::Str(String::new())),
        None => action.set("respond", Value::Int(status)),
    }
    t.rule(d, m, action)?;
    Ok(None)
}

/// `log [<name>] { output ...; format ... }`.
pub fn log(t: &mut Caddy, d: &Directive) -> Applied {
    let mut differences: Vec<String> = Vec::new();
    let mut out = "stdout".to_string();
    for sub in block(d) {
        match sub.name.as_str() {
            "output" => match sub.arg(0) {
                "file" => {
                    out = sub.arg(1).to_string();
                    for roll in block(sub) {
                        let r = match roll.name.as_str() {
                            "roll_size" => values::size(roll.arg(0))
                                .and_then(|s| t.global("access_log_size", Value::Str(s))),
                            "roll_keep" => match roll.arg(0).parse::<i64>() {
                                Ok(n) => t.global("access_log_keep", Value::Int(n)),
                                Err(_) => Err(format!("roll_keep {}", roll.arg(0))),
                            },
                            "roll_keep_for" => crate::values::duration(roll.arg(0))
                                .and_then(|a| t.global("access_log_age", Value::Str(a))),
                            _ => Ok(()),
                        };
                        if let Err(e) = r {
                            t.note(roll, Kind::NotCarried, e);
                        }
                    }
                }
                "stdout" | "stderr" => out = sub.arg(0).into(),
                "discard" => out = "off".into(),
                other => t.note(
                    sub,
                    Kind::NotCarried,
                    format!("output {other} is not carried"),
                ),
            },
            "format" => match sub.arg(0) {
                "json" => t.global("access_log_format", Value::Str("json".into()))?,
                "console" => {}
                other => t.note(
                    sub,
                    Kind::NotCarried,
                    format!("format {other}: hayate writes combined, common, json or ecs lines"),
                ),
            },
            "level" => {}
            other => t.note(sub, Kind::NotCarried, format!("{other} is not carried")),
        }
    }
    t.global("access_log", Value::Str(out))?;
    differences.push(
        "hayate's access log is one for every site (combined by default; Caddy writes JSON)".into(),
    );
    Ok(Some(differences.join("; ")))
}

/// `request_body [<matcher>] { max_size <size> }`.
pub fn request_body(t: &mut Caddy, d: &Directive) -> Applied {
    let (m, _) = split(t, d)?;
    let mut size = None;
    for sub in block(d) {
        match sub.name.as_str() {
            "max_size" => size = Some(values::size(sub.arg(0))?),
            other => return Err(format!("{other} is not carried")),
        }
    }
    let Some(size) = size else {
        return Err("no max_size".into());
    };
    scoped(t, d, &m, "max_body_size", Value::Str(size))
}
