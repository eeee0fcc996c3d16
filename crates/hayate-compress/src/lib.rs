//! Content codings (RFC 9110 §8.4): the br/zstd/gzip encoders, what a route compresses (policy), the shared
//! compress-once store of file variants with its background compressor, and
//! the stage that compresses streamed (proxied) responses.
//!
//! Depends only on hayate-core; the server combines it with static files
//! (through `hayate_static::VariantSource`) and the proxy.

pub mod encode;
pub mod policy;
pub mod store;
pub mod stream;

pub use encode::Levels;
/// Accept-Encoding negotiation lives in hayate-core (the cache keys its
/// variants with it too).
pub use hayate_core::negotiate::AcceptEncoding;
pub use hayate_core::variant::{FileStamp, VariantState};
pub use policy::{Policy, TypeList};
pub use store::{StoreLimits, VariantStore};
pub use stream::{compress_response, RequestFacts};
