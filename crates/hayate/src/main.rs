//! The `hayate` binary: parses the command line, loads the configuration and
//! runs the server. Everything else lives in the library crates.

mod apps;
mod control_client;
mod import;
mod logs;
mod php;
mod service;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Arg, ArgMatches, Command};
use hayate_config::values::{Listen, ListenAddr, LogLevel};
use hayate_config::{cli, Config, ConfigError, ConfigErrors, Overrides};
use hayate_server::control::ControlPlace;
use hayate_server::handoff::Inherited;

use crate::control_client::{
    app_command, ask, control, control_command, default_control_path, find_control,
};

/// The arguments of serving: a directory, a config file, every option.
fn with_serve_args(cmd: Command) -> Command {
    cli::add_option_args(
        cmd.arg(Arg::new("dir").value_name("DIR").help(
            "Directory to serve [default: the config file's root, else the current directory]",
        ))
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
            with_serve_args(Command::new("run").about(
                "Run N instances of an app (each told its own 127.0.0.1 port in PORT, or a Unix \
                 socket with --app-listen unix) and serve it: files first, the app for the rest, \
                 each client kept on one instance; SIGHUP reloads it instance by instance. With \
                 --config and no command: every app of the file ([app] or [[app]] tables)",
            ))
            .mut_arg("dir", |a| {
                a.help(
                    "Directory whose files are served before the app [default: the config file's \
                     root; without a file, ./public when it exists, else none: every request goes \
                     to the app]",
                )
            })
            .arg(
                Arg::new("instances")
                    .long("instances")
                    .value_name("N|auto")
                    .env("HAYATE_INSTANCES")
                    .help("Instances of the app [default: auto, one per worker]"),
            )
            .arg(
                Arg::new("watch")
                    .long("watch")
                    .action(clap::ArgAction::SetTrue)
                    .help(
                        "Restart each app (rolling, no failed request) when its files change: \
                         those its watch names, else its whole directory (.git, node_modules and \
                         its ignore excepted); its build runs first",
                    ),
            )
            .arg(
                Arg::new("command")
                    .value_name("CMD")
                    .num_args(1..)
                    .last(true)
                    .help(
                        "The app's command, after --: hayate run -- node server.js \
                         [default: command of the config file's [app]]",
                    ),
            ),
        )
        .subcommand(
            with_serve_args(Command::new("php").about(
                "Serve a PHP app: php-fpm supervised (a pool sized to this machine on a private \
                 Unix socket, restarted on crash, replaced gracefully on SIGHUP) behind hayate: \
                 files first, then .php scripts, then index.php with the original URI",
            ))
            .mut_arg("dir", |a| {
                a.help("The app's document root: its files and scripts [default: the current directory]")
            }),
        )
        .subcommand(
            Command::new("check")
                .about(
                    "Validate a config file: exit 0 when valid; exit 1 with every error \
                     (file:line: key: reason) when not; exit 2 on a usage error",
                )
                .arg(
                    Arg::new("file")
                        .value_name("FILE")
                        .required(true)
                        .help("The config file (TOML)"),
                ),
        )
        .subcommand(control_command(
            "status",
            "Show which hayate answers (pid, directory, config file, listeners), its apps' \
             instances by app (state, pid, uptime, restarts, memory, requests) and queues, and \
             the shared tier",
        ))
        .subcommand(
            control_command(
                "reload",
                "Re-read the config file and apply it with no failed request (prints what changed; \
                 exits 1 with every error and keeps the running config), then replace the apps' \
                 instances app_reload_parallel at a time (only APP's when named)",
            )
            .arg(
                Arg::new("app")
                    .value_name("APP")
                    .help("Roll only this app's instances (its name in the file; the others keep theirs)"),
            ),
        )
        .subcommand(control_command(
            "upgrade",
            "Start the hayate binary now installed at this one's path with its sockets (no \
             connection refused); once it serves, this one drains and exits. Exits 1 if the new \
             one fails (this one keeps serving)",
        ))
        .subcommand(
            control_command(
                "stop",
                "Stop hayate gracefully: no new connection; requests in flight finish within \
                 grace_period. With APP: stop that app's instances (drained first) and keep it \
                 stopped until hayate start APP; its routes answer 503 meanwhile",
            )
            .arg(Arg::new("app").value_name("APP").help("Stop only this app")),
        )
        .subcommand(app_command(
            "start",
            "Start an app that hayate stop APP stopped",
        ))
        .subcommand(app_command(
            "restart",
            "Replace an app's instances, app_reload_parallel at a time, with no failed request \
             (without re-reading the config: hayate reload APP does); a stopped app starts",
        ))
        .subcommand(
            control_command(
                "logs",
                "Print the last lines of the running hayate's log files (access_log, error_log, \
                 app_log), each line prefixed with its log's name; -f follows them",
            )
            .arg(
                Arg::new("follow")
                    .short('f')
                    .long("follow")
                    .action(clap::ArgAction::SetTrue)
                    .help("Keep printing lines as they are written (across rotations)"),
            )
            .arg(
                Arg::new("lines")
                    .short('n')
                    .long("lines")
                    .value_name("N")
                    .default_value("20")
                    .value_parser(clap::value_parser!(usize))
                    .help("Lines of each log printed first"),
            ),
        )
        .subcommand(
            control_command(
                "purge",
                "Remove a URL (all its variants and query strings) or a tag from the response cache",
            )
            .arg(
                Arg::new("url")
                    .value_name("URL")
                    .required_unless_present("tag")
                    .help("http://HOST/PATH, or /PATH for every host"),
            )
            .arg(
                Arg::new("tag")
                    .long("tag")
                    .value_name("TAG")
                    .conflicts_with("url")
                    .help("Remove every response whose Surrogate-Key names TAG"),
            ),
        )
        .subcommand(import::command())
        .subcommand(control_client::list_command())
        .subcommand(service_command())
        .subcommand(
            Command::new("help-config").about("Print the configuration reference (docs/config.md)"),
        )
}

fn service_command() -> Command {
    let args = |cmd: Command| {
        cmd.arg(
            Arg::new("config")
                .long("config")
                .short('c')
                .value_name("FILE")
                .default_value("/etc/hayate/hayate.toml")
                .help("The config file the service runs"),
        )
        .arg(
            Arg::new("name")
                .long("name")
                .value_name("NAME")
                .default_value("hayate")
                .help("The service's name (NAME.service, control socket /run/NAME/control.sock)"),
        )
    };
    Command::new("service")
        .about("A systemd service for hayate: print its unit, or install it")
        .subcommand_required(true)
        .subcommand(args(Command::new("unit").about("Print the systemd unit")))
        .subcommand(
            args(Command::new("install").about(
                "Write the systemd unit (then: systemctl daemon-reload; systemctl enable --now NAME)",
            ))
            .arg(
                Arg::new("unit-dir")
                    .long("unit-dir")
                    .value_name("DIR")
                    .default_value("/etc/systemd/system")
                    .help("Where the unit is written"),
            )
            .arg(
                Arg::new("force")
                    .long("force")
                    .action(clap::ArgAction::SetTrue)
                    .help("Replace a unit of the same name that differs"),
            ),
        )
}

/// `hayate service unit|install`.
fn service(m: &ArgMatches) -> anyhow::Result<()> {
    let (action, m) = m.subcommand().context("service unit or service install")?;
    let binary = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("where this hayate binary is")?;
    let config = PathBuf::from(m.get_one::<String>("config").expect("has a default"));
    // The service starts elsewhere: a relative path would not be found.
    let config = std::path::absolute(&config).unwrap_or(config);
    let name = m.get_one::<String>("name").expect("has a default");
    anyhow::ensure!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
        "--name: letters, digits, '-', '_' and '.' only"
    );
    let spec = service::UnitSpec {
        binary: &binary,
        config: &config,
        name,
    };
    match action {
        "unit" => print!("{}", service::unit(&spec)),
        _ => {
            let dir = Path::new(m.get_one::<String>("unit-dir").expect("has a default"));
            let path = service::install(&spec, dir, m.get_flag("force"))?;
            println!(
                "wrote {}\nnext: systemctl daemon-reload && systemctl enable --now {name}",
                path.display()
            );
        }
    }
    Ok(())
}

/// Clap's error, with its tip for an unknown flag that resembles none
/// ("to pass '--x' as a value, use '-- --x'") replaced: after `--` a word
/// is the app's command (`hayate run`) or the directory, never what a
/// mistyped flag meant. A flag close to a real one keeps clap's "a similar
/// argument exists" (the `suggestions` feature).
fn with_a_true_tip(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let mut tips = match e.remove(ContextKind::Suggested) {
        Some(ContextValue::StyledStrs(tips)) => tips,
        _ => Vec::new(),
    };
    tips.retain(|t| !t.to_string().contains("as a value, use"));
    if tips.is_empty() && e.get(ContextKind::SuggestedArg).is_none() {
        tips.push(
            "no option has this name: --help lists them (hayate help-config with their file keys \
             and variables)"
                .into(),
        );
    }
    e.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
    e
}

fn main() -> ExitCode {
    // First, before any thread: the sockets of a hayate this one replaces.
    let inherited = match Inherited::from_env() {
        Ok(inherited) => inherited,
        Err(e) => {
            eprintln!("hayate: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Started by `hayate upgrade`: a failure is told to it, not only logged.
    let mut start_failure = inherited.start_failure();
    let args = cli::join_bool_values(std::env::args_os());
    let matches = command().try_get_matches_from(args).unwrap_or_else(|e| {
        let e = with_a_true_tip(e);
        if let Some(failure) = start_failure.take() {
            failure.tell(&e.render().to_string());
        }
        e.exit()
    });
    let result = match matches.subcommand() {
        Some(("serve", m)) => serve(m, inherited),
        Some(("check", m)) => check(m),
        Some(("run", m)) => run_app(m, inherited),
        Some(("php", m)) => php::run(m, inherited),
        Some(("logs", m)) => find_control(m)
            .and_then(|target| ask(&target.socket, "logs\n"))
            .and_then(|files| {
                logs::run(
                    &files,
                    *m.get_one("lines").expect("default"),
                    m.get_flag("follow"),
                )
            }),
        Some((
            name @ ("status" | "reload" | "upgrade" | "stop" | "start" | "restart" | "purge"),
            m,
        )) => control(name, m),
        Some(("list", _)) => control_client::list(),
        Some(("service", m)) => service(m),
        Some(("import", m)) => return import::run(m),
        Some(("help-config", _)) => {
            print!("{}", hayate_config::markdown_reference());
            Ok(())
        }
        _ => serve(&matches, inherited),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hayate: {e:#}");
            if let Some(failure) = start_failure {
                failure.tell(&format!("{e:#}\n"));
            }
            ExitCode::FAILURE
        }
    }
}

/// The flags and environment of `hayate [DIR]`, the directory included.
fn serve_overrides(m: &ArgMatches) -> Result<Overrides, ConfigError> {
    let mut overrides: Overrides = cli::overrides_from(m)?;
    if let Some(dir) = m.get_one::<String>("dir") {
        overrides.route.root = Some(PathBuf::from(dir));
    }
    Ok(overrides)
}

/// How a reload reads the configuration again: the same file with the same
/// flags and environment; `None` without a file.
pub(crate) fn rereader<'a>(
    m: &'a ArgMatches,
    overrides: Overrides,
) -> Option<hayate_server::reload::Reread<'a>> {
    m.get_one::<String>("config")?;
    Some(Box::new(move || load_with(m, &overrides)))
}

pub(crate) fn load_with(m: &ArgMatches, overrides: &Overrides) -> Result<Config, ConfigErrors> {
    match m.get_one::<String>("config") {
        Some(path) => {
            let path = Path::new(path);
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                file: Some(path.into()),
                line: None,
                key: None,
                message: e.to_string(),
            })?;
            hayate_config::load_file(path, &text, overrides)
        }
        None => Ok(hayate_config::without_file(overrides)?),
    }
}

fn serve(m: &ArgMatches, inherited: Inherited) -> anyhow::Result<()> {
    let overrides = serve_overrides(m)?;
    let config = load_with(m, &overrides)?;
    if !config.apps.is_empty() {
        // A config file with apps: run them, as `hayate run` does.
        let file = m.get_one::<String>("config");
        let apps = config.apps.clone();
        return supervise(config, apps, file, rereader(m, overrides), inherited);
    }
    init_log(&config)?;
    let what = describe(&config);
    let on_reload = |_: &Config, _: Option<&str>| String::new();
    let mut hooks = hooks(
        &config,
        m.get_one::<String>("config"),
        what,
        &on_reload,
        None,
        hayate_core::metrics::Metrics::default(),
    );
    hooks.reread = rereader(m, overrides);
    hooks.inherited = inherited;
    hayate_server::run(config, Default::default(), hooks).context("server failed")
}

/// `hayate run [options] [--instances N] -- CMD [ARGS]`: supervise the app and
/// serve it, files under DIR (or ./public when it exists) first. With
/// `--config`, the file's `[app]` section is the base and flags override it.
fn run_app(m: &ArgMatches, inherited: Inherited) -> anyhow::Result<()> {
    let command: Vec<String> = m
        .get_many::<String>("command")
        .map(|c| c.cloned().collect())
        .unwrap_or_default();
    let mut overrides: Overrides = cli::overrides_from(m)?;
    let with_file = m.get_one::<String>("config").is_some();
    if !with_file {
        overrides.route.app = Some(hayate_config::app::AppRef::Only);
    }
    match m.get_one::<String>("dir") {
        Some(dir) => overrides.route.root = Some(PathBuf::from(dir)),
        // The app's own directory is never served; its public/ folder is.
        None if !with_file && Path::new("public").is_dir() => {
            overrides.route.root = Some(PathBuf::from("public"))
        }
        None => {}
    }
    let mut config = load_with(m, &overrides)?;
    if with_file && config.apps.is_empty() {
        // A file without apps: its routes send what matches no file to
        // the app, as without a file.
        overrides.route.app = Some(hayate_config::app::AppRef::Only);
        config = load_with(m, &overrides)?;
    }
    let reread = rereader(m, overrides);
    let watch = m.get_flag("watch");
    if watch {
        let roots = apps::static_roots(&config);
        for app in &mut config.apps {
            apps::watch_by_default(app, &roots);
        }
    }
    if config.apps.len() > 1 {
        // The file's [[app]]s, each as declared.
        anyhow::ensure!(
            command.is_empty() && m.get_one::<String>("instances").is_none(),
            "this file declares {} apps: a command or --instances on the command line would \
             not say which; set them in its [[app]] tables",
            config.apps.len()
        );
        let apps = config.apps.clone();
        return supervise(
            config,
            apps,
            m.get_one::<String>("config"),
            reread,
            inherited,
        );
    }
    let mut app = config
        .apps
        .first()
        .cloned()
        .unwrap_or_else(|| hayate_config::app::AppSection {
            name: hayate_config::app::DEFAULT_APP_NAME.into(),
            served: true,
            ..Default::default()
        });
    if !command.is_empty() {
        app.command = command;
    }
    if watch {
        apps::watch_by_default(&mut app, &apps::static_roots(&config));
    }
    if app.command.is_empty() {
        anyhow::bail!(
            "no command to run: hayate run -- CMD [ARGS], or an [app] section with a command in --config FILE"
        );
    }
    if let Some(n) = m.get_one::<String>("instances") {
        use hayate_config::values::OptValue;
        let key = match m.value_source("instances") {
            Some(clap::parser::ValueSource::EnvVariable) => "HAYATE_INSTANCES",
            _ => "--instances",
        };
        app.instances = Some(
            hayate_config::app::Instances::parse_str(n)
                .map_err(|e| anyhow::anyhow!("{key}: {e}"))?,
        );
    }
    supervise(
        config,
        vec![app],
        m.get_one::<String>("config"),
        reread,
        inherited,
    )
}

/// Starts the apps' supervisors and serves until stopped. `apps` holds one
/// app (`hayate run -- CMD`, `[app]`, `hayate php`) or the file's `[[app]]`s.
pub(crate) fn supervise(
    config: Config,
    apps: Vec<hayate_config::app::AppSection>,
    config_file: Option<&String>,
    reread: Option<hayate_server::reload::Reread<'_>>,
    inherited: Inherited,
) -> anyhow::Result<()> {
    init_log(&config)?;
    // A reload takes an app's new command, cwd or env from the file
    // (unless the command line gave the command), then rolls its instances.
    let from_file = config
        .apps
        .iter()
        .zip(&apps)
        .all(|(file, running)| file.command == running.command)
        && !config.apps.is_empty();
    let running = std::sync::Arc::new(apps::RunningApps::start(
        &config,
        apps.clone(),
        from_file,
        inherited.is_upgrade(),
    )?);
    let what = running.describe(&config, &apps);
    let reload = |next: &Config, only: Option<&str>| running.reload(next, only);
    let act = |action, name: &str| running.act(action, name);
    // Status and metrics show the apps running now (a reload may add or
    // remove some); they hold no reference that would keep the apps
    // running past `drop(running)` below.
    let metrics = hayate_core::metrics::Metrics::default();
    let apps_now = std::sync::Arc::downgrade(&running);
    metrics.register_fn(move |out| {
        if let Some(running) = apps_now.upgrade() {
            use hayate_core::metrics::MetricsSource;
            hayate_supervisor::AllApps(running.statuses()).render(out);
        }
    });
    let apps_now = std::sync::Arc::downgrade(&running);
    let status: hayate_server::StatusFn = std::sync::Arc::new(move || {
        apps_now
            .upgrade()
            .map(|running| apps::RunningApps::status_text(&running.roles()))
            .unwrap_or_default()
    });
    let mut hooks = hooks(&config, config_file, what, &reload, Some(status), metrics);
    hooks.reread = reread;
    hooks.inherited = inherited;
    hooks.app_names = Box::new(|| running.names());
    hooks.start_new_apps = Box::new(|next: &Config| running.start_new(next));
    hooks.on_app = Box::new(act);
    hooks.on_reopen_logs = Box::new(|| running.reopen_logs());
    let result = hayate_server::run(config, running.table(), hooks).context("server failed");
    drop(running); // stops every instance and waits
    result
}

/// Where a serving hayate's control socket goes: `--control` (or the
/// file's `control`), else the directory's default. Every hayate has one,
/// so `hayate stop` and `hayate list` know every hayate.
fn control_place(config: &Config) -> ControlPlace {
    match &config.global.control {
        Some(path) => ControlPlace::Given(path.clone()),
        None => ControlPlace::Default(default_control_path(Path::new("."))),
    }
}

/// Who the app runs as: `app_user`, else hayate's own `user` (a hayate that
/// dropped to it cannot start the app as anyone else), else hayate's user.
pub(crate) fn app_identity(
    config: &Config,
) -> anyhow::Result<Option<hayate_core::identity::Identity>> {
    use hayate_core::identity::Identity;
    let g = &config.global;
    Ok(match (&g.app_user, &g.user) {
        (Some(user), _) => {
            Some(Identity::resolve(user, None).with_context(|| format!("app_user {user:?}"))?)
        }
        (None, Some(user)) => Some(
            Identity::resolve(user, g.group.as_deref())
                .with_context(|| format!("user {user:?}"))?,
        ),
        (None, None) => None,
    })
}

/// Sets the error log up: its level, and its file when `error_log` names one.
pub(crate) fn init_log(config: &Config) -> anyhow::Result<()> {
    if let Some(path) = &config.global.error_log {
        let file = hayate_core::logfile::RotatingLog::open(path, u64::MAX, 0)
            .with_context(|| format!("error_log {}", path.display()))?;
        hayate_core::log::to_file(Some(std::sync::Arc::new(file)));
    }
    hayate_core::log::init(match config.global.log_level {
        LogLevel::Off => log::LevelFilter::Off,
        LogLevel::Error => log::LevelFilter::Error,
        LogLevel::Warn => log::LevelFilter::Warn,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Debug => log::LevelFilter::Debug,
    });
    Ok(())
}

/// The binary's hooks: the "serving" line, reload, status and metrics.
fn hooks<'a>(
    config: &Config,
    config_file: Option<&String>,
    what: String,
    on_reload: &'a dyn Fn(&Config, Option<&str>) -> String,
    status: Option<hayate_server::StatusFn>,
    metrics: hayate_core::metrics::Metrics,
) -> hayate_server::Hooks<'a> {
    let workers = config.global.workers.get();
    hayate_server::Hooks {
        on_listening: Box::new(move |addrs: &[Listen]| {
            for a in addrs {
                let scheme = a.scheme.as_str();
                // The address bound, as bound: 0.0.0.0 says that every
                // interface is served, which "localhost" would hide.
                let (url, reach) = match &a.addr {
                    ListenAddr::Tcp(sa) if sa.ip().is_unspecified() => {
                        (format!("{scheme}://{sa}/"), "every interface, ")
                    }
                    ListenAddr::Tcp(sa) => (format!("{scheme}://{sa}/"), ""),
                    ListenAddr::Unix(p) => (format!("unix:{}", p.display()), ""),
                };
                println!("hayate: serving {what} on {url} ({reach}{workers} workers)");
            }
        }),
        on_reload: Box::new(on_reload),
        start_new_apps: Box::new(|_| String::new()),
        app_names: Box::new(Vec::new),
        on_app: Box::new(|_, _| String::new()),
        reread: None,
        inherited: Inherited::default(),
        on_reopen_logs: Box::new(|| Ok(())),
        control: Some(control_place(config)),
        config_file: config_file.map(PathBuf::from),
        status,
        metrics,
    }
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

/// The line of `text` (1-based) that sets `key` to a value containing
/// `value`: where a check of the file a key names points.
fn line_setting(text: &str, key: &str, value: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.trim_start().starts_with(key) && l.contains(value))
        .map(|i| i + 1)
}

fn check(m: &ArgMatches) -> anyhow::Result<()> {
    let file = m
        .get_one::<String>("file")
        .map(PathBuf::from)
        .unwrap_or_default();
    let text = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
    let config = check_text(&file, &text)?;
    println!("{}: ok", file.display());
    let limit = hayate_server::budget::limit_at_start();
    let budget = hayate_server::budget::Budget::new(limit, config.global.workers.get());
    if let Some(note) = budget.low_limit_note(config.global.max_connections) {
        println!("note: {note}");
    }
    Ok(())
}

/// `hayate check`'s whole judgement of a config file's text (`hayate import
/// --check` asks it too).
pub(crate) fn check_text(file: &Path, text: &str) -> anyhow::Result<Config> {
    let file = file.to_path_buf();
    let config = hayate_config::load_file(&file, text, &Overrides::default())?;
    // Paths must exist too, and the files policies read must load: a config
    // that cannot start is not valid.
    for site in &config.sites {
        for route in &site.routes {
            let error_at = |key: &str, message: String| ConfigError {
                file: Some(file.clone()),
                line: route.line_of(key),
                key: Some(key.into()),
                message,
            };
            if let Some(root) = &route.options.root {
                if !root.is_dir() {
                    let message = format!(
                        "{} (route {:?}) is not a directory",
                        root.display(),
                        route.prefix
                    );
                    return Err(error_at("root", message).into());
                }
            }
            let o = &route.options;
            match (&o.proxy_tls_cert, &o.proxy_tls_key) {
                (Some(_), None) => {
                    let message = "proxy_tls_cert needs proxy_tls_key".to_string();
                    return Err(error_at("proxy_tls_cert", message).into());
                }
                (None, Some(_)) => {
                    let message = "proxy_tls_key needs proxy_tls_cert".to_string();
                    return Err(error_at("proxy_tls_key", message).into());
                }
                (Some(cert), Some(key)) => {
                    let g = &config.global;
                    let pair = Some((cert.as_path(), key.as_path()));
                    if let Err(e) = hayate_tls::upstream_client_config(
                        g.proxy_tls_ca.as_deref(),
                        g.proxy_tls_verify,
                        pair,
                    ) {
                        let key = if e.starts_with("proxy_tls_key") {
                            "proxy_tls_key"
                        } else {
                            "proxy_tls_cert"
                        };
                        return Err(error_at(key, e).into());
                    }
                }
                (None, None) => {}
            }
            let name = hayate_server::policy::RouteName::of(site, route);
            if let Err(e) =
                hayate_server::policy::RoutePolicies::check(&name, &route.options, &config.global)
            {
                return Err(error_at(e.key, e.message).into());
            }
        }
    }
    if let Err((key, path, message)) = hayate_tls::client_auth::check(&config) {
        return Err(ConfigError {
            file: Some(file.clone()),
            line: line_setting(text, key, &path.display().to_string()),
            key: Some(key.into()),
            message,
        }
        .into());
    }
    for app in &config.apps {
        let error = |key: &str, message: String| ConfigError {
            file: Some(file.clone()),
            line: app.line,
            key: Some(key.into()),
            message: match app.name.as_str() {
                hayate_config::app::DEFAULT_APP_NAME => format!("[app] {message}"),
                name => format!("[[app]] {name}: {message}"),
            },
        };
        if let Some(cwd) = app.cwd.as_ref().filter(|cwd| !cwd.is_dir()) {
            let message = format!("directory {} does not exist", cwd.display());
            return Err(error("cwd", message).into());
        }
        if let Some(path) = &app.env_file {
            if let Err(e) = apps::read_env_file(path) {
                return Err(error("env_file", format!("{e:#}")).into());
            }
        }
    }
    Ok(config)
}
