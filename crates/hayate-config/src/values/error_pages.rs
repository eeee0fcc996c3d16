//! The value type of `error_pages`.

use std::path::PathBuf;

use toml::de::DeValue;

use super::OptValue;

/// Which statuses a page is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMatch {
    /// One status (`404`).
    One(u16),
    /// A class (`"5xx"`: 500-599).
    Class(u16),
}

impl StatusMatch {
    /// Whether `status` is one of these.
    pub fn holds(self, status: u16) -> bool {
        match self {
            StatusMatch::One(s) => s == status,
            StatusMatch::Class(c) => status / 100 == c,
        }
    }
}

/// `error_pages = { 404 = "errors/404.html", "5xx" = "errors/50x.html" }`:
/// files answered instead of the built-in text of an error (a status wins
/// over a class, whatever the order); relative paths are relative to the
/// config file's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorPages(pub Vec<(StatusMatch, PathBuf)>);

impl ErrorPages {
    fn entry(key: &str, file: &str) -> Result<(StatusMatch, PathBuf), String> {
        let bad = || format!("expected a status 400-599 or a class 4xx/5xx, got {key:?}");
        let status = match key.strip_suffix("xx") {
            Some(class) => match class {
                "4" => StatusMatch::Class(4),
                "5" => StatusMatch::Class(5),
                _ => return Err(bad()),
            },
            None => StatusMatch::One(
                key.parse::<u16>()
                    .ok()
                    .filter(|s| (400..=599).contains(s))
                    .ok_or_else(bad)?,
            ),
        };
        if file.trim().is_empty() {
            return Err(format!("{key}: expected a file"));
        }
        Ok((status, PathBuf::from(file)))
    }

    /// The page for `status`: its own first, else its class's.
    pub fn page_for(&self, status: u16) -> Option<&PathBuf> {
        let find = |one: bool| {
            self.0
                .iter()
                .find(|(m, _)| matches!(m, StatusMatch::One(_)) == one && m.holds(status))
        };
        find(true).or_else(|| find(false)).map(|(_, p)| p)
    }
}

impl OptValue for ErrorPages {
    const REPEATED: bool = true;

    /// `STATUS=FILE` (on the command line, one per flag).
    fn parse_str(s: &str) -> Result<Self, String> {
        let mut pages = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, file) = item.split_once('=').ok_or_else(|| {
                format!("expected STATUS=FILE (404=errors/404.html), got {item:?}")
            })?;
            pages.push(ErrorPages::entry(key.trim(), file.trim())?);
        }
        Ok(ErrorPages(pages))
    }

    fn parse_many(values: &[String]) -> Result<Self, String> {
        Self::parse_str(&values.join(","))
    }

    fn parse_toml(v: &DeValue<'_>) -> Result<Self, String> {
        let DeValue::Table(table) = v else {
            return Err(
                "expected a table, as { 404 = \"errors/404.html\", \"5xx\" = \"errors/50x.html\" }"
                    .into(),
            );
        };
        let mut pages = Vec::new();
        for (key, value) in table {
            let DeValue::String(file) = value.get_ref() else {
                return Err(format!("{}: expected a file", key.get_ref()));
            };
            pages.push(ErrorPages::entry(key.get_ref(), file)?);
        }
        Ok(ErrorPages(pages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_wins_over_its_class() {
        let p = ErrorPages::parse_str("5xx=50x.html, 503=busy.html, 404=404.html").unwrap();
        assert_eq!(p.page_for(503), Some(&PathBuf::from("busy.html")));
        assert_eq!(p.page_for(502), Some(&PathBuf::from("50x.html")));
        assert_eq!(p.page_for(404), Some(&PathBuf::from("404.html")));
        assert_eq!(p.page_for(403), None);
        for bad in ["3xx=a", "200=a", "404", "404=", "4x=a"] {
            assert!(ErrorPages::parse_str(bad).is_err(), "{bad}");
        }
    }
}
