//! Jaeger, a real OpenTelemetry trace store, for the tracing tests: it
//! takes OTLP over gRPC and HTTP, keeps traces in memory, and serves them
//! back on its query API (`/api/traces/TRACE_ID`).
//!
//! Built by scripts/test from the module's source (`go install ...@v1.76.0`
//! refuses it: its go.mod has replace directives) into Go's bin directory;
//! found there or on PATH. Each test starts its own, on ports of its own.

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};

use crate::pebble::{free_port, go_binary};
use crate::Client;

/// A running Jaeger, stopped when dropped.
pub struct Jaeger {
    /// OTLP/gRPC's address (4317 by default).
    pub otlp_grpc: SocketAddr,
    /// OTLP/HTTP's address (4318 by default).
    pub otlp_http: SocketAddr,
    query: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Jaeger {
    /// Starts Jaeger with an in-memory store; waits until its receivers and
    /// its query API accept connections.
    pub fn start() -> Jaeger {
        Jaeger::start_with(None)
    }

    /// Like [`Jaeger::start`], its OTLP receivers (gRPC and HTTP) over TLS
    /// with this certificate chain and key (PEM files).
    pub fn start_tls(cert: &str, key: &str) -> Jaeger {
        Jaeger::start_with(Some((cert, key, None)))
    }

    /// Like [`Jaeger::start_tls`], requiring a client certificate that
    /// chains to `client_ca` (mutual TLS).
    pub fn start_mtls(cert: &str, key: &str, client_ca: &str) -> Jaeger {
        Jaeger::start_with(Some((cert, key, Some(client_ca))))
    }

    /// Jaeger binds the ports it is given itself, so one found free may be
    /// taken by a test running in parallel before it does: then it exits,
    /// and is started again on other ports (CI saw "jaeger listening:
    /// Connection refused" once).
    fn start_with(tls: Option<(&str, &str, Option<&str>)>) -> Jaeger {
        let mut last = String::new();
        for _ in 0..3 {
            match Jaeger::try_start(tls) {
                Ok(j) => return j,
                Err(why) => last = why,
            }
        }
        panic!("jaeger did not start: {last}");
    }

    fn try_start(tls: Option<(&str, &str, Option<&str>)>) -> Result<Jaeger, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let addr = |port: u16| -> SocketAddr { ([127, 0, 0, 1], port).into() };
        let (grpc, http, query, query_grpc) = (
            addr(free_port()),
            addr(free_port()),
            addr(free_port()),
            addr(free_port()),
        );
        let tls = match tls {
            Some((cert, key, client_ca)) => {
                let client_ca = client_ca
                    .map(|ca| format!("\n          client_ca_file: \"{ca}\""))
                    .unwrap_or_default();
                format!("\n        tls:\n          cert_file: \"{cert}\"\n          key_file: \"{key}\"{client_ca}")
            }
            None => String::new(),
        };
        // No batch processor: a span is stored as it is received, so the
        // query API has it as soon as the export was answered.
        let config = format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: "{query}"
    grpc:
      endpoint: "{query_grpc}"
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: "{grpc}"{tls}
      http:
        endpoint: "{http}"{tls}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#
        );
        let path = dir.path().join("jaeger.yaml");
        std::fs::write(&path, config).expect("write");
        let stderr = dir.path().join("jaeger.stderr");
        let child = Command::new(go_binary(
            "jaeger",
            "github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 (scripts/test builds it)",
        ))
        .arg("--config")
        .arg(format!("file:{}", path.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("start jaeger");
        let mut j = Jaeger {
            otlp_grpc: grpc,
            otlp_http: http,
            query,
            child,
            _dir: dir,
        };
        // Until every port answers, or Jaeger has exited (a port was
        // taken); a Go program starting under a loaded CI machine may
        // take more than one WAIT.
        let deadline = std::time::Instant::now() + 3 * crate::WAIT;
        for a in [grpc, http, query] {
            while TcpStream::connect(a).is_err() {
                let said = || std::fs::read_to_string(&stderr).unwrap_or_default();
                if let Ok(Some(status)) = j.child.try_wait() {
                    return Err(format!("exited ({status}): {}", said()));
                }
                if std::time::Instant::now() > deadline {
                    return Err(format!("not listening on {a} after 30 s: {}", said()));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        Ok(j)
    }

    /// The trace `trace_id` (32 hex digits) as the query API has it: its
    /// spans, each with `operationName`, `spanID`, `references` (the
    /// parent: `CHILD_OF`), `tags` and its process's `serviceName`; `None`
    /// while Jaeger has none of it.
    pub fn trace(&self, trace_id: &str) -> Option<serde_json::Value> {
        let r = Client::connect(self.query).get(&format!("/api/traces/{trace_id}"), &[]);
        if r.status != 200 {
            return None;
        }
        let body: serde_json::Value = serde_json::from_str(&r.text()).expect("JSON");
        body["data"].get(0).cloned()
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
