//! The hayate config an import builds, and its TOML text. Kept as ordered
//! keys (not a TOML library's table) so the output reads in the order of
//! the nginx file, each section with a comment naming where it came from.

/// A TOML value of the keys an import writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// true or false.
    Bool(bool),
    /// A list of strings.
    List(Vec<String>),
    /// An inline table of strings (`response_headers`, `error_pages`).
    Map(Vec<(String, String)>),
}

/// Keys in the order they were first set; a later set replaces the value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Keys(pub Vec<(String, Value)>);

impl Keys {
    /// Sets `key`, replacing an earlier value.
    pub fn set(&mut self, key: &str, value: Value) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.into(), value)),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Appends to the list at `key` (made when missing).
    pub fn push(&mut self, key: &str, item: String) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, Value::List(list))) => {
                if !list.contains(&item) {
                    list.push(item)
                }
            }
            _ => self.set(key, Value::List(vec![item])),
        }
    }

    /// Sets `name` in the inline table at `key` (made when missing).
    pub fn insert(&mut self, key: &str, name: String, value: String) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, Value::Map(map))) => match map.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => map.push((name, value)),
            },
            _ => self.set(key, Value::Map(vec![(name, value)])),
        }
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }
}

/// A `[[site.route]]`.
#[derive(Debug, Clone, Default)]
pub struct Route {
    /// Where the nginx location was (`file:line`).
    pub from: String,
    /// Its path prefix.
    pub prefix: String,
    /// Its options.
    pub keys: Keys,
}

/// A `[[site]]`.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// Where the nginx server block was.
    pub from: String,
    /// Its names; none for the default site.
    pub hosts: Vec<String>,
    /// Site-wide options.
    pub keys: Keys,
    /// `[[site.rule]]`s, each with where it came from.
    pub rules: Vec<(String, Keys)>,
    /// `[[site.route]]`s.
    pub routes: Vec<Route>,
    /// The scheme every listener of its server block has (`http` or
    /// `https`; none when it has both): when two blocks of the same names
    /// become one site, each one's own rules keep to its scheme. Not
    /// written.
    pub scheme: Option<&'static str>,
}

/// An `[[upstream]]` group.
#[derive(Debug, Clone, Default)]
pub struct Upstream {
    /// Where the nginx upstream block was.
    pub from: String,
    /// Its name.
    pub name: String,
    /// `URL [weight=N]` members.
    pub members: Vec<String>,
}

/// A whole hayate config.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Global options and route defaults (the top level).
    pub top: Keys,
    /// Named groups.
    pub upstreams: Vec<Upstream>,
    /// Sites, in the order of the server blocks.
    pub sites: Vec<Site>,
}

impl Config {
    /// The TOML text, with `header` as a comment at the top.
    pub fn to_toml(&self, header: &str) -> String {
        let mut out = String::new();
        for line in header.lines() {
            out.push_str(&format!("# {line}\n"));
        }
        write_keys(&mut out, &self.top);
        for u in &self.upstreams {
            out.push_str(&format!("\n[[upstream]]                # {}\n", u.from));
            out.push_str(&format!("name = {}\n", string(&u.name)));
            let members = Value::List(u.members.clone());
            out.push_str(&format!("members = {}\n", value(&members)));
        }
        for site in &self.sites {
            out.push_str(&format!("\n[[site]]                    # {}\n", site.from));
            if !site.hosts.is_empty() {
                out.push_str(&format!(
                    "hosts = {}\n",
                    value(&Value::List(site.hosts.clone()))
                ));
            }
            write_keys(&mut out, &site.keys);
            for (from, rule) in &site.rules {
                out.push_str(&format!("\n[[site.rule]]               # {from}\n"));
                write_keys(&mut out, rule);
            }
            for route in &site.routes {
                out.push_str(&format!("\n[[site.route]]              # {}\n", route.from));
                out.push_str(&format!("prefix = {}\n", string(&route.prefix)));
                write_keys(&mut out, &route.keys);
            }
        }
        out
    }
}

fn write_keys(out: &mut String, keys: &Keys) {
    for (k, v) in &keys.0 {
        out.push_str(&format!("{k} = {}\n", value(v)));
    }
}

fn value(v: &Value) -> String {
    match v {
        Value::Str(s) => string(s),
        Value::Int(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::List(items) => {
            let items: Vec<String> = items.iter().map(|s| string(s)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(pairs) => {
            let pairs: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{} = {}", string(k), string(v)))
                .collect();
            format!("{{ {} }}", pairs.join(", "))
        }
    }
}

/// A TOML basic string: `"` and `\` escaped, control characters as \uXXXX.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_in_order_with_escaped_strings() {
        let mut config = Config::default();
        config.top.push("listen", "0.0.0.0:80".into());
        let mut site = Site {
            from: "a.conf:3".into(),
            hosts: vec!["example.com".into()],
            ..Default::default()
        };
        site.keys.set("root", Value::Str("/srv/a \"b\"".into()));
        let mut rule = Keys::default();
        rule.set("match", Value::Str("^/(\\d+)$".into()));
        rule.set("status", Value::Int(301));
        site.rules.push(("a.conf:5".into(), rule));
        site.routes.push(Route {
            from: "a.conf:7".into(),
            prefix: "/x/".into(),
            keys: Keys(vec![(
                "response_headers".into(),
                Value::Map(vec![("X-A".into(), "1".into())]),
            )]),
        });
        config.sites.push(site);
        let text = config.to_toml("imported");
        assert_eq!(
            text,
            "# imported\nlisten = [\"0.0.0.0:80\"]\n\n[[site]]                    # a.conf:3\n\
             hosts = [\"example.com\"]\nroot = \"/srv/a \\\"b\\\"\"\n\n\
             [[site.rule]]               # a.conf:5\nmatch = \"^/(\\\\d+)$\"\nstatus = 301\n\n\
             [[site.route]]              # a.conf:7\nprefix = \"/x/\"\n\
             response_headers = { \"X-A\" = \"1\" }\n"
        );
    }
}
