//! The `hayate` binary: parses the command line, loads the configuration and
//! runs the server. Everything else lives in the library crates.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Arg, ArgMatches, Command};
use hayate_config::values::{ListenAddr, LogLevel};
use hayate_config::{cli, Config, ConfigError, Overrides};

/// The arguments of serving: a directory, a config file, every option.
fn with_serve_args(cmd: Command) -> Command {
    cli::add_option_args(
        cmd.arg(
            Arg::new("dir")
                .value_name("DIR")
                .help("Directory to serve [default: the current directory]"),
        )
        .arg(
            Arg::new("config")
                .long("config")
                .short('c')
                .value_name("FILE")
                .env("HAYATE_CONFIG")
                .help("Config file (TOML); flags and env vars override it"),
        ),
    )
}

fn command() -> Command {
    // `hayate [DIR] [OPTIONS]` serves; so does `hayate serve [DIR] [OPTIONS]`.
    with_serve_args(Command::new("hayate"))
        .version(env!("CARGO_PKG_VERSION"))
        .about("One fast, safe binary in front of a web application")
        .args_conflicts_with_subcommands(true)
        .subcommand(with_serve_args(
            Command::new("serve").about("Serve a directory (the default command)"),
        ))
        .subcommand(
            Command::new("check")
                .about("Validate a config file; prints file:line and the key on error, exits 1")
                .arg(Arg::new("file").value_name("FILE").required(true)),
        )
        .subcommand(
            Command::new("help-config").about("Print the configuration reference (docs/config.md)"),
        )
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let result = match matches.subcommand() {
        Some(("serve", m)) => serve(m),
        Some(("check", m)) => check(m),
        Some(("help-config", _)) => {
            print!("{}", hayate_config::markdown_reference());
            Ok(())
        }
        _ => serve(&matches),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hayate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(m: &ArgMatches) -> Result<Config, ConfigError> {
    let mut overrides: Overrides = cli::overrides_from(m)?;
    if let Some(dir) = m.get_one::<String>("dir") {
        overrides.route.root = Some(PathBuf::from(dir));
    }
    match m.get_one::<String>("config") {
        Some(path) => {
            let path = Path::new(path);
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                file: Some(path.into()),
                line: None,
                key: None,
                message: e.to_string(),
            })?;
            hayate_config::load_file(path, &text, &overrides)
        }
        None => hayate_config::without_file(&overrides),
    }
}

fn serve(m: &ArgMatches) -> anyhow::Result<()> {
    let config = load(m)?;
    hayate_core::log::init(match config.global.log_level {
        LogLevel::Off => log::LevelFilter::Off,
        LogLevel::Error => log::LevelFilter::Error,
        LogLevel::Warn => log::LevelFilter::Warn,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Debug => log::LevelFilter::Debug,
    });
    let what = describe(&config);
    let workers = config.global.workers.get();
    hayate_server::run(config, |addrs| {
        for a in addrs {
            let url = match a {
                ListenAddr::Tcp(sa) if sa.ip().is_unspecified() => {
                    format!("http://localhost:{}/", sa.port())
                }
                ListenAddr::Tcp(sa) => format!("http://{sa}/"),
                ListenAddr::Unix(p) => format!("unix:{}", p.display()),
            };
            println!("hayate: serving {what} on {url} ({workers} workers)");
        }
    })
    .context("server failed")
}

fn describe(config: &Config) -> String {
    match config.sites.as_slice() {
        [site] if site.routes.len() == 1 => {
            let root = site.routes[0].options.root.clone().unwrap_or_default();
            std::fs::canonicalize(&root)
                .unwrap_or(root)
                .display()
                .to_string()
        }
        sites => format!("{} sites", sites.len()),
    }
}

fn check(m: &ArgMatches) -> anyhow::Result<()> {
    let file = m
        .get_one::<String>("file")
        .map(PathBuf::from)
        .unwrap_or_default();
    let text = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
    let config = hayate_config::load_file(&file, &text, &Overrides::default())?;
    // Paths must exist too: a config that cannot start is not valid.
    for site in &config.sites {
        for route in &site.routes {
            if let Some(root) = &route.options.root {
                if !root.is_dir() {
                    return Err(ConfigError {
                        file: Some(file.clone()),
                        line: route.root_line,
                        key: Some("root".into()),
                        message: format!(
                            "{} (route {:?}) is not a directory",
                            root.display(),
                            route.prefix
                        ),
                    }
                    .into());
                }
            }
        }
    }
    println!("{}: ok", file.display());
    Ok(())
}
