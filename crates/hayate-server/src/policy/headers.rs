//! Header rules: `response_headers` in the response phase, on every answer
//! of the route (hayate's own errors too), and `request_headers` on what
//! goes to its upstream; `security_headers` is a preset of the first.
//!
//! Values are checked at load (no control characters) and again once their
//! variables are filled in: every variable is either hayate's own text or
//! bytes the request's parser let through (no CR, LF or NUL), and a value
//! that still came out with one is dropped with a warning, never sent.

use std::borrow::Cow;

use hayate_config::rules::{Part, Template, Var};
use hayate_config::values::{HeaderOp, HeaderRule, HeaderRules};
use hayate_core::field::strip_port;
use hayate_core::request::RequestHead;
use hayate_core::transport::Scheme;
use hayate_core::Response;

use super::{ResponsePolicy, ResponseRequest};

/// `security_headers = true`: what every site should send, each only where
/// the response has none of its own (HSTS comes with the route's `hsts`,
/// which the preset sets to a year over HTTPS).
const SECURITY_HEADERS: [(&str, &str); 3] = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "strict-origin-when-cross-origin"),
    // SAMEORIGIN rather than DENY: a site's own pages may frame each other.
    ("X-Frame-Options", "SAMEORIGIN"),
];

/// A route's header rules for one direction.
pub struct HeaderPolicy {
    rules: Vec<HeaderRule>,
    /// Each rule's value when it names no variable: sent as it is, with
    /// nothing to fill in per request.
    literals: Vec<Option<Vec<u8>>>,
}

impl HeaderPolicy {
    fn new(rules: Vec<HeaderRule>) -> HeaderPolicy {
        let literals = rules
            .iter()
            .map(|r| {
                let mut text = Vec::new();
                for part in &r.value.parts {
                    match part {
                        Part::Text(t) => text.extend_from_slice(t.as_bytes()),
                        _ => return None,
                    }
                }
                Some(text)
            })
            .collect();
        HeaderPolicy { rules, literals }
    }

    /// Rule `i`'s value for this request.
    fn value<'a>(&'a self, i: usize, head: &RequestHead, client_ip: &str) -> Option<Cow<'a, [u8]>> {
        match &self.literals[i] {
            Some(literal) => Some(Cow::Borrowed(literal)),
            None => render(&self.rules[i].value, head, client_ip).map(Cow::Owned),
        }
    }
}

impl HeaderPolicy {
    /// The response rules of a route: its `response_headers`, then the
    /// `security_headers` preset; `None` when it has neither.
    pub fn for_responses(rules: Option<&HeaderRules>, security: bool) -> Option<HeaderPolicy> {
        let mut all = rules.map_or_else(Vec::new, |r| r.0.clone());
        if security {
            all.extend(SECURITY_HEADERS.iter().map(|(name, value)| HeaderRule {
                op: HeaderOp::Default,
                name: name.to_string(),
                value: Template {
                    parts: vec![Part::Text(value.to_string())],
                    query_at: None,
                    carries_query: false,
                },
            }));
        }
        (!all.is_empty()).then(|| HeaderPolicy::new(all))
    }

    /// The request rules of a route (`request_headers`).
    pub fn for_requests(rules: Option<&HeaderRules>) -> Option<HeaderPolicy> {
        let rules = rules.map_or_else(Vec::new, |r| r.0.clone());
        (!rules.is_empty()).then(|| HeaderPolicy::new(rules))
    }

    /// Applies the rules to the fields of a request sent upstream.
    pub fn request_fields(&self, head: &RequestHead, client_ip: &str) -> RequestFieldChanges {
        let (mut removed, mut added) = (Vec::new(), Vec::<(Vec<u8>, Vec<u8>)>::new());
        for (i, rule) in self.rules.iter().enumerate() {
            let name = rule.name.as_bytes();
            let present = || {
                head.header(name).is_some()
                    && !removed
                        .iter()
                        .any(|r: &Vec<u8>| r.eq_ignore_ascii_case(name))
                    || added.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
            };
            let value = match rule.op {
                HeaderOp::Remove => None,
                HeaderOp::Default if present() => continue,
                _ => match self.value(i, head, client_ip) {
                    Some(v) => Some(v.into_owned()),
                    None => continue,
                },
            };
            if matches!(rule.op, HeaderOp::Set | HeaderOp::Remove) {
                removed.push(name.to_vec());
                added.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            }
            if let Some(value) = value {
                added.push((name.to_vec(), value));
            }
        }
        RequestFieldChanges { removed, added }
    }
}

/// What the request header rules change in a request sent upstream.
#[derive(Default)]
pub struct RequestFieldChanges {
    /// Names taken out of the client's fields.
    pub removed: Vec<Vec<u8>>,
    /// Fields added.
    pub added: Vec<(Vec<u8>, Vec<u8>)>,
}

impl ResponsePolicy for HeaderPolicy {
    fn respond(&self, response: &mut Response, request: &ResponseRequest<'_>) {
        for (i, rule) in self.rules.iter().enumerate() {
            let name = rule.name.as_bytes();
            let is_server = name.eq_ignore_ascii_case(b"server");
            match rule.op {
                HeaderOp::Remove => {
                    response.remove_field(name);
                    response.no_server |= is_server;
                    continue;
                }
                HeaderOp::Default if is_server || response.field(name).is_some() => continue,
                HeaderOp::Set => response.remove_field(name),
                HeaderOp::Add | HeaderOp::Default => {}
            }
            if let Some(value) = self.value(i, request.head, request.client_ip) {
                response.header(&rule.name, &value);
                response.no_server |= is_server;
            }
        }
    }
}

/// A value with its variables filled in; `None` (with a warning) when the
/// result could split the head.
fn render(template: &Template, head: &RequestHead, client_ip: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for part in &template.parts {
        match part {
            Part::Text(t) => out.extend_from_slice(t.as_bytes()),
            Part::Var(Var::ClientIp) => out.extend_from_slice(client_ip.as_bytes()),
            Part::Var(Var::Host) => {
                out.extend_from_slice(head.host().map(strip_port).unwrap_or_default())
            }
            Part::Var(Var::Scheme) => out.extend_from_slice(match head.scheme {
                Scheme::Https => b"https",
                Scheme::Http => b"http",
            }),
            Part::Var(Var::RequestUri) => out.extend_from_slice(head.original_target()),
            Part::Var(Var::Query) => out.extend_from_slice(head.query().unwrap_or_default()),
            Part::Var(Var::Path) => out.extend_from_slice(head.path()),
            // Only a rule's `match` has captures; values were refused
            // at load.
            Part::Group(_) | Part::Named(_) => {}
        }
    }
    if out.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
        log::warn!("a header rule's value came out with a control character; not sent");
        return None;
    }
    Some(out)
}
