//! The seam between forwarding (members, pool, queue, retries) and the
//! protocol an upstream speaks: HTTP/1.1 ([`crate::h1_client::Http1`])
//! today; a FastCGI responder implements the same two steps.

use hayate_core::client_body::ClientBody;
use hayate_core::transport::Transport;
use hayate_core::Response;

use crate::group::{Outstanding, ProxySettings};
use crate::h1_client::Outgoing;
use crate::retry::Failure;

/// How one attempt of a request travels over a connected [`Transport`].
pub(crate) trait UpstreamProtocol {
    /// The head of an answer, with the connection its body will come on.
    type Answer;

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
