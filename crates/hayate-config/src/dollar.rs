//! The `$name` syntax that rule templates (`rules.rs`) and access log
//! templates (`values/log_format.rs`) share: `$name` (letters, digits and
//! `_`; `$1` is one digit, so `$12` is `$1` then "2", as nginx reads it),
//! `${name}` next to other letters, and `$$` for a dollar sign. Each caller
//! decides what a name means.

/// A piece of a template: text as written, or a name to resolve.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Token<'a> {
    /// Text, `$$` already made `$`.
    Text(String),
    /// What follows a `$`.
    Name(&'a str),
}

/// Splits `source` into text and names, in order (no empty text).
pub(crate) fn tokens(source: &str) -> Result<Vec<Token<'_>>, String> {
    let mut out = Vec::new();
    let mut literal = String::new();
    let mut rest = source;
    while let Some(at) = rest.find('$') {
        literal.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            literal.push('$');
            rest = after;
            continue;
        }
        let (name, after) = match rest.strip_prefix('{') {
            Some(braced) => {
                let end = braced.find('}').ok_or("a ${ without its }")?;
                (&braced[..end], &braced[end + 1..])
            }
            None => {
                let end = if rest.starts_with(|c: char| c.is_ascii_digit()) {
                    1
                } else {
                    rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len())
                };
                (&rest[..end], &rest[end..])
            }
        };
        if name.is_empty() {
            return Err("a $ names nothing (write $$ for a dollar sign)".into());
        }
        if !literal.is_empty() {
            out.push(Token::Text(std::mem::take(&mut literal)));
        }
        out.push(Token::Name(name));
        rest = after;
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        out.push(Token::Text(literal));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_text_and_dollars() {
        assert_eq!(
            tokens("a$x-${y}z$$ $12").unwrap(),
            vec![
                Token::Text("a".into()),
                Token::Name("x"),
                Token::Text("-".into()),
                Token::Name("y"),
                Token::Text("z$ ".into()),
                Token::Name("1"),
                Token::Text("2".into()),
            ]
        );
        assert!(tokens("${x").unwrap_err().contains("without its }"));
        assert!(tokens("a $ b").unwrap_err().contains("names nothing"));
    }
}
