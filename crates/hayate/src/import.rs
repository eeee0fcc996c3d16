//! `hayate import nginx|caddy FILE [-o OUT] [--check]`: another server's
//! config as a hayate config (hayate-import does the work), the report on
//! stderr; files the config names (a Caddyfile's basic_auth users) beside
//! OUT.
//! Exit 0 when everything was carried over (what was not needed or differs
//! is still reported), 2 when something was not carried over or not
//! supported (the config is still written), 1 when the input cannot be
//! read or parsed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgMatches, Command};

/// The `import` subcommand.
pub(crate) fn command() -> Command {
    Command::new("import")
        .about(
            "Turn another server's config into a hayate config: prints it (or writes -o OUT), \
             and on stderr one line per directive not carried over or carried with a difference \
             (file:line: directive: what); exit 0 all carried, 2 something not carried, 1 the \
             input unreadable",
        )
        .arg_required_else_help(true)
        .arg(
            Arg::new("table-markdown")
                .long("table-markdown")
                .value_name("SERVER")
                .num_args(0..=1)
                .default_missing_value("nginx")
                .value_parser(["nginx", "caddy"])
                .exclusive(true)
                .help(
                    "Print a directive table: nginx's (docs/import-nginx.md) or caddy's \
                     (docs/import-caddy.md)",
                ),
        )
        .subcommand(
            Command::new("nginx")
                .about("Import an nginx config (follows include, globs, relative paths)")
                .arg(
                    Arg::new("file")
                        .value_name("FILE")
                        .required(true)
                        .help("The main nginx file (/etc/nginx/nginx.conf) or one site's file"),
                )
                .arg(Arg::new("prefix").long("prefix").value_name("DIR").help(
                    "Where relative include paths start, as nginx's configuration \
                             prefix [default: the nearest directory at or above FILE's with an \
                             nginx.conf, else FILE's]",
                ))
                .args(output_args()),
        )
        .subcommand(
            Command::new("caddy")
                .about("Import a Caddyfile (snippets, import, {$ENV})")
                .arg(
                    Arg::new("file")
                        .value_name("FILE")
                        .required(true)
                        .help("The Caddyfile"),
                )
                .args(output_args()),
        )
}

fn output_args() -> [Arg; 2] {
    [
        Arg::new("out")
            .short('o')
            .long("output")
            .value_name("OUT")
            .help("Write the hayate config here instead of stdout (files it names go beside it)"),
        Arg::new("check")
            .long("check")
            .action(ArgAction::SetTrue)
            .help("Also run the result through hayate check (exit 1 when it fails)"),
    ]
}

/// Runs `hayate import ...`.
pub(crate) fn run(m: &ArgMatches) -> ExitCode {
    match m.get_one::<String>("table-markdown").map(String::as_str) {
        Some("caddy") => {
            print!("{}", hayate_import::caddy_table_markdown());
            return ExitCode::SUCCESS;
        }
        Some(_) => {
            print!("{}", hayate_import::table_markdown());
            return ExitCode::SUCCESS;
        }
        None => {}
    }
    let (imported, m) = match m.subcommand() {
        Some(("nginx", m)) => {
            let file = PathBuf::from(m.get_one::<String>("file").expect("required"));
            let prefix = m.get_one::<String>("prefix").map(PathBuf::from);
            (hayate_import::nginx(&file, prefix.as_deref()), m)
        }
        Some(("caddy", m)) => {
            let file = PathBuf::from(m.get_one::<String>("file").expect("required"));
            (hayate_import::caddy(&file), m)
        }
        _ => {
            eprintln!("hayate import: name the server: hayate import nginx|caddy FILE");
            return ExitCode::from(1);
        }
    };
    let import = match imported {
        Ok(import) => import,
        Err(e) => {
            eprintln!("hayate import: {e}");
            return ExitCode::from(1);
        }
    };
    for note in &import.notes {
        eprintln!("{note}");
    }
    let out = m.get_one::<String>("out").map(PathBuf::from);
    let beside = out
        .as_deref()
        .and_then(Path::parent)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    for (name, content) in &import.files {
        // htpasswd hashes: readable by the owner only.
        let path = beside.join(name);
        if let Err(e) = write_private(&path, content) {
            eprintln!("hayate import: {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if let Some(out) = &out {
        if let Err(e) = std::fs::write(out, &import.toml) {
            eprintln!("hayate import: {}: {e}", out.display());
            return ExitCode::from(1);
        }
    } else {
        print!("{}", import.toml);
    }
    if m.get_flag("check") {
        // Relative paths of the result mean what they would in OUT's place.
        let place = out.unwrap_or_else(|| PathBuf::from("hayate.toml"));
        if let Err(e) = crate::check_text(Path::new(&place), &import.toml) {
            eprintln!("hayate import: the imported config fails hayate check: {e:#}");
            return ExitCode::from(1);
        }
    }
    if !import.notes.iter().any(|n| n.kind.is_loss()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

/// Writes `content` to `path`, readable and writable by its owner only.
fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content.as_bytes())
}
