//! `hayate import`: another server's configuration turned into a hayate
//! config, with a report of every directive not carried over or carried
//! over with a difference (decision 0025).
//!
//! nginx's text is parsed (`nginx_parse`, includes resolved), walked
//! (`nginx_translate`) with one table saying how each directive maps
//! (`nginx_table`, its functions in `nginx_apply`), and written as TOML
//! (`hayate_toml`). The table also prints the "Coming from nginx" page
//! (`table_markdown`). No I/O but reading the nginx files; checking the
//! result is the binary's (`hayate check`'s code).

mod hayate_toml;
mod markdown;
mod nginx_apply;
mod nginx_parse;
mod nginx_table;
mod nginx_translate;
mod nginx_upstreams;
mod values;

#[cfg(test)]
mod tests;

pub use markdown::table_markdown;
pub use nginx_parse::{ParseError, Pos};
pub use nginx_translate::{Kind, Note};

use std::path::Path;

/// An imported configuration.
#[derive(Debug)]
pub struct Import {
    /// The hayate config (TOML).
    pub toml: String,
    /// The report, in the order of the nginx files.
    pub notes: Vec<Note>,
}

/// Imports the nginx configuration `file` (and what it includes, relative
/// to its directory, nginx's prefix for a main file in /etc/nginx).
pub fn nginx(file: &Path) -> Result<Import, ParseError> {
    // A bare file name's prefix is "" (the current directory), so that
    // included files are named as plainly as the main one.
    let prefix = file.parent().unwrap_or(Path::new(""));
    let main = nginx_parse::parse_file(file, prefix)?;
    let mut t = nginx_translate::translate(&main);
    finish(&mut t.config);
    let header = format!(
        "hayate config imported from nginx ({}) by hayate import nginx.\n\
         Every directive not carried over, or carried with a difference, was reported.",
        file.display()
    );
    Ok(Import {
        toml: t.config.to_toml(&header),
        notes: t.notes,
    })
}

/// The last touches: nginx's default listener when none was named.
fn finish(config: &mut hayate_toml::Config) {
    if config.top.get("listen").is_none() {
        // nginx's default: port 80 on every address.
        config.top.push("listen", "0.0.0.0:80".into());
    }
}
