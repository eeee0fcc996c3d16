//! The seam between forwarding (members, pool, queue, retries) and the
//! protocol an upstream speaks: HTTP/1.1 ([`crate::h1_client::Http1`]) or
//! FastCGI ([`crate::fastcgi::FastCgi`]). A value of the protocol is one
//! request prepared for it, built once so that every attempt sends the
//! same bytes; forwarding calls the same few steps whatever the protocol.

use std::time::Instant;

use bytes::Bytes;
use hayate_core::client_body::{BodyLength, ClientBody};
use hayate_core::error::Error;
use hayate_core::transport::Transport;
use hayate_core::Response;

use crate::group::{Outstanding, ProxySettings};
use crate::retry::Failure;
use crate::{ProxyRequest, UpstreamAddr};

/// One request, prepared for the protocol its upstream speaks.
pub(crate) trait UpstreamProtocol: Sized {
    /// The head of an answer, with the connection its body will come on.
    type Answer;

    /// The protocol must announce the body's length before the body (CGI's
    /// CONTENT_LENGTH): a chunked body is then read whole first, within
    /// the client's `max_body_size`.
    const NEEDS_LENGTH: bool = false;

    /// Prepares `req`, whose body goes upstream framed as `length`
    /// (`buffered`: the whole body, when it was read first). An error is
    /// a request this protocol cannot carry.
    fn prepare(
        req: &ProxyRequest<'_>,
        length: BodyLength,
        buffered: Option<&Bytes>,
        settings: &ProxySettings,
    ) -> Result<Self, Error>;

    /// Adapts the request to `member` (the Host an HTTP request names).
    fn for_member(&mut self, settings: &ProxySettings, member: &UpstreamAddr);

    /// What opens the request on the connection (for [`Outgoing::head`]).
    fn head(&self) -> &[u8];

    /// Whether the request asks to switch protocols (WebSocket).
    fn upgrade(&self) -> bool;

    /// The X-Request-Id hayate made for the request (0: the client's own
    /// was passed on), for the access log.
    fn made_request_id(&self) -> u64;

    /// Sends the request on `conn` and reads the answer's head. A failure
    /// says how far the request got ([`Failure`]), which decides whether
    /// it may be sent again.
    async fn exchange<B: ClientBody>(
        &self,
        conn: Transport,
        out: &Outgoing<'_>,
        body: &mut B,
        settings: &ProxySettings,
    ) -> Result<Self::Answer, Failure>;

    /// The response for the client; its body streams from the connection,
    /// and `guard` counts the request as outstanding on its member until
    /// the body ends (then the connection may return to the pool).
    fn response(
        &self,
        answer: Self::Answer,
        guard: Outstanding,
        settings: &ProxySettings,
    ) -> Response;
}

/// What one attempt sends upstream.
#[derive(Clone, Copy)]
pub(crate) struct Outgoing<'a> {
    /// What opens the request ([`UpstreamProtocol::head`]).
    pub head: &'a [u8],
    /// The whole body, when it was small enough to buffer (replayable).
    pub buffered: Option<&'a Bytes>,
    /// Otherwise, what was read of it before streaming the rest.
    pub prefix: &'a Bytes,
    /// The trailer section of a buffered chunked body (kept for a replay);
    /// a streamed body's trailers are read from the client at its end.
    pub trailers: Option<&'a Bytes>,
    /// The framing sent upstream.
    pub length: BodyLength,
    /// The request is HEAD (its answer has no body).
    pub is_head: bool,
    /// The request asks for a protocol switch.
    pub upgrade: bool,
    /// When the attempt started (a clock read with nothing awaited since):
    /// the response head's deadline counts from it unless sending waited.
    pub started: Instant,
}
