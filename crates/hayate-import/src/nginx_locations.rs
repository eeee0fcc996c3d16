//! nginx's locations in hayate's terms: prefix and `^~` locations become
//! routes, exact and regex ones that answer by themselves become rules (in
//! the phase nginx checks them), the PHP location becomes the site's
//! FastCGI application; and `try_files`, whose shapes are a route's own
//! order (the order is explained in `nginx_translate`'s module doc).

use crate::hayate_toml::{Keys, Route, Value};
use crate::nginx_parse::Directive;
use crate::nginx_translate::{directive, Kind, Target, Translation};
use crate::values;

/// How an nginx location matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// `location /p` or `location ^~ /p` (true: `^~`).
    Prefix(String, bool),
    /// `location = /p`.
    Exact(String),
    /// `location ~ re` or `~* re` (true: case-insensitive).
    Regex(String, bool),
    /// `location @name`.
    Named(String),
}

impl Match {
    pub fn parse(d: &Directive) -> Result<Match, String> {
        match d.args.as_slice() {
            [p] if p.starts_with('@') => Ok(Match::Named(p.clone())),
            [p] => Ok(Match::Prefix(p.clone(), false)),
            [m, p] if m == "^~" => Ok(Match::Prefix(p.clone(), true)),
            [m, p] if m == "=" => Ok(Match::Exact(p.clone())),
            [m, p] if m == "~" => Ok(Match::Regex(p.clone(), false)),
            [m, p] if m == "~*" => Ok(Match::Regex(p.clone(), true)),
            _ => Err(format!(
                "location {}: not a location form",
                d.args.join(" ")
            )),
        }
    }

    /// The rule condition that holds where this location matches.
    pub fn condition(&self) -> Keys {
        let mut keys = Keys::default();
        match self {
            Match::Prefix(p, _) if p == "/" => {}
            Match::Prefix(p, _) => keys.set("prefix", Value::Str(p.clone())),
            Match::Exact(p) => keys.set("match", Value::Str(format!("^{}$", regex_escape(p)))),
            Match::Regex(re, ci) => {
                let re = if *ci { format!("(?i){re}") } else { re.clone() };
                keys.set("match", Value::Str(re))
            }
            Match::Named(_) => {}
        }
        keys
    }
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A `location` of server `site`; `parent` is the route of an enclosing
/// prefix location (nested locations start from its settings).
pub fn location(t: &mut Translation, site: usize, d: &Directive, parent: Option<usize>) {
    let body = d.block.as_deref().unwrap_or_default();
    let m = match Match::parse(d) {
        Ok(m) => m,
        Err(e) => return t.note(d, Kind::NotCarried, e),
    };
    if t.auth_locations.iter().any(|l| l.pos == d.pos) {
        return t.note(
            d,
            Kind::NotNeeded,
            "the auth service's location: hayate asks the service itself (forward_auth)",
        );
    }
    let is_php = body.iter().any(|i| i.name == "fastcgi_pass");
    match &m {
        Match::Named(_) => {} // taken where try_files names it
        Match::Regex(re, _) if is_php => {
            if re.contains("index") {
                // Said at the server's end, unless a rule refuses the other
                // scripts (Symfony's `location ~ \.php$ { return 404; }`).
                t.front_controller_only = Some(d.clone());
            } else if !re.contains("php") {
                t.note(
                    d,
                    Kind::Differs,
                    "hayate runs the files fastcgi_extensions names \
                     (.php) through FastCGI, whatever this regex says",
                );
            }
            t.target = Some(Target::Php(site));
            t.php_condition = Some(m.condition());
            for inner in body {
                directive(t, inner);
            }
            t.php_condition = None;
        }
        Match::Prefix(prefix, _) if only_returns(body) => {
            // `location /old/ { return 301 /new/; }`: a rule under the
            // prefix, with no route that would never be reached. Where a
            // longer prefix location takes a path (nginx's longest match),
            // the rule does not: `location / { return 301 https://...; }`
            // beside `location /.well-known/acme-challenge/ { }`.
            let mut condition = m.condition();
            let longer: Vec<String> = t
                .prefixes
                .iter()
                .filter(|p| p.len() > prefix.len() && p.starts_with(prefix.as_str()))
                .map(|p| regex_escape(p))
                .collect();
            if !longer.is_empty() {
                condition.set("match", Value::Str(format!("!^(?:{})", longer.join("|"))));
            }
            t.conditions.push((condition, 2));
            let i = t.conditions.len() - 1;
            for inner in body {
                t.target = Some(Target::Rules(i));
                directive(t, inner);
            }
        }
        Match::Prefix(prefix, no_regex) => {
            let routes = &mut t.config.sites[site].routes;
            if routes.iter().any(|r| &r.prefix == prefix) {
                return t.note(d, Kind::NotCarried, "another location has this prefix");
            }
            let keys = parent.map(|p| routes[p].keys.clone()).unwrap_or_default();
            routes.push(Route {
                from: d.pos.to_string(),
                prefix: prefix.clone(),
                keys,
            });
            let r = routes.len() - 1;
            if !prefix.ends_with('/') && prefix != "/" {
                t.note(
                    d,
                    Kind::Differs,
                    format!(
                        "hayate's prefixes end at a path segment: \
                         {prefix} takes {prefix} and {prefix}/..., not {prefix}x as nginx does"
                    ),
                );
            }
            if *no_regex {
                t.note(
                    d,
                    Kind::Differs,
                    "hayate's rules (from regex and exact locations) \
                     run before any route, this one's paths included",
                );
            }
            for inner in body {
                t.target = Some(Target::Route(site, r));
                if inner.name == "location" {
                    location(t, site, inner, Some(r));
                } else {
                    directive(t, inner);
                }
            }
        }
        Match::Exact(path) if !answers_alone(body) => {
            // Content of its own: a route at that path, the nearest hayate has.
            let routes = &mut t.config.sites[site].routes;
            if routes.iter().any(|r| &r.prefix == path) {
                return t.note(d, Kind::NotCarried, "another location has this path");
            }
            routes.push(Route {
                from: d.pos.to_string(),
                prefix: path.clone(),
                keys: Keys::default(),
            });
            let r = routes.len() - 1;
            if path != "/" {
                t.note(
                    d,
                    Kind::Differs,
                    format!("a route at {path}, which also takes the paths under it"),
                );
            }
            for inner in body {
                t.target = Some(Target::Route(site, r));
                directive(t, inner);
            }
        }
        Match::Regex(re, ci) if regex::Regex::new(re).is_err() => {
            let hides_dotfiles = re.starts_with("/\\.") && !*ci;
            let what = if hides_dotfiles && body.iter().all(|i| i.name != "return") {
                (
                    Kind::Differs,
                    "hayate hides dotfiles itself (a 404, where this answers 403), \
                 .well-known excepted"
                        .to_string(),
                )
            } else {
                (
                    Kind::NotCarried,
                    format!(
                        "{re}: hayate's regexes run in linear time, without look-around or \
                     back-references"
                    ),
                )
            };
            t.note(d, what.0, what.1);
        }
        Match::Exact(_) | Match::Regex(..) => {
            let phase = if matches!(m, Match::Exact(_)) { 1 } else { 2 };
            t.conditions.push((m.condition(), phase));
            let i = t.conditions.len() - 1;
            let rules_before = t.rule_phases[phase].len();
            for inner in body {
                t.target = Some(Target::Rules(i));
                directive(t, inner);
            }
            let falls_back = body
                .iter()
                .any(|i| i.name == "try_files" && i.args.last().is_some_and(|a| a != "=404"));
            if t.rule_phases[phase].len() == rules_before && !falls_back {
                // A location of files alone: nginx answers 404 for a
                // missing one, where hayate's route would go on to its
                // front controller or upstream (as nginx does too when
                // the location's try_files falls back).
                let mut keys = m.condition();
                keys.set("file", Value::Str("missing".into()));
                keys.set("respond", Value::Int(404));
                t.rule_phases[phase].push((d.pos.to_string(), keys));
            }
        }
    }
}

/// Whether a location's block answers every request with `return` (and
/// logging settings).
fn only_returns(body: &[Directive]) -> bool {
    body.iter().any(|d| d.name == "return")
        && body
            .iter()
            .all(|d| matches!(d.name.as_str(), "return" | "access_log" | "log_not_found"))
}

/// Whether a location's block only answers by itself (rules can carry it),
/// or holds nothing a route would: an `if` (reported as not supported) is
/// no reason for a route, and Nextcloud's `location = / { if ... }` as a
/// route at `/` would take the place of its `location /`.
fn answers_alone(body: &[Directive]) -> bool {
    body.iter().all(|d| {
        matches!(
            d.name.as_str(),
            "return" | "rewrite" | "deny" | "allow" | "access_log" | "log_not_found" | "if"
        )
    })
}

/// `try_files`: the shapes hayate's routes already have.
pub fn try_files(t: &mut Translation, d: &Directive) -> Result<Option<String>, String> {
    let Some((last, tries)) = d.args.split_last() else {
        return Err("no arguments".into());
    };
    if t.in_php() {
        // `try_files $fastcgi_script_name =404;` (Debian's fastcgi-php.conf).
        return Ok(None);
    }
    if !t.takes_options() {
        return Err("inside a regex or exact location".into());
    }
    let extra: Vec<&String> = tries
        .iter()
        .filter(|a| !matches!(a.as_str(), "$uri" | "$uri/"))
        .collect();
    let mut difference = None;
    if !extra.is_empty() {
        difference = Some(format!(
            "hayate tries the file and the directory only ({} not tried)",
            extra
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if last == "=404" {
        return Ok(difference);
    }
    if last.starts_with('=') {
        return Err(format!("{last}: hayate answers 404 for a missing file"));
    }
    if last.starts_with('@') {
        let Some(named) = t.named.iter().find(|n| n.arg(0) == last).cloned() else {
            return Err(format!("no location {last} in this server"));
        };
        t.named_used.push(last.clone());
        // The named location's settings apply where nothing matched a file:
        // hayate's route sends what matches no file to its upstream.
        for inner in named.block.as_deref().unwrap_or_default() {
            directive(t, inner);
        }
        return Ok(difference);
    }
    // `/index.php$request_uri` (Nextcloud's): the front controller with
    // the request's path as its PATH_INFO.
    let (last, path_info) = match last
        .strip_suffix("$request_uri")
        .or(last.strip_suffix("$uri"))
    {
        Some(script) if script.ends_with(".php") => (script, true),
        _ => (last.as_str(), false),
    };
    let target = values::template(last).map_err(|e| format!("{last}: {e}"))?;
    let file = target.split('?').next().unwrap_or_default();
    if file.ends_with(".php") {
        if path_info {
            t.keys().set("fastcgi_index_path_info", Value::Bool(true));
        }
        if file != "/index.php" {
            let name = file.trim_start_matches('/').to_string();
            t.keys().set("fastcgi_index", Value::Str(name));
        }
        t.wants_fastcgi.get_or_insert(d.pos.clone());
        return Ok(difference);
    }
    if file.contains('$') {
        return Err(format!("{last}: a computed fallback"));
    }
    t.keys()
        .set("fallback", Value::Str(file.trim_start_matches('/').into()));
    Ok(difference)
}
