//! A log file with rotation by size (the app's output, the access log, the
//! error log) and, when asked, by age (the access log): `x.log` grows to
//! `max_size` or `max_age`, then becomes `x.log.1` (older ones shift up),
//! and only `keep` rotated files are kept, so a chatty app or a busy site
//! cannot fill the disk. [`RotatingLog::reopen`]
//! follows an outside rotation (logrotate's `postrotate`, SIGUSR1).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// A size-rotated log file, shared by the threads that write to it (whole
/// writes under a lock, so lines never interleave).
#[derive(Debug)]
pub struct RotatingLog {
    path: PathBuf,
    max_size: u64,
    max_age: Option<Duration>,
    keep: usize,
    state: Mutex<Current>,
}

/// The file being written.
#[derive(Debug)]
struct Current {
    file: File,
    size: u64,
    /// When it was started (created, or found at open).
    started: SystemTime,
}

impl Current {
    fn open(path: &Path) -> io::Result<Current> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let meta = file.metadata()?;
        Ok(Current {
            size: meta.len(),
            // Its birth time where the filesystem keeps one: a file that
            // was already days old is as old after a restart.
            started: meta.created().unwrap_or_else(|_| SystemTime::now()),
            file,
        })
    }
}

impl RotatingLog {
    /// Opens (appends to) `path`.
    pub fn open(path: &Path, max_size: u64, keep: usize) -> io::Result<RotatingLog> {
        Ok(RotatingLog {
            path: path.to_path_buf(),
            max_size: max_size.max(1),
            max_age: None,
            keep,
            state: Mutex::new(Current::open(path)?),
        })
    }

    /// Also rotates a file once it is `max_age` old (at its next write).
    pub fn with_max_age(mut self, max_age: Option<Duration>) -> RotatingLog {
        self.max_age = max_age;
        self
    }

    /// Opens the file again at its path (SIGUSR1 after an outside rotation
    /// moved it): the next lines go to a new file there.
    pub fn reopen(&self) -> io::Result<()> {
        let current = Current::open(&self.path)?;
        let mut state = self
            .state
            .lock()
            .map_err(|_| io::Error::other("log lock poisoned"))?;
        *state = current;
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line, rotating first when it would pass the size limit.
    pub fn write_line(&self, line: &str) -> io::Result<()> {
        let mut text = Vec::with_capacity(line.len() + 1);
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        self.write_all(&text)
    }

    /// Appends whole lines in one write, rotating first when they would
    /// pass the size limit or the file is past its age.
    pub fn write_all(&self, lines: &[u8]) -> io::Result<()> {
        self.write_all_at(lines, SystemTime::now())
    }

    fn write_all_at(&self, lines: &[u8], now: SystemTime) -> io::Result<()> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| io::Error::other("log lock poisoned"))?;
        let too_big = state.size + lines.len() as u64 > self.max_size;
        let too_old = self.max_age.is_some_and(|age| {
            now.duration_since(state.started)
                .is_ok_and(|lived| lived >= age)
        });
        if state.size > 0 && (too_big || too_old) {
            self.rotate()?;
            *state = Current::open(&self.path)?;
            state.started = now;
        }
        state.file.write_all(lines)?;
        state.size += lines.len() as u64;
        Ok(())
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&self) -> io::Result<()> {
        if self.keep == 0 {
            return std::fs::remove_file(&self.path);
        }
        let _ = std::fs::remove_file(self.rotated(self.keep));
        for n in (1..self.keep).rev() {
            let _ = std::fs::rename(self.rotated(n), self.rotated(n + 1));
        }
        std::fs::rename(&self.path, self.rotated(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_its_age_is_rotated_at_its_next_write() {
        let dir = tempfile_dir("age");
        let path = dir.join("access.log");
        let log = RotatingLog::open(&path, u64::MAX, 3)
            .expect("open")
            .with_max_age(Some(Duration::from_secs(86_400)));
        let start = SystemTime::now();
        log.write_all_at(b"day one\n", start).expect("write");
        log.write_all_at(b"day one, later\n", start + Duration::from_secs(3_600))
            .expect("write");
        assert!(!dir.join("access.log.1").exists(), "not a day old yet");
        log.write_all_at(b"day two\n", start + Duration::from_secs(90_000))
            .expect("write");
        let old = std::fs::read_to_string(dir.join("access.log.1")).expect("rotated");
        assert_eq!(old, "day one\nday one, later\n");
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "day two\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hayate-logtest-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn rotation_keeps_size_and_count() {
        let dir = std::env::temp_dir().join(format!("hayate-logtest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("app.log");
        let log = RotatingLog::open(&path, 100, 2).expect("open");
        for i in 0..50 {
            log.write_line(&format!("line {i:04} 0123456789"))
                .expect("write");
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into())
            .collect();
        names.sort();
        assert_eq!(names, vec!["app.log", "app.log.1", "app.log.2"]);
        for n in &names {
            let size = std::fs::metadata(dir.join(n)).expect("stat").len();
            assert!(size <= 100, "{n} is {size} bytes");
        }
        let newest = std::fs::read_to_string(&path).expect("read");
        assert!(newest.ends_with("line 0049 0123456789\n"), "{newest}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
