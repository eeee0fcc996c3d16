//! The `hayate` binary: parses the command line, loads the configuration and
//! runs the server. Everything else lives in the library crates.

mod control_client;
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

use crate::control_client::{ask, control, control_command, default_control_path, find_control};

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
                 each client kept on one instance; SIGHUP reloads it instance by instance",
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
            "Show which hayate answers (pid, directory, config file, listeners), its app's \
             instances (state, pid, uptime, restarts, memory, requests) and queue, and the \
             shared tier",
        ))
        .subcommand(control_command(
            "reload",
            "Re-read the config file and apply it with no failed request (prints what changed; \
             exits 1 with every error and keeps the running config), then replace the app's \
             instances app_reload_parallel at a time",
        ))
        .subcommand(control_command(
            "upgrade",
            "Start the hayate binary now installed at this one's path with its sockets (no \
             connection refused); once it serves, this one drains and exits. Exits 1 if the new \
             one fails (this one keeps serving)",
        ))
        .subcommand(control_command(
            "stop",
            "Stop hayate gracefully: no new connection; requests in flight finish within \
             grace_period",
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
        Some((name @ ("status" | "reload" | "upgrade" | "stop" | "purge"), m)) => control(name, m),
        Some(("list", _)) => control_client::list(),
        Some(("service", m)) => service(m),
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
    if let Some(app) = config.app.clone() {
        // A config file with an [app] section: run it, as `hayate run` does.
        let file = m.get_one::<String>("config");
        return supervise(config, app, file, rereader(m, overrides), inherited);
    }
    init_log(&config)?;
    let what = describe(&config);
    let on_reload = |_: &Config| String::new();
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
    hayate_server::run(config, None, hooks).context("server failed")
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
        overrides.route.app = Some(true);
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
    if with_file && config.app.is_none() {
        // A file without [app]: its routes send what matches no file to
        // the app, as without a file.
        overrides.route.app = Some(true);
        config = load_with(m, &overrides)?;
    }
    let reread = rereader(m, overrides);
    let mut app = config.app.clone().unwrap_or_default();
    if !command.is_empty() {
        app.command = command;
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
        app,
        m.get_one::<String>("config"),
        reread,
        inherited,
    )
}

/// How long `hayate run` waits for its app's first start to fail before it
/// serves (see [`supervise`]).
const STARTUP_VERDICT: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts the supervisor for `app` and serves until stopped.
pub(crate) fn supervise(
    config: Config,
    app: hayate_config::app::AppSection,
    config_file: Option<&String>,
    reread: Option<hayate_server::reload::Reread<'_>>,
    inherited: Inherited,
) -> anyhow::Result<()> {
    use hayate_config::app::AppListen;
    init_log(&config)?;
    let g = &config.global;
    let instances = app
        .instances
        .unwrap_or(hayate_config::app::Instances::Auto)
        .get(g.workers.get());
    let socket_dir = std::env::temp_dir().join(format!("hayate-{}", std::process::id()));
    // Loopback TCP unless told otherwise: Next.js and Fastify want a port
    // number (issue 33); php-fpm takes a socket path, private to it.
    let fastcgi = g.app_protocol == hayate_config::app::AppProtocol::FastCgi;
    let default_listen = if fastcgi {
        AppListen::Unix
    } else {
        AppListen::Tcp
    };
    let listen = match g.app_listen.unwrap_or(default_listen) {
        AppListen::Unix => hayate_supervisor::Listen::Unix(socket_dir.clone()),
        AppListen::Tcp => hayate_supervisor::Listen::Tcp,
        AppListen::TcpBase(base) => hayate_supervisor::Listen::TcpBase(base),
    };
    let app_log = match &config.global.app_log {
        Some(path) => Some(std::sync::Arc::new(
            hayate_supervisor::RotatingLog::open(
                path,
                config.global.app_log_size.0,
                config.global.app_log_keep as usize,
            )
            .with_context(|| format!("app log {}", path.display()))?,
        )),
        None => None,
    };
    let command = app.command;
    let supervisor = hayate_supervisor::Supervisor::start(hayate_supervisor::AppSpec {
        command: command.clone(),
        cwd: app.cwd.unwrap_or_else(|| PathBuf::from(".")),
        instances,
        listen,
        runtime_dir: socket_dir.clone(),
        reload_parallel: g.app_reload_parallel,
        start_timeout: config.global.app_start_timeout.0,
        ready_path: config.global.app_ready_path.clone(),
        stop_timeout: config.global.grace_period.0,
        env: app.env,
        max_memory: config.global.app_max_memory.map(|s| s.0),
        max_requests: config.global.app_max_requests.map(u64::from),
        log: app_log.clone(),
        run_as: app_identity(&config)?,
    })?;
    // An app that cannot start fails `hayate run` here, before "serving".
    // One second catches a command that is not there or exits at once (a
    // Node syntax error exits in about 100 ms); a slower start goes on while
    // hayate serves, its requests queued.
    // An upgrade waits for the app to be ready: the hayate it replaces
    // serves until then.
    let verdict = match inherited.is_upgrade() {
        true => config.global.app_start_timeout.0,
        false => config.global.app_start_timeout.0.min(STARTUP_VERDICT),
    };
    supervisor
        .wait_started(verdict)
        .map_err(|why| anyhow::anyhow!("the app did not start: {why}"))?;
    let what = format!("{} ({instances} instances)", command.join(" "));
    // A reload takes a new [app] command, cwd or env from the file (unless
    // the command line gave the command), then rolls the instances.
    let from_file = config.app.as_ref().is_some_and(|a| a.command == command);
    let reload = |next: &Config| {
        let mut report = String::new();
        if let Some(app) = next.app.as_ref().filter(|_| from_file) {
            let cwd = app.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
            if supervisor.set_command(app.command.clone(), cwd, app.env.clone()) {
                report
                    .push_str("[app]: command, cwd or env changed; new instances start with it\n");
            }
        }
        supervisor.reload();
        report.push_str("app: reloading its instances, app_reload_parallel at a time\n");
        report
    };
    let status = supervisor.status();
    let metrics = hayate_core::metrics::Metrics::default();
    metrics.register(std::sync::Arc::new(status.clone()));
    let mut hooks = hooks(&config, config_file, what, &reload, Some(status), metrics);
    hooks.reread = reread;
    hooks.inherited = inherited;
    if let Some(log) = app_log {
        hooks.on_reopen_logs = Box::new(move || log.reopen());
    }
    let result =
        hayate_server::run(config, Some(supervisor.slots()), hooks).context("server failed");
    drop(supervisor); // stops every instance and waits
    let _ = std::fs::remove_dir_all(&socket_dir);
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
    on_reload: &'a dyn Fn(&Config) -> String,
    status: Option<hayate_supervisor::AppStatus>,
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
        reread: None,
        inherited: Inherited::default(),
        on_reopen_logs: Box::new(|| Ok(())),
        control: Some(control_place(config)),
        config_file: config_file.map(PathBuf::from),
        status: status.map(|s| std::sync::Arc::new(move || s.text()) as hayate_server::StatusFn),
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
    let config = hayate_config::load_file(&file, &text, &Overrides::default())?;
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
            line: line_setting(&text, key, &path.display().to_string()),
            key: Some(key.into()),
            message,
        }
        .into());
    }
    if let Some(cwd) = config.app.as_ref().and_then(|a| a.cwd.as_ref()) {
        if !cwd.is_dir() {
            return Err(ConfigError {
                file: Some(file.clone()),
                line: None,
                key: Some("cwd".into()),
                message: format!("[app] directory {} does not exist", cwd.display()),
            }
            .into());
        }
    }
    println!("{}: ok", file.display());
    let limit = hayate_server::budget::limit_at_start();
    let budget = hayate_server::budget::Budget::new(limit, config.global.workers.get());
    if let Some(note) = budget.low_limit_note(config.global.max_connections) {
        println!("note: {note}");
    }
    Ok(())
}
