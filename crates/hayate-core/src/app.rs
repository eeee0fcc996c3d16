//! The meeting point of the supervisor and the proxy: slots of a supervised
//! app, each holding the instance that currently takes requests.
//!
//! The supervisor (its own thread) swaps instances in and out; every worker's
//! proxy reads the current one when it connects, counts its requests in
//! flight on it (so a replaced instance is drained before it is stopped) and
//! drops pooled connections to instances that are no longer current.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Where an instance listens (what it was told in `PORT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppAddr {
    /// A Unix socket.
    Unix(PathBuf),
    /// A loopback TCP port.
    Tcp(SocketAddr),
    /// Nowhere: a worker process (an app no route names), told no `PORT`
    /// and never proxied to.
    None,
}

impl fmt::Display for AppAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppAddr::Unix(p) => write!(f, "{}", p.display()),
            AppAddr::Tcp(a) => write!(f, "{a}"),
            AppAddr::None => f.write_str("no socket (a worker)"),
        }
    }
}

/// A running, ready instance of the app.
#[derive(Debug)]
pub struct AppInstance {
    /// Where it listens.
    pub addr: AppAddr,
    /// Unique per started instance.
    pub id: u64,
    /// Requests in flight on it, across workers.
    pub inflight: AtomicU32,
    /// Requests sent to it so far (max-requests recycling).
    pub served: AtomicU64,
}

impl AppInstance {
    /// A ready instance.
    pub fn new(addr: AppAddr, id: u64) -> Arc<AppInstance> {
        Arc::new(AppInstance {
            addr,
            id,
            inflight: AtomicU32::new(0),
            served: AtomicU64::new(0),
        })
    }

    /// Requests in flight.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Acquire)
    }
}

/// One slot of the app (instance number `HAYATE_INSTANCE`).
#[derive(Debug, Default)]
pub struct AppSlot {
    current: Mutex<Option<Arc<AppInstance>>>,
}

impl AppSlot {
    /// The instance taking requests now, if one is ready.
    pub fn current(&self) -> Option<Arc<AppInstance>> {
        self.current.lock().map(|c| c.clone()).unwrap_or(None)
    }

    /// Puts `instance` in (or takes the slot out with `None`); returns the
    /// previous one.
    pub fn replace(&self, instance: Option<Arc<AppInstance>>) -> Option<Arc<AppInstance>> {
        match self.current.lock() {
            Ok(mut c) => std::mem::replace(&mut *c, instance),
            Err(_) => None,
        }
    }
}

/// The slots of an app and the signal raised when one becomes ready.
#[derive(Debug, Clone)]
pub struct AppSlots {
    /// One per instance.
    pub slots: Vec<Arc<AppSlot>>,
    /// Notified (all waiters) whenever a slot gets a ready instance.
    pub ready: Arc<Notify>,
    /// Requests waiting in the app group's queues, across workers (each
    /// worker adds and removes its own; read by `hayate status`).
    pub queued: Arc<AtomicUsize>,
    /// Slots in a crash loop, not restarted until a reload.
    pub halted: Arc<AtomicUsize>,
    /// Stopped by `hayate stop APP`, until `hayate start APP`: requests
    /// are answered 503 at once instead of waiting for an instance.
    pub stopped: Arc<AtomicBool>,
}

impl AppSlots {
    /// Requests waiting for an instance now.
    pub fn queue_depth(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Whether every slot is in a crash loop: no instance will become ready
    /// until a reload, so waiting for one is pointless.
    pub fn is_down(&self) -> bool {
        self.halted.load(Ordering::Acquire) >= self.slots.len()
    }

    /// Whether `hayate stop APP` stopped it.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// `n` empty slots.
    pub fn new(n: usize) -> AppSlots {
        AppSlots {
            slots: (0..n).map(|_| Arc::new(AppSlot::default())).collect(),
            ready: Arc::new(Notify::new()),
            queued: Arc::new(AtomicUsize::new(0)),
            halted: Arc::new(AtomicUsize::new(0)),
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// A supervised app that routes send to, and how they speak to it.
#[derive(Debug, Clone)]
pub struct ServedApp {
    /// Its name (`app = "NAME"` on a route; `app` for the only app).
    pub name: Arc<str>,
    /// Its slots.
    pub slots: AppSlots,
    /// Whether its instances speak FastCGI (php-fpm) rather than HTTP.
    pub fastcgi: bool,
}

/// The served apps, by name: what the server is given and routes look up.
/// Cloning is shallow: every clone (the reloader's, each worker's) sees an
/// app added or removed by a reload that adds or removes an `[[app]]`.
/// Routers look apps up when they are built, never per request; the lock
/// is held only to copy the list out. Workers (apps no route names) are
/// not in it.
#[derive(Debug, Clone, Default)]
pub struct AppTable {
    apps: Arc<std::sync::RwLock<Arc<[ServedApp]>>>,
}

impl AppTable {
    /// A table of `apps` (names unique).
    pub fn new(apps: Vec<ServedApp>) -> AppTable {
        AppTable {
            apps: Arc::new(std::sync::RwLock::new(apps.into())),
        }
    }

    fn list(&self) -> Arc<[ServedApp]> {
        self.apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The app called `name`; with `None` (a route's `app = true`), the
    /// only app, if there is exactly one.
    pub fn find(&self, name: Option<&str>) -> Option<ServedApp> {
        match (name, &*self.list()) {
            (None, [only]) => Some(only.clone()),
            (None, _) => None,
            (Some(name), apps) => apps.iter().find(|a| &*a.name == name).cloned(),
        }
    }

    /// Adds `app` (a reload started it), replacing one of its name.
    pub fn add(&self, app: ServedApp) {
        let mut apps = self
            .apps
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut list: Vec<ServedApp> = apps
            .iter()
            .filter(|a| a.name != app.name)
            .cloned()
            .collect();
        list.push(app);
        *apps = list.into();
    }

    /// Removes the app called `name` (a reload's config no longer has
    /// it; routers built before keep their copy until they are replaced).
    pub fn remove(&self, name: &str) {
        let mut apps = self
            .apps
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let list: Vec<ServedApp> = apps.iter().filter(|a| &*a.name != name).cloned().collect();
        *apps = list.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_are_found_by_name_and_the_only_one_without() {
        let app = |name: &str| ServedApp {
            name: name.into(),
            slots: AppSlots::new(1),
            fastcgi: false,
        };
        let one = AppTable::new(vec![app("app")]);
        assert_eq!(one.find(None).map(|a| a.name), Some("app".into()));
        let two = AppTable::new(vec![app("api"), app("web")]);
        assert!(two.find(None).is_none(), "app = true is ambiguous with two");
        assert_eq!(two.find(Some("web")).map(|a| a.name), Some("web".into()));
        assert!(two.find(Some("nope")).is_none());
        assert!(AppTable::default().find(None).is_none());
        let seen_by_a_clone = two.clone();
        two.add(app("admin"));
        two.remove("api");
        assert_eq!(
            seen_by_a_clone.find(Some("admin")).map(|a| a.name),
            Some("admin".into())
        );
        assert!(seen_by_a_clone.find(Some("api")).is_none());
    }
}
