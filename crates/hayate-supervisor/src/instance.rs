//! One instance of the app: its process (in its own process group), its
//! socket, its captured output.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hayate_core::app::{AppAddr, AppInstance};
use hayate_core::h1;
use hayate_core::identity::Identity;
use hayate_core::transport::Transport;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::loopback;
use crate::port_errors::{self, OutputTail};
use crate::{AppSpec, Listen, RotatingLog};

/// How often readiness and drains are polled.
const POLL: Duration = Duration::from_millis(20);

/// How long a worker (an app with no socket) must stay up to count as
/// started: a Node script with a syntax error or a missing module exits in
/// about 100 ms, so 300 ms tells those apart from a worker that runs,
/// and delays a worker's rolling reload by no more than that.
const WORKER_SETTLE: Duration = Duration::from_millis(300);

/// A started, ready instance.
pub(crate) struct Running {
    child: Child,
    pid: u32,
    pub instance: Arc<AppInstance>,
}

impl Running {
    /// Starts instance `index` and waits until its socket accepts.
    /// `alternate` picks the second port of a slot under `tcp:BASE` (a
    /// replacement must not take the port its predecessor still holds).
    /// While it waits, `stopping()` turning true (hayate stops) stops the
    /// new process and ends the wait with `ErrorKind::Interrupted`.
    pub async fn start(
        index: usize,
        spec: &AppSpec,
        ids: &AtomicU64,
        alternate: bool,
        stopping: impl Fn() -> bool,
    ) -> io::Result<Running> {
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let addr = match &spec.listen {
            Listen::Unix(dir) => {
                let path = dir.join(format!("app-{index}-{id}.sock"));
                let _ = std::fs::remove_file(&path);
                AppAddr::Unix(path)
            }
            Listen::Tcp => {
                // A port the kernel deems free now; the app binds it next.
                let probe = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
                AppAddr::Tcp(probe.local_addr()?)
            }
            Listen::TcpBase(base) => {
                let offset = index + if alternate { spec.instances } else { 0 };
                let port = u16::try_from(usize::from(*base) + offset)
                    .map_err(|_| io::Error::other("app port out of range"))?;
                let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
                // Another process on the port would pass the readiness check
                // in the instance's place.
                if let Err(e) = std::net::TcpListener::bind(addr) {
                    return Err(io::Error::new(e.kind(), format!("app port {port}: {e}")));
                }
                AppAddr::Tcp(addr)
            }
            Listen::None => AppAddr::None,
        };
        let port = match &addr {
            AppAddr::Unix(path) => Some(path.as_os_str().to_owned()),
            AppAddr::Tcp(a) => Some(a.port().to_string().into()),
            AppAddr::None => None,
        };
        // Re-resolved at every start: a `current -> releases/N` switch takes.
        let cwd = std::fs::canonicalize(&spec.cwd).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("app directory {}: {e}", spec.cwd.display()),
            )
        })?;
        let mut cmd = Command::new(&spec.command[0]);
        cmd.args(&spec.command[1..])
            .current_dir(&cwd)
            .env("HAYATE_INSTANCE", index.to_string())
            // It decrypts the ACME keys shared in Redis: hayate's, not the app's.
            .env_remove("HAYATE_SHARED_KEY");
        match &port {
            Some(port) => cmd.env("PORT", port),
            // A worker listens nowhere: a PORT of hayate's own would mislead it.
            None => cmd.env_remove("PORT"),
        };
        if matches!(addr, AppAddr::Tcp(_)) {
            // Frameworks that take a host from the environment listen on
            // loopback (the app's own env below may say otherwise); Node
            // apps that take none are held to it by the preload.
            cmd.env("HOST", loopback::HOST)
                .env("HOSTNAME", loopback::HOST);
            let own = spec
                .env
                .iter()
                .rev()
                .find(|(k, _)| k == "NODE_OPTIONS")
                .map(|(_, v)| v.into())
                .or_else(|| std::env::var_os("NODE_OPTIONS"));
            let preload = spec.runtime_dir.join(loopback::NODE_PRELOAD_FILE);
            cmd.env("NODE_OPTIONS", loopback::node_options(&preload, own));
        }
        cmd.envs(
            spec.env
                .iter()
                .filter(|(k, _)| !(k == "NODE_OPTIONS" && matches!(addr, AppAddr::Tcp(_))))
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
        let other = spec
            .run_as
            .as_ref()
            .filter(|who| who.uid != nix::unistd::geteuid().as_raw());
        let (out, err) = (output_pipe(other)?, output_pipe(other)?);
        cmd.stdout(out.0).stderr(err.0);
        if let Some(who) = &spec.run_as {
            cmd.uid(who.uid)
                .gid(who.gid)
                .env("HOME", &who.home)
                .env("USER", &who.name)
                .env("LOGNAME", &who.name);
        }
        let child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", spec.command[0])))?;
        let pid = child.id().unwrap_or(0);
        let tail = OutputTail::default();
        let tag = spec.tag(index);
        tokio::spawn(relay_lines(
            out.1,
            tag.clone(),
            pid,
            "stdout",
            spec.log.clone(),
            tail.clone(),
        ));
        tokio::spawn(relay_lines(
            err.1,
            tag,
            pid,
            "stderr",
            spec.log.clone(),
            tail.clone(),
        ));
        let mut run = Running {
            child,
            pid,
            instance: AppInstance::new(addr, id),
        };
        let deadline = Instant::now() + spec.start_timeout;
        let settled = Instant::now() + WORKER_SETTLE;
        loop {
            let ready = match &run.instance.addr {
                AppAddr::None => Instant::now() >= settled,
                addr => is_ready(addr, spec.ready_path.as_deref()).await,
            };
            if ready {
                if let AppAddr::Tcp(a) = &run.instance.addr {
                    let exposed = loopback::exposed_listeners(a.port());
                    if !exposed.is_empty() {
                        let tag = spec.tag(index);
                        log::warn!("{}", loopback::exposure_warning(&tag, pid, &exposed));
                    }
                }
                return Ok(run);
            }
            if let Some(status) = run.child.try_wait()? {
                run.cleanup();
                let mut why = format!("exited before it was ready ({status})");
                // Its last lines reach the tail a moment after it exits.
                let hint = match &port {
                    Some(port) => port_hint_after_exit(&tail, spec, port).await,
                    None => None,
                };
                if let Some(hint) = hint {
                    why = format!("{why}, because of {hint}");
                }
                return Err(io::Error::other(why));
            }
            if stopping() {
                run.stop(spec.stop_timeout).await;
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "stopped while starting",
                ));
            }
            if Instant::now() >= deadline {
                let message = format!(
                    "not accepting on {} after {:?}",
                    run.instance.addr, spec.start_timeout
                );
                run.stop(Duration::from_secs(1)).await;
                return Err(io::Error::new(io::ErrorKind::TimedOut, message));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Resident memory of the process, from /proc.
    pub fn rss_bytes(&self) -> Option<u64> {
        rss_of(self.pid)
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> String {
        match self.child.wait().await {
            Ok(status) => describe(status),
            Err(e) => e.to_string(),
        }
    }

    /// Waits until no request is in flight on this instance (true), or
    /// `limit` passes (false).
    pub async fn drain(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.instance.inflight() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
        true
    }

    /// SIGTERM to the process group, SIGKILL after `grace`; removes the
    /// socket.
    pub async fn stop(mut self, grace: Duration) {
        let group = Pid::from_raw(self.pid as i32);
        let _ = killpg(group, Signal::SIGTERM);
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            log::warn!(
                "app pid {} ignored SIGTERM for {grace:?}; killing it",
                self.pid
            );
            let _ = killpg(group, Signal::SIGKILL);
            let _ = self.child.wait().await;
        }
        self.kill_group();
        self.cleanup();
    }

    /// Kills what is left of the instance's process group once it exited:
    /// the processes it started go with it (php-fpm's workers outlive a
    /// master killed by SIGKILL, and would keep their memory forever).
    pub fn kill_group(&self) {
        let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
    }

    /// Removes the socket file (Unix sockets).
    pub fn cleanup(&self) {
        if let AppAddr::Unix(path) = &self.instance.addr {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Readiness: the socket accepts, and when a probe path is set, `GET path`
/// answers 2xx within 2 s.
async fn is_ready(addr: &AppAddr, probe: Option<&str>) -> bool {
    let conn = match addr {
        AppAddr::Unix(path) => tokio::net::UnixStream::connect(path)
            .await
            .map(Transport::Unix),
        AppAddr::Tcp(a) => match tokio::net::TcpStream::connect(a).await {
            Ok(s) => Transport::tcp(s),
            Err(e) => Err(e),
        },
        AppAddr::None => return false,
    };
    let Ok(mut conn) = conn else { return false };
    let Some(probe) = probe else { return true };
    let answered = h1::probe::get(&mut conn, probe, "hayate-ready", Duration::from_secs(2)).await;
    answered.is_ok_and(|status| status.is_success())
}

/// Resident memory of a process, from /proc.
pub(crate) fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (_, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

/// Copies an instance's output, a line at a time, tagged with time,
/// instance and pid, to the app log file or hayate's log.
/// A pipe for the app's stdout or stderr: the end it writes, the end
/// hayate reads. For an app that runs as `other`, a user other than
/// hayate's, the pipe is made its own: a pipe belongs to whoever made it,
/// mode 0600, and an app that opens `/proc/self/fd/2` again (php-fpm's
/// `error_log`, as Docker images log) would otherwise be refused.
fn output_pipe(other: Option<&Identity>) -> io::Result<(Stdio, tokio::net::unix::pipe::Receiver)> {
    let (write, read) = tokio::net::unix::pipe::pipe()?;
    let write = write.into_blocking_fd()?;
    if let Some(who) = other {
        std::os::unix::fs::fchown(&write, Some(who.uid), Some(who.gid))?;
    }
    Ok((Stdio::from(write), read))
}

async fn relay_lines(
    out: impl AsyncRead + Unpin,
    tag: String,
    pid: u32,
    stream: &'static str,
    file: Option<Arc<RotatingLog>>,
    tail: OutputTail,
) {
    let mut lines = BufReader::new(out).lines();
    let _closed = CloseOnDrop(tail.clone());
    while let Ok(Some(line)) = lines.next_line().await {
        tail.push(&line);
        match &file {
            Some(f) => {
                let mut stamped = String::with_capacity(line.len() + 48);
                hayate_core::date::iso_now(&mut stamped);
                stamped.push_str(&format!(" {tag} pid {pid} {stream}: {line}"));
                if let Err(e) = f.write_line(&stamped) {
                    log::error!("app log write failed: {e}");
                }
            }
            None => log::info!("{tag} pid {pid} {stream}: {line}"),
        }
    }
}

/// The port error an instance that just exited printed, if any. Its pipes
/// may still hold its last lines: they are read until both end (at once,
/// unless a process it started holds them), for up to [`OUTPUT_SETTLE`].
async fn port_hint_after_exit(
    tail: &OutputTail,
    spec: &AppSpec,
    port: &std::ffi::OsStr,
) -> Option<String> {
    let port = port.to_string_lossy();
    let deadline = Instant::now() + OUTPUT_SETTLE;
    loop {
        let complete = tail.complete();
        let hint = port_errors::hint(tail, &spec.listen, &port);
        if hint.is_some() || complete || Instant::now() >= deadline {
            return hint;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How long an exited instance's last output is waited for when a process
/// it left behind keeps its pipes open.
const OUTPUT_SETTLE: Duration = Duration::from_millis(100);

/// Marks a stream of the tail ended when its relay ends, however it ends.
struct CloseOnDrop(OutputTail);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}
