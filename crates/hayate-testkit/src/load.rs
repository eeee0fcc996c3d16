//! Clients asking paths in a loop while a test restarts or reloads what
//! answers them: one keep-alive connection per path, every answer counted,
//! the ones a test's check finds wrong kept, so "no failed request during a
//! rolling reload" can be asserted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{eventually_true, Client, Response};

/// The longest a load runs if the test never stops it.
const LONGEST: Duration = Duration::from_secs(15);

/// What is wrong with an answer to a path (`None`: nothing).
pub type Check = fn(&str, &Response) -> Option<String>;

/// The clients, running until [`Load::failures`].
pub struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU32>,
    threads: Vec<JoinHandle<Vec<String>>>,
}

impl Load {
    /// Starts a client per path on `addr`, each answer judged by `check`;
    /// returns once `warm` answers have come.
    pub fn start(addr: SocketAddr, paths: &[&str], check: Check, warm: u32) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU32::new(0));
        let threads = paths
            .iter()
            .map(|path| {
                let (stop, answered, path) = (stop.clone(), answered.clone(), path.to_string());
                std::thread::spawn(move || {
                    let mut c = Client::connect(addr);
                    let mut failures = Vec::new();
                    let deadline = Instant::now() + LONGEST;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        let r = c.get(&path, &[]);
                        failures.extend(check(&path, &r));
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    failures
                })
            })
            .collect();
        let load = Load {
            stop,
            answered,
            threads,
        };
        load.more(warm);
        load
    }

    /// Waits for `n` more answers.
    pub fn more(&self, n: u32) {
        let from = self.answered.load(Ordering::SeqCst);
        eventually_true("more answers", || {
            self.answered.load(Ordering::SeqCst) >= from + n
        });
    }

    /// Waits for `settle` more answers, stops the clients: the answers
    /// counted and what the check found wrong.
    pub fn failures(self, settle: u32) -> (u32, Vec<String>) {
        self.more(settle);
        self.stop.store(true, Ordering::Relaxed);
        let failures = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().expect("join"))
            .collect();
        (self.answered.load(Ordering::SeqCst), failures)
    }
}
