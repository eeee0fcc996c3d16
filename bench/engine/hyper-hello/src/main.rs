//! hyper-hello: the engine baseline of the bench lab.
//!
//! One current-thread tokio runtime, HTTP/1 only, keep-alive, pipeline flushing
//! on, every request answered with the same 1,024-byte body. It shows what the
//! hyper + tokio engine costs per request before any file serving happens.
//!
//! usage: hyper-hello [ADDR]   (default 127.0.0.1:8091)

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const BODY_LEN: usize = 1024;

fn body() -> Bytes {
    let v: Vec<u8> = (0..BODY_LEN)
        .map(|i| if i % 64 == 63 { b'\n' } else { b'a' + (i % 26) as u8 })
        .collect();
    Bytes::from(v)
}

async fn hello(_req: Request<Incoming>, body: Bytes) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut resp = Response::new(Full::new(body));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(resp)
}

fn main() {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8091".to_string())
        .parse()
        .expect("usage: hyper-hello [ADDR]");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(addr).await.expect("bind");
        println!("hyper-hello listening on http://{addr}/");
        let body = body();
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(_) => continue,
            };
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| hello(req, body.clone()));
                let _ = http1::Builder::new()
                    .keep_alive(true)
                    .pipeline_flush(true)
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}
