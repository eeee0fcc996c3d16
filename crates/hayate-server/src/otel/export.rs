//! The exporter: a thread of its own that takes finished spans from the
//! workers' buffers ([`super::spans`]), cuts them into batches, and sends
//! each batch to the collector (OTLP/HTTP or OTLP/gRPC). Workers never
//! wait for it: a full buffer drops the span and counts it, so a slow or
//! dead collector never delays a request. A batch the collector does not
//! take within `otel_timeout`, or that it refuses, is dropped and counted
//! too, with one exception: a collector that says it is throttling or
//! briefly unable (HTTP 429, 502, 503, 504; gRPC's retryable codes, as the
//! OTLP spec lists them) gets the same batch again after its
//! `Retry-After`, or after a backoff, and nothing else meanwhile (spans
//! that arrive while it waits stay in the workers' buffers, and past
//! `otel_queue` are dropped and counted: the load the collector asked to
//! be spared). A collector that is down is not waited for: each batch is
//! dropped as it fails.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hayate_config::values::{OtelEndpoint, OtelHeaders, OtelProtocol};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;

use hayate_core::protobuf::{fields, Value};

use super::proto::{self, Resource};
use super::spans::{self, Spans, MAX_BATCH};
use super::{DROPPED, EXPORTED};

/// How long a batch waits to fill. The SDKs wait 5 s; 1 s shows a request
/// in the trace viewer about as it ends, for one POST a second at most
/// while requests are few.
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// Times a throttled batch is sent in all before it is dropped.
const MAX_ATTEMPTS: u32 = 5;

/// The first pause after a throttled export that said no `Retry-After`
/// (doubled at each next one: the OTLP spec's exponential backoff).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest pause taken, whatever `Retry-After` asks: a collector that
/// asks for an hour is waited for a minute, then the batch is tried again
/// (and dropped after MAX_ATTEMPTS), rather than every span of that hour
/// dropped at the queue.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// Where and how batches go.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExportSettings {
    pub(crate) endpoint: OtelEndpoint,
    pub(crate) protocol: OtelProtocol,
    pub(crate) service_name: String,
    /// Sent with every export (`otel_headers`: credentials).
    pub(crate) headers: OtelHeaders,
    /// Spans a worker thread's buffer holds at most (`otel_queue`).
    pub(crate) queue: usize,
    pub(crate) timeout: Duration,
    /// The CA file an https endpoint is verified against (`otel_ca`).
    pub(crate) ca: Option<std::path::PathBuf>,
    /// The certificate and key presented to it (`otel_tls_cert`).
    pub(crate) client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// A running exporter: the buffers workers write spans into (and its
/// bell), and how to make it send what it holds and end (at exit).
pub(crate) struct Exporter {
    pub(crate) spans: Arc<Spans>,
    stop: Arc<Notify>,
    ended: std::sync::mpsc::Receiver<()>,
}

impl Exporter {
    /// Asks the exporter to send what is buffered now and end; waits for
    /// it at most `wait`.
    pub(crate) fn finish(self, wait: Duration) {
        self.stop.notify_one();
        let _ = self.ended.recv_timeout(wait);
    }

    /// Whether its thread still runs.
    pub(crate) fn is_running(&self) -> bool {
        matches!(
            self.ended.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Empty)
        )
    }
}

/// Starts the exporter's thread; spans pushed into its buffers are
/// exported until [`Exporter::finish`], or until nothing else holds them
/// (the last generation using these settings ended), then what is
/// buffered is sent and the thread ends.
pub(crate) fn start(settings: ExportSettings) -> std::io::Result<Exporter> {
    let tls = match settings.endpoint.tls {
        true => Some(Arc::new(client_tls(&settings)?)),
        false => None,
    };
    let spans = Arc::new(Spans::new(settings.queue));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stop = Arc::new(Notify::new());
    let (ended_tx, ended) = std::sync::mpsc::channel();
    let (stopped, taken) = (stop.clone(), spans.clone());
    std::thread::Builder::new()
        .name("hayate-otel".into())
        .spawn(move || {
            runtime.block_on(run(settings, tls, taken, &stopped));
            let _ = ended_tx.send(());
        })?;
    Ok(Exporter { spans, stop, ended })
}

/// The TLS client of an https endpoint: the system's roots or `otel_ca`,
/// a client certificate if one is set, ALPN h2 for gRPC.
fn client_tls(settings: &ExportSettings) -> std::io::Result<ClientConfig> {
    let client_cert = settings
        .client_cert
        .as_ref()
        .map(|(cert, key)| (cert.as_path(), key.as_path()));
    let mut config = hayate_tls::upstream_client_config(settings.ca.as_deref(), true, client_cert)
        .map_err(|e| {
            let what = match client_cert {
                Some(_) => "otel_ca, otel_tls_cert",
                None => "otel_ca",
            };
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what}: {e}"))
        })?;
    config.alpn_protocols = match settings.protocol {
        OtelProtocol::Grpc => vec![b"h2".to_vec()],
        OtelProtocol::HttpProtobuf => vec![b"http/1.1".to_vec()],
    };
    Ok(config)
}

/// The exporter's loop: every BATCH_DELAY, or when a worker says its
/// buffer holds a batch, it takes what every buffer holds and sends it in
/// batches of MAX_BATCH spans at most.
async fn run(
    settings: ExportSettings,
    tls: Option<Arc<ClientConfig>>,
    spans: Arc<Spans>,
    stop: &Notify,
) {
    let resource = Resource::this_process(&settings.service_name);
    let mut warned = false;
    let mut stopping = false;
    loop {
        // Only this thread holds the buffers: every generation using these
        // settings ended. What is left goes, then the thread ends.
        let closed = Arc::strong_count(&spans) == 1;
        if !stopping && !closed {
            tokio::select! {
                () = tokio::time::sleep(BATCH_DELAY) => {}
                () = spans.full.notified() => {}
                () = stop.notified() => stopping = true,
            }
        }
        let taken = spans.take();
        if taken.is_empty() {
            if stopping || closed {
                return;
            }
            continue;
        }
        for (runs, n) in spans::batches(&taken, MAX_BATCH) {
            let outcome = export(
                &settings,
                tls.as_ref(),
                &resource,
                &runs,
                stop,
                &mut stopping,
            );
            warned = count(outcome.await, n as u64, &settings, warned);
        }
        spans.give_back(taken);
    }
}

/// Sends one batch, again while the collector says it is throttling (at
/// most MAX_ATTEMPTS times, never once stopping).
async fn export(
    settings: &ExportSettings,
    tls: Option<&Arc<ClientConfig>>,
    resource: &Resource,
    runs: &[&[u8]],
    stop: &Notify,
    stopping: &mut bool,
) -> Outcome {
    let spans_len = runs.iter().map(|run| run.len()).sum();
    let head = proto::export_head(resource, spans_len);
    let body: Vec<&[u8]> = std::iter::once(head.as_slice())
        .chain(runs.iter().copied())
        .collect();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let sent = tokio::time::timeout(settings.timeout, send(settings, tls, &body)).await;
        let outcome = sent.unwrap_or_else(|_| Err("no answer within otel_timeout".into()));
        let pause = match &outcome {
            Err(Failure {
                retry: Some(retry), ..
            }) if attempts < MAX_ATTEMPTS && !*stopping => match *retry {
                Retry::After(pause) => pause.min(MAX_PAUSE),
                Retry::Backoff => FIRST_BACKOFF * (1 << (attempts - 1)),
            },
            _ => return outcome,
        };
        log::debug!(
            "otel: {} is throttling ({}); the batch again in {pause:?}",
            settings.endpoint.authority,
            outcome.err().map(|f| f.why).unwrap_or_default()
        );
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.notified() => *stopping = true,
        }
    }
}

/// Counts a batch of `n` spans exported or dropped; warns once per outage
/// (`warned`: whether the last batch warned), and returns whether this one
/// did or the outage goes on.
fn count(outcome: Outcome, n: u64, settings: &ExportSettings, warned: bool) -> bool {
    // Once per outage, not once a batch.
    let warn_once = |what: std::fmt::Arguments<'_>| {
        if !warned {
            log::warn!("otel: {what}");
        }
        true
    };
    let collector = &settings.endpoint.authority;
    match outcome {
        Ok(None) => {
            EXPORTED.fetch_add(n, Ordering::Relaxed);
            false
        }
        // OTLP's partial success: the collector took the batch but
        // refused some of its spans (over a quota, malformed): those are
        // counted as dropped, with the collector's reason.
        Ok(Some(refused)) => {
            let rejected = refused.spans.min(n);
            EXPORTED.fetch_add(n - rejected, Ordering::Relaxed);
            DROPPED.fetch_add(rejected, Ordering::Relaxed);
            warn_once(format_args!(
                "{collector} refused {rejected} of {n} spans: {}",
                refused.message
            ))
        }
        Err(failure) => {
            DROPPED.fetch_add(n, Ordering::Relaxed);
            warn_once(format_args!(
                "{n} spans not exported to {collector}: {}",
                failure.why
            ))
        }
    }
}

/// What a collector refused of a batch it took (OTLP's
/// `ExportTracePartialSuccess`).
#[derive(Debug, PartialEq, Eq)]
struct Refused {
    spans: u64,
    message: String,
}

/// Why a batch was not taken, and whether to send it again (the
/// collector is throttling, or briefly unable).
#[derive(Debug, PartialEq, Eq)]
struct Failure {
    why: String,
    retry: Option<Retry>,
}

/// When a throttled batch goes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// When the collector said (`Retry-After`).
    After(Duration),
    /// After the backoff: FIRST_BACKOFF, doubled at each attempt.
    Backoff,
}

impl From<String> for Failure {
    fn from(why: String) -> Failure {
        Failure { why, retry: None }
    }
}

impl From<&str> for Failure {
    fn from(why: &str) -> Failure {
        Failure::from(why.to_string())
    }
}

/// What an export came to: taken whole (`None`), taken but for some
/// spans, or not taken.
type Outcome = Result<Option<Refused>, Failure>;

/// Sends one export request, `body` its pieces in order.
async fn send(
    settings: &ExportSettings,
    tls: Option<&Arc<ClientConfig>>,
    body: &[&[u8]],
) -> Outcome {
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
    body: &[&[u8]],
) -> Outcome {
    match settings.protocol {
        OtelProtocol::HttpProtobuf => post(stream, settings, body).await,
        OtelProtocol::Grpc => grpc_export(stream, settings, body).await,
    }
}

/// OTLP/HTTP: one POST of `application/x-protobuf` on a connection of its
/// own (a batch a second at most while requests are few; under load one
/// per 512 spans), answered 2xx when taken.
async fn post(
    mut tcp: impl AsyncRead + AsyncWrite + Unpin,
    settings: &ExportSettings,
    body: &[&[u8]],
) -> Outcome {
    let body_len: usize = body.iter().map(|piece| piece.len()).sum();
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
        body_len,
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
    for piece in body {
        tcp.write_all(piece).await.map_err(|e| e.to_string())?;
    }
    // The answer, to the end (the connection closes after it): its
    // status, and its body, an ExportTraceServiceResponse that may say
    // some spans were refused.
    let mut answer = Vec::new();
    let mut piece = [0u8; 4096];
    loop {
        match tcp.read(&mut piece).await {
            Ok(0) => break,
            Ok(n) if answer.len() + n <= MAX_ANSWER => answer.extend_from_slice(&piece[..n]),
            Ok(_) => return Err("an answer over 64 KiB".into()),
            Err(e) if answer.is_empty() => return Err(e.to_string().into()),
            // A collector that resets after its answer: what came counts.
            Err(_) => break,
        }
    }
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Response::new(&mut fields);
    let head_len = match head.parse(&answer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if answer.is_empty() => {
            return Err("the collector closed the connection".into())
        }
        _ => return Err("a malformed answer".into()),
    };
    let code = head.code.unwrap_or(0);
    if !(200..300).contains(&code) {
        let why = format!("answered {code} {}", head.reason.unwrap_or(""));
        // OTLP/HTTP's retryable statuses.
        let retry = matches!(code, 429 | 502 | 503 | 504).then(|| {
            let asked = head
                .headers
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case("retry-after"))
                .and_then(|f| retry_after(f.value, std::time::SystemTime::now()));
            asked.map_or(Retry::Backoff, Retry::After)
        });
        return Err(Failure { why, retry });
    }
    let chunked = head.headers.iter().any(|f| {
        f.name.eq_ignore_ascii_case("transfer-encoding")
            && f.value.to_ascii_lowercase().ends_with(b"chunked")
    });
    let rest = &answer[head_len..];
    let body = match chunked {
        false => rest.to_vec(),
        true => {
            let mut body = Vec::new();
            let mut decoder = hayate_core::h1::chunked::ChunkedDecoder::default();
            // A body cut short still says what it says so far.
            let _ = decoder.decode(rest, |data| body.extend_from_slice(data));
            body
        }
    };
    Ok(partial_success(&body))
}

/// A `Retry-After` value (RFC 9110 §10.2.3): seconds, or an HTTP date
/// (a date already past: at once).
fn retry_after(value: &[u8], now: std::time::SystemTime) -> Option<Duration> {
    let value = std::str::from_utf8(value).ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Most bytes of a collector's answer read (a partial success's message
/// is a sentence; 64 KiB is far past any real one).
const MAX_ANSWER: usize = 64 * 1024;

/// The refused spans an `ExportTraceServiceResponse` reports (field 1,
/// `partial_success`: `rejected_spans` (1), `error_message` (2)); `None`
/// when it reports none (an empty answer is a full success).
fn partial_success(response: &[u8]) -> Option<Refused> {
    let partial = fields(response).find_map(|(n, v)| match (n, v) {
        (1, Value::Bytes(b)) => Some(b),
        _ => None,
    })?;
    let mut refused = Refused {
        spans: 0,
        message: String::new(),
    };
    for field in fields(partial) {
        match field {
            (1, Value::Varint(n)) => refused.spans = n,
            (2, Value::Bytes(m)) => refused.message = String::from_utf8_lossy(m).into(),
            _ => {}
        }
    }
    // A message alone is a warning with every span taken (OTLP says so).
    (refused.spans > 0).then_some(refused)
}

/// OTLP/gRPC: `TraceService/Export` over h2c, the request a gRPC message
/// (a flag byte, a 4-byte length, the protobuf), taken when the trailers
/// say `grpc-status: 0`.
async fn grpc_export(
    tcp: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    settings: &ExportSettings,
    body: &[&[u8]],
) -> Outcome {
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
    // One DATA payload (h2 takes `Bytes`): the body's one copy.
    let body_len: usize = body.iter().map(|piece| piece.len()).sum();
    let mut message = Vec::with_capacity(5 + body_len);
    message.push(0);
    message.extend_from_slice(&(body_len as u32).to_be_bytes());
    for piece in body {
        message.extend_from_slice(piece);
    }
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
    let mut message = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if message.len() + chunk.len() > MAX_ANSWER {
            return Err("an answer over 64 KiB".into());
        }
        message.extend_from_slice(&chunk);
    }
    if grpc_status.is_none() {
        let trailers = body.trailers().await.map_err(|e| e.to_string())?;
        grpc_status = trailers.as_ref().and_then(status);
    }
    match grpc_status.as_deref() {
        // The answer's one message, past its 5-byte frame header.
        Some("0") => Ok(message.get(5..).and_then(partial_success)),
        // The OTLP spec's retryable codes: CANCELLED, DEADLINE_EXCEEDED,
        // ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS (and
        // RESOURCE_EXHAUSTED, which it retries only with RetryInfo: a
        // collector over its quota says so that way).
        Some(code) => Err(Failure {
            why: format!("grpc-status {code}"),
            retry: matches!(code, "1" | "4" | "8" | "10" | "11" | "14" | "15")
                .then_some(Retry::Backoff),
        }),
        None => Err("no grpc-status".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        assert_eq!(retry_after(b" 3 ", now), Some(Duration::from_secs(3)));
        let later = b"Sun, 06 Nov 1994 08:50:07 GMT";
        assert_eq!(retry_after(later, now), Some(Duration::from_secs(30)));
        let past = b"Sun, 06 Nov 1994 08:49:00 GMT";
        assert_eq!(retry_after(past, now), Some(Duration::ZERO));
        assert_eq!(retry_after(b"soon", now), None);
        assert_eq!(retry_after(b"-1", now), None);
    }

    #[test]
    fn partial_successes_report_refused_spans() {
        // partial_success { rejected_spans: 3, error_message: "quota" }
        let answer = [0x0a, 9, 0x08, 3, 0x12, 5, b'q', b'u', b'o', b't', b'a'];
        let refused = partial_success(&answer);
        assert_eq!(
            refused,
            Some(Refused {
                spans: 3,
                message: "quota".into()
            })
        );
        assert_eq!(partial_success(&[]), None, "an empty answer: all taken");
        // A warning alone (no span refused).
        assert_eq!(partial_success(&[0x0a, 3, 0x12, 1, b'w']), None);
        assert_eq!(partial_success(&[0x0a, 9, 0x08]), None, "cut");
    }
}
