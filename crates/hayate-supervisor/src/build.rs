//! An app's build step (`build = ["npm", "run", "build"]`): run in the
//! app's directory, with its environment and user, before a restart for a
//! change of its files. It must exit 0 within its timeout; otherwise the
//! restart does not happen (the running instances keep serving) and its
//! output is logged for the developer to read.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::AppSpec;

/// The most of a build's output kept for the log: its last 64 KiB (a
/// failing `tsc` or webpack prints its errors last; a whole `npm ci` log
/// can be megabytes).
const OUTPUT_KEPT: usize = 64 * 1024;

/// How a build went.
pub(crate) struct BuildOutcome {
    /// `Ok` when it exited 0; else why not (its exit, or the timeout).
    pub result: Result<(), String>,
    /// The end of its stdout and stderr, interleaved as they came.
    pub output: String,
    /// How long it ran.
    pub took: Duration,
}

/// Runs `command` for the app of `spec`, stopping its process group after
/// `timeout`.
pub(crate) async fn run(command: &[String], spec: &AppSpec, timeout: Duration) -> BuildOutcome {
    let started = Instant::now();
    let outcome = |result, output: Vec<u8>| BuildOutcome {
        result,
        output: String::from_utf8_lossy(&output).into_owned(),
        took: started.elapsed(),
    };
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env_remove("HAYATE_SHARED_KEY")
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(who) = &spec.run_as {
        cmd.uid(who.uid).gid(who.gid).env("HOME", &who.home);
    }
    // One pipe for both streams: the output reads in the order printed.
    let pipe = tokio::net::unix::pipe::pipe().and_then(|(write, read)| {
        let write = write.into_blocking_fd()?;
        Ok((write.try_clone()?, write, read))
    });
    let mut read = match pipe {
        Ok((out, err, read)) => {
            cmd.stdout(Stdio::from(out)).stderr(Stdio::from(err));
            read
        }
        Err(e) => return outcome(Err(format!("no pipe for its output: {e}")), Vec::new()),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return outcome(Err(format!("{}: {e}", command[0])), Vec::new()),
    };
    // The pipe's write ends are the child's alone now: the read ends at
    // its exit (or that of the last process it left holding them).
    drop(cmd);
    let pgid = child.id().map(|p| Pid::from_raw(p as i32));
    let mut output = Vec::new();
    let read_all = async {
        let mut chunk = [0u8; 8192];
        loop {
            match read.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    output.extend_from_slice(&chunk[..n]);
                    if output.len() > 2 * OUTPUT_KEPT {
                        output.drain(..output.len() - OUTPUT_KEPT);
                    }
                }
            }
        }
    };
    let finished = tokio::time::timeout(timeout, async {
        read_all.await;
        child.wait().await
    })
    .await;
    let result = match finished {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(format!("it exited with {status}")),
        Ok(Err(e)) => Err(format!("waiting for it: {e}")),
        Err(_) => {
            if let Some(pgid) = pgid {
                let _ = killpg(pgid, Signal::SIGKILL);
            }
            let _ = child.wait().await;
            Err(format!(
                "it ran past app_build_timeout ({timeout:?}) and was stopped"
            ))
        }
    };
    if output.len() > OUTPUT_KEPT {
        output.drain(..output.len() - OUTPUT_KEPT);
    }
    outcome(result, output)
}
