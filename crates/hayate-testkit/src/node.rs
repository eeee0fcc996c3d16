//! Node programs that tests run (apps under `hayate run`, gRPC servers and
//! clients): their sources live in the repository with a committed
//! package-lock.json, and are installed with `npm ci` into a directory
//! under the target dir, again only when the lockfile changes.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Copies `sources` to `dir` and runs `npm ci` there unless its
/// node_modules was installed from the same lockfile; returns `dir`.
pub fn install(sources: &Path, dir: PathBuf) -> PathBuf {
    copy_tree(sources, &dir);
    let lock = std::fs::read(dir.join("package-lock.json")).expect("package-lock.json");
    let stamp = dir.join("node_modules/.installed-from-lock");
    if std::fs::read(&stamp).ok().as_deref() == Some(&lock[..]) {
        return dir;
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("npm (Node's package manager) is needed: {e}"));
    assert!(
        out.status.success(),
        "npm ci in {} failed: the first run installs the test apps from the npm registry \
         (it must be reachable then; scripts/test does the same): {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&stamp, &lock).expect("stamp");
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_name() == "node_modules" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else if std::fs::read(&target).ok() != std::fs::read(entry.path()).ok() {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A Node program the test started (a server), killed when dropped; what
/// it prints on stdout is read line by line.
pub struct NodeProcess {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl NodeProcess {
    /// Runs `node ARGS` in `dir`.
    pub fn start(dir: &Path, args: &[&str]) -> NodeProcess {
        let mut child = Command::new("node")
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("node is needed: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        NodeProcess { child, lines }
    }

    /// The rest of the first line it prints that starts with `prefix`
    /// (within [`crate::WAIT`]).
    pub fn line_after(&self, prefix: &str) -> String {
        let deadline = std::time::Instant::now() + crate::WAIT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(_) => panic!("node printed no line starting with {prefix:?}"),
            }
        }
    }

    /// The port of a server that prints `listening PORT`.
    pub fn listening_port(&self) -> u16 {
        self.line_after("listening ").parse().expect("a port")
    }

    /// Lines printed so far that have not been read.
    pub fn printed(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
