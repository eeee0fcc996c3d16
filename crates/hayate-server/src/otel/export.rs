//! The exporter: a thread of its own that takes finished spans from a
//! bounded queue, batches them, and sends each batch to the collector
//! (OTLP/HTTP or OTLP/gRPC). Workers only ever `try_send` into the queue:
//! a full queue drops the span and counts it, so a slow or dead collector
//! never delays a request. A batch the collector does not take within
//! `otel_timeout` is dropped and counted too (no retry: a second try
//! would hold the queue up while new spans are dropped instead).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hayate_config::values::{OtelEndpoint, OtelHeaders, OtelProtocol};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;

use super::proto::{self, Resource};
use super::{DROPPED, EXPORTED};

/// Spans per batch at most: the OpenTelemetry SDKs' batch processor's
/// default (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`), about 320 KiB at hayate's
/// ~650 bytes a proxied request's span (`otel.rs`'s test).
const MAX_BATCH: usize = 512;

/// How long a batch waits to fill. The SDKs wait 5 s; 1 s shows a request
/// in the trace viewer about as it ends, for one POST a second at most
/// while requests are few.
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// Where and how batches go.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExportSettings {
    pub(crate) endpoint: OtelEndpoint,
    pub(crate) protocol: OtelProtocol,
    pub(crate) service_name: String,
    /// Sent with every export (`otel_headers`: credentials).
    pub(crate) headers: OtelHeaders,
    pub(crate) queue: usize,
    pub(crate) timeout: Duration,
    /// The CA file an https endpoint is verified against (`otel_ca`).
    pub(crate) ca: Option<std::path::PathBuf>,
}

/// A running exporter: its queue, and how to make it send what it holds
/// and end (at exit).
pub(crate) struct Exporter {
    pub(crate) queue: mpsc::Sender<Vec<u8>>,
    stop: Arc<Notify>,
    ended: std::sync::mpsc::Receiver<()>,
}

impl Exporter {
    /// Asks the exporter to send what is queued now and end; waits for it
    /// at most `wait`.
    pub(crate) fn finish(self, wait: Duration) {
        self.stop.notify_one();
        let _ = self.ended.recv_timeout(wait);
    }
}

/// Starts the exporter's thread; spans sent into its queue are exported
/// until [`Exporter::finish`], or until every sender is dropped (the last
/// generation using these settings ended), then what is queued is sent and
/// the thread ends.
pub(crate) fn start(settings: ExportSettings) -> std::io::Result<Exporter> {
    let tls = match settings.endpoint.tls {
        true => Some(Arc::new(client_tls(&settings)?)),
        false => None,
    };
    let (queue, rx) = mpsc::channel(settings.queue.max(1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stop = Arc::new(Notify::new());
    let (ended_tx, ended) = std::sync::mpsc::channel();
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name("hayate-otel".into())
        .spawn(move || {
            runtime.block_on(run(settings, tls, rx, &stopped));
            let _ = ended_tx.send(());
        })?;
    Ok(Exporter { queue, stop, ended })
}

/// The TLS client of an https endpoint: the system's roots or `otel_ca`,
/// ALPN h2 for gRPC.
fn client_tls(settings: &ExportSettings) -> std::io::Result<ClientConfig> {
    let mut config = hayate_tls::upstream_client_config(settings.ca.as_deref(), true, None)
        .map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("otel_ca: {e}"))
        })?;
    config.alpn_protocols = match settings.protocol {
        OtelProtocol::Grpc => vec![b"h2".to_vec()],
        OtelProtocol::HttpProtobuf => vec![b"http/1.1".to_vec()],
    };
    Ok(config)
}

async fn run(
    settings: ExportSettings,
    tls: Option<Arc<ClientConfig>>,
    mut rx: mpsc::Receiver<Vec<u8>>,
    stop: &Notify,
) {
    let resource = Resource::this_process(&settings.service_name);
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut warned = false;
    let mut stopping = false;
    while !stopping {
        tokio::select! {
            span = rx.recv() => match span {
                Some(span) => batch.push(span),
                None => return,
            },
            () = stop.notified() => stopping = true,
        }
        let deadline = tokio::time::Instant::now() + BATCH_DELAY;
        while batch.len() < MAX_BATCH && !stopping {
            tokio::select! {
                span = tokio::time::timeout_at(deadline, rx.recv()) => match span {
                    Ok(Some(span)) => batch.push(span),
                    Ok(None) | Err(_) => break,
                },
                () = stop.notified() => stopping = true,
            }
        }
        // At exit: what is queued now, in one last batch or a few.
        while stopping && batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(span) => batch.push(span),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let body = proto::export_request(&resource, &batch);
        let n = batch.len() as u64;
        batch.clear();
        let sent =
            tokio::time::timeout(settings.timeout, send(&settings, tls.as_ref(), body)).await;
        match sent.unwrap_or_else(|_| Err("no answer within otel_timeout".into())) {
            Ok(()) => {
                EXPORTED.fetch_add(n, Ordering::Relaxed);
                warned = false;
            }
            Err(e) => {
                DROPPED.fetch_add(n, Ordering::Relaxed);
                // Once per outage, not once a batch.
                if !warned {
                    log::warn!(
                        "otel: {n} spans not exported to {}: {e}",
                        settings.endpoint.authority
                    );
                    warned = true;
                }
            }
        }
    }
}

async fn send(
    settings: &ExportSettings,
    tls: Option<&Arc<ClientConfig>>,
    body: Vec<u8>,
) -> Result<(), String> {
    let tcp = tokio::net::TcpStream::connect(&settings.endpoint.authority)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return speak(tcp, settings, body).await;
    };
    let host = hayate_core::field::strip_port(settings.endpoint.authority.as_bytes());
    let host = String::from_utf8_lossy(host);
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| format!("{host}: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    speak(stream, settings, body).await
}

/// The export over a connection, plain or TLS.
async fn speak<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    settings: &ExportSettings,
    body: Vec<u8>,
) -> Result<(), String> {
    match settings.protocol {
        OtelProtocol::HttpProtobuf => post(stream, settings, &body).await,
        OtelProtocol::Grpc => grpc_export(stream, settings, body).await,
    }
}

/// OTLP/HTTP: one POST of `application/x-protobuf` on a connection of its
/// own (a batch a second at most while requests are few; under load one
/// per 512 spans), answered 2xx when taken.
async fn post(
    mut tcp: impl AsyncRead + AsyncWrite + Unpin,
    settings: &ExportSettings,
    body: &[u8],
) -> Result<(), String> {
    let endpoint = &settings.endpoint;
    let path = if endpoint.path.is_empty() {
        "/v1/traces"
    } else {
        &endpoint.path
    };
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\nUser-Agent: hayate/{}\r\n",
        endpoint.authority,
        body.len(),
        env!("CARGO_PKG_VERSION")
    );
    // Names and values were checked at load (no CR or LF can pass).
    for (name, value) in &settings.headers.0 {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    tcp.write_all(body).await.map_err(|e| e.to_string())?;
    // The status line is all that is read: the answer's body (an
    // ExportTraceServiceResponse, maybe with partial_success) is not.
    let mut answer = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match tcp.read(&mut answer[got..]).await {
            Ok(0) => return Err("the collector closed the connection".into()),
            Ok(n) => got += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    match &answer[9..10] {
        b"2" => Ok(()),
        _ => Err(format!(
            "answered {}",
            String::from_utf8_lossy(&answer[..got])
                .lines()
                .next()
                .unwrap_or("")
        )),
    }
}

/// OTLP/gRPC: `TraceService/Export` over h2c, the request a gRPC message
/// (a flag byte, a 4-byte length, the protobuf), taken when the trailers
/// say `grpc-status: 0`.
async fn grpc_export(
    tcp: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    settings: &ExportSettings,
    body: Vec<u8>,
) -> Result<(), String> {
    let endpoint = &settings.endpoint;
    let (client, conn) = h2::client::handshake(tcp)
        .await
        .map_err(|e| format!("HTTP/2: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.map_err(|e| e.to_string())?;
    let mut request = http::Request::builder();
    for (name, value) in &settings.headers.0 {
        request = request.header(name, value);
    }
    let request = request
        .method("POST")
        .uri(format!(
            "{}://{}/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            if endpoint.tls { "https" } else { "http" },
            endpoint.authority
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| e.to_string())?;
    let (answer, mut stream) = client
        .send_request(request, false)
        .map_err(|e| e.to_string())?;
    let mut message = Vec::with_capacity(5 + body.len());
    message.push(0);
    message.extend_from_slice(&(body.len() as u32).to_be_bytes());
    message.extend_from_slice(&body);
    stream
        .send_data(Bytes::from(message), true)
        .map_err(|e| e.to_string())?;
    let answer = answer.await.map_err(|e| e.to_string())?;
    let status = |h: &http::HeaderMap| {
        h.get("grpc-status")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    // Trailers-only answers carry grpc-status in the head.
    let mut grpc_status = status(answer.headers());
    let mut body = answer.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    if grpc_status.is_none() {
        let trailers = body.trailers().await.map_err(|e| e.to_string())?;
        grpc_status = trailers.as_ref().and_then(status);
    }
    match grpc_status.as_deref() {
        Some("0") => Ok(()),
        Some(code) => Err(format!("grpc-status {code}")),
        None => Err("no grpc-status".into()),
    }
}
