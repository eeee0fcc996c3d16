//! Site rules (`[[site.rule]]`, or `[[rule]]` at the top level for every
//! site): ordered conditions and one action each — redirect, rewrite or
//! respond — checked at load so that every mistake names its line: a
//! regex that does not compile, a `$2` its regex does not capture, a
//! variable that does not exist, a status a redirect cannot have.
//!
//! The rewrite phase that runs them is hayate-server's `policy::rewrite`.

use regex::bytes::Regex;
use toml::de::{DeTable, DeValue};

/// One rule: when every condition holds, its action runs.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The config file line of its table, for logs and `hayate check`.
    pub line: usize,
    /// What the request must be.
    pub when: Conditions,
    /// What happens then.
    pub action: Action,
}

/// A rule's conditions; all must hold (an empty set always does).
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    /// `match`: a regex on the normalized path, with the captures the
    /// action's template uses.
    pub path: Option<Pattern>,
    /// `prefix`: the normalized path starts with it (segment-wise: `/old`
    /// is `/old` and `/old/...`, not `/older`).
    pub prefix: Option<String>,
    /// `host`: the request's host is one of these (lower-case, without port;
    /// `*.example.com` for subdomains).
    pub hosts: Vec<String>,
    /// `method`: one of these methods.
    pub methods: Vec<String>,
    /// `header`: each named field (lower-case name) has a value the regex
    /// matches (a missing field matches only a negated regex).
    pub headers: Vec<(String, Pattern)>,
    /// `query`: a regex on the raw query (empty when there is none).
    pub query: Option<Pattern>,
    /// `scheme`: `http` or `https`.
    pub scheme: Option<String>,
    /// `file`: whether the path names a file or directory under its route's
    /// root.
    pub file: Option<FileTest>,
}

/// A regex, or its negation (written with a leading `!`, as nginx's `!~`).
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The compiled regex (linear time: the regex crate has no
    /// backtracking, so no pattern is a ReDoS).
    pub regex: Regex,
    /// Holds when the regex does *not* match.
    pub negated: bool,
}

impl Pattern {
    /// Whether `text` satisfies the pattern.
    pub fn holds(&self, text: &[u8]) -> bool {
        self.regex.is_match(text) != self.negated
    }
}

/// The `file` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileTest {
    /// A file or directory exists at the path under the route's root.
    Exists,
    /// Nothing does (or the route has no root).
    Missing,
}

/// What a rule does.
#[derive(Debug, Clone)]
pub enum Action {
    /// Answer with a redirect to the template's URL.
    Redirect {
        /// Where to (a path, or an absolute URL).
        to: Template,
        /// 301, 302, 303, 307 or 308.
        status: u16,
    },
    /// With a `prefix` condition: the same URL with that prefix replaced
    /// (`/old/a?x` → `/new/a?x`), no regex needed.
    RedirectPrefix {
        /// The prefix's replacement (a path, or an absolute URL).
        to: String,
        /// 301, 302, 303, 307 or 308.
        status: u16,
    },
    /// Continue with the template's path and query; the rules run again on
    /// it unless `last`.
    Rewrite {
        /// The new target (starts with `/`).
        to: Template,
        /// Stop the rules after this rewrite.
        last: bool,
    },
    /// Answer with this status (and body text, else the status's own).
    Respond {
        /// The status.
        status: u16,
        /// The body, as `text/plain`.
        body: Option<String>,
    },
}

/// A URL with `$` references, parsed at load.
#[derive(Debug, Clone)]
pub struct Template {
    /// Its pieces in order.
    pub parts: Vec<Part>,
    /// Where the query starts: the index of the part holding the first
    /// literal `?`; `None`: the template has no query of its own, so the
    /// request's query is kept (unless it names `$query` or `$request_uri`,
    /// which carry it already).
    pub query_at: Option<usize>,
    /// It names `$query` or `$request_uri`.
    pub carries_query: bool,
}

/// A piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text as written.
    Text(String),
    /// A numbered capture of `match` (`$1`).
    Group(usize),
    /// A named capture of `match` (`$slug`, `${slug}`).
    Named(String),
    /// A request variable.
    Var(Var),
}

/// The variables a template may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// The target as the client sent it (path and query).
    RequestUri,
    /// The host, without port.
    Host,
    /// `http` or `https`.
    Scheme,
    /// The raw query, without `?`.
    Query,
    /// The client's address.
    ClientIp,
    /// The normalized path (percent-encoded where it goes).
    Path,
}

impl Var {
    /// Every variable by name.
    pub const ALL: [(&'static str, Var); 6] = [
        ("request_uri", Var::RequestUri),
        ("host", Var::Host),
        ("scheme", Var::Scheme),
        ("query", Var::Query),
        ("client_ip", Var::ClientIp),
        ("path", Var::Path),
    ];
}

/// The keys a rule table may have.
pub const RULE_KEYS: &[&str] = &[
    "match",
    "prefix",
    "host",
    "method",
    "header",
    "query",
    "scheme",
    "file",
    "redirect",
    "redirect_prefix",
    "rewrite",
    "respond",
    "status",
    "last",
];

/// Why a rule table is wrong: the byte offset to name the line of, the key,
/// and the reason.
pub type RuleError = (usize, &'static str, String);

/// Parses one rule table; `line` is its table's line.
pub fn parse_rule(table: &DeTable<'_>, at: usize, line: usize) -> Result<Rule, RuleError> {
    let mut when = Conditions::default();
    let mut actions: Vec<(&'static str, usize, &DeValue<'_>)> = Vec::new();
    let (mut status, mut last) = (None, false);
    for (key, value) in table {
        let k = key.get_ref().as_ref();
        let here = value.span().start;
        let Some(&key_name) = RULE_KEYS.iter().find(|&&name| name == k) else {
            return Err((
                key.span().start,
                "rule",
                format!(
                    "unknown key {k:?} in a rule (known: {})",
                    RULE_KEYS.join(", ")
                ),
            ));
        };
        let v = value.get_ref();
        let err = |m: String| (here, key_name, m);
        match key_name {
            "match" => when.path = Some(pattern(text(v).map_err(err)?).map_err(err)?),
            "prefix" => {
                let p = text(v).map_err(err)?;
                if !p.starts_with('/') {
                    return Err(err(format!("expected a path starting with /, got {p:?}")));
                }
                when.prefix = Some(p.to_string());
            }
            "host" => {
                when.hosts = texts(v).map_err(err)?;
                for h in &mut when.hosts {
                    h.make_ascii_lowercase();
                }
            }
            "method" => {
                when.methods = texts(v).map_err(err)?;
                if let Some(m) = when.methods.iter().find(|m| !is_token(m)) {
                    return Err(err(format!("{m:?} is not a method")));
                }
            }
            "header" => {
                let DeValue::Table(fields) = v else {
                    return Err(err(
                        "expected a table of field names and regexes, as header = { \"User-Agent\" = \"(?i)bot\" }".into(),
                    ));
                };
                for (name, regex) in fields {
                    let name = name.get_ref().as_ref();
                    if !is_token(name) {
                        return Err(err(format!("{name:?} is not a field name")));
                    }
                    let p = pattern(text(regex.get_ref()).map_err(err)?).map_err(err)?;
                    when.headers.push((name.to_ascii_lowercase(), p));
                }
            }
            "query" => when.query = Some(pattern(text(v).map_err(err)?).map_err(err)?),
            "scheme" => match text(v).map_err(err)? {
                s @ ("http" | "https") => when.scheme = Some(s.to_string()),
                s => return Err(err(format!("expected http or https, got {s:?}"))),
            },
            "file" => {
                when.file = Some(match text(v).map_err(err)? {
                    "exists" => FileTest::Exists,
                    "missing" => FileTest::Missing,
                    s => return Err(err(format!("expected exists or missing, got {s:?}"))),
                })
            }
            "status" => match v {
                DeValue::Integer(i) => {
                    status = Some(
                        i.as_str()
                            .parse::<u16>()
                            .ok()
                            .filter(|s| (200..=599).contains(s))
                            .ok_or_else(|| err("expected a status from 200 to 599".into()))?,
                    )
                }
                _ => return Err(err("expected a status number".into())),
            },
            "last" => match v {
                DeValue::Boolean(b) => last = *b,
                _ => return Err(err("expected true or false".into())),
            },
            action => actions.push((action, here, v)),
        }
    }
    let [(kind, here, value)] = actions[..] else {
        let message = match actions.len() {
            0 => "a rule needs one action: redirect, redirect_prefix, rewrite or respond",
            _ => "a rule has one action only: redirect, redirect_prefix, rewrite or respond",
        };
        return Err((at, "rule", message.into()));
    };
    let err = |m: String| (here, kind, m);
    let redirect_status = |status: Option<u16>| match status {
        None => Ok(302),
        Some(s @ (301 | 302 | 303 | 307 | 308)) => Ok(s),
        Some(s) => Err((
            at,
            "status",
            format!("a redirect's status is 301, 302, 303, 307 or 308, not {s}"),
        )),
    };
    let action = match kind {
        "redirect" => {
            let to = template(text(value).map_err(err)?, &when).map_err(err)?;
            Action::Redirect {
                to,
                status: redirect_status(status)?,
            }
        }
        "redirect_prefix" => {
            if when.prefix.is_none() {
                return Err(err(
                    "redirect_prefix replaces the rule's prefix: give prefix = \"/old/\" too"
                        .into(),
                ));
            }
            let to = text(value).map_err(err)?;
            if !(to.starts_with('/') || to.starts_with("https://") || to.starts_with("http://")) {
                return Err(err(format!(
                    "expected a path or an http(s):// URL, got {to:?}"
                )));
            }
            if to.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                return Err(err("a URL has no spaces or control characters".into()));
            }
            Action::RedirectPrefix {
                to: to.to_string(),
                status: redirect_status(status)?,
            }
        }
        "rewrite" => {
            let source = text(value).map_err(err)?;
            if !source.starts_with('/') {
                return Err(err(format!(
                    "a rewrite's target is a path starting with /, got {source:?}"
                )));
            }
            Action::Rewrite {
                to: template(source, &when).map_err(err)?,
                last,
            }
        }
        _ => match value {
            DeValue::Integer(i) => Action::Respond {
                status: i
                    .as_str()
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (200..=599).contains(s))
                    .ok_or_else(|| err("expected a status from 200 to 599".into()))?,
                body: None,
            },
            DeValue::String(body) => Action::Respond {
                status: status.unwrap_or(200),
                body: Some(body.to_string()),
            },
            _ => {
                return Err(err(
                    "expected a status (respond = 404) or a body text".into()
                ))
            }
        },
    };
    if status.is_some() && matches!(action, Action::Rewrite { .. }) {
        return Err((
            at,
            "status",
            "a rewrite has no status (it answers nothing itself)".into(),
        ));
    }
    if last && !matches!(action, Action::Rewrite { .. }) {
        return Err((at, "last", "last is for rewrites".into()));
    }
    Ok(Rule { line, when, action })
}

fn text<'v>(v: &'v DeValue<'_>) -> Result<&'v str, String> {
    match v {
        DeValue::String(s) => Ok(s),
        other => Err(format!("expected a string, got {}", other.type_str())),
    }
}

fn texts(v: &DeValue<'_>) -> Result<Vec<String>, String> {
    match v {
        DeValue::String(s) => Ok(vec![s.to_string()]),
        DeValue::Array(items) => items
            .iter()
            .map(|i| text(i.get_ref()).map(str::to_string))
            .collect(),
        other => Err(format!(
            "expected a string or a list, got {}",
            other.type_str()
        )),
    }
}

/// A token (RFC 9110 §5.6.2): what a method or a field name is made of.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Longest regex source accepted, and the compiled size bound: a pattern
/// like `(a{1000}){1000}` would otherwise compile to hundreds of MB per
/// worker (the regex crate's default limit is 10 MiB; 1 MiB fits any
/// URL pattern).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

fn pattern(source: &str) -> Result<Pattern, String> {
    let (negated, source) = match source.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, source),
    };
    let regex = regex::bytes::RegexBuilder::new(source)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("bad regex: {}", e.to_string().replace('\n', " ")))?;
    Ok(Pattern { regex, negated })
}

/// Parses a URL template, checking every reference against `when`'s regex.
fn template(source: &str, when: &Conditions) -> Result<Template, String> {
    if source.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("a URL has no spaces or control characters (write %20)".into());
    }
    let regex = when.path.as_ref().filter(|p| !p.negated).map(|p| &p.regex);
    parse_parts(source, regex)
}

/// Parses a template that may name variables only (a header rule's value).
pub fn parse_template(source: &str) -> Result<Template, String> {
    parse_parts(source, None)
}

fn parse_parts(source: &str, regex: Option<&Regex>) -> Result<Template, String> {
    let mut parts = Vec::new();
    for token in crate::dollar::tokens(source)? {
        let name = match token {
            crate::dollar::Token::Text(text) => {
                parts.push(Part::Text(text));
                continue;
            }
            crate::dollar::Token::Name(name) => name,
        };
        let part = if let Ok(n) = name.parse::<usize>() {
            let groups = regex.map_or(0, |r| r.captures_len() - 1);
            if n == 0 || n > groups {
                return Err(match regex {
                    None => format!("${n} refers to a capture, but the rule has no match regex"),
                    Some(_) => format!("${n}: the match regex has {groups} capture group(s)"),
                });
            }
            Part::Group(n)
        } else if let Some((_, var)) = Var::ALL.iter().find(|(v, _)| *v == name) {
            Part::Var(*var)
        } else if regex.is_some_and(|r| r.capture_names().flatten().any(|c| c == name)) {
            Part::Named(name.to_string())
        } else {
            let names: Vec<_> = Var::ALL.iter().map(|(n, _)| format!("${n}")).collect();
            return Err(format!(
                "${name} is neither a capture of the match regex nor a variable ({})",
                names.join(", ")
            ));
        };
        parts.push(part);
    }
    let query_at = parts
        .iter()
        .position(|p| matches!(p, Part::Text(t) if t.contains('?')));
    let carries_query = parts
        .iter()
        .any(|p| matches!(p, Part::Var(Var::Query | Var::RequestUri)));
    Ok(Template {
        parts,
        query_at,
        carries_query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(toml: &str) -> Result<Rule, String> {
        let doc = DeTable::parse(toml).map_err(|e| e.to_string())?;
        parse_rule(doc.get_ref(), 0, 1).map_err(|(_, key, m)| format!("{key}: {m}"))
    }

    #[test]
    fn templates_name_captures_and_variables() {
        let r = rule(
            "match = '^/p/(?P<slug>[a-z]+)/(\\d+)$'\nrewrite = '/index.php?p=$slug&n=$2&$query'",
        )
        .unwrap();
        let Action::Rewrite { to, last: false } = r.action else {
            panic!()
        };
        assert_eq!(
            to.parts,
            [
                Part::Text("/index.php?p=".into()),
                Part::Named("slug".into()),
                Part::Text("&n=".into()),
                Part::Group(2),
                Part::Text("&".into()),
                Part::Var(Var::Query),
            ]
        );
        assert_eq!((to.query_at, to.carries_query), (Some(0), true));
        let r = rule("match = '^/a'\nredirect = 'https://example.com$${1}x$request_uri'").unwrap();
        let Action::Redirect { to, status: 302 } = r.action else {
            panic!()
        };
        assert_eq!(to.parts[0], Part::Text("https://example.com${1}x".into()));
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (
                "match = '^/(a)'\nredirect = '/$2'",
                "redirect: $2: the match regex has 1 capture group(s)",
            ),
            (
                "redirect = '/$1'",
                "redirect: $1 refers to a capture, but the rule has no match regex",
            ),
            (
                "match = '^/'\nrewrite = '/$nope'",
                "rewrite: $nope is neither a capture",
            ),
            ("match = '^/(a'\nrespond = 404", "match: bad regex"),
            ("match = '^/'", "rule: a rule needs one action"),
            (
                "respond = 404\nredirect = '/'",
                "rule: a rule has one action only",
            ),
            (
                "redirect = '/'\nstatus = 200",
                "status: a redirect's status is",
            ),
            ("rewrite = 'x'", "rewrite: a rewrite's target is a path"),
            (
                "redirect_prefix = '/new/'",
                "redirect_prefix: redirect_prefix replaces",
            ),
            ("respond = 404\nlast = true", "last: last is for rewrites"),
            (
                "respond = 404\nfile = 'maybe'",
                "file: expected exists or missing",
            ),
            (
                "respond = 404\nmatchh = 'x'",
                "rule: unknown key \"matchh\"",
            ),
            ("redirect = '/a b'", "redirect: a URL has no spaces"),
            (
                "match = '(a{1000}){1000}'\nrespond = 404",
                "match: bad regex",
            ),
        ];
        for (toml, expected) in cases {
            let e = rule(toml).unwrap_err();
            assert!(e.starts_with(expected), "{toml:?}: {e}");
        }
    }

    #[test]
    fn negated_patterns() {
        let p = pattern("!^/api/").unwrap();
        assert!(p.holds(b"/web"));
        assert!(!p.holds(b"/api/x"));
    }
}
