//! `hayate logs [-f] [-n N]`: the last lines of the running hayate's log
//! files, each prefixed with its log's name (`[access]`, `[error]`,
//! `[app]`), then, with `-f`, the lines written after, across rotations (a
//! file replaced at its path is read from its start), like `tail -F`.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

/// How often `-f` looks for new lines: `tail -f` looks every second; a
/// quarter of that feels live and costs a few stat calls a second.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// One followed file.
struct Followed {
    name: String,
    path: PathBuf,
    /// The open file (its inode) and how far it was read.
    file: Option<(File, u64)>,
    /// A line not yet ended.
    partial: String,
}

/// Prints the files named in `answer` (`KIND PATH` lines, the control
/// socket's answer to `logs`).
#[allow(clippy::disallowed_methods)] // a command's own thread, not a worker's event loop
pub fn run(answer: &str, lines: usize, follow: bool) -> anyhow::Result<()> {
    let mut files: Vec<Followed> = answer
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, path)| Followed {
            name: name.to_string(),
            path: PathBuf::from(path),
            file: None,
            partial: String::new(),
        })
        .collect();
    anyhow::ensure!(
        !files.is_empty(),
        "this hayate logs to no file (its logs go to stdout or stderr: see access_log, \
         error_log, app_log)"
    );
    for f in &mut files {
        f.print_last(lines);
    }
    if !follow {
        return Ok(());
    }
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        for f in &mut files {
            f.print_new();
        }
    }
}

impl Followed {
    /// Prints the file's last `n` lines and remembers where it ends.
    fn print_last(&mut self, n: usize) {
        let Ok(mut file) = File::open(&self.path) else {
            return;
        };
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            return;
        }
        let all: Vec<&str> = text.lines().collect();
        for line in &all[all.len().saturating_sub(n)..] {
            println!("[{}] {line}", self.name);
        }
        self.file = Some((file, text.len() as u64));
    }

    /// Prints what was written since, starting over when the path names
    /// a new file (rotated) or the file shrank (truncated).
    fn print_new(&mut self) {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return;
        };
        let replaced = match &self.file {
            Some((file, read)) => file
                .metadata()
                .map_or(true, |m| m.ino() != meta.ino() || meta.len() < *read),
            None => true,
        };
        if replaced {
            // What the old file got after the last look, then the new one.
            self.print_rest();
            self.file = File::open(&self.path).ok().map(|f| (f, 0));
            self.partial.clear();
        }
        self.print_rest();
    }

    /// Prints the open file's lines from where it was last read to its end.
    fn print_rest(&mut self) {
        let Some((file, read)) = &mut self.file else {
            return;
        };
        if file.seek(SeekFrom::Start(*read)).is_err() {
            return;
        }
        let mut reader = BufReader::new(&mut *file);
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    *read += n as u64;
                    self.partial.push_str(&line);
                    if self.partial.ends_with('\n') {
                        print!("[{}] {}", self.name, self.partial);
                        self.partial.clear();
                    }
                }
            }
        }
    }
}
