//! `hayate php [DIR] [options]`: php-fpm as the supervised app, speaking
//! FastCGI, with a pool generated for this machine
//! ([`hayate_supervisor::php::PhpPool`]); DIR (default: the current
//! directory) is the document root: files first, then scripts, then the
//! front controller.
//!
//! PHP never runs as root by accident: a hayate started as root runs
//! php-fpm (its master and so its children) as `app_user`, else `user`,
//! else `www-data` where it exists, else `nobody`; root only when asked
//! for by name, with a warning. The files hayate writes for php-fpm (its
//! configuration, the directory of its socket) belong to that user.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ArgMatches;
use hayate_config::{cli, Config, Overrides};
use hayate_core::identity::Identity;
use hayate_server::handoff::Inherited;

use crate::{app_identity, init_log, load_with, rereader, supervise};

/// Who PHP runs as when hayate starts as root and nobody says: the first
/// of these that exists (Debian's and most distributions' web user, then
/// the user that owns nothing).
const UNPRIVILEGED: &[&str] = &["www-data", "nobody"];

/// Runs `hayate php`.
pub fn run(m: &ArgMatches, inherited: Inherited) -> anyhow::Result<()> {
    use hayate_config::app::{AppProtocol, AppSection, Instances};
    use hayate_supervisor::php::{php_fpm_binary, PhpPool};
    let binary = php_fpm_binary()
        .context("php-fpm not found on PATH or in /usr/sbin (Debian: apt-get install php-fpm)")?;
    let mut overrides: Overrides = cli::overrides_from(m)?;
    let root = PathBuf::from(m.get_one::<String>("dir").map_or(".", String::as_str));
    overrides.route.root = Some(root.clone());
    overrides.route.app = Some(hayate_config::app::AppRef::Only);
    overrides.global.app_protocol = Some(AppProtocol::FastCgi);
    let pool = PhpPool::sized_to_machine();
    // Every child may hold a kept connection: hayate's bound is the pool.
    overrides
        .global
        .fastcgi_max_conns
        .get_or_insert(pool.children);
    let mut config = load_with(m, &overrides)?;
    let reread = rereader(m, overrides);
    // Readiness is the socket accepting: php-fpm answers no HTTP probe.
    config.global.app_ready_path = None;
    // What is said about PHP's user is said in the log (`supervise` sets
    // it up again, the same way).
    init_log(&config)?;
    let who = php_user(&mut config)?;
    // The pool's file, private to this hayate and to PHP's user (its
    // socket comes in PORT, in a directory the supervisor gives that user).
    let dir = std::env::temp_dir().join(format!("hayate-php-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let conf = dir.join("php-fpm.conf");
    std::fs::write(&conf, pool.config()).with_context(|| format!("{}", conf.display()))?;
    if let Some(who) = &who {
        for path in [&dir, &conf] {
            std::os::unix::fs::chown(path, Some(who.uid), Some(who.gid))
                .with_context(|| format!("giving {} to {}", path.display(), who.name))?;
        }
    }
    let as_root = match &who {
        Some(who) => who.uid == 0,
        None => nix::unistd::geteuid().is_root(),
    };
    let app = AppSection {
        name: hayate_config::app::DEFAULT_APP_NAME.into(),
        command: PhpPool::command(&binary, &conf, as_root),
        cwd: Some(root),
        // One master: php-fpm runs its children itself.
        instances: Some(Instances::Count(1)),
        served: true,
        ..AppSection::default()
    };
    let file = m.get_one::<String>("config");
    let result = supervise(config, vec![app], file, reread, inherited);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Who php-fpm runs as (`None`: as hayate, which is not root). As root
/// without `app_user` or `user`, the first [`UNPRIVILEGED`] user becomes
/// `config`'s `app_user`.
fn php_user(config: &mut Config) -> anyhow::Result<Option<Identity>> {
    if let Some(who) = app_identity(config)? {
        if who.uid == 0 {
            log::warn!(
                "PHP runs as root ({:?} asked for it): any script, or a flaw in one, can do \
                 anything on this machine; give --app-user www-data unless root is needed",
                who.name
            );
        }
        return Ok(Some(who));
    }
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let Some(who) = UNPRIVILEGED
        .iter()
        .find_map(|name| Identity::resolve(name, None).ok())
    else {
        anyhow::bail!(
            "hayate php started as root runs PHP as www-data or nobody, and neither exists: \
             give --app-user USER (--app-user root to run PHP as root)"
        );
    };
    log::info!("PHP runs as {} (hayate was started as root)", who.name);
    warn_unreadable(config, &who);
    config.global.app_user = Some(who.name.clone());
    Ok(Some(who))
}

/// Warns when `who` cannot reach a route's root: every directory on the
/// way must let it search (a root under /root, mode 0700, is the usual
/// case). Mode bits only: ACLs and supplementary groups may allow more.
fn warn_unreadable(config: &Config, who: &Identity) {
    let roots = config
        .sites
        .iter()
        .flat_map(|s| &s.routes)
        .filter_map(|r| r.options.root.as_deref());
    for root in roots {
        let Ok(real) = std::fs::canonicalize(root) else {
            continue;
        };
        if let Some(dir) = real.ancestors().find(|d| !may_search(d, who)) {
            log::warn!(
                "PHP runs as {}, who may not enter {} (on the way to {}): php-fpm cannot \
                 start there nor read the scripts; let it in (chmod o+x) or give --app-user",
                who.name,
                dir.display(),
                real.display()
            );
        }
    }
}

/// Whether `who` may search the directory `dir`, by its mode bits.
fn may_search(dir: &Path, who: &Identity) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return true;
    };
    let mode = meta.mode();
    if meta.uid() == who.uid {
        mode & 0o100 != 0
    } else if meta.gid() == who.gid {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}
