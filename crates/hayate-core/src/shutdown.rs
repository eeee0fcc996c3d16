//! The process-wide shutdown signal. The main thread triggers it (SIGTERM,
//! SIGINT); every worker, listener and connection holds a [`ShutdownWatch`]
//! and stops accepting or keeping alive once it fires.

use tokio::sync::watch;

/// The sending side, owned by the main thread.
#[derive(Debug)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

/// A cheap, cloneable view of the shutdown state.
#[derive(Debug, Clone)]
pub struct ShutdownWatch {
    rx: watch::Receiver<bool>,
}

impl Shutdown {
    /// Creates the signal, not yet fired.
    pub fn new() -> Shutdown {
        Shutdown {
            tx: watch::channel(false).0,
        }
    }

    /// A watch to hand to a worker or a connection.
    pub fn watch(&self) -> ShutdownWatch {
        ShutdownWatch {
            rx: self.tx.subscribe(),
        }
    }

    /// Fires the signal; every watch sees it.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl ShutdownWatch {
    /// Completes once shutdown has begun (at once if it already has).
    pub async fn wait(&mut self) {
        // An error means the sender is gone, which also means shutdown.
        let _ = self.rx.wait_for(|fired| *fired).await;
    }
}
