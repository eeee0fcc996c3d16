//! `hayate import nginx FILE [-o OUT] [--check]`: another server's config
//! as a hayate config (hayate-import does the work), the report on stderr.
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
                .action(ArgAction::SetTrue)
                .exclusive(true)
                .help("Print the nginx directive table (docs/import-nginx.md)"),
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
                .arg(
                    Arg::new("out")
                        .short('o')
                        .long("output")
                        .value_name("OUT")
                        .help("Write the hayate config here instead of stdout"),
                )
                .arg(
                    Arg::new("check")
                        .long("check")
                        .action(ArgAction::SetTrue)
                        .help("Also run the result through hayate check (exit 1 when it fails)"),
                ),
        )
}

/// Runs `hayate import ...`.
pub(crate) fn run(m: &ArgMatches) -> ExitCode {
    if m.get_flag("table-markdown") {
        print!("{}", hayate_import::table_markdown());
        return ExitCode::SUCCESS;
    }
    let Some(("nginx", m)) = m.subcommand() else {
        eprintln!("hayate import: name the server: hayate import nginx FILE");
        return ExitCode::from(1);
    };
    let file = PathBuf::from(m.get_one::<String>("file").expect("required"));
    let prefix = m.get_one::<String>("prefix").map(PathBuf::from);
    let import = match hayate_import::nginx(&file, prefix.as_deref()) {
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
