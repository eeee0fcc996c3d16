//! Caddy's request matchers in hayate's terms. A directive's first
//! argument may be a matcher token (`*`, a path `/api/*`, or a named set
//! `@name` defined in the site); a named set ANDs its matchers, and the
//! values inside one matcher are ORed.
//!
//! Two places take them. Directives that answer by themselves (`redir`,
//! `rewrite`, `respond`, `error`) become `[[site.rule]]`s, whose
//! conditions say almost everything Caddy's matchers do ([`conditions`]).
//! Everything else is scoped the way hayate scopes options: by path
//! prefix, as a `[[site.route]]` ([`scope`]).

use crate::hayate_toml::{Keys, Value};
use crate::nginx_parse::Directive;

/// One matcher of a set.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// `path PATTERN...` (globs: `*` at the end for a prefix, at the start
    /// for a suffix; case-insensitive in Caddy).
    Path(Vec<String>),
    /// `path_regexp [NAME] REGEX`.
    PathRegexp(String),
    /// `method M...`.
    Method(Vec<String>),
    /// `header [!]FIELD [VALUE...]`: values ORed, `*` a wildcard; none
    /// (or `!FIELD`) tests presence.
    Header(String, Vec<String>),
    /// `header_regexp [NAME] FIELD REGEX`.
    HeaderRegexp(String, String),
    /// `host NAME...`.
    Host(Vec<String>),
    /// `query KEY=VALUE...` (ORed; `*` any value).
    Query(Vec<String>),
    /// `protocol http|https`.
    Protocol(String),
    /// `file` (the path is a file under the root).
    File,
    /// `remote_ip`/`client_ip CIDR...` (only for allow and deny).
    RemoteIp(Vec<String>),
    /// `not MATCHER` or `not { ... }`.
    Not(Vec<Cond>),
    /// A matcher hayate has no condition for (`expression`, `vars`, ...).
    Other(String),
}

/// A named matcher set: `@name ...`.
#[derive(Debug, Clone)]
pub struct Named {
    /// Without its `@`.
    pub name: String,
    /// The matchers, all of which must hold.
    pub conds: Vec<Cond>,
}

/// The matcher of a directive: all requests, or conditions.
#[derive(Debug, Clone, PartialEq)]
pub enum Matcher {
    /// No matcher token, or `*`.
    All,
    /// A path token or a named set.
    When(Vec<Cond>),
}

/// The named matcher definitions among a site's directives.
pub fn named(body: &[Directive]) -> Vec<Named> {
    body.iter()
        .filter_map(|d| {
            let name = d.name.strip_prefix('@')?;
            let conds = match &d.block {
                Some(block) => block.iter().map(cond).collect(),
                None => match d.args.split_first() {
                    Some((first, rest)) => vec![cond_of(first, rest, None)],
                    None => vec![Cond::Other("an empty matcher".into())],
                },
            };
            Some(Named {
                name: name.into(),
                conds: merged(conds),
            })
        })
        .collect()
}

/// A set's matchers of one kind written on several lines are one matcher
/// with all their values (Caddy merges `path` lines so: any of them).
fn merged(conds: Vec<Cond>) -> Vec<Cond> {
    let mut out: Vec<Cond> = Vec::with_capacity(conds.len());
    for c in conds {
        let same = out.iter_mut().find_map(|o| match (o, &c) {
            (Cond::Path(a), Cond::Path(b))
            | (Cond::Method(a), Cond::Method(b))
            | (Cond::Host(a), Cond::Host(b))
            | (Cond::Query(a), Cond::Query(b))
            | (Cond::RemoteIp(a), Cond::RemoteIp(b)) => Some((a, b.clone())),
            _ => None,
        });
        match same {
            Some((values, more)) => values.extend(more),
            None => out.push(c),
        }
    }
    out
}

fn cond(d: &Directive) -> Cond {
    cond_of(&d.name, &d.args, d.block.as_deref())
}

fn cond_of(kind: &str, args: &[String], block: Option<&[Directive]>) -> Cond {
    let list = || args.to_vec();
    match kind {
        "path" => Cond::Path(list()),
        "path_regexp" => match args {
            [_, re] | [re] => Cond::PathRegexp(re.clone()),
            _ => Cond::Other("path_regexp with other arguments".into()),
        },
        "method" => Cond::Method(args.iter().map(|m| m.to_ascii_uppercase()).collect()),
        "header" => match args.split_first() {
            Some((field, values)) => Cond::Header(field.clone(), values.to_vec()),
            None => Cond::Other("header without a field".into()),
        },
        "header_regexp" => match args {
            [_, field, re] | [field, re] => Cond::HeaderRegexp(field.clone(), re.clone()),
            _ => Cond::Other("header_regexp with other arguments".into()),
        },
        "host" => Cond::Host(list()),
        "query" => Cond::Query(list()),
        "protocol" => Cond::Protocol(args.first().cloned().unwrap_or_default()),
        "file" if args.is_empty() && block.is_none_or(file_block_is_plain) => Cond::File,
        "remote_ip" | "client_ip" => Cond::RemoteIp(
            args.iter()
                .filter(|a| *a != "forwarded")
                .map(|a| private_ranges(a))
                .collect::<Vec<_>>()
                .join(" ")
                .split_whitespace()
                .map(String::from)
                .collect(),
        ),
        "not" => match block {
            Some(block) => Cond::Not(block.iter().map(cond).collect()),
            None => match args.split_first() {
                Some((k, rest)) => Cond::Not(vec![cond_of(k, rest, None)]),
                None => Cond::Other("not without a matcher".into()),
            },
        },
        other => Cond::Other(other.into()),
    }
}

/// `file { try_files {path} }` (or nothing more): the request's own path.
fn file_block_is_plain(block: &[Directive]) -> bool {
    block
        .iter()
        .all(|d| d.name == "try_files" && d.args.iter().all(|a| a == "{path}"))
}

/// Caddy's `private_ranges` shorthand.
pub fn private_ranges(arg: &str) -> String {
    if arg == "private_ranges" {
        "192.168.0.0/16 172.16.0.0/12 10.0.0.0/8 127.0.0.1/8 fd00::/8 ::1".into()
    } else {
        arg.into()
    }
}

/// Splits a directive's matcher token off its arguments: (matcher, the
/// rest). An unknown `@name` is an error naming it.
pub fn split<'a>(d: &'a Directive, sets: &[Named]) -> Result<(Matcher, &'a [String]), String> {
    let Some(first) = d.args.first() else {
        return Ok((Matcher::All, &d.args[..]));
    };
    let rest = &d.args[1..];
    if first == "*" {
        Ok((Matcher::All, rest))
    } else if first.starts_with('/') {
        Ok((Matcher::When(vec![Cond::Path(vec![first.clone()])]), rest))
    } else if let Some(name) = first.strip_prefix('@') {
        match sets.iter().find(|s| s.name == name) {
            Some(set) => Ok((Matcher::When(set.conds.clone()), rest)),
            None => Err(format!("no matcher @{name} is defined in this site")),
        }
    } else {
        Ok((Matcher::All, &d.args[..]))
    }
}

/// Where a scoped directive's options go.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    /// The whole site.
    Site,
    /// A route of this prefix, with the difference to report if any.
    Prefix(String, Option<&'static str>),
}

/// Caddy's `/api*` also matches `/apix`; hayate's prefixes end at a path
/// segment.
pub const PREFIX_SEGMENT: &str =
    "hayate's route prefixes end at a path segment: Caddy's /x* also matched /xy";
/// An exact path as a route.
pub const EXACT_AS_PREFIX: &str =
    "hayate's routes are prefixes: the route also takes the paths under this one";

/// The route a matcher scopes a directive to: the site, or one path
/// prefix. Other matchers have no place to go (hayate scopes options by
/// path prefix), and the error says so.
pub fn scope(m: &Matcher) -> Result<Scope, String> {
    match m {
        Matcher::All => Ok(Scope::Site),
        Matcher::When(conds) => match &conds[..] {
            [Cond::Path(paths)] if paths.len() == 1 => path_scope(&paths[0]),
            _ => Err(
                "hayate scopes options by path prefix: this matcher has no route to go to".into(),
            ),
        },
    }
}

fn path_scope(p: &str) -> Result<Scope, String> {
    if p == "*" || p == "/*" {
        return Ok(Scope::Site);
    }
    let Some(stem) = p.strip_suffix('*') else {
        if p.contains('*') {
            return Err(format!("{p}: a path glob is not a prefix"));
        }
        return Ok(Scope::Prefix(p.into(), Some(EXACT_AS_PREFIX)));
    };
    if stem.contains('*') || !stem.starts_with('/') {
        return Err(format!("{p}: a path glob is not a prefix"));
    }
    if stem.ends_with('/') {
        Ok(Scope::Prefix(stem.into(), None))
    } else {
        Ok(Scope::Prefix(stem.into(), Some(PREFIX_SEGMENT)))
    }
}

/// A `[[site.rule]]`'s conditions for a matcher.
pub fn conditions(m: &Matcher) -> Result<Keys, String> {
    let mut keys = Keys::default();
    let Matcher::When(conds) = m else {
        return Ok(keys);
    };
    for c in conds {
        add(&mut keys, c, false)?;
    }
    Ok(keys)
}

fn add(keys: &mut Keys, c: &Cond, negated: bool) -> Result<(), String> {
    let bang = if negated { "!" } else { "" };
    let set_once = |keys: &mut Keys, key: &str, value: Value| {
        if keys.get(key).is_some() {
            return Err(format!(
                "two {key} conditions in one matcher: a hayate rule has one"
            ));
        }
        keys.set(key, value);
        Ok(())
    };
    match c {
        Cond::Path(paths) => {
            let alternatives: Vec<String> = paths.iter().map(|p| path_regex(p)).collect();
            let re = format!("{bang}(?i)^(?:{})$", alternatives.join("|"));
            set_once(keys, "match", Value::Str(re))
        }
        Cond::PathRegexp(re) => {
            regex_ok(re)?;
            set_once(keys, "match", Value::Str(format!("{bang}{re}")))
        }
        Cond::Method(methods) if !negated => set_once(keys, "method", Value::List(methods.clone())),
        Cond::Host(hosts) if !negated => set_once(keys, "host", Value::List(hosts.clone())),
        Cond::Header(field, values) => {
            let (field, negated) = match field.strip_prefix('!') {
                Some(f) => (f, !negated),
                None => (field.as_str(), negated),
            };
            // `^` matches any value: the field is there.
            let re = if values.is_empty() || values.iter().any(|v| v == "*") {
                "^".to_string()
            } else {
                let alts: Vec<String> = values.iter().map(|v| glob_regex(v)).collect();
                format!("^(?:{})$", alts.join("|"))
            };
            // A negated regex also holds when the field is missing.
            let re = if negated { format!("!{re}") } else { re };
            header(keys, field, re)
        }
        Cond::HeaderRegexp(field, re) => {
            regex_ok(re)?;
            header(keys, field, format!("{bang}{re}"))
        }
        Cond::Query(pairs) => {
            let alts: Vec<String> = pairs
                .iter()
                .map(|p| match p.split_once('=') {
                    Some((k, "*")) => format!("{}=", regex::escape(k)),
                    Some((k, v)) => format!("{}={}", regex::escape(k), regex::escape(v)),
                    None => regex::escape(p),
                })
                .collect();
            let re = format!("{bang}(?:^|&)(?:{})(?:&|$)", alts.join("|"));
            set_once(keys, "query", Value::Str(re))
        }
        Cond::Protocol(p) if p == "http" || p == "https" => {
            let scheme = match (p.as_str(), negated) {
                ("http", false) | ("https", true) => "http",
                _ => "https",
            };
            set_once(keys, "scheme", Value::Str(scheme.into()))
        }
        Cond::File => set_once(
            keys,
            "file",
            Value::Str(if negated { "missing" } else { "exists" }.into()),
        ),
        Cond::Not(inner) if !negated => match &inner[..] {
            [one] => add(keys, one, true),
            _ => Err("not with several matchers (not all of them) has no hayate condition".into()),
        },
        Cond::RemoteIp(_) => {
            Err("remote_ip outside an allow/deny answer (respond/abort/error 403 for it)".into())
        }
        Cond::Other(what) => Err(format!("the {what} matcher has no hayate condition")),
        other => Err(format!(
            "{} has no hayate condition",
            describe(other, negated)
        )),
    }
}

fn header(keys: &mut Keys, field: &str, re: String) -> Result<(), String> {
    if let Some(Value::Map(map)) = keys.get("header") {
        if map.iter().any(|(n, _)| n.eq_ignore_ascii_case(field)) {
            return Err(format!(
                "two conditions on {field}: a hayate rule has one per field"
            ));
        }
    }
    keys.insert("header", field.into(), re);
    Ok(())
}

fn describe(c: &Cond, negated: bool) -> String {
    let what = match c {
        Cond::Method(_) => "method",
        Cond::Host(_) => "host",
        Cond::Protocol(_) => "protocol",
        Cond::Not(_) => "not",
        _ => "this matcher",
    };
    if negated {
        format!("not {what}")
    } else {
        what.into()
    }
}

fn regex_ok(re: &str) -> Result<(), String> {
    regex::Regex::new(re).map(|_| ()).map_err(|_| {
        format!("{re}: hayate's regexes run in linear time, without look-around or back-references")
    })
}

/// A Caddy path pattern as a regex body (without anchors).
fn path_regex(p: &str) -> String {
    glob_regex(p)
}

/// `*` as "anything", the rest literal.
fn glob_regex(p: &str) -> String {
    p.split('*')
        .map(regex::escape)
        .collect::<Vec<_>>()
        .join(".*")
}

/// For allow and deny: a matcher that is client addresses (or their
/// negation), with at most a path besides. `Some((true, cidrs, rest))` for
/// `remote_ip` (those are refused: deny), `Some((false, cidrs, rest))` for
/// `not remote_ip` (everyone else is refused: allow); `rest` is the path
/// part, which scopes the list to a route.
pub fn addresses(m: &Matcher) -> Option<(bool, Vec<String>, Matcher)> {
    let Matcher::When(conds) = m else {
        return None;
    };
    let mut found = None;
    let mut rest = Vec::new();
    for c in conds {
        match c {
            Cond::RemoteIp(cidrs) if found.is_none() => found = Some((true, cidrs.clone())),
            Cond::Not(inner) if found.is_none() => match &inner[..] {
                [Cond::RemoteIp(cidrs)] => found = Some((false, cidrs.clone())),
                _ => return None,
            },
            Cond::Path(_) if rest.is_empty() => rest.push(c.clone()),
            _ => return None,
        }
    }
    let (deny, cidrs) = found?;
    let rest = match rest.is_empty() {
        true => Matcher::All,
        false => Matcher::When(rest),
    };
    Some((deny, cidrs, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caddy_parse::parse_str;
    use std::path::Path;

    fn site(text: &str) -> Vec<Directive> {
        let file = parse_str(&format!("a.test {{\n{text}\n}}\n"), Path::new("C")).unwrap();
        file.sites.into_iter().next().unwrap().body
    }

    #[test]
    fn scopes_are_path_prefixes() {
        let body = site("@api path /api/*\nreverse_proxy @api x\nreverse_proxy /v1* y\n");
        let sets = named(&body);
        let (m, rest) = split(&body[1], &sets).unwrap();
        assert_eq!(rest, ["x"]);
        assert_eq!(scope(&m), Ok(Scope::Prefix("/api/".into(), None)));
        let (m, _) = split(&body[2], &sets).unwrap();
        assert_eq!(
            scope(&m),
            Ok(Scope::Prefix("/v1".into(), Some(PREFIX_SEGMENT)))
        );
        assert_eq!(scope(&Matcher::All), Ok(Scope::Site));
        let (m, _) = split(&site("respond *.php 403")[0], &[]).unwrap();
        assert_eq!(m, Matcher::All, "a bare *.php is not a matcher token");
        assert!(split(&site("respond @nope 403")[0], &[]).is_err());
    }

    #[test]
    fn named_sets_become_rule_conditions() {
        let body = site(
            "@bots {\n\theader User-Agent *bot* *crawl*\n\tmethod get post\n\
             \tnot path /robots.txt\n\tquery debug=*\n}\n\
             @legacy path_regexp old ^/old/(\\d+)$\n",
        );
        let sets = named(&body);
        let c = conditions(&Matcher::When(sets[0].conds.clone())).unwrap();
        assert_eq!(
            c.get("header"),
            Some(&Value::Map(vec![(
                "User-Agent".into(),
                "^(?:.*bot.*|.*crawl.*)$".into()
            )]))
        );
        assert_eq!(
            c.get("method"),
            Some(&Value::List(vec!["GET".into(), "POST".into()]))
        );
        assert_eq!(
            c.get("match"),
            Some(&Value::Str("!(?i)^(?:/robots\\.txt)$".into()))
        );
        assert_eq!(
            c.get("query"),
            Some(&Value::Str("(?:^|&)(?:debug=)(?:&|$)".into()))
        );
        let c = conditions(&Matcher::When(sets[1].conds.clone())).unwrap();
        assert_eq!(c.get("match"), Some(&Value::Str("^/old/(\\d+)$".into())));
        let refused = conditions(&Matcher::When(vec![Cond::Other("expression".into())]));
        assert!(refused.unwrap_err().contains("expression"));
    }

    #[test]
    fn client_addresses_for_allow_and_deny() {
        let body =
            site("@outside not remote_ip 10.0.0.0/8 private_ranges\n@bad remote_ip 192.0.2.1\n");
        let sets = named(&body);
        let (deny, cidrs, rest) = addresses(&Matcher::When(sets[0].conds.clone())).unwrap();
        assert!(!deny);
        assert_eq!(rest, Matcher::All);
        assert_eq!(cidrs[0], "10.0.0.0/8");
        assert!(cidrs.contains(&"fd00::/8".to_string()));
        assert_eq!(
            addresses(&Matcher::When(sets[1].conds.clone())),
            Some((true, vec!["192.0.2.1".into()], Matcher::All))
        );
    }
}
