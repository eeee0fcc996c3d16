//! nginx's configuration syntax: words, quotes and escapes, `#` comments,
//! `{ }` blocks, and `include` resolved in place (globs, paths relative to
//! the prefix directory as nginx resolves them). Every directive keeps the
//! file and line it was written at, for the report.
//!
//! Hand-written (decision 0025): the grammar is a page of code, and the
//! crates that parse it either reject directives they do not model
//! (nginx-config), or bring a syntax-tree library and no `include`
//! (nginx-lint-parser).

use std::path::{Path, PathBuf};

pub use crate::report::{ParseError, Pos};

/// One directive: its name, its arguments (quotes removed, escapes kept
/// as nginx keeps them: `\"` becomes `"`, other backslashes stay), and its
/// block when it has one.
#[derive(Debug, Clone)]
pub struct Directive {
    /// The directive's name (`server`, `location`, `proxy_pass`).
    pub name: String,
    /// Its arguments, unquoted.
    pub args: Vec<String>,
    /// `{ ... }`, with includes already replaced by what they include.
    pub block: Option<Vec<Directive>>,
    /// Where its name was written.
    pub pos: Pos,
}

impl Directive {
    /// The argument at `i`, or "".
    pub fn arg(&self, i: usize) -> &str {
        self.args.get(i).map(String::as_str).unwrap_or_default()
    }
}

/// Includes nested deeper than this are a loop (nginx has no limit and
/// recurses until it runs out of file descriptors; real configs nest 2-3).
const MAX_INCLUDE_DEPTH: usize = 16;

/// Reads `file` and every file it includes. `prefix` is where relative
/// `include` paths start, as nginx's prefix: the directory of the main
/// file (nginx uses its `--conf-path` directory, /etc/nginx on Debian,
/// which is that directory for the usual `nginx.conf`).
pub fn parse_file(file: &Path, prefix: &Path) -> Result<Vec<Directive>, ParseError> {
    parse_at(file, prefix, 0)
}

fn parse_at(file: &Path, prefix: &Path, depth: usize) -> Result<Vec<Directive>, ParseError> {
    let text = std::fs::read(file).map_err(|e| ParseError {
        pos: Pos {
            file: file.into(),
            line: 0,
            col: 0,
        },
        message: e.to_string(),
    })?;
    let text = String::from_utf8_lossy(&text);
    let mut parser = Parser {
        lexer: Lexer::new(&text, file),
        prefix,
        depth,
    };
    parser.block(None)
}

/// Parses text as if it were the file `name` (`include` is resolved under
/// `prefix`).
pub fn parse_str(text: &str, name: &Path, prefix: &Path) -> Result<Vec<Directive>, ParseError> {
    let mut parser = Parser {
        lexer: Lexer::new(text, name),
        prefix,
        depth: 0,
    };
    parser.block(None)
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Semicolon,
    Open,
    Close,
    End,
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    file: &'a Path,
    line: usize,
    col: usize,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str, file: &'a Path) -> Self {
        Lexer {
            chars: text.chars().peekable(),
            file,
            line: 1,
            col: 1,
        }
    }

    fn pos(&self) -> Pos {
        Pos {
            file: self.file.into(),
            line: self.line,
            col: self.col,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    /// The next token and where it starts.
    fn next(&mut self) -> Result<(Token, Pos), ParseError> {
        loop {
            match self.chars.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('#') => {
                    while self.chars.peek().is_some_and(|&c| c != '\n') {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
        let at = self.pos();
        let token = match self.chars.peek().copied() {
            None => Token::End,
            Some(';') => {
                self.bump();
                Token::Semicolon
            }
            Some('{') => {
                self.bump();
                Token::Open
            }
            Some('}') => {
                self.bump();
                Token::Close
            }
            Some(q @ ('"' | '\'')) => {
                self.bump();
                Token::Word(self.quoted(q, &at)?)
            }
            Some(_) => Token::Word(self.bare()),
        };
        Ok((token, at))
    }

    /// A quoted argument: `\q` is the quote, other escapes are kept as
    /// written (nginx leaves `\d` in a regex alone).
    fn quoted(&mut self, quote: char, at: &Pos) -> Result<String, ParseError> {
        let mut word = String::new();
        loop {
            match self.bump() {
                None => {
                    return Err(ParseError {
                        pos: at.clone(),
                        message: format!("unterminated {quote}quoted{quote} argument"),
                    })
                }
                Some('\\') => match self.bump() {
                    Some(c) if c == quote || c == '\\' => word.push(c),
                    Some(c) => {
                        word.push('\\');
                        word.push(c);
                    }
                    None => {}
                },
                Some(c) if c == quote => return Ok(word),
                Some(c) => word.push(c),
            }
        }
    }

    /// A bare word: up to whitespace, `;`, `{` or `}` (a `${var}` keeps its
    /// braces, as nginx reads it).
    fn bare(&mut self) -> String {
        let mut word = String::new();
        let mut in_variable = false;
        while let Some(&c) = self.chars.peek() {
            match c {
                c if c.is_whitespace() || c == ';' => break,
                '{' if word.ends_with('$') => in_variable = true,
                '{' => break,
                '}' if in_variable => in_variable = false,
                '}' => break,
                '\\' => {
                    self.bump();
                    word.push('\\');
                    if let Some(n) = self.bump() {
                        word.push(n);
                    }
                    continue;
                }
                _ => {}
            }
            word.push(c);
            self.bump();
        }
        word
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
    prefix: &'a Path,
    depth: usize,
}

impl Parser<'_> {
    /// Directives up to the end of the file (`opened` is None) or to the `}`
    /// closing the block opened at `opened`.
    fn block(&mut self, opened: Option<&Pos>) -> Result<Vec<Directive>, ParseError> {
        let mut out = Vec::new();
        loop {
            let (token, at) = self.lexer.next()?;
            let name = match token {
                Token::Word(w) => w,
                Token::End => match opened {
                    None => return Ok(out),
                    Some(o) => {
                        return Err(ParseError {
                            pos: at,
                            message: format!(
                                "unexpected end of file, expecting \"}}\" (for the block opened at line {})",
                                o.line
                            ),
                        })
                    }
                },
                Token::Close => match opened {
                    Some(_) => return Ok(out),
                    None => {
                        return Err(ParseError {
                            pos: at,
                            message: "unexpected \"}\"".into(),
                        })
                    }
                },
                Token::Semicolon | Token::Open => {
                    return Err(ParseError {
                        pos: at,
                        message: "expected a directive name".into(),
                    })
                }
            };
            let mut args = Vec::new();
            let block = loop {
                let (token, tat) = self.lexer.next()?;
                match token {
                    Token::Word(w) => args.push(w),
                    Token::Semicolon => break None,
                    Token::Open => break Some(self.block(Some(&at))?),
                    Token::Close | Token::End => {
                        return Err(ParseError {
                            pos: tat,
                            message: format!("directive \"{name}\" is not terminated by \";\""),
                        })
                    }
                }
            };
            if name == "include" && block.is_none() {
                out.extend(self.include(&args, &at)?);
                continue;
            }
            out.push(Directive {
                name,
                args,
                block,
                pos: at,
            });
        }
    }

    /// `include PATH;`: every file PATH names (a glob may name none), in
    /// name order as glob(3) returns them.
    fn include(&mut self, args: &[String], at: &Pos) -> Result<Vec<Directive>, ParseError> {
        let [pattern] = args else {
            return Err(ParseError {
                pos: at.clone(),
                message: "include takes one path".into(),
            });
        };
        if self.depth >= MAX_INCLUDE_DEPTH {
            return Err(ParseError {
                pos: at.clone(),
                message: format!("includes nested deeper than {MAX_INCLUDE_DEPTH}: a loop?"),
            });
        }
        let path = self.prefix.join(pattern);
        let files = if pattern.contains(['*', '?', '[']) {
            glob(&path)
        } else {
            vec![path]
        };
        let mut out = Vec::new();
        for file in files {
            let inner = parse_at(&file, self.prefix, self.depth + 1).map_err(|mut e| {
                if e.pos.line == 0 {
                    e.pos = at.clone();
                    e.message = format!("include {}: {}", file.display(), e.message);
                }
                e
            })?;
            out.extend(inner);
        }
        Ok(out)
    }
}

/// The files a pattern names, sorted, each component matched as glob(3)
/// does (`*`, `?`, `[...]`; a leading dot only by a leading dot).
pub fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for part in pattern.components() {
        let part = part.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        for base in &found {
            if !part.contains(['*', '?', '[']) {
                next.push(base.join(&*part));
                continue;
            }
            let Ok(entries) = std::fs::read_dir(if base.as_os_str().is_empty() {
                Path::new(".")
            } else {
                base
            }) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| (!n.starts_with('.') || part.starts_with('.')) && wildcard(&part, n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| base.join(n)));
        }
        found = next;
    }
    found.retain(|p| p.is_file());
    found
}

/// Whether `name` matches the glob `pattern` (one path component).
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Backtracking over the last `*` only: linear in practice for file names.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(len) = (pi < p.len()).then(|| one(&p[pi..], n[ni])).flatten() {
            pi += len;
            ni += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether the pattern's first element matches `c`: how many pattern
/// characters it spans.
fn one(p: &[char], c: char) -> Option<usize> {
    match p[0] {
        '?' => Some(1),
        '[' => {
            let end = p.iter().skip(1).position(|&x| x == ']')? + 1;
            let class = &p[1..end];
            let (negate, class) = match class.first() {
                Some('!' | '^') => (true, &class[1..]),
                _ => (false, class),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == '-' {
                    hit |= (class[i]..=class[i + 2]).contains(&c);
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            (hit != negate).then_some(end + 1)
        }
        x => (x == c).then_some(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Directive>, ParseError> {
        parse_str(text, Path::new("t.conf"), Path::new("."))
    }

    #[test]
    fn words_quotes_comments_and_blocks() {
        let d = parse(
            "# a comment\nserver { # trailing\n  listen 80 default_server;\n  \
             add_header X-A \"a \\\"b\\\" c\" always;\n  rewrite ^/(\\d+)$ '/p?id=$1' last;\n  \
             location ~ \\.php$ { set ${x}y 1; }\n}\n",
        )
        .unwrap();
        assert_eq!(d.len(), 1);
        let server = &d[0];
        assert_eq!((server.name.as_str(), server.pos.line), ("server", 2));
        let inner = server.block.as_ref().unwrap();
        assert_eq!(inner[0].args, ["80", "default_server"]);
        assert_eq!(inner[0].pos.line, 3);
        assert_eq!(inner[1].args, ["X-A", "a \"b\" c", "always"]);
        assert_eq!(inner[2].args, ["^/(\\d+)$", "/p?id=$1", "last"]);
        let loc = &inner[3];
        assert_eq!(loc.args, ["~", "\\.php$"]);
        assert_eq!(loc.block.as_ref().unwrap()[0].args, ["${x}y", "1"]);
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = parse("server {\n  listen 80;\n").unwrap_err();
        assert_eq!(e.pos.line, 3, "{e}");
        assert!(e.message.contains("opened at line 1"), "{e}");
        let e = parse("server {\n  listen 80\n}\n").unwrap_err();
        assert_eq!((e.pos.line, e.pos.col), (3, 1), "{e}");
        assert!(e.message.contains("\"listen\" is not terminated"), "{e}");
        let e = parse("a \"open;\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.conf:1:3: unterminated \"quoted\" argument"
        );
        assert!(parse("}").unwrap_err().message.contains("unexpected"));
    }

    #[test]
    fn include_globs_relative_to_the_prefix_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("conf.d")).unwrap();
        std::fs::write(dir.path().join("conf.d/b.conf"), "b 2;\n").unwrap();
        std::fs::write(dir.path().join("conf.d/a.conf"), "a 1;\n").unwrap();
        std::fs::write(dir.path().join("conf.d/c.txt"), "c 3;\n").unwrap();
        std::fs::write(dir.path().join("params"), "p 0;\n").unwrap();
        let main = dir.path().join("nginx.conf");
        std::fs::write(
            &main,
            "http {\n include params;\n include conf.d/*.conf;\n}\n",
        )
        .unwrap();
        let d = parse_file(&main, dir.path()).unwrap();
        let inner = d[0].block.as_ref().unwrap();
        let names: Vec<_> = inner.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["p", "a", "b"]);
        assert_eq!(inner[1].pos.file, dir.path().join("conf.d/a.conf"));
        assert_eq!(inner[1].pos.line, 1);
        // A missing plain include is an error at the include; an empty glob is not.
        std::fs::write(&main, "include nothing/*.conf;\ninclude missing;\n").unwrap();
        let e = parse_file(&main, dir.path()).unwrap_err();
        assert_eq!(e.pos.line, 2, "{e}");
    }

    #[test]
    fn every_cut_of_a_config_parses_or_names_its_position() {
        // Editors save half-written files: no cut of a real config panics.
        let text = "server {\n  listen 80 default_server; # c\n  server_name \"a b\" 'c\\'d';\n  \
                    location ~* \\.(png|css)$ { expires max; }\n  set ${x}y \"\\\"\";\n}\n";
        for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            if let Err(e) = parse(&text[..cut]) {
                assert!(e.pos.line >= 1 && e.pos.col >= 1, "{cut}: {e}");
            }
        }
    }

    #[test]
    fn glob_components() {
        assert!(wildcard("*.conf", "a.conf"));
        assert!(!wildcard("*.conf", "a.conf.bak"));
        assert!(wildcard("site-[a-c]?", "site-b1"));
        assert!(!wildcard("site-[!a-c]*", "site-b1"));
        assert!(wildcard("*", ""));
    }
}
