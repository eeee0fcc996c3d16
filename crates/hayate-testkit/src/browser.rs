//! A real headless Chromium for end-to-end tests of pages hayate serves,
//! driven over W3C WebDriver: Debian's `chromium` and `chromium-driver`
//! packages (`.ci/run` installs them), chromedriver started on a free
//! loopback port, one browser session per [`Browser`].
//!
//! WebDriver through fantoccini (a maintained async client, no TLS built
//! in here since chromedriver is on loopback) rather than the DevTools
//! protocol: WebDriver is a W3C standard that chromedriver implements, so
//! the test reads the page's DOM the way a user agent renders it, without
//! a WebSocket client of our own. The cost: about 50 more crates in the
//! test build only (most are url's IDNA tables), about a minute of one
//! core's compile, once.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

const INSTALL: &str = "apt-get install chromium chromium-driver (.ci/run installs them)";

/// chromedriver and one headless Chromium session; dropping it ends both.
pub struct Browser {
    /// The session: navigate, run scripts, take screenshots.
    pub client: Client,
    driver: Driver,
    _profile: tempfile::TempDir,
}

/// The chromedriver process, in a process group of its own that the
/// Chromium it starts joins; dropped, the whole group is killed, so a test
/// that panics before closing its session leaves no browser behind.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        let group = Pid::from_raw(self.0.id() as i32);
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a window of
    /// `width` x `height` CSS pixels. Panics, saying how to install them,
    /// when either is missing.
    pub async fn start(width: u32, height: u32) -> Browser {
        let driver_bin = on_path(&["chromedriver"])
            .unwrap_or_else(|| panic!("chromedriver not found on PATH: {INSTALL}"));
        let chromium = on_path(&["chromium", "chromium-browser", "google-chrome"])
            .unwrap_or_else(|| panic!("chromium not found on PATH: {INSTALL}"));
        let port = crate::pebble::free_port();
        let driver = Driver(
            Command::new(driver_bin)
                .arg(format!("--port={port}"))
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("chromedriver: {e}: {INSTALL}")),
        );
        let profile = tempfile::tempdir().expect("tempdir");
        crate::eventually_async("chromedriver accepting", || {
            TcpStream::connect(("127.0.0.1", port))
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await;
        let caps = serde_json::json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    // Containers (CI runs as root) have no user namespace
                    // for Chromium's sandbox.
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    "--no-first-run",
                    "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!("a JSON object")
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("a Chromium session: {e}: {INSTALL}"));
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Ends the session (Chromium exits), then chromedriver.
    pub async fn close(self) {
        let _ = self.client.close().await;
        drop(self.driver);
    }
}
