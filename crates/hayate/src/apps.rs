//! The config's apps as running supervisors: one [`Supervisor`] each,
//! started together, reloaded together or one by name, shown together.
//!
//! One app (`hayate run -- CMD`, an `[app]` section) keeps the old
//! contract: if it cannot start, hayate exits with the reason. With several
//! apps, one that cannot start is logged and shown in `hayate status` (its
//! routes answer 503 once it is down) while the others start and serve.
//!
//! A reload of a config whose apps come from the file adds and removes
//! apps by name: one new in the file starts before the new routes are
//! built (they need its slots), one gone from it is taken out of the
//! routes' table, drained and stopped; the others keep their processes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::Context;
use hayate_config::app::{AppListen, AppProtocol, AppSection, Instances};
use hayate_config::Config;
use hayate_core::app::{AppTable, ServedApp};
use hayate_server::control::AppAction;
use hayate_supervisor::{
    AppSpec, AppStatus, Listen, RestartTimes, RotatingLog, Supervisor, WatchSpec,
};

/// How long hayate waits for an app's first start to fail before it
/// serves: one second catches a command that is not there or exits at
/// once (a Node syntax error exits in about 100 ms); a slower start goes
/// on while hayate serves, its requests queued.
const STARTUP_VERDICT: std::time::Duration = std::time::Duration::from_secs(1);

/// One app, running.
pub(crate) struct RunningApp {
    name: String,
    /// Routes send to it (else: a worker).
    served: bool,
    fastcgi: bool,
    /// Its command came from the file (a reload takes the file's new one).
    from_file: bool,
    /// Its `app_*` options as started (a reload that changes them says
    /// they wait for a restart).
    options: String,
    /// Its watch, build and schedule as started (the same).
    restarts: String,
    log: Option<Arc<RotatingLog>>,
    supervisor: Supervisor,
    /// Started by a reload that has not rolled the apps yet (it must not
    /// roll this one: it starts from the file as it is).
    fresh: bool,
}

impl RunningApp {
    /// What routes send to.
    fn served(&self) -> ServedApp {
        ServedApp {
            name: self.name.as_str().into(),
            slots: self.supervisor.slots(),
            fastcgi: self.fastcgi,
        }
    }
}

/// Every app, running; dropping it stops them all.
pub(crate) struct RunningApps {
    /// Locked by the main loop's hooks (reload, start/stop, status) and
    /// never across a wait.
    apps: Mutex<Vec<RunningApp>>,
    /// The served apps' slots, shared with the server's routers: a reload
    /// adds and removes apps there.
    table: AppTable,
    /// Whether the apps came from the file's `[[app]]` tables (a reload
    /// may then add or remove some).
    from_file: bool,
    /// Who the apps run as.
    run_as: Option<hayate_core::identity::Identity>,
    /// Where their sockets and files are (removed on drop).
    runtime_dir: PathBuf,
    /// Numbers the directories of apps a reload starts.
    generation: AtomicU32,
    /// The configuration of the last start or reload (where each app is
    /// served, for `hayate status`).
    config: Mutex<Arc<Config>>,
}

impl RunningApps {
    /// Starts `apps` (a single one whose first start fails is an error;
    /// of several, a failing one is only reported). `upgrade`: hayate takes
    /// over from another, which serves until the apps are ready.
    pub fn start(
        config: &Config,
        apps: Vec<AppSection>,
        from_file: bool,
        upgrade: bool,
    ) -> anyhow::Result<RunningApps> {
        let runtime_dir = std::env::temp_dir().join(format!("hayate-{}", std::process::id()));
        let several = apps.len() > 1;
        check_port_ranges(config, &apps)?;
        let mut running = RunningApps {
            apps: Mutex::new(Vec::new()),
            table: AppTable::default(),
            from_file,
            run_as: crate::app_identity(config)?,
            runtime_dir: runtime_dir.clone(),
            generation: AtomicU32::new(0),
            config: Mutex::new(Arc::new(config.clone())),
        };
        for app in apps {
            let dir = match several {
                true => runtime_dir.join(&app.name),
                false => runtime_dir.clone(),
            };
            let app = running.start_one(config, app, dir)?;
            running.lock().push(app);
        }
        for app in running.lock().iter() {
            let verdict = match upgrade {
                true => config.global.app_start_timeout.0,
                false => config.global.app_start_timeout.0.min(STARTUP_VERDICT),
            };
            if let Err(why) = app.supervisor.wait_started(verdict) {
                if !several {
                    anyhow::bail!("the app did not start: {why}");
                }
                log::error!(
                    "app {} did not start: {why}; the other apps start and serve, its routes answer 503 once it is down",
                    app.name
                );
            }
        }
        let served: Vec<ServedApp> = running
            .lock()
            .iter()
            .filter(|a| a.served)
            .map(RunningApp::served)
            .collect();
        running.table = AppTable::new(served);
        Ok(running)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<RunningApp>> {
        self.apps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts one app's supervisor, its sockets and files under `dir`.
    fn start_one(
        &self,
        config: &Config,
        app: AppSection,
        dir: PathBuf,
    ) -> anyhow::Result<RunningApp> {
        let options = app.options(&config.global);
        let fastcgi = options.protocol == AppProtocol::FastCgi;
        // Loopback TCP unless told otherwise: Next.js and Fastify want
        // a port number (issue 33); php-fpm takes a socket path,
        // private to it. A worker listens nowhere.
        let default_listen = if fastcgi {
            AppListen::Unix
        } else {
            AppListen::Tcp
        };
        let listen = match (app.served, options.listen.unwrap_or(default_listen)) {
            (false, _) => Listen::None,
            (true, AppListen::Unix) => Listen::Unix(dir.clone()),
            (true, AppListen::Tcp) => Listen::Tcp,
            (true, AppListen::TcpBase(base)) => Listen::TcpBase(base),
        };
        let log = match &options.log {
            Some(path) => Some(Arc::new(
                RotatingLog::open(path, options.log_size.0, options.log_keep as usize)
                    .with_context(|| format!("app {} log {}", app.name, path.display()))?,
            )),
            None => None,
        };
        let spec = AppSpec {
            name: app.name.clone(),
            command: app.command.clone(),
            cwd: app.cwd.clone().unwrap_or_else(|| PathBuf::from(".")),
            instances: app
                .instances
                .unwrap_or(Instances::Auto)
                .get(config.global.workers.get()),
            listen,
            runtime_dir: dir,
            reload_parallel: options.reload_parallel,
            start_timeout: options.start_timeout.0,
            ready_path: options.ready_path.clone(),
            stop_timeout: config.global.grace_period.0,
            env: environment(&app).with_context(|| format!("app {}", app.name))?,
            max_memory: options.max_memory.map(|s| s.0),
            max_requests: options.max_requests.map(u64::from),
            log: log.clone(),
            run_as: self.run_as.clone(),
            watch: app.watch.clone().map(|rules| WatchSpec {
                paths: rules.paths,
                ignore: rules
                    .ignore
                    .into_iter()
                    .chain(own_files(config, &app))
                    .collect(),
                debounce: options.watch_debounce.0,
                max_dirs: options.watch_max_dirs as usize,
                build: app.build.clone(),
                build_timeout: options.build_timeout.0,
            }),
            schedule: app.schedule.clone().map(|schedule| RestartTimes {
                what: schedule.describe(),
                next: Arc::new(move |now| schedule.next_after(now)),
            }),
        };
        let supervisor = Supervisor::start(spec).with_context(|| format!("app {}", app.name))?;
        let restarts = restarts_of(&app);
        Ok(RunningApp {
            name: app.name,
            served: app.served,
            fastcgi,
            from_file: self.from_file,
            options: format!("{options:?}"),
            restarts,
            log,
            supervisor,
            fresh: false,
        })
    }

    /// The served apps, for the routes (shared: a reload that adds or
    /// removes an app changes it).
    pub fn table(&self) -> AppTable {
        self.table.clone()
    }

    /// A reload's first step, before the new routes are built: starts the
    /// apps new in `next` (by name; not with one app before and after,
    /// which stays the same app). Returns the report.
    pub fn start_new(&self, next: &Config) -> String {
        let mut report = String::new();
        if !self.changes_by_name(next) {
            return report;
        }
        if let Err(e) = check_port_ranges(next, &next.apps) {
            // Said in the log too: the reload is then refused (a route
            // names an app that does not run), and its report with it.
            log::error!("reload: {e:#}; no app new in the file starts");
            return format!("{e:#}; no app new in the file starts\n");
        }
        let running: Vec<(String, bool)> = self
            .lock()
            .iter()
            .map(|a| (a.name.clone(), a.served))
            .collect();
        // An app whose role changed (a worker now served, or the reverse)
        // is replaced too: a worker has no socket for a route.
        let new = |a: &&AppSection| !running.contains(&(a.name.clone(), a.served));
        for section in next.apps.iter().filter(new) {
            // A directory of its own: a removed app of the same name may
            // still be draining, its socket files named as the new ones'.
            let generation = self.generation.fetch_add(1, Ordering::Relaxed);
            let dir = self
                .runtime_dir
                .join(format!("{}.{generation}", section.name));
            let was = running.iter().any(|(name, _)| *name == section.name);
            match self.start_one(next, section.clone(), dir) {
                Ok(mut app) => {
                    app.fresh = true;
                    report.push_str(&format!(
                        "{}: {}; starting its instances{}\n",
                        app.name,
                        match (was, app.served) {
                            (false, _) => "new in the file",
                            (true, true) => "now served (was a worker)",
                            (true, false) => "now a worker (was served)",
                        },
                        match app.served {
                            true => " (its routes' requests wait for the first)",
                            false => " (a worker)",
                        }
                    ));
                    if app.served {
                        self.table.add(app.served());
                    }
                    self.lock().push(app);
                }
                Err(e) => {
                    log::error!("reload: app {} did not start: {e:#}", section.name);
                    report.push_str(&format!(
                        "{}: new in the file, but did not start: {e:#}\n",
                        section.name
                    ));
                }
            }
        }
        report
    }

    /// Whether a reload to `next` adds and removes apps by name: the apps
    /// come from the file, and there are apps in it; one before and one
    /// after is the same app, whatever its name.
    fn changes_by_name(&self, next: &Config) -> bool {
        self.from_file && !next.apps.is_empty() && !(self.lock().len() == 1 && next.apps.len() == 1)
    }

    /// Takes the apps gone from `next` out of the routes' table, then
    /// drains and stops them on a thread of their own (a drain lasts up to
    /// `grace_period`; the main loop must not wait). Returns the report.
    fn stop_removed(&self, next: &Config) -> String {
        let mut report = String::new();
        if !self.changes_by_name(next) {
            return report;
        }
        let mut apps = self.lock();
        let (gone, kept): (Vec<RunningApp>, Vec<RunningApp>) =
            std::mem::take(&mut *apps).into_iter().partition(|a| {
                !next
                    .apps
                    .iter()
                    .any(|d| d.name == a.name && d.served == a.served)
            });
        let replaced = |name: &str| kept.iter().any(|a| a.name == name);
        for app in gone {
            report.push_str(&format!(
                "{}: {}; draining and stopping its instances\n",
                app.name,
                match replaced(&app.name) {
                    true => "its role changed",
                    false => "gone from the file",
                }
            ));
            if app.served {
                // Its replacement, if any, is a worker: not in the table.
                self.table.remove(&app.name);
            }
            std::thread::spawn(move || {
                app.supervisor.stop_app();
                drop(app);
            });
        }
        *apps = kept;
        report
    }

    /// The apps' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.lock().iter().map(|a| a.name.clone()).collect()
    }

    /// What the "serving" line says of the apps.
    pub fn describe(&self, config: &Config, sections: &[AppSection]) -> String {
        match (&self.lock()[..], sections) {
            ([_], [one]) => {
                let n = one
                    .instances
                    .unwrap_or(Instances::Auto)
                    .get(config.global.workers.get());
                format!("{} ({n} instances)", one.command.join(" "))
            }
            (apps, _) => format!(
                "{} apps ({})",
                apps.len(),
                apps.iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Every app's status handle.
    pub fn statuses(&self) -> Vec<AppStatus> {
        self.lock().iter().map(|a| a.supervisor.status()).collect()
    }

    /// `hayate status`: each app's table under a line naming it and its
    /// routes (or that it is a worker).
    pub fn status_text(statuses: &[(AppStatus, String)]) -> String {
        statuses
            .iter()
            .map(|(status, role)| status.text(role))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Each app's status handle and what it is: `served at site/prefix,...`
    /// (routes of the running configuration) or `worker (no route)`.
    pub fn roles(&self) -> Vec<(AppStatus, String)> {
        let config = self
            .config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let apps = self.lock();
        apps.iter()
            .map(|a| {
                let role = match a.served {
                    false => "worker (no route: supervised, not proxied to)".to_string(),
                    true => format!("served at {}", routes_of(&config, &a.name, apps.len())),
                };
                (a.supervisor.status(), role)
            })
            .collect()
    }

    /// A reload: every app (`only` is `None`) or the one named takes its
    /// new command, cwd and env from `next` (if it came from the file) and
    /// rolls its instances. Returns the report.
    pub fn reload(&self, next: &Config, only: Option<&str>) -> String {
        *self.config.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(next.clone());
        let mut report = self.stop_removed(next);
        let mut apps = self.lock();
        let single = apps.len() == 1;
        for app in apps.iter_mut() {
            // One started by this reload runs the file as it is now.
            let fresh = std::mem::take(&mut app.fresh);
            if fresh || only.is_some_and(|name| name != app.name) {
                continue;
            }
            let declared = next
                .apps
                .iter()
                .find(|a| a.name == app.name || (single && next.apps.len() == 1));
            if declared.is_some_and(|d| format!("{:?}", d.options(&next.global)) != app.options) {
                report.push_str(&format!(
                    "{}: app_* options changed: not until a restart (the supervisor is set up at start)\n",
                    app.name
                ));
            }
            if declared.is_some_and(|d| restarts_of(d) != app.restarts) {
                report.push_str(&format!(
                    "{}: watch, ignore, build or its restart schedule changed: not until a restart\n",
                    app.name
                ));
            }
            if let Some(section) = declared.filter(|_| app.from_file) {
                let cwd = section.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
                match environment(section) {
                    Ok(env) => {
                        if app
                            .supervisor
                            .set_command(section.command.clone(), cwd, env)
                        {
                            let what = match single {
                                true => "[app]".to_string(),
                                false => format!("[[app]] {}", app.name),
                            };
                            report.push_str(&format!(
                                "{what}: command, cwd or env changed; new instances start with it\n"
                            ));
                        }
                    }
                    Err(e) => report.push_str(&format!(
                        "{}: {e:#}; its new instances start with the environment they had\n",
                        app.name
                    )),
                }
            }
            if app.supervisor.is_stopped() {
                report.push_str(&format!(
                    "{0}: stopped (hayate start {0} starts it as the file says now)\n",
                    app.name
                ));
                continue;
            }
            app.supervisor.reload();
            report.push_str(&format!(
                "{}: reloading its instances, app_reload_parallel at a time\n",
                app.name
            ));
        }
        report
    }

    /// `hayate start|stop|restart APP` (`name` is one of [`Self::names`]).
    pub fn act(&self, action: AppAction, name: &str) -> String {
        let apps = self.lock();
        let Some(app) = apps.iter().find(|a| a.name == name) else {
            return format!("no app named {name:?}\n");
        };
        let s = &app.supervisor;
        match action {
            AppAction::Stop if s.stop_app() => format!(
                "{name}: stopping its instances (drained first); its routes answer 503 until hayate start {name}\n"
            ),
            AppAction::Stop => format!("{name}: stopped already\n"),
            AppAction::Start if s.start_app() => format!("{name}: starting its instances\n"),
            AppAction::Start => format!(
                "{name}: runs already (hayate restart {name} replaces its instances)\n"
            ),
            AppAction::Restart => {
                s.restart();
                format!("{name}: replacing its instances, app_reload_parallel at a time\n")
            }
        }
    }

    /// Opens every app log again (SIGUSR1).
    pub fn reopen_logs(&self) -> std::io::Result<()> {
        for log in self.lock().iter().filter_map(|a| a.log.as_ref()) {
            log.reopen()?;
        }
        Ok(())
    }
}

impl Drop for RunningApps {
    fn drop(&mut self) {
        // Each supervisor stops its instances and waits.
        self.lock().clear();
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

/// Refuses apps whose `listen = "tcp:BASE"` port ranges overlap: each
/// takes BASE to BASE+2N-1 (N instances, and their replacements), and
/// two apps on one port would pass each other's readiness checks.
fn check_port_ranges(config: &Config, apps: &[AppSection]) -> anyhow::Result<()> {
    let workers = config.global.workers.get();
    let ranges: Vec<(&str, u32, u32)> = apps
        .iter()
        .filter(|a| a.served)
        .filter_map(|a| match a.options(&config.global).listen {
            Some(AppListen::TcpBase(base)) => {
                let n = a.instances.unwrap_or(Instances::Auto).get(workers) as u32;
                Some((a.name.as_str(), u32::from(base), u32::from(base) + 2 * n))
            }
            _ => None,
        })
        .collect();
    for (i, (a, a_start, a_end)) in ranges.iter().enumerate() {
        for (b, b_start, b_end) in &ranges[i + 1..] {
            anyhow::ensure!(
                b_end <= a_start || a_end <= b_start,
                "apps {a} and {b}: their tcp:BASE ports overlap ({a}: {a_start}-{}, {b}: {b_start}-{}); \
                 give each a base at least 2 x its instances apart",
                a_end - 1,
                b_end - 1
            );
        }
    }
    Ok(())
}

/// Where routes send to app `name`: `HOST/PREFIX` or `/PREFIX`, comma
/// separated.
fn routes_of(config: &Config, name: &str, apps: usize) -> String {
    let mut places = Vec::new();
    for site in &config.sites {
        let host = site.hosts.first().map_or("", String::as_str);
        for route in &site.routes {
            let to_it = match route.options.app.name() {
                Some(n) => n == name,
                None => route.options.app.is_on() && apps == 1,
            };
            if to_it {
                places.push(format!("{host}{}", route.prefix));
            }
        }
    }
    places.join(", ")
}

/// `hayate run --watch`: an app with no `watch` of its own watches its
/// whole directory, except its `ignore` and the routes' roots under it
/// (files served from a root are read fresh: no restart needed).
pub(crate) fn watch_by_default(app: &mut AppSection, static_roots: &[PathBuf]) {
    if app.watch.is_some() {
        return;
    }
    let cwd = app.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    let mut ignore = app.ignore.clone();
    for root in static_roots {
        if let Ok(under) = root.strip_prefix(&cwd) {
            if !under.as_os_str().is_empty() {
                // With a `/`, an ignore entry is a path from the app's
                // directory, not a name matched anywhere.
                ignore.push(format!("./{}", under.display()));
            }
        }
    }
    app.watch = Some(hayate_config::app_restart::WatchRules {
        paths: Vec::new(),
        ignore,
    });
}

/// hayate's own files in the app's directory, as `ignore` entries: its
/// control socket, pid and lock files, its logs and their rotations.
/// Written while it runs, they must not restart the app.
fn own_files(config: &Config, app: &AppSection) -> Vec<String> {
    let g = &config.global;
    let access_log = match &g.access_log {
        hayate_config::values::AccessLog::File(path) => Some(path.clone()),
        _ => None,
    };
    let app_log = app.options(g).log;
    let cwd = app.cwd.clone().unwrap_or_else(|| PathBuf::from("."));
    let Ok(cwd) = std::fs::canonicalize(cwd) else {
        return Vec::new();
    };
    let mut own = Vec::new();
    for (path, stem_only) in [
        (g.control.clone(), true),
        (g.error_log.clone(), false),
        (access_log, false),
        (app_log, false),
    ] {
        let Some(path) = path else { continue };
        let path = std::path::absolute(&path).unwrap_or(path);
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            continue;
        };
        let Ok(under) =
            std::fs::canonicalize(dir).map(|d| d.strip_prefix(&cwd).map(Path::to_path_buf))
        else {
            continue;
        };
        let Ok(under) = under else { continue };
        let name = name.to_string_lossy();
        // The control socket's family: NAME.sock, NAME.pid (written as
        // NAME.pid.PID, then renamed), NAME.lock.
        let stem = match stem_only {
            true => path
                .file_stem()
                .map_or(name.to_string(), |s| s.to_string_lossy().into()),
            false => name.to_string(),
        };
        own.push(format!("./{}", under.join(&*stem).display()));
        own.push(format!("./{}", under.join(format!("{stem}.*")).display()));
    }
    own
}

/// The routes' static roots, resolved.
pub(crate) fn static_roots(config: &Config) -> Vec<PathBuf> {
    config
        .sites
        .iter()
        .flat_map(|s| &s.routes)
        .filter_map(|r| std::fs::canonicalize(r.options.root.as_ref()?).ok())
        .collect()
}

/// What an app restarts on by itself, to compare across reloads.
fn restarts_of(app: &AppSection) -> String {
    format!("{:?} {:?} {:?}", app.watch, app.build, app.schedule)
}

/// An app's environment: its `env_file` (read now), then its `env`.
fn environment(app: &AppSection) -> anyhow::Result<Vec<(String, String)>> {
    let mut env = Vec::new();
    if let Some(path) = &app.env_file {
        env = read_env_file(path)?;
    }
    env.extend(app.env.iter().cloned());
    Ok(env)
}

/// Reads and parses an `env_file`; an error names `file:line`.
pub(crate) fn read_env_file(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("env_file {}", path.display()))?;
    hayate_config::app::parse_env_file(&text)
        .map_err(|(line, why)| anyhow::anyhow!("{}:{line}: {why}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_apps(api_base: u16, web_base: u16) -> Config {
        let text = format!(
            "root = \".\"\nworkers = 1\n\
             [[app]]\nname = \"api\"\ncommand = \"x\"\ninstances = 2\nlisten = \"tcp:{api_base}\"\n\
             [[app]]\nname = \"web\"\ncommand = \"y\"\ninstances = 1\nlisten = \"tcp:{web_base}\"\n\
             [[site]]\nroot = \".\"\n[[site.route]]\nprefix = \"/a/\"\napp = \"api\"\n\
             [[site.route]]\nprefix = \"/w/\"\napp = \"web\"\n"
        );
        let overrides = hayate_config::Overrides::default();
        hayate_config::load_file("h.toml".as_ref(), &text, &overrides).expect("valid")
    }

    #[test]
    fn hayates_own_files_in_a_watched_directory_are_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().display();
        let text = format!(
            "root = \".\"\ncontrol = \"{d}/run/c.sock\"\nerror_log = \"{d}/error.log\"\n\
             [app]\ncommand = \"x\"\nlog = \"{d}/app.log\"\n"
        );
        std::fs::create_dir(dir.path().join("run")).expect("mkdir");
        let path = dir.path().join("h.toml");
        let overrides = hayate_config::Overrides::default();
        let config = hayate_config::load_file(&path, &text, &overrides).expect("valid");
        let own = own_files(&config, &config.apps[0]);
        assert_eq!(
            own,
            [
                "./run/c",
                "./run/c.*",
                "./error.log",
                "./error.log.*",
                "./app.log",
                "./app.log.*"
            ]
        );
    }

    #[test]
    fn tcp_base_ranges_of_two_apps_must_not_overlap() {
        // api takes 4000-4003 (2 instances and their replacements).
        let ok = two_apps(4000, 4004);
        assert!(check_port_ranges(&ok, &ok.apps).is_ok());
        let bad = two_apps(4000, 4003);
        let e = check_port_ranges(&bad, &bad.apps).expect_err("overlap");
        assert!(
            e.to_string().contains("api: 4000-4003, web: 4003-4004"),
            "{e}"
        );
    }
}
