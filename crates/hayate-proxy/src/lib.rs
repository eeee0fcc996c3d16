//! The reverse proxy: upstream groups over TCP or Unix sockets, a per-worker
//! pool of keep-alive connections, least-outstanding balancing with passive
//! health, header forwarding and streamed bodies.
//!
//! Like every feature crate it depends only on hayate-core: the server hands
//! it a [`ProxyRequest`] and a [`ClientBody`](hayate_core::client_body::ClientBody)
//! and writes the [`Response`](hayate_core::Response) it returns. Groups are
//! built per worker (`Rc`, `Cell`): balancing state and pools are
//! shared-nothing.
//!
//! Never a spurious 502 from the pool race: idle connections expire before
//! the upstream's own keep-alive timeout, are checked for a close at
//! checkout, and a request that fails on a reused connection before any
//! response byte is replayed once on a fresh one when its body was buffered.

mod addr;
mod forward;
mod group;
mod h1_client;
mod health;
mod hop_by_hop;
mod pool;
mod protocol;
mod queue;
mod request;
mod request_head;
mod retry;
mod upconn;

pub use addr::UpstreamAddr;
pub use group::{Balance, HostPolicy, ProxySettings, UpstreamGroup};
pub use request::{ProxyRequest, RequestFields};
