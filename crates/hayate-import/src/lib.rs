//! `hayate import`: another server's configuration (nginx's, or a
//! Caddyfile) turned into a hayate config, with a report of every directive
//! not carried over or carried over with a difference (decision 0025).
//! The Caddyfile goes the same way through its own modules (`caddy_parse`,
//! `caddy_translate`, `caddy_table`, `caddy_apply` with `caddy_proxy` and
//! `caddy_global`, `caddy_matchers`, `caddy_values`).
//!
//! nginx's text is parsed (`nginx_parse`, includes resolved), walked
//! (`nginx_translate`, locations in `nginx_locations`) with one table
//! saying how each directive maps (`nginx_table`, its functions in
//! `nginx_apply` and `nginx_upstreams`), and written as TOML
//! (`hayate_toml`). The table also prints the "Coming from nginx" page
//! (`table_markdown`). No I/O but reading the nginx files (and seeing
//! which index file a root holds); checking the
//! result is the binary's (`hayate check`'s code).

mod caddy_apply;
mod caddy_global;
mod caddy_matchers;
mod caddy_parse;
mod caddy_proxy;
mod caddy_table;
mod caddy_translate;
mod caddy_values;
mod hayate_toml;
mod markdown;
mod nginx_apply;
mod nginx_locations;
mod nginx_parse;
mod nginx_table;
mod nginx_translate;
mod nginx_upstreams;
mod report;
mod values;

#[cfg(test)]
mod caddy_tests;
#[cfg(test)]
mod tests;

pub use markdown::{caddy_table_markdown, table_markdown};
pub use report::{Kind, Note, ParseError, Pos};

use std::path::Path;

/// An imported configuration.
#[derive(Debug)]
pub struct Import {
    /// The hayate config (TOML).
    pub toml: String,
    /// The report, in the order of the files read.
    pub notes: Vec<Note>,
    /// Files that go beside the config (name, content): the htpasswd
    /// files of a Caddyfile's `basic_auth` users.
    pub files: Vec<(String, String)>,
}

/// Imports the nginx configuration `file` and what it includes, relative
/// paths resolved under `prefix` (nginx's configuration prefix: the
/// directory of its nginx.conf) or, when None, under [`conf_prefix`]'s
/// guess.
pub fn nginx(file: &Path, prefix: Option<&Path>) -> Result<Import, ParseError> {
    let prefix = prefix.map_or_else(|| conf_prefix(file), Path::to_path_buf);
    Ok(nginx_import(&nginx_parse::parse_file(file, &prefix)?, file))
}

/// Imports nginx configuration text as if it were the file `name`
/// (includes resolved under `prefix`): what the fuzz target feeds.
pub fn nginx_text(text: &str, name: &Path, prefix: &Path) -> Result<Import, ParseError> {
    Ok(nginx_import(
        &nginx_parse::parse_str(text, name, prefix)?,
        name,
    ))
}

fn nginx_import(main: &[nginx_parse::Directive], file: &Path) -> Import {
    let mut t = nginx_translate::translate(main);
    finish(&mut t.config);
    let header = format!(
        "hayate config imported from nginx ({}) by hayate import nginx.\n\
         Every directive not carried over, or carried with a difference, was reported.",
        file.display()
    );
    Import {
        toml: t.config.to_toml(&header),
        notes: t.notes,
        files: Vec::new(),
    }
}

/// Imports the Caddyfile `file` and what it imports.
pub fn caddy(file: &Path) -> Result<Import, ParseError> {
    Ok(caddy_import(&caddy_parse::parse_file(file)?, file))
}

/// Imports Caddyfile text as if it were the file `name` (imported files
/// looked for beside it): what the fuzz target feeds.
pub fn caddy_text(text: &str, name: &Path) -> Result<Import, ParseError> {
    Ok(caddy_import(&caddy_parse::parse_str(text, name)?, name))
}

fn caddy_import(parsed: &caddy_parse::Caddyfile, file: &Path) -> Import {
    let t = caddy_translate::translate(parsed);
    let header = format!(
        "hayate config imported from a Caddyfile ({}) by hayate import caddy.\n\
         Every directive not carried over, or carried with a difference, was reported.",
        file.display()
    );
    Import {
        toml: t.config.to_toml(&header),
        notes: t.notes,
        files: t.files,
    }
}

/// Where nginx would resolve `file`'s relative includes: the nearest
/// directory at or above the file's that holds an nginx.conf (a site file
/// in /etc/nginx/sites-available includes snippets/... from /etc/nginx),
/// else the file's own directory. A bare file name's is "" (the current
/// directory), so included files are named as plainly as the main one.
pub fn conf_prefix(file: &Path) -> std::path::PathBuf {
    let own = file.parent().unwrap_or(Path::new(""));
    own.ancestors()
        .take_while(|d| !d.as_os_str().is_empty())
        .find(|d| d.join("nginx.conf").is_file())
        .unwrap_or(own)
        .to_path_buf()
}

/// The last touches: nginx's default listener when none was named.
fn finish(config: &mut hayate_toml::Config) {
    if config.top.get("listen").is_none() {
        // nginx's default: port 80 on every address.
        config.top.push("listen", "0.0.0.0:80".into());
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    /// Values with quotes, backslashes, newlines, control characters and
    /// TOML's own syntax stay inside their strings (the fuzz target
    /// `import_config` tries any text; these are its seeds).
    #[test]
    fn hostile_values_stay_inside_their_toml_strings() {
        let name = Path::new("/nonexistent-hayate-import/site.conf");
        let dir = Path::new("/nonexistent-hayate-import");
        let nasty = [
            r#""a\"b]]\n[[site]]\nhost = \"x""#,
            "'a\tb\u{1}c'",
            "\"x\ny = 1\"",
        ];
        for value in nasty {
            let nginx = format!(
                "server {{ listen 80; server_name {value}; root {value};\n\
                 add_header X-A {value} always; return 200 {value};\n\
                 location /{value} {{ proxy_pass http://127.0.0.1:1; proxy_set_header X-B {value}; }} }}\n"
            );
            let import = nginx_text(&nginx, name, dir).expect("nginx parses");
            let parsed = import.toml.parse::<toml::Table>();
            assert!(parsed.is_ok(), "{parsed:?}\n{}", import.toml);
            let caddy = format!(
                "example.com {{\n header X-A {value}\n respond /x {value} 200\n\
                 redir /old {value}\n reverse_proxy /api/* 127.0.0.1:1 {{\n header_up X-B {value}\n }}\n}}\n"
            );
            let import = caddy_text(&caddy, name).expect("Caddyfile parses");
            let parsed = import.toml.parse::<toml::Table>();
            assert!(parsed.is_ok(), "{parsed:?}\n{}", import.toml);
        }
    }
}
