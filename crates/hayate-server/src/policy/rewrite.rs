//! The rewrite phase: a site's rules (`[[site.rule]]`: redirect, rewrite,
//! respond), run in order on the normalized path before the request is
//! routed, so a rewrite can send it to another route.
//!
//! The first rule whose conditions all hold acts. A redirect or a respond
//! answers; a rewrite replaces the target and the rules run again from the
//! top on the new one (nginx's `rewrite ... last`), at most
//! [`MAX_REWRITES`] times, unless the rule says `last = true`.
//!
//! What a client sends never leaves through a template unescaped: captures
//! and `$path` come from the decoded, normalized path and are
//! percent-encoded for where they go (a path segment keeps `/`; a query
//! value escapes `&`, `=`, `+`, `#` too, so `/p/a%26admin=1` cannot add a
//! parameter), and the result is normalized and checked again like any
//! request's path (no `..` out of a root, whatever the rule built).

use hayate_config::rules::{Action, FileTest, Part, Rule, Template, Var};
use hayate_core::field::strip_port;
use hayate_core::request::RequestHead;
use hayate_core::transport::Scheme;
use hayate_core::{Response, Status};
use regex::bytes::{Captures, RegexSet};

/// Rewrites one request may go through. A rule whose result matches
/// itself again would loop forever; nginx stops at 10 too.
pub const MAX_REWRITES: usize = 10;

/// Longest URL a rule may build (a redirect's Location, a rewritten
/// target): 8 KiB, the longest request target hayate's own limits let in
/// by default.
pub const MAX_URL: usize = 8 * 1024;

/// A site's rules, in order.
pub struct SiteRules {
    rules: Vec<Rule>,
    /// Every rule's `match` regex in one set, matched once per pass: a
    /// request that no rule's regex matches pays one scan of its path,
    /// not one per rule (and captures are taken only for the rule that
    /// acts). `None` when no rule has one.
    regexes: Option<RegexSet>,
    /// For each rule, its regex's index in `regexes`.
    in_set: Vec<Option<usize>>,
}

/// What a rule needs beyond the head.
pub struct RuleRequest<'a> {
    /// The request as it came.
    pub head: &'a RequestHead,
    /// The client's address as identify decided it.
    pub client_ip: &'a str,
    /// Whether a file or directory is at a normalized path under the root
    /// of the route that path goes to (the `file` condition).
    pub file_exists: &'a dyn Fn(&[u8]) -> bool,
}

/// What the rules decided.
pub enum Rewritten {
    /// No rule acted.
    Unchanged,
    /// The request goes on with this target (path and query).
    Target(Vec<u8>),
    /// Answered (a redirect, a respond, or 500 for a rule that failed).
    Answer(Response),
}

impl SiteRules {
    /// The rules, or `None` for a site with none.
    pub fn new(rules: &[Rule]) -> Option<SiteRules> {
        if rules.is_empty() {
            return None;
        }
        let mut sources = Vec::new();
        let in_set = rules
            .iter()
            .map(|r| {
                let p = r.when.path.as_ref()?;
                sources.push(p.regex.as_str().to_string());
                Some(sources.len() - 1)
            })
            .collect();
        // Without the set (none of the rules has a regex, or together they
        // pass its size bound), each regex is matched on its own.
        let regexes = match sources.is_empty() {
            true => None,
            false => regex::bytes::RegexSetBuilder::new(&sources)
                .size_limit(16 << 20)
                .build()
                .ok(),
        };
        Some(SiteRules {
            rules: rules.to_vec(),
            regexes,
            in_set,
        })
    }

    /// Runs the rules on `req`.
    pub fn apply(&self, req: &RuleRequest<'_>) -> Rewritten {
        // The target the last rewrite made, and that rule's line.
        let mut rewritten: Option<(Vec<u8>, usize)> = None;
        for passes in 0.. {
            let target = rewritten.as_ref().map_or(req.head.target(), |(t, _)| t);
            let (raw_path, query) = split_target(target);
            let path = match hayate_core::path::normalize(raw_path) {
                Ok(p) => p,
                // The request's own: the pipeline answers it (400).
                Err(_) if rewritten.is_none() => return Rewritten::Unchanged,
                Err(e) => {
                    let line = rewritten.map_or(0, |(_, line)| line);
                    return failed(line, &format!("it made an unsafe path ({})", e.as_str()));
                }
            };
            let Some((rule, captures)) = self.first_match(&path, query, req) else {
                return match rewritten {
                    Some((target, _)) => Rewritten::Target(target),
                    None => Rewritten::Unchanged,
                };
            };
            let place = Place {
                req,
                path: &path,
                query,
                captures: captures.as_ref(),
            };
            match &rule.action {
                Action::Redirect { to, status } => {
                    return match place.render(to) {
                        Ok(location) => Rewritten::Answer(redirect(*status, &location)),
                        Err(why) => failed(rule.line, &why),
                    }
                }
                Action::RedirectPrefix { to, status } => {
                    let prefix = rule.when.prefix.as_deref().unwrap_or("/");
                    let rest = &raw_path[prefix.len().min(raw_path.len())..];
                    let mut location = to.as_bytes().to_vec();
                    if location.ends_with(b"/") && rest.starts_with(b"/") {
                        location.pop();
                    }
                    location.extend_from_slice(rest);
                    if let Some(q) = query {
                        location.push(b'?');
                        location.extend_from_slice(q);
                    }
                    return Rewritten::Answer(redirect(*status, &location));
                }
                Action::Respond { status, body } => {
                    return Rewritten::Answer(respond(*status, body))
                }
                Action::Rewrite { to, last } => {
                    if passes >= MAX_REWRITES {
                        return failed(
                            rule.line,
                            "the rules rewrote this request 10 times (a loop?)",
                        );
                    }
                    let target = match place.render(to) {
                        Ok(t) => t,
                        Err(why) => return failed(rule.line, &why),
                    };
                    if *last {
                        return match hayate_core::path::normalize(split_target(&target).0) {
                            Ok(_) => Rewritten::Target(target),
                            Err(e) => failed(
                                rule.line,
                                &format!("it made an unsafe path ({})", e.as_str()),
                            ),
                        };
                    }
                    rewritten = Some((target, rule.line));
                }
            }
        }
        unreachable!("the loop returns by MAX_REWRITES passes")
    }

    /// The first rule whose conditions hold, with its regex's captures.
    fn first_match<'p>(
        &self,
        path: &'p [u8],
        query: Option<&[u8]>,
        req: &RuleRequest<'_>,
    ) -> Option<(&Rule, Option<Captures<'p>>)> {
        let matched = self.regexes.as_ref().map(|set| set.matches(path));
        self.rules
            .iter()
            .zip(&self.in_set)
            .find_map(|(rule, in_set)| {
                let when = &rule.when;
                if let Some(prefix) = &when.prefix {
                    if !segment_prefix(prefix.as_bytes(), path) {
                        return None;
                    }
                }
                if !when.hosts.is_empty() {
                    let host = req.head.host().map(strip_port).unwrap_or_default();
                    if !when.hosts.iter().any(|h| host_matches(h, host)) {
                        return None;
                    }
                }
                if !when.methods.is_empty()
                    && !when
                        .methods
                        .iter()
                        .any(|m| m.as_bytes() == req.head.method())
                {
                    return None;
                }
                if let Some(scheme) = &when.scheme {
                    let is = match req.head.scheme {
                        Scheme::Https => "https",
                        Scheme::Http => "http",
                    };
                    if scheme != is {
                        return None;
                    }
                }
                if let Some(q) = &when.query {
                    if !q.holds(query.unwrap_or_default()) {
                        return None;
                    }
                }
                for (name, pattern) in &when.headers {
                    let holds = match req.head.header(name.as_bytes()) {
                        Some(value) => pattern.holds(value),
                        None => pattern.negated,
                    };
                    if !holds {
                        return None;
                    }
                }
                let captures = match &when.path {
                    None => None,
                    Some(p) => {
                        let hit = match (in_set, &matched) {
                            (Some(i), Some(m)) => m.matched(*i),
                            _ => p.regex.is_match(path),
                        };
                        if hit == p.negated {
                            return None;
                        }
                        match p.negated {
                            true => None,
                            false => Some(p.regex.captures(path)?),
                        }
                    }
                };
                if let Some(test) = when.file {
                    if (req.file_exists)(path) != (test == FileTest::Exists) {
                        return None;
                    }
                }
                Some((rule, captures))
            })
    }
}

/// Where a template is rendered: the request and what the rule matched.
struct Place<'a, 'p> {
    req: &'a RuleRequest<'a>,
    path: &'p [u8],
    query: Option<&'p [u8]>,
    captures: Option<&'p Captures<'p>>,
}

impl Place<'_, '_> {
    /// The template's URL; `Err` says why it cannot be made.
    fn render(&self, template: &Template) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(64);
        for (i, part) in template.parts.iter().enumerate() {
            let in_query = template.query_at.is_some_and(|q| i > q);
            let escape = |out: &mut Vec<u8>, bytes: &[u8]| match in_query {
                true => escape_component(out, bytes),
                false => out.extend_from_slice(hayate_core::path::encode(bytes).as_bytes()),
            };
            match part {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                Part::Group(n) => {
                    let c = self.captures.and_then(|c| c.get(*n));
                    escape(&mut out, c.map_or(&b""[..], |m| m.as_bytes()));
                }
                Part::Named(name) => {
                    let c = self.captures.and_then(|c| c.name(name));
                    escape(&mut out, c.map_or(&b""[..], |m| m.as_bytes()));
                }
                Part::Var(Var::Path) => escape(&mut out, self.path),
                Part::Var(Var::RequestUri) => out.extend_from_slice(self.req.head.target()),
                Part::Var(Var::Query) => out.extend_from_slice(self.query.unwrap_or_default()),
                Part::Var(Var::ClientIp) => out.extend_from_slice(self.req.client_ip.as_bytes()),
                Part::Var(Var::Scheme) => out.extend_from_slice(match self.req.head.scheme {
                    Scheme::Https => b"https",
                    Scheme::Http => b"http",
                }),
                Part::Var(Var::Host) => {
                    let host = self.req.head.host().map(strip_port).unwrap_or_default();
                    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"-.[]:".contains(b);
                    if host.is_empty() || !host.iter().all(plain) {
                        return Err("the request's host is missing or not a plain name".into());
                    }
                    out.extend(host.iter().map(u8::to_ascii_lowercase));
                }
            }
            if out.len() > MAX_URL {
                return Err(format!("it built a URL longer than {MAX_URL} bytes"));
            }
        }
        if template.query_at.is_none() && !template.carries_query {
            if let Some(q) = self.query {
                out.push(b'?');
                out.extend_from_slice(q);
            }
        }
        // A query that renders empty (`/x?`, nginx's way of dropping the
        // request's; `/x?$query` without one) leaves no `?` behind.
        if template.query_at.is_some() && out.last() == Some(&b'?') {
            out.pop();
        }
        if out.len() > MAX_URL {
            return Err(format!("it built a URL longer than {MAX_URL} bytes"));
        }
        // What the client sent was checked by its parser; this holds
        // whatever a template and a request combine into.
        if out.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err("it built a URL with a space or a control character".into());
        }
        Ok(out)
    }
}

/// Percent-encodes a query component: everything but RFC 3986's unreserved
/// characters.
fn escape_component(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// The path and the query (without `?`) of a target.
fn split_target(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    }
}

/// Segment-wise prefix: `/old` matches `/old` and `/old/x`, not `/older`.
fn segment_prefix(prefix: &[u8], path: &[u8]) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with(b"/") || path.len() == prefix.len() || path[prefix.len()] == b'/')
}

/// `pattern` is a lower-case name, or `*.example.com` for subdomains.
fn host_matches(pattern: &str, host: &[u8]) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
                && host[host.len() - suffix.len() - 1] == b'.'
        }
        None => host.eq_ignore_ascii_case(pattern.as_bytes()),
    }
}

fn redirect(status: u16, location: &[u8]) -> Response {
    let status = Status::any(status).unwrap_or(Status::FOUND);
    Response::error(status).with_header("Location", location)
}

fn respond(status: u16, body: &Option<String>) -> Response {
    let status = Status::any(status).unwrap_or(Status::NOT_FOUND);
    match body {
        None => Response::error(status),
        Some(text) => {
            let mut r = Response::new(status);
            r.header("Content-Type", b"text/plain; charset=utf-8");
            r.body = hayate_core::Body::Bytes(text.clone().into());
            r
        }
    }
}

/// 500 for a rule that could not do what it says, with the line to fix.
fn failed(line: usize, why: &str) -> Rewritten {
    log::error!("500: the rule at line {line} failed: {why}");
    Rewritten::Answer(Response::error(Status::INTERNAL_SERVER_ERROR))
}
