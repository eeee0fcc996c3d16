//! A private php-fpm for tests: the pool hayate generates for `hayate php`
//! (with a size and limits a test chooses), listening on a Unix socket in
//! a temp dir, in the foreground, as the current user. Installed by
//! `.ci/run` (Debian's `php-fpm` package).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hayate_supervisor::php::{php_fpm_binary, PhpPool};

use crate::eventually;

/// A running php-fpm, stopped when dropped.
pub struct PhpFpm {
    child: Option<Child>,
    socket: PathBuf,
    conf: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl PhpFpm {
    /// Starts php-fpm with `pool` and waits until its socket accepts.
    pub fn start(pool: &PhpPool) -> PhpFpm {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("pool.conf");
        // Scripts stream what they print: no output buffer in front of
        // flush().
        let text = format!("{}php_value[output_buffering] = 0\n", pool.config());
        std::fs::write(&conf, text).expect("write pool");
        let mut fpm = PhpFpm {
            child: None,
            socket: dir.path().join("php.sock"),
            log: dir.path().join("php-fpm.log"),
            conf,
            _dir: dir,
        };
        fpm.start_again();
        fpm
    }

    /// The socket hayate connects to: `unix:PATH`.
    pub fn address(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// What php-fpm logged (its workers' output included).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops php-fpm (SIGTERM: its children end at once) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + crate::WAIT;
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Starts php-fpm (again, after [`PhpFpm::stop`]) on the same socket
    /// and waits until it accepts.
    pub fn start_again(&mut self) {
        let binary = php_fpm_binary().expect("php-fpm not found: apt-get install php-fpm");
        // As the test's user, root included (a test's scripts are its own).
        let as_root = nix::unistd::geteuid().is_root();
        let cmd = PhpPool::command(&binary, &self.conf, as_root);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .env("PORT", &self.socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn php-fpm");
        self.child = Some(child);
        let socket = self.socket.clone();
        eventually("php-fpm accepts on its socket", || {
            std::os::unix::net::UnixStream::connect(&socket)
                .map(drop)
                .map_err(|e| e.to_string())
        });
    }
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        self.stop();
    }
}
