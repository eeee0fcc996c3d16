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
//! checkout and swept when nobody takes them, and a request that fails on a
//! reused connection before any response byte is replayed once on a fresh
//! one when its body was buffered and sending it twice is safe (`retry.rs`).
//! A request that may not repeat avoids the race instead: it takes only a
//! connection that answered within the last second.
//!
//! A request's way through the crate: `forward.rs` (the attempt loop) picks
//! a member (`group.rs`) or waits (`queue.rs`), takes a connection
//! (`pool.rs`, `upconn.rs`), and runs one exchange in the upstream's
//! protocol (`protocol.rs`; HTTP/1.1 in `h1_client.rs`, with the head from
//! `request_head.rs`; FastCGI in `fastcgi.rs`, with its records, CGI
//! environment and CGI response head under `fastcgi/`). HTTP/2 members
//! (`h2c://`, or `https://` with `proxy_http2 = on`) take another way:
//! `h2_client.rs` over the multiplexed pool of `h2_pool.rs`, with gRPC's
//! view of a call (deadline, error answers) in `grpc.rs`.

mod addr;
mod fastcgi;
pub mod figures;
mod forward;
mod group;
mod grpc;
mod grpc_web;
mod h1_client;
mod h2_body;
mod h2_client;
mod h2_pool;
mod health;
mod hop_by_hop;
mod negotiated;
mod pool;
mod protocol;
mod queue;
mod request;
mod request_head;
mod retry;
mod spares;
mod sticky;
mod tunnel;
mod upconn;
mod upstream_io;

pub use addr::UpstreamAddr;
#[doc(hidden)]
pub use fastcgi::read_fastcgi_answer;
pub use figures::{FiguresSlot, MemberFigures, MemberState};
pub use group::{Balance, HostPolicy, ProxySettings, UpstreamGroup};
pub use h2_body::{field_lines, trailer_map, RecvBody};
pub use health::HealthProbe;
pub use request::{CgiScript, ClientPorts, ForwardedChain, ProxyRequest, RequestFields};
pub use request_head::request_id_hex;
pub use sticky::DEFAULT_COOKIE as DEFAULT_STICKY_COOKIE;
