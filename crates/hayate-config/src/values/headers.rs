//! The value types of header rules (`response_headers`, `request_headers`)
//! and of `cors`.

use toml::de::DeValue;

use super::OptValue;
use crate::rules::{parse_template, Template};

/// What a header rule does to its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderOp {
    /// `Name = "v"`: replaces every value of the field with this one.
    Set,
    /// `+Name = "v"`: adds a value, keeping the others.
    Add,
    /// `-Name = ""`: removes the field.
    Remove,
    /// `?Name = "v"`: sets the field only where the message has none.
    Default,
}

/// One header rule.
#[derive(Debug, Clone)]
pub struct HeaderRule {
    /// What it does.
    pub op: HeaderOp,
    /// The field's name as written.
    pub name: String,
    /// Its value, with variables (`$client_ip`, `$host`, `$scheme`,
    /// `$request_uri`, `$query`, `$path`); empty for [`HeaderOp::Remove`].
    pub value: Template,
}

/// Header rules in order (`response_headers = { "X-Frame-Options" =
/// "DENY", "-Server" = "", "+Link" = "...", "?Cache-Control" = "no-cache" }`;
/// on the command line one `Name: value`, `+Name: value`, `?Name: value`
/// or `-Name` per flag). A route's rules come after its site's, which come
/// after the top level's (nginx's `add_header` in a location drops the
/// server's; here they add up, and `-Name` undoes a parent's).
#[derive(Debug, Clone, Default)]
pub struct HeaderRules(pub Vec<HeaderRule>);

impl HeaderRules {
    /// `parent`'s rules, then these.
    pub fn after(&self, parent: &HeaderRules) -> HeaderRules {
        HeaderRules(parent.0.iter().chain(&self.0).cloned().collect())
    }

    fn rule(key: &str, value: &str) -> Result<HeaderRule, String> {
        let (op, name) = match key.as_bytes().first() {
            Some(b'+') => (HeaderOp::Add, &key[1..]),
            Some(b'-') => (HeaderOp::Remove, &key[1..]),
            Some(b'?') => (HeaderOp::Default, &key[1..]),
            _ => (HeaderOp::Set, key),
        };
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(format!("{name:?} is not a header field name"));
        }
        let framing = [
            "content-length",
            "transfer-encoding",
            "connection",
            "content-encoding",
        ];
        if framing.iter().any(|f| f.eq_ignore_ascii_case(name)) {
            return Err(format!(
                "{name} is set by hayate from the message itself; a rule cannot change it"
            ));
        }
        if op == HeaderOp::Remove && !value.is_empty() {
            return Err(format!("-{name} removes the field: give it an empty value"));
        }
        if value.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err(format!(
                "the value of {name} has a control character (CR, LF, NUL...)"
            ));
        }
        let value = parse_template(value).map_err(|e| format!("{name}: {e}"))?;
        Ok(HeaderRule {
            op,
            name: name.to_string(),
            value,
        })
    }
}

impl OptValue for HeaderRules {
    const REPEATED: bool = true;

    fn parse_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(HeaderRules::default());
        }
        let (key, value) = match s.split_once(':') {
            Some((k, v)) => (k.trim(), v.trim()),
            None if s.starts_with('-') => (s, ""),
            None => {
                return Err(format!(
                    "expected \"Name: value\" (or -Name to remove), got {s:?}"
                ))
            }
        };
        Ok(HeaderRules(vec![HeaderRules::rule(key, value)?]))
    }

    fn parse_many(values: &[String]) -> Result<Self, String> {
        let mut all = HeaderRules::default();
        for v in values {
            all.0.extend(HeaderRules::parse_str(v)?.0);
        }
        Ok(all)
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        let DeValue::Table(table) = v else {
            return Err(
                "expected a table, as { \"X-Frame-Options\" = \"DENY\", \"-Server\" = \"\" }"
                    .into(),
            );
        };
        // In the order written (the table itself is sorted by key).
        let mut entries: Vec<_> = table.iter().collect();
        entries.sort_by_key(|(key, _)| key.span().start);
        let mut rules = Vec::new();
        for (key, value) in entries {
            let text = match value.get_ref() {
                DeValue::String(s) => s.to_string(),
                DeValue::Integer(i) => i.as_str().to_string(),
                other => {
                    return Err(format!(
                        "{}: expected a string, got {}",
                        key.get_ref(),
                        other.type_str()
                    ))
                }
            };
            rules.push(HeaderRules::rule(key.get_ref(), &text)?);
        }
        Ok(HeaderRules(rules))
    }
}

/// `cors`: the origins whose pages may read this route's answers (`*` for
/// any; `off`, the default, answers no preflight and adds nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorsOrigins(pub Vec<String>);

impl OptValue for CorsOrigins {
    const REPEATED: bool = true;

    fn parse_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for origin in s.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            if origin == "off" {
                continue;
            }
            let valid = origin == "*"
                || ["https://", "http://"].iter().any(|scheme| {
                    origin.strip_prefix(scheme).is_some_and(|rest| {
                        !rest.is_empty()
                            && !rest.ends_with('/')
                            && rest
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]*".contains(&b))
                    })
                });
            if !valid {
                return Err(format!(
                    "expected origins like https://app.example.com (scheme, host, port; no path) or *, got {origin:?}"
                ));
            }
            out.push(origin.to_ascii_lowercase());
        }
        Ok(CorsOrigins(out))
    }

    fn parse_many(values: &[String]) -> Result<Self, String> {
        Self::parse_str(&values.join(","))
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        match v {
            DeValue::Array(items) => {
                let mut all = Vec::new();
                for i in items {
                    match i.get_ref() {
                        DeValue::String(s) => all.extend(Self::parse_str(s)?.0),
                        _ => return Err("expected origin strings".into()),
                    }
                }
                Ok(CorsOrigins(all))
            }
            DeValue::String(s) => Self::parse_str(s),
            other => Err(format!(
                "expected a list of origins, got {}",
                other.type_str()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_rules_from_a_table_and_from_flags() {
        let doc = toml::de::DeTable::parse(
            "h = { \"X-Frame-Options\" = \"DENY\", \"-Server\" = \"\", \"+Link\" = \"</a>; rel=preload\", \"?Cache-Control\" = \"no-cache\", \"X-Real-IP\" = \"$client_ip\" }",
        )
        .unwrap();
        let (_, v) = doc.get_ref().iter().next().unwrap();
        let rules = HeaderRules::parse_toml(v.get_ref()).unwrap().0;
        let ops: Vec<_> = rules.iter().map(|r| (r.op, r.name.as_str())).collect();
        assert_eq!(
            ops,
            [
                (HeaderOp::Set, "X-Frame-Options"),
                (HeaderOp::Remove, "Server"),
                (HeaderOp::Add, "Link"),
                (HeaderOp::Default, "Cache-Control"),
                (HeaderOp::Set, "X-Real-IP"),
            ]
        );
        let flags = [
            "X-A: 1".to_string(),
            "-Server".to_string(),
            "+Vary: Origin".to_string(),
        ];
        assert_eq!(HeaderRules::parse_many(&flags).unwrap().0.len(), 3);
        for bad in [
            "X A: 1",
            "-Server: x",
            "Content-Length: 1",
            "X-A: $nope",
            "no colon",
        ] {
            assert!(HeaderRules::parse_str(bad).is_err(), "{bad}");
        }
        assert!(HeaderRules::rule("X-A", "a\r\nSet-Cookie: x").is_err());
    }

    #[test]
    fn cors_origins() {
        let o = CorsOrigins::parse_str("https://a.example, http://localhost:3000").unwrap();
        assert_eq!(o.0, ["https://a.example", "http://localhost:3000"]);
        assert_eq!(CorsOrigins::parse_str("*").unwrap().0, ["*"]);
        assert!(CorsOrigins::parse_str("off").unwrap().0.is_empty());
        for bad in [
            "a.example",
            "https://a.example/",
            "https://a.example/path",
            "ftp://x",
        ] {
            assert!(CorsOrigins::parse_str(bad).is_err(), "{bad}");
        }
    }
}
