//! One `GET` on a fresh connection and the status it answers: the active
//! health checks of upstream members and the readiness probes of
//! supervised app instances both ask this way.

use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client_body::BodyLength;
use crate::h1::request::{write_field, write_framing, write_request_line};
use crate::h1::response::parse_head;
use crate::transport::Transport;
use crate::Status;

/// The largest answer head a probe reads.
const MAX_HEAD: usize = 16 * 1024;

/// Sends `GET path` (`Host: localhost`, `Connection: close`, the given
/// User-Agent) on `conn` and returns the final status, interim 1xx
/// answers skipped; within `limit` in all.
pub async fn get(
    conn: &mut Transport,
    path: &str,
    user_agent: &str,
    limit: Duration,
) -> io::Result<Status> {
    let exchange = async {
        let mut request = Vec::with_capacity(128);
        write_request_line(&mut request, b"GET", path.as_bytes());
        write_field(&mut request, b"Host", b"localhost");
        write_field(&mut request, b"User-Agent", user_agent.as_bytes());
        write_field(&mut request, b"Connection", b"close");
        write_framing(&mut request, BodyLength::None);
        conn.write_all(&request).await?;
        let mut buf = BytesMut::with_capacity(1024);
        loop {
            if conn.read_buf(&mut buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before answering",
                ));
            }
            loop {
                let mut slots = [const { MaybeUninit::uninit() }; 64];
                match parse_head(&buf, &mut slots, false)? {
                    None => break,
                    Some(head) if head.status.code() < 200 => {
                        let len = head.len;
                        let _ = buf.split_to(len);
                    }
                    Some(head) => return Ok(head.status),
                }
            }
            if buf.len() > MAX_HEAD {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "answer head too large",
                ));
            }
        }
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_reads_the_final_status_past_interim_answers() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (a, mut b) = tokio::net::UnixStream::pair().expect("pair");
            let app = tokio::spawn(async move {
                let mut req = vec![0u8; 512];
                let n = b.read(&mut req).await.expect("read");
                b.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
                    .await
                    .expect("write");
                b.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                    .await
                    .expect("write");
                String::from_utf8_lossy(&req[..n]).into_owned()
            });
            let mut conn = Transport::Unix(a);
            let status = get(&mut conn, "/health", "hayate-test", Duration::from_secs(5))
                .await
                .expect("answered");
            assert_eq!(status.code(), 503);
            let request = app.await.expect("app");
            assert_eq!(
                request,
                "GET /health HTTP/1.1\r\nHost: localhost\r\nUser-Agent: hayate-test\r\n\
                 Connection: close\r\n\r\n"
            );
        });
    }
}
