//! Health probes to HTTP/2 members, on a fresh connection each (not the
//! pool's: a probe judges whether a new connection works, as the HTTP/1.1
//! probe does): `GET path` answered 2xx, or gRPC's health protocol
//! (gRPC's health-checking.md): `grpc.health.v1.Health/Check` for the
//! server as a whole or one service, answered SERVING.

use std::io;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use hayate_core::protobuf::{fields, put_varint, Value};

use super::{HealthProbe, Tls};
use crate::h2_pool::h2_io;
use crate::UpstreamAddr;

/// A Check answer is a few bytes (a status field); more is not one.
const MAX_ANSWER: usize = 1024;

/// Probes `addr` as `check` says, within `limit`.
pub(super) async fn probe(
    addr: &UpstreamAddr,
    tls: Tls<'_>,
    label: &str,
    check: &HealthProbe,
    limit: Duration,
) -> io::Result<()> {
    let transport = crate::upconn::connect(addr, limit, None, tls, None).await?;
    let (send, connection) = crate::h2_pool::handshake(transport, label, limit).await?;
    // The connection's task ends once the probe drops its handles.
    tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    let mut send = send.ready().await.map_err(h2_io)?;
    let authority = match addr {
        UpstreamAddr::Tcp { authority, .. } => authority.as_str(),
        _ => "localhost",
    };
    let scheme = if addr.tls_name().is_some() {
        "https"
    } else {
        "http"
    };
    let (request, body) = match check {
        HealthProbe::Get(path) => (
            http::Request::get(format!("{scheme}://{authority}{path}")),
            None,
        ),
        HealthProbe::Grpc(service) => (
            http::Request::post(format!(
                "{scheme}://{authority}/grpc.health.v1.Health/Check"
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers"),
            Some(check_request(service)),
        ),
    };
    let request = request
        .header("user-agent", "hayate-health")
        .body(())
        .map_err(io::Error::other)?;
    let (answer, mut out) = send.send_request(request, body.is_none()).map_err(h2_io)?;
    if let Some(body) = body {
        out.send_data(body, true).map_err(h2_io)?;
    }
    let answer = answer.await.map_err(h2_io)?;
    if !answer.status().is_success() {
        let code = answer.status().as_u16();
        return Err(io::Error::other(format!("answered {code}")));
    }
    if matches!(check, HealthProbe::Get(_)) {
        return Ok(());
    }
    // A trailers-only answer (an error) says its status in the head.
    let head_status = grpc_status(answer.headers());
    let mut recv = answer.into_body();
    let mut message = BytesMut::new();
    while let Some(data) = recv.data().await {
        let data = data.map_err(h2_io)?;
        let _ = recv.flow_control().release_capacity(data.len());
        if message.len() + data.len() > MAX_ANSWER {
            return Err(io::Error::other("a health answer over 1 KiB"));
        }
        message.extend_from_slice(&data);
    }
    let trailers = recv.trailers().await.map_err(h2_io)?;
    match head_status.or_else(|| trailers.as_ref().and_then(grpc_status)) {
        Some(0) => serving(&message),
        Some(code) => Err(io::Error::other(format!("grpc-status {code}"))),
        None => Err(io::Error::other("no grpc-status")),
    }
}

fn grpc_status(fields: &http::HeaderMap) -> Option<u32> {
    fields.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// `HealthCheckRequest { string service = 1; }` in its gRPC frame.
fn check_request(service: &str) -> Bytes {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a); // field 1, length-delimited
        put_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0); // not compressed
    frame.put_u32(message.len() as u32);
    frame.put_slice(&message);
    frame.freeze()
}

/// Whether a Check answer's frame says SERVING: `HealthCheckResponse {
/// ServingStatus status = 1; }`, where 1 is SERVING (0 UNKNOWN, 2
/// NOT_SERVING, 3 SERVICE_UNKNOWN); fields a later version adds are
/// skipped.
fn serving(frame: &[u8]) -> io::Result<()> {
    let malformed = || io::Error::other("a malformed health answer");
    let message = match frame {
        [0, rest @ ..] if rest.len() >= 4 => {
            let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            rest[4..].get(..n).ok_or_else(malformed)?
        }
        _ => return Err(malformed()),
    };
    let mut status = 0u64;
    let mut read = 0;
    for (field, value) in fields(message) {
        read += 1;
        if let (1, Value::Varint(v)) = (field, value) {
            status = v;
        }
    }
    if read == 0 && !message.is_empty() {
        return Err(malformed());
    }
    const NAMES: [&str; 4] = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];
    match status {
        1 => Ok(()),
        s => {
            let name = NAMES
                .get(s as usize)
                .copied()
                .unwrap_or("an unknown status");
            Err(io::Error::other(format!("answered {name}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_check_messages_both_ways() {
        assert_eq!(&check_request("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &check_request("a.B")[..],
            &[0, 0, 0, 0, 5, 0x0a, 3, b'a', b'.', b'B']
        );
        assert!(serving(&[0, 0, 0, 0, 2, 0x08, 1]).is_ok());
        let not = serving(&[0, 0, 0, 0, 2, 0x08, 2]).unwrap_err().to_string();
        assert!(not.contains("NOT_SERVING"), "{not}");
        // An empty message is status 0, UNKNOWN; an unknown field is skipped.
        assert!(serving(&[0, 0, 0, 0, 0]).is_err());
        assert!(serving(&[0, 0, 0, 0, 5, 0x12, 1, b'x', 0x08, 1]).is_ok());
        assert!(serving(&[0, 0, 0, 0, 9, 0x08]).is_err(), "cut");
    }
}
