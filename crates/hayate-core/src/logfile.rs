//! A log file with size-based rotation (the app's output, the access log,
//! the error log): `x.log` grows to `max_size`, then becomes `x.log.1`
//! (older ones shift up), and only `keep` rotated files are kept, so a
//! chatty app or a busy site cannot fill the disk. [`RotatingLog::reopen`]
//! follows an outside rotation (logrotate's `postrotate`, SIGUSR1).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A size-rotated log file, shared by the threads that write to it (whole
/// writes under a lock, so lines never interleave).
#[derive(Debug)]
pub struct RotatingLog {
    path: PathBuf,
    max_size: u64,
    keep: usize,
    state: Mutex<(File, u64)>,
}

impl RotatingLog {
    /// Opens (appends to) `path`.
    pub fn open(path: &Path, max_size: u64, keep: usize) -> io::Result<RotatingLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingLog {
            path: path.to_path_buf(),
            max_size: max_size.max(1),
            keep,
            state: Mutex::new((file, size)),
        })
    }

    /// Opens the file again at its path (SIGUSR1 after an outside rotation
    /// moved it): the next lines go to a new file there.
    pub fn reopen(&self) -> io::Result<()> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let size = file.metadata()?.len();
        let mut state = self
            .state
            .lock()
            .map_err(|_| io::Error::other("log lock poisoned"))?;
        *state = (file, size);
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
    /// pass the size limit.
    pub fn write_all(&self, lines: &[u8]) -> io::Result<()> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| io::Error::other("log lock poisoned"))?;
        if state.1 > 0 && state.1 + lines.len() as u64 > self.max_size {
            self.rotate()?;
            *state = (
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .truncate(false)
                    .open(&self.path)?,
                0,
            );
        }
        state.0.write_all(lines)?;
        state.1 += lines.len() as u64;
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
