//! Content negotiation of codings (RFC 9110 §12.5.3). Encoders come with the
//! compression issue; this crate already owns the Accept-Encoding parser so
//! static files can pick precompressed siblings.
//!
//! Depends only on hayate-core.

pub mod negotiate;

pub use negotiate::AcceptEncoding;
