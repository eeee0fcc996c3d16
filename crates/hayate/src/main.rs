//! The `hayate` binary: parses the command line, loads the configuration and
//! runs the server. Everything else lives in the library crates.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Arg, ArgMatches, Command};
use hayate_config::values::{Listen, ListenAddr, LogLevel};
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
            with_serve_args(Command::new("run").about(
                "Run N instances of an app (each told its Unix socket or TCP port in PORT) and \
                 serve it: files first, the app for the rest; SIGHUP reloads it instance by instance",
            ))
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
        .subcommand(with_serve_args(Command::new("php").about(
            "Serve a PHP app: php-fpm supervised (a pool sized to this machine on a private Unix \
             socket, restarted on crash, replaced gracefully on SIGHUP) behind hayate: files first, \
             then .php scripts, then index.php with the original URI",
        )))
        .subcommand(
            Command::new("check")
                .about("Validate a config file; prints file:line and the key on error, exits 1")
                .arg(Arg::new("file").value_name("FILE").required(true)),
        )
        .subcommand(control_command(
            "status",
            "Show the app's instances (state, pid, uptime, restarts, memory, requests) and its queue",
        ))
        .subcommand(control_command(
            "reload",
            "Replace the app's instances (app_reload_parallel at a time), with no failed request",
        ))
        .subcommand(control_command("stop", "Stop hayate gracefully"))
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
        .subcommand(
            Command::new("help-config").about("Print the configuration reference (docs/config.md)"),
        )
}

fn control_command(name: &'static str, about: &'static str) -> Command {
    Command::new(name).about(about).arg(
        Arg::new("control")
            .long("control")
            .value_name("PATH")
            .env("HAYATE_CONTROL")
            .help("Control socket [default: the one of the hayate run started in this directory]"),
    )
}

/// The control socket of a `hayate run` started in `dir`: per user, per
/// directory, so `hayate status` run in the app's directory finds it.
fn default_control_path(dir: &Path) -> PathBuf {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dir.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    std::env::temp_dir()
        .join(format!("hayate-{}", nix::unistd::getuid()))
        .join(format!("{h:016x}.sock"))
}

/// `hayate status|reload|stop|purge`: one command on the control socket.
fn control(name: &str, m: &ArgMatches) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let path = m
        .get_one::<String>("control")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_control_path(Path::new(".")));
    let line = match (
        m.try_get_one::<String>("url"),
        m.try_get_one::<String>("tag"),
    ) {
        (Ok(Some(url)), _) => format!("{name} url {url}\n"),
        (_, Ok(Some(tag))) => format!("{name} tag {tag}\n"),
        _ => format!("{name}\n"),
    };
    // The line the server will parse: refuse here what it would refuse.
    anyhow::ensure!(
        hayate_server::control::ControlCommand::parse(&line).is_some(),
        "a URL or tag must be one word, without spaces"
    );
    let mut s = std::os::unix::net::UnixStream::connect(&path).with_context(|| {
        format!(
            "no hayate run answers on {} (start it here, or pass --control)",
            path.display()
        )
    })?;
    s.write_all(line.as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    print!("{answer}");
    Ok(())
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let result = match matches.subcommand() {
        Some(("serve", m)) => serve(m),
        Some(("check", m)) => check(m),
        Some(("run", m)) => run_app(m),
        Some(("php", m)) => php(m),
        Some((name @ ("status" | "reload" | "stop" | "purge"), m)) => control(name, m),
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
    load_with(m, &overrides)
}

fn load_with(m: &ArgMatches, overrides: &Overrides) -> Result<Config, ConfigError> {
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
        None => hayate_config::without_file(overrides),
    }
}

fn serve(m: &ArgMatches) -> anyhow::Result<()> {
    let config = load(m)?;
    if let Some(app) = config.app.clone() {
        // A config file with an [app] section: run it, as `hayate run` does.
        return supervise(config, app);
    }
    init_log(&config);
    let what = describe(&config);
    let on_reload = || log::warn!("SIGHUP: nothing to reload (no app runs)");
    // A cache is purged through the control socket; without one there is
    // nothing to control but stop.
    let caches = config
        .sites
        .iter()
        .flat_map(|s| &s.routes)
        .any(|r| r.options.cache.enabled);
    let mut hooks = hooks(
        &config,
        what,
        &on_reload,
        None,
        hayate_core::metrics::Metrics::default(),
    );
    hooks.control = match config.global.control.clone() {
        Some(p) => Some(p),
        None if caches => {
            let p = default_control_path(Path::new("."));
            if std::os::unix::net::UnixStream::connect(&p).is_ok() {
                log::warn!(
                    "another hayate answers on {}: running without a control socket (set --control)",
                    p.display()
                );
                None
            } else {
                Some(p)
            }
        }
        None => None,
    };
    hayate_server::run(config, None, hooks).context("server failed")
}

/// `hayate run [options] [--instances N] -- CMD [ARGS]`: supervise the app and
/// serve it, files under DIR (or ./public when it exists) first. With
/// `--config`, the file's `[app]` section is the base and flags override it.
fn run_app(m: &ArgMatches) -> anyhow::Result<()> {
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
    supervise(config, app)
}

/// `hayate php [DIR] [options]`: php-fpm as the supervised app, speaking
/// FastCGI, with a pool generated for this machine
/// ([`hayate_supervisor::php::PhpPool`]); DIR (default: the current
/// directory) is the document root: files first, then scripts, then the
/// front controller.
fn php(m: &ArgMatches) -> anyhow::Result<()> {
    use hayate_config::app::{AppProtocol, AppSection, Instances};
    use hayate_supervisor::php::{php_fpm_binary, PhpPool};
    let binary = php_fpm_binary()
        .context("php-fpm not found on PATH or in /usr/sbin (Debian: apt-get install php-fpm)")?;
    let mut overrides: Overrides = cli::overrides_from(m)?;
    let root = PathBuf::from(m.get_one::<String>("dir").map_or(".", String::as_str));
    overrides.route.root = Some(root.clone());
    overrides.route.app = Some(true);
    overrides.global.app_protocol = Some(AppProtocol::FastCgi);
    let pool = PhpPool::sized_to_machine();
    // Every child may hold a kept connection: hayate's bound is the pool.
    overrides
        .global
        .fastcgi_max_conns
        .get_or_insert(pool.children);
    let mut config = load_with(m, &overrides)?;
    // Readiness is the socket accepting: php-fpm answers no HTTP probe.
    config.global.app_ready_path = None;
    // The pool's file, private to this hayate (its socket comes in PORT).
    let dir = std::env::temp_dir().join(format!("hayate-php-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let conf = dir.join("php-fpm.conf");
    std::fs::write(&conf, pool.config()).with_context(|| format!("{}", conf.display()))?;
    let app = AppSection {
        command: PhpPool::command(&binary, &conf),
        cwd: Some(root),
        env: Vec::new(),
        // One master: php-fpm runs its children itself.
        instances: Some(Instances::Count(1)),
    };
    let result = supervise(config, app);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Starts the supervisor for `app` and serves until stopped.
fn supervise(config: Config, app: hayate_config::app::AppSection) -> anyhow::Result<()> {
    use hayate_config::app::AppListen;
    init_log(&config);
    let g = &config.global;
    let instances = app
        .instances
        .unwrap_or(hayate_config::app::Instances::Auto)
        .get(g.workers.get());
    let socket_dir = std::env::temp_dir().join(format!("hayate-{}", std::process::id()));
    let listen = match g.app_listen {
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
        reload_parallel: g.app_reload_parallel,
        start_timeout: config.global.app_start_timeout.0,
        ready_path: config.global.app_ready_path.clone(),
        stop_timeout: config.global.grace_period.0,
        env: app.env,
        max_memory: config.global.app_max_memory.map(|s| s.0),
        max_requests: config.global.app_max_requests.map(u64::from),
        log: app_log,
    })?;
    let what = format!("{} ({instances} instances)", command.join(" "));
    let reload = || supervisor.reload();
    let status = supervisor.status();
    let metrics = hayate_core::metrics::Metrics::default();
    metrics.register(std::sync::Arc::new(status.clone()));
    let mut hooks = hooks(&config, what, &reload, Some(status), metrics);
    hooks.control = Some(
        config
            .global
            .control
            .clone()
            .unwrap_or_else(|| default_control_path(Path::new("."))),
    );
    let result =
        hayate_server::run(config, Some(supervisor.slots()), hooks).context("server failed");
    drop(supervisor); // stops every instance and waits
    let _ = std::fs::remove_dir_all(&socket_dir);
    result
}

fn init_log(config: &Config) {
    hayate_core::log::init(match config.global.log_level {
        LogLevel::Off => log::LevelFilter::Off,
        LogLevel::Error => log::LevelFilter::Error,
        LogLevel::Warn => log::LevelFilter::Warn,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Debug => log::LevelFilter::Debug,
    });
}

/// The binary's hooks: the "serving" line, reload, status and metrics.
fn hooks<'a>(
    config: &Config,
    what: String,
    on_reload: &'a dyn Fn(),
    status: Option<hayate_supervisor::AppStatus>,
    metrics: hayate_core::metrics::Metrics,
) -> hayate_server::Hooks<'a> {
    let workers = config.global.workers.get();
    hayate_server::Hooks {
        on_listening: Box::new(move |addrs: &[Listen]| {
            for a in addrs {
                let scheme = a.scheme.as_str();
                let url = match &a.addr {
                    ListenAddr::Tcp(sa) if sa.ip().is_unspecified() => {
                        format!("{scheme}://localhost:{}/", sa.port())
                    }
                    ListenAddr::Tcp(sa) => format!("{scheme}://{sa}/"),
                    ListenAddr::Unix(p) => format!("unix:{}", p.display()),
                };
                println!("hayate: serving {what} on {url} ({workers} workers)");
            }
        }),
        on_reload: Box::new(on_reload),
        control: None,
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
    Ok(())
}
