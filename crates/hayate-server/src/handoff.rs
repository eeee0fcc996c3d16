//! Binary upgrade with no refused connection (`hayate upgrade`; nginx's
//! USR2, pingora's socket handoff): the running hayate starts the binary now
//! at its path with the same arguments and hands it its listening sockets,
//! the control socket and the admin listener as inherited descriptors. They
//! are the same kernel sockets, so connections waiting in their accept
//! queues are accepted by one process or the other, never reset.
//!
//! The new hayate says `ready` on a socket pair once its workers accept (and
//! its app is ready); the old one then stops accepting, drains and exits. If
//! the new one cannot start, it says `error` and its error on the pair (a
//! config file that no longer loads: its file:line) before it exits; if it
//! fails so or is not ready in time, the old one keeps serving and `hayate
//! upgrade` prints why.
//!
//! Descriptors travel as in systemd's socket activation (`LISTEN_FDS`, from
//! fd 3; command-fds maps them in the child, listenfd takes them), described
//! by one more variable, a line per descriptor: `INDEX KIND KEY`. KIND is
//! `ready`, `control`, `admin-tcp`/`admin-unix`, `tcp`/`unix` for a
//! listener configured as KEY, or `udp` for one of its HTTP/3 sockets.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use hayate_config::values::{Listen, ListenAddr};
use socket2::Socket;

/// The variable that describes the inherited descriptors.
const ENV: &str = "HAYATE_UPGRADE_FDS";

/// The first inherited descriptor (after stdin, stdout, stderr).
const FIRST_FD: i32 = 3;

/// What the new hayate says once it serves.
const READY: &[u8] = b"ready\n";

/// What the new hayate says, followed by its error, when it cannot start.
const FAILED: &[u8] = b"error\n";

/// The key a listener is handed over by: as configured, so `:0` ports and
/// names match across the two processes.
pub fn listen_key(listen: &Listen) -> String {
    let proxy_protocol = if listen.proxy_protocol {
        " proxy_protocol"
    } else {
        ""
    };
    let h2c = if listen.http2_only { " h2c" } else { "" };
    format!(
        "{}://{}{proxy_protocol}{h2c}",
        listen.scheme.as_str(),
        listen.addr
    )
}

/// What a handed-over descriptor is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Ready,
    Control,
    Admin {
        tcp: bool,
    },
    Listener {
        tcp: bool,
        key: String,
    },
    /// A worker's UDP socket of the https listener `key` (HTTP/3).
    Quic {
        key: String,
    },
}

impl Kind {
    fn line(&self, index: usize) -> String {
        match self {
            Kind::Ready => format!("{index} ready"),
            Kind::Control => format!("{index} control"),
            Kind::Admin { tcp: true } => format!("{index} admin-tcp"),
            Kind::Admin { tcp: false } => format!("{index} admin-unix"),
            Kind::Listener { tcp: true, key } => format!("{index} tcp {key}"),
            Kind::Listener { tcp: false, key } => format!("{index} unix {key}"),
            Kind::Quic { key } => format!("{index} udp {key}"),
        }
    }

    fn parse(line: &str) -> Option<(usize, Kind)> {
        let mut parts = line.splitn(3, ' ');
        let index = parts.next()?.parse().ok()?;
        let kind = match (parts.next()?, parts.next()) {
            ("ready", None) => Kind::Ready,
            ("control", None) => Kind::Control,
            ("admin-tcp", None) => Kind::Admin { tcp: true },
            ("admin-unix", None) => Kind::Admin { tcp: false },
            ("tcp", Some(key)) => Kind::Listener {
                tcp: true,
                key: key.into(),
            },
            ("unix", Some(key)) => Kind::Listener {
                tcp: false,
                key: key.into(),
            },
            ("udp", Some(key)) => Kind::Quic { key: key.into() },
            _ => return None,
        };
        Some((index, kind))
    }
}

/// The sockets a hayate hands to its successor: duplicates of its
/// listeners, kept by the main thread while the workers own the originals.
#[derive(Debug, Default)]
pub struct HandoffSet {
    sockets: Vec<(Kind, OwnedFd)>,
}

impl HandoffSet {
    /// Keeps a duplicate of a listener socket bound for `listen`.
    pub fn add_listener(&mut self, listen: &Listen, socket: &Socket) -> io::Result<()> {
        let tcp = matches!(listen.addr, ListenAddr::Tcp(_));
        let key = listen_key(listen);
        self.sockets
            .push((Kind::Listener { tcp, key }, socket.try_clone()?.into()));
        Ok(())
    }

    /// Keeps a duplicate of a worker's HTTP/3 socket of the https
    /// listener `listen`.
    pub fn add_quic(&mut self, listen: &Listen, socket: &std::net::UdpSocket) -> io::Result<()> {
        let key = listen_key(listen);
        self.sockets
            .push((Kind::Quic { key }, socket.try_clone()?.into()));
        Ok(())
    }

    /// Forgets the listener configured as `listen` (a reload removed it):
    /// its duplicates close, so the socket closes with the workers' copies.
    pub fn remove_listener(&mut self, listen: &Listen) {
        let key = listen_key(listen);
        self.sockets.retain(|(kind, _)| match kind {
            Kind::Listener { key: k, .. } | Kind::Quic { key: k } => *k != key,
            _ => true,
        });
    }

    /// Closes every duplicate: hayate stops, and its listeners must close
    /// with the workers' accept loops (new connections refused).
    pub fn clear(&mut self) {
        self.sockets.clear();
    }

    /// Keeps a duplicate of the control socket.
    pub fn set_control(&mut self, listener: &tokio::net::UnixListener) -> io::Result<()> {
        let fd = std::os::fd::AsFd::as_fd(listener).try_clone_to_owned()?;
        self.sockets.push((Kind::Control, fd));
        Ok(())
    }

    /// Keeps a duplicate of the admin listener.
    pub fn set_admin(&mut self, socket: &impl std::os::fd::AsFd, tcp: bool) -> io::Result<()> {
        let fd = socket.as_fd().try_clone_to_owned()?;
        self.sockets.push((Kind::Admin { tcp }, fd));
        Ok(())
    }

    /// Starts `binary` with `args` and these sockets, and waits up to
    /// `timeout` for it to say it serves: `Ok(pid)` then. Otherwise it is
    /// stopped, and the error says why.
    pub fn start_successor(
        &self,
        binary: &Path,
        args: &[std::ffi::OsString],
        timeout: Duration,
    ) -> io::Result<u32> {
        let (ours, theirs) = UnixStream::pair()?;
        let mut lines = Vec::new();
        let mut mappings = Vec::new();
        let handed = std::iter::once((Kind::Ready, OwnedFd::from(theirs)));
        let copies = self
            .sockets
            .iter()
            .map(|(kind, fd)| Ok((kind.clone(), fd.try_clone()?)))
            .collect::<io::Result<Vec<_>>>()?;
        for (index, (kind, fd)) in handed.chain(copies).enumerate() {
            lines.push(kind.line(index));
            mappings.push(FdMapping {
                parent_fd: fd,
                child_fd: FIRST_FD + index as i32,
            });
        }
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .env(ENV, lines.join("\n"))
            .env("LISTEN_FDS", lines.len().to_string())
            .env_remove("LISTEN_PID")
            .stdin(Stdio::null());
        cmd.fd_mappings(mappings)
            .map_err(|e| io::Error::other(format!("handing sockets over: {e}")))?;
        let mut child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", binary.display())))?;
        // The command holds our copies of the child's descriptors: closed
        // now, so that the pair's end of file means the child is gone.
        drop(cmd);
        ours.set_read_timeout(Some(timeout))?;
        match read_verdict(&ours) {
            Ok(Verdict::Ready) => Ok(child.id()),
            result => {
                stop(&mut child);
                Err(match result {
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("the new hayate was not ready in {timeout:?}"),
                        )
                    }
                    Ok(Verdict::Failed(why)) => {
                        io::Error::other(format!("the new hayate failed: {}", why.trim_end()))
                    }
                    _ => io::Error::other(format!(
                        "the new hayate exited before it was ready ({}; hayate's error log may say why)",
                        exit_status(&mut child)
                    )),
                })
            }
        }
    }
}

/// What the new hayate said on the pair.
enum Verdict {
    /// It serves.
    Ready,
    /// It could not start, and why (its error, as it printed it).
    Failed(String),
}

/// Reads the new hayate's verdict: `ready`, or `error` and its reason up to
/// its end (it exits once it has said it). Only the first line is read
/// before deciding: a hayate that serves keeps the pair open.
fn read_verdict(pair: &UnixStream) -> io::Result<Verdict> {
    let mut reader = io::BufReader::new(pair);
    let mut first = String::new();
    io::BufRead::read_line(&mut reader, &mut first)?;
    if first.as_bytes() == READY {
        return Ok(Verdict::Ready);
    }
    if first.as_bytes() == FAILED {
        let mut why = String::new();
        // Bounded: what a failed start prints, not a stream.
        io::Read::take(reader, 64 * 1024).read_to_string(&mut why)?;
        return Ok(Verdict::Failed(why));
    }
    Err(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "no verdict from the new hayate",
    ))
}

/// How a stopped successor ended, for the error.
fn exit_status(child: &mut Child) -> String {
    match child.try_wait() {
        Ok(Some(status)) => status.to_string(),
        _ => "its exit status unknown".into(),
    }
}

/// Stops a successor that did not come up: SIGTERM (it stops its app too).
fn stop(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let _ = child.wait();
}

/// Sockets inherited from the hayate this one replaces (none when it was not
/// started by an upgrade).
#[derive(Debug, Default)]
pub struct Inherited {
    listeners: HashMap<String, Vec<Socket>>,
    quic: HashMap<String, Vec<std::net::UdpSocket>>,
    control: Option<UnixListener>,
    admin: Option<Socket>,
    ready: Option<UnixStream>,
}

impl Inherited {
    /// Takes the descriptors the environment describes; the variables are
    /// removed, so the app does not see them. Call it first thing, before
    /// any other thread runs.
    pub fn from_env() -> io::Result<Inherited> {
        let Some(text) = std::env::var_os(ENV) else {
            return Ok(Inherited::default());
        };
        std::env::remove_var(ENV);
        let mut fds = listenfd::ListenFd::from_env();
        let mut inherited = Inherited::default();
        let bad = |line: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{ENV}: cannot use {line:?}"),
            )
        };
        for line in text.to_string_lossy().lines() {
            let (index, kind) = Kind::parse(line).ok_or_else(|| bad(line))?;
            let unix = |fds: &mut listenfd::ListenFd| -> io::Result<UnixListener> {
                fds.take_unix_listener(index)?.ok_or_else(|| bad(line))
            };
            match kind {
                Kind::Ready => {
                    // A connected stream, not a listener: listenfd checks
                    // only its family and type.
                    inherited.ready = Some(UnixStream::from(OwnedFd::from(unix(&mut fds)?)));
                }
                Kind::Control => inherited.control = Some(unix(&mut fds)?),
                Kind::Admin { tcp: false } => inherited.admin = Some(unix(&mut fds)?.into()),
                Kind::Admin { tcp: true } => {
                    let l = fds.take_tcp_listener(index)?.ok_or_else(|| bad(line))?;
                    inherited.admin = Some(l.into());
                }
                Kind::Listener { tcp, key } => {
                    let socket: Socket = if tcp {
                        fds.take_tcp_listener(index)?
                            .ok_or_else(|| bad(line))?
                            .into()
                    } else {
                        unix(&mut fds)?.into()
                    };
                    inherited.listeners.entry(key).or_default().push(socket);
                }
                Kind::Quic { key } => {
                    let socket = fds.take_udp_socket(index)?.ok_or_else(|| bad(line))?;
                    inherited.quic.entry(key).or_default().push(socket);
                }
            }
        }
        Ok(inherited)
    }

    /// Whether this hayate replaces another.
    pub fn is_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// The sockets of the listener configured as `listen`, if handed over.
    pub fn take_listener(&mut self, listen: &Listen) -> Option<Vec<Socket>> {
        self.listeners.remove(&listen_key(listen))
    }

    /// The HTTP/3 sockets of the https listener configured as `listen`, if
    /// handed over.
    pub fn take_quic(&mut self, listen: &Listen) -> Option<Vec<std::net::UdpSocket>> {
        self.quic.remove(&listen_key(listen))
    }

    /// The control socket, if handed over.
    pub fn take_control(&mut self) -> Option<UnixListener> {
        self.control.take()
    }

    /// The admin listener, if handed over.
    pub fn take_admin(&mut self) -> Option<Socket> {
        self.admin.take()
    }

    /// Where to tell the old hayate why this one could not start
    /// ([`StartFailure::tell`]); `None` when this one does not replace
    /// another. Taken first thing, so that an error anywhere before the
    /// `ready` (a config file that no longer loads, a socket) reaches the
    /// `hayate upgrade` that started it.
    pub fn start_failure(&self) -> Option<StartFailure> {
        let pair = self.ready.as_ref()?.try_clone().ok()?;
        Some(StartFailure(pair))
    }

    /// Tells the old hayate that this one serves.
    pub fn say_ready(&mut self) {
        if let Some(mut pair) = self.ready.take() {
            let _ = pair.write_all(READY);
        }
    }
}

/// The pair on which a hayate started by an upgrade tells the old one why
/// it failed.
#[derive(Debug)]
pub struct StartFailure(UnixStream);

impl StartFailure {
    /// Sends `why` (the error as printed on stderr). After `ready` nobody
    /// reads it any more: the write fails, unseen, as it should.
    pub fn tell(mut self, why: &str) {
        let mut text = FAILED.to_vec();
        text.extend_from_slice(why.as_bytes());
        let _ = self.0.write_all(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_lines_round_trip() {
        let kinds = [
            Kind::Ready,
            Kind::Control,
            Kind::Admin { tcp: true },
            Kind::Admin { tcp: false },
            Kind::Listener {
                tcp: true,
                key: "https://127.0.0.1:0".into(),
            },
            Kind::Listener {
                tcp: false,
                key: "http://unix:/run/a b.sock".into(),
            },
            Kind::Quic {
                key: "https://[::1]:443".into(),
            },
        ];
        for (i, kind) in kinds.into_iter().enumerate() {
            assert_eq!(Kind::parse(&kind.line(i)), Some((i, kind)));
        }
        assert_eq!(Kind::parse("x ready"), None);
        assert_eq!(Kind::parse("1 tcp"), None);
    }
}
