//! HTTP/1.1, both roles, over bytes: the one codec hayate speaks HTTP/1
//! with (like hyper's `proto/h1`). It does no I/O of its own; the server's
//! connection loop, the proxy's upstream client, the admin listener and
//! the health and readiness probes drive it over a
//! [`Transport`](crate::transport::Transport).
//!
//! - [`request`]: a request head — parsed and validated (server role:
//!   limits and the framing rules of RFC 9112 that keep request smuggling
//!   out), or written (client role).
//! - [`response`]: a response head — written (server role), or parsed and
//!   checked (client role).
//! - [`body`]: body framing in either direction: Content-Length, chunked
//!   (with trailers, [`chunked`]) and close-delimited bodies decoded as
//!   bytes arrive.
//! - [`probe`]: one `GET` and the status it answers, for health checks and
//!   readiness probes.

pub mod body;
pub mod chunked;
pub mod probe;
pub mod request;
pub mod response;
