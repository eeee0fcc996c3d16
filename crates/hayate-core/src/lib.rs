//! Shared mechanism for every hayate crate: HTTP status lines, the response
//! model handed from handlers to the connection writer, the cached `Date`
//! header, content codings, the logger and the shutdown signal.
//!
//! This crate owns no I/O policy and must not depend on any other hayate crate.

pub mod app;
pub mod bounded_writes;
pub mod boxed;
pub mod client_body;
pub mod client_cert;
pub mod coding;
pub mod date;
pub mod deadline;
pub mod epoch;
pub mod error;
pub mod field;
pub mod fields;
pub mod h1;
pub mod identity;
pub mod log;
pub mod logfile;
pub mod loop_time;
pub mod metrics;
pub mod negotiate;
pub mod net;
pub mod path;
pub mod protobuf;
pub mod proxy_header;
pub mod request;
pub mod response;
pub mod shutdown;
pub mod status;
pub mod trace;
pub mod transport;
pub mod variant;

pub use coding::Coding;
pub use fields::Fields;
pub use response::{
    Attached, Body, BodySource, Chunk, Duplex, Response, StreamBody, Tunnel, UpstreamTimes,
};
pub use status::Status;
