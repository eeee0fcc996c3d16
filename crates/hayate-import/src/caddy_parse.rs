//! The Caddyfile's syntax, as Caddy's own lexer and parser read it
//! (caddyconfig/caddyfile): whitespace-separated tokens, `"..."` with `\"`
//! escapes, `` `...` `` raw, `<<END` heredocs, `#` comments at a token's
//! start, `{$ENV}` and `{$ENV:default}` replaced before anything else; a
//! directive is the tokens of one line, with a block when the line ends in
//! `{`. At the top: an optional global options block (`{` alone first),
//! snippets `(name) { ... }`, and site blocks (addresses, then a block; a
//! lone site may leave its braces out). `import` is expanded in place: a
//! snippet defined before it (with `{args[N]}`/`{args[:]}`), else files
//! (a glob, relative to the importing file's directory).
//!
//! Hand-written, as the nginx parser is (decision 0025): no Rust crate
//! parses the Caddyfile.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use crate::nginx_parse::Directive;
use crate::report::{ParseError, Pos};

/// Imports nested deeper than this are a loop (Caddy stops at the same
/// kind of cycle; real files nest 1-2).
const MAX_IMPORT_DEPTH: usize = 16;

/// A parsed Caddyfile.
#[derive(Debug, Default)]
pub struct Caddyfile {
    /// The global options block.
    pub global: Vec<Directive>,
    /// The site blocks, in order.
    pub sites: Vec<SiteBlock>,
}

/// One site block.
#[derive(Debug)]
pub struct SiteBlock {
    /// Its addresses (`example.com`, `:8080`, `http://a.test:81`).
    pub addresses: Vec<String>,
    /// Its directives (named matchers included: `@name`).
    pub body: Vec<Directive>,
    /// Where its first address was written.
    pub pos: Pos,
}

#[derive(Debug, Clone)]
struct Token {
    text: String,
    quoted: bool,
    pos: Pos,
    /// The line its text ends on (a quoted token may span lines).
    end_line: usize,
    /// How many imports deep it came from.
    depth: usize,
}

impl Token {
    fn is(&self, s: &str) -> bool {
        !self.quoted && self.text == s
    }

    /// Whether `next` starts a new line after this token.
    fn line_ends_before(&self, next: &Token) -> bool {
        next.pos.file != self.pos.file || next.pos.line != self.end_line
    }
}

fn error(pos: &Pos, message: impl Into<String>) -> ParseError {
    ParseError {
        pos: pos.clone(),
        message: message.into(),
    }
}

/// Reads the Caddyfile `file` and what it imports.
pub fn parse_file(file: &Path) -> Result<Caddyfile, ParseError> {
    let tokens = lex_file(file, 0)?;
    let tokens = expand(tokens)?;
    structure(tokens)
}

/// Parses text as if it were the file `name` (imported files are looked
/// for beside `name`).
pub fn parse_str(text: &str, name: &Path) -> Result<Caddyfile, ParseError> {
    let tokens = lex(&replace_env(text), name, 0)?;
    structure(expand(tokens)?)
}

fn lex_file(file: &Path, depth: usize) -> Result<Vec<Token>, ParseError> {
    let text = std::fs::read(file).map_err(|e| {
        error(
            &Pos {
                file: file.into(),
                line: 0,
                col: 0,
            },
            e.to_string(),
        )
    })?;
    lex(&replace_env(&String::from_utf8_lossy(&text)), file, depth)
}

/// `{$NAME}` and `{$NAME:default}` replaced by the environment, as Caddy
/// does before it lexes (an unset variable without a default is empty).
fn replace_env(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{$") {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let inner = &rest[start + 2..start + len];
        let (name, default) = match inner.split_once(':') {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        out.push_str(&rest[..start]);
        if name.is_empty() || name.contains(char::is_whitespace) {
            out.push_str(&rest[start..start + len + 1]);
        } else {
            match (std::env::var(name), default) {
                (Ok(v), _) if !v.is_empty() => out.push_str(&v),
                (_, Some(d)) => out.push_str(d),
                _ => {}
            }
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

fn lex(text: &str, file: &Path, depth: usize) -> Result<Vec<Token>, ParseError> {
    let mut lexer = Lexer {
        chars: text.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
    };
    let mut tokens = Vec::new();
    loop {
        // Whitespace and comments between tokens.
        while let Some(c) = lexer.peek() {
            if c.is_whitespace() {
                lexer.bump();
            } else if c == '#' {
                while lexer.peek().is_some_and(|c| c != '\n') {
                    lexer.bump();
                }
            } else {
                break;
            }
        }
        let Some(first) = lexer.peek() else {
            return Ok(tokens);
        };
        let pos = Pos {
            file: file.into(),
            line: lexer.line,
            col: lexer.col,
        };
        let mut text = String::new();
        let mut quoted = false;
        if first == '"' || first == '`' {
            quoted = true;
            lexer.bump();
            loop {
                let Some(c) = lexer.bump() else {
                    return Err(error(&pos, format!("unclosed {first}")));
                };
                if c == first {
                    break;
                }
                if first == '"' && c == '\\' && lexer.peek() == Some('"') {
                    lexer.bump();
                    text.push('"');
                } else {
                    text.push(c);
                }
            }
        } else {
            while let Some(c) = lexer.peek() {
                if c.is_whitespace() {
                    break;
                }
                lexer.bump();
                text.push(c);
            }
            if let Some(marker) = text.strip_prefix("<<") {
                if !marker.is_empty()
                    && marker
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    let marker = marker.to_string();
                    text = lexer.heredoc(&marker, &pos)?;
                    quoted = true;
                }
            }
        }
        // A quoted token (or heredoc) ends where its closing mark was; an
        // unquoted one where it started.
        let end_line = if quoted { lexer.line } else { pos.line };
        tokens.push(Token {
            text,
            quoted,
            pos,
            end_line,
            depth,
        });
    }
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
}

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    /// The lines of a heredoc up to the one starting with `marker` (more
    /// tokens may follow it on that line), each with that line's
    /// indentation removed (Caddy's rule).
    fn heredoc(&mut self, marker: &str, pos: &Pos) -> Result<String, ParseError> {
        // The rest of the opening line must be empty.
        while let Some(c) = self.bump() {
            if c == '\n' {
                break;
            }
            if !c.is_whitespace() {
                return Err(error(pos, "text after a heredoc's opening marker"));
            }
        }
        let marker: Vec<char> = marker.chars().collect();
        let mut lines: Vec<String> = Vec::new();
        loop {
            let start = self.i;
            let mut indent = 0;
            while matches!(self.chars.get(start + indent), Some(' ' | '\t')) {
                indent += 1;
            }
            let at = start + indent;
            let closes = self.chars.get(at..at + marker.len()) == Some(&marker[..])
                && self
                    .chars
                    .get(at + marker.len())
                    .is_none_or(|c| c.is_whitespace());
            if closes {
                let indent: String = self.chars[start..at].iter().collect();
                for _ in 0..indent.chars().count() + marker.len() {
                    self.bump();
                }
                let body: Vec<&str> = lines
                    .iter()
                    .map(|l| l.strip_prefix(indent.as_str()).unwrap_or(l))
                    .collect();
                return Ok(body.join("\n"));
            }
            if self.peek().is_none() {
                return Err(error(
                    pos,
                    format!(
                        "heredoc without its closing {}",
                        marker.iter().collect::<String>()
                    ),
                ));
            }
            let mut current = String::new();
            while let Some(c) = self.bump() {
                if c == '\n' {
                    break;
                }
                current.push(c);
            }
            lines.push(current);
        }
    }
}

/// Snippets defined, and `import`s replaced by what they name.
fn expand(tokens: Vec<Token>) -> Result<Vec<Token>, ParseError> {
    let mut input: VecDeque<Token> = tokens.into();
    let mut out: Vec<Token> = Vec::with_capacity(input.len());
    let mut snippets: Vec<(String, Vec<Token>)> = Vec::new();
    let mut nesting = 0usize;
    while let Some(token) = input.pop_front() {
        let starts_line = out.last().is_none_or(|p| p.line_ends_before(&token));
        // `(name) {` at the top: a snippet, kept aside.
        if nesting == 0
            && starts_line
            && !token.quoted
            && token.text.len() > 2
            && token.text.starts_with('(')
            && token.text.ends_with(')')
        {
            let name = token.text[1..token.text.len() - 1].to_string();
            match input.pop_front() {
                Some(open) if open.is("{") && !token.line_ends_before(&open) => {}
                _ => return Err(error(&token.pos, format!("snippet {name}: {{ expected"))),
            }
            let mut body = Vec::new();
            let mut depth = 1;
            loop {
                let Some(t) = input.pop_front() else {
                    return Err(error(&token.pos, format!("snippet {name}: unclosed {{")));
                };
                if t.is("{") {
                    depth += 1;
                } else if t.is("}") {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                body.push(t);
            }
            snippets.retain(|(n, _)| *n != name);
            snippets.push((name, body));
            continue;
        }
        if starts_line && token.is("import") {
            let mut args = Vec::new();
            let mut last = token.clone();
            while input.front().is_some_and(|t| !last.line_ends_before(t)) {
                last = input.pop_front().expect("peeked");
                args.push(last.text.clone());
            }
            let Some(what) = args.first().cloned() else {
                return Err(error(&token.pos, "import: name a snippet or a file"));
            };
            if token.depth >= MAX_IMPORT_DEPTH {
                return Err(error(
                    &token.pos,
                    format!("import {what}: nested more than {MAX_IMPORT_DEPTH} deep (a cycle?)"),
                ));
            }
            let imported = match snippets.iter().find(|(n, _)| *n == what) {
                Some((_, body)) => with_args(body, &args[1..], token.depth + 1),
                None => import_files(&token, &what)?,
            };
            for t in imported.into_iter().rev() {
                input.push_front(t);
            }
            continue;
        }
        if token.is("{") {
            nesting += 1;
        } else if token.is("}") {
            nesting = nesting.saturating_sub(1);
        }
        out.push(token);
    }
    Ok(out)
}

/// A snippet's tokens with `{args[N]}`, `{args[:]}`, `{args[N:]}` and the
/// older `{args.N}` replaced.
fn with_args(body: &[Token], args: &[String], depth: usize) -> Vec<Token> {
    let mut out = Vec::with_capacity(body.len());
    for t in body {
        let mut t = t.clone();
        t.depth = depth;
        if let Some(from) = t
            .text
            .strip_prefix("{args[")
            .and_then(|r| r.strip_suffix(":]}"))
        {
            let from = if from.is_empty() {
                Some(0)
            } else {
                from.parse().ok()
            };
            if let Some(from) = from {
                for a in args.iter().skip(from) {
                    let mut each = t.clone();
                    each.text = a.clone();
                    out.push(each);
                }
                continue;
            }
        }
        for (i, a) in args.iter().enumerate() {
            t.text = t
                .text
                .replace(&format!("{{args[{i}]}}"), a)
                .replace(&format!("{{args.{i}}}"), a);
        }
        out.push(t);
    }
    out
}

/// The tokens of the files `pattern` names (a glob, relative to the
/// importing file's directory), in name order; a glob matching nothing
/// imports nothing, as Caddy's does, but a plain name must exist.
fn import_files(at: &Token, pattern: &str) -> Result<Vec<Token>, ParseError> {
    let base = at.pos.file.parent().unwrap_or(Path::new(""));
    let path = if Path::new(pattern).is_absolute() {
        PathBuf::from(pattern)
    } else {
        base.join(pattern)
    };
    let files = if pattern.contains(['*', '?', '[']) {
        crate::nginx_parse::glob(&path)
    } else {
        if !path.is_file() {
            return Err(error(
                &at.pos,
                format!("import {pattern}: no snippet of that name defined before, and no file"),
            ));
        }
        vec![path]
    };
    let mut out = Vec::new();
    for f in files {
        out.extend(lex_file(&f, at.depth + 1)?);
    }
    Ok(out)
}

/// Tokens (imports expanded) into the global block and site blocks.
fn structure(tokens: Vec<Token>) -> Result<Caddyfile, ParseError> {
    let mut p = Lines {
        tokens: tokens.into(),
        last: None,
    };
    let mut file = Caddyfile::default();
    let mut first = true;
    while let Some(line) = p.line() {
        if first && line.len() == 1 && line[0].is("{") {
            file.global = p.block(&line[0].pos)?;
            first = false;
            continue;
        }
        first = false;
        let pos = line[0].pos.clone();
        let mut addresses: Vec<String> = Vec::new();
        let mut line = line;
        loop {
            let opens = line.last().is_some_and(|t| t.is("{"));
            let words = if opens {
                &line[..line.len() - 1]
            } else {
                &line[..]
            };
            for w in words {
                if w.is("}") {
                    return Err(error(&w.pos, "} without a block to close"));
                }
                addresses.extend(
                    w.text
                        .split(',')
                        .map(str::trim)
                        .filter(|a| !a.is_empty())
                        .map(String::from),
                );
            }
            if opens {
                let brace = line.last().expect("opens").pos.clone();
                let body = p.block(&brace)?;
                file.sites.push(SiteBlock {
                    addresses,
                    body,
                    pos,
                });
                break;
            }
            // Addresses go on to the next line after a trailing comma.
            if line.last().is_some_and(|t| t.text.ends_with(',')) {
                match p.line() {
                    Some(next) => line = next,
                    None => return Err(error(&pos, "site addresses without a block")),
                }
                continue;
            }
            // One site without braces: the rest of the file is its body.
            if !file.sites.is_empty() {
                return Err(error(
                    &pos,
                    "a site block without { }: only a Caddyfile's one site may leave them out",
                ));
            }
            let body = p.body(None)?;
            file.sites.push(SiteBlock {
                addresses,
                body,
                pos,
            });
            if let Some(t) = p.tokens.front() {
                return Err(error(&t.pos, "more site blocks after one without { }"));
            }
            break;
        }
    }
    Ok(file)
}

struct Lines {
    tokens: VecDeque<Token>,
    last: Option<Token>,
}

impl Lines {
    /// The tokens of the next line.
    fn line(&mut self) -> Option<Vec<Token>> {
        let first = self.tokens.pop_front()?;
        let mut line = vec![first];
        while let Some(next) = self.tokens.front() {
            if line.last().expect("one").line_ends_before(next) {
                break;
            }
            line.push(self.tokens.pop_front().expect("peeked"));
        }
        self.last = line.last().cloned();
        Some(line)
    }

    /// A block's directives up to its `}`, the block's `{` at `open`.
    fn block(&mut self, open: &Pos) -> Result<Vec<Directive>, ParseError> {
        self.body(Some(open))
    }

    /// Directives up to the `}` closing the block opened at `open`, or to
    /// the end when `open` is None.
    fn body(&mut self, open: Option<&Pos>) -> Result<Vec<Directive>, ParseError> {
        let mut out = Vec::new();
        loop {
            let Some(mut line) = self.line() else {
                return match open {
                    Some(pos) => Err(error(pos, "{ not closed")),
                    None => Ok(out),
                };
            };
            if line[0].is("}") {
                if line.len() > 1 {
                    return Err(error(&line[1].pos, "text after }"));
                }
                return match open {
                    Some(_) => Ok(out),
                    None => Err(error(&line[0].pos, "} without a block to close")),
                };
            }
            let opens = line.len() > 1 && line.last().is_some_and(|t| t.is("{"));
            if line.len() == 1 && line[0].is("{") {
                return Err(error(&line[0].pos, "{ must end the line of its directive"));
            }
            let brace = if opens { line.pop() } else { None };
            let name = line.remove(0);
            let block = match brace {
                Some(brace) => Some(self.block(&brace.pos)?),
                None => None,
            };
            if let Some(close) = line.iter().find(|t| t.is("}")) {
                return Err(error(&close.pos, "} must be alone on its line"));
            }
            out.push(Directive {
                name: name.text,
                args: line.into_iter().map(|t| t.text).collect(),
                block,
                pos: name.pos,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Caddyfile {
        parse_str(text, Path::new("Caddyfile")).expect("parses")
    }

    #[test]
    fn global_options_sites_blocks_and_quotes() {
        let f = parse(
            "{\n\temail a@example.com\n}\n\n# a comment\nexample.com, www.example.com {\n\
             \troot * /srv/www # trailing comment\n\treverse_proxy /api/* localhost:3000 {\n\
             \t\theader_up Host {upstream_hostport}\n\t}\n\trespond \"say \\\"hi\\\"\" 200\n\
             \trespond `raw \\n` 201\n}\n:8080 {\n\tfile_server browse\n}\n",
        );
        assert_eq!(f.global[0].name, "email");
        assert_eq!(f.sites.len(), 2);
        let site = &f.sites[0];
        assert_eq!(site.addresses, ["example.com", "www.example.com"]);
        assert_eq!(site.pos.line, 6);
        assert_eq!(site.body[0].args, ["*", "/srv/www"]);
        let proxy = &site.body[1];
        assert_eq!(proxy.args, ["/api/*", "localhost:3000"]);
        let inner = proxy.block.as_ref().expect("block");
        assert_eq!(inner[0].args, ["Host", "{upstream_hostport}"]);
        assert_eq!(site.body[2].args, ["say \"hi\"", "200"]);
        assert_eq!(site.body[3].args, ["raw \\n", "201"]);
        assert_eq!(f.sites[1].addresses, [":8080"]);
    }

    #[test]
    fn one_site_without_braces_and_multiline_addresses() {
        let f = parse("localhost\n\nfile_server\n");
        assert_eq!(f.sites[0].addresses, ["localhost"]);
        assert_eq!(f.sites[0].body[0].name, "file_server");
        let f = parse("a.test,\nb.test {\n\trespond ok\n}\n");
        assert_eq!(f.sites[0].addresses, ["a.test", "b.test"]);
        // After a site without braces, what looks like a site block is a
        // directive of it (Caddy then refuses it as unknown).
        let f = parse("a.test\nrespond x\nb.test {\n}\n");
        assert_eq!(f.sites.len(), 1);
        assert_eq!(f.sites[0].body[1].name, "b.test");
    }

    #[test]
    fn snippets_with_arguments_and_env() {
        std::env::set_var("HAYATE_IMPORT_TEST_UPSTREAM", "127.0.0.1:9000");
        let f = parse(
            "(proxy) {\n\treverse_proxy {args[0]} {args[1:]}\n}\n(common) {\n\tencode gzip\n}\n\
             a.test {\n\timport proxy /api/* one two\n\timport common\n\
             \treverse_proxy {$HAYATE_IMPORT_TEST_UPSTREAM} {$HAYATE_IMPORT_TEST_UNSET:fallback:1}\n}\n",
        );
        let body = &f.sites[0].body;
        assert_eq!(body[0].name, "reverse_proxy");
        assert_eq!(body[0].args, ["/api/*", "one", "two"]);
        assert_eq!(
            body[0].pos.line, 2,
            "a snippet's directive keeps its own line"
        );
        assert_eq!(body[1].name, "encode");
        assert_eq!(body[2].args, ["127.0.0.1:9000", "fallback:1"]);
    }

    #[test]
    fn heredocs_and_errors_with_positions() {
        let f = parse("a.test {\n\trespond <<HTML\n\t\t<p>hi</p>\n\t\tHTML 200\n}\n");
        assert_eq!(f.sites[0].body[0].args, ["<p>hi</p>", "200"]);
        for (text, want) in [
            ("a.test {\n\trespond x\n", "Caddyfile:1:8: { not closed"),
            ("a.test {\n}\n}\n", "Caddyfile:3:1: } without a block"),
            (
                "a.test {\n\trespond \"x\n}\n",
                "Caddyfile:2:10: unclosed \"",
            ),
            (
                "a.test {\n\timport nothing\n}\n",
                "Caddyfile:2:2: import nothing",
            ),
            (
                "(s) {\n\timport s\n}\na.test {\n\timport s\n}\n",
                "nested more than",
            ),
        ] {
            let e = parse_str(text, Path::new("Caddyfile")).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
    }
}
