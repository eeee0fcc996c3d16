//! What a route compresses: codings in preference order, levels, the
//! smallest body worth it and the media types that compress (an allow-list,
//! so images, video, archives and fonts already compressed are left alone).

use hayate_core::Coding;

use crate::encode::Levels;

/// The media types compressed by default; `text/event-stream` is never
/// compressed whatever the list says.
pub const DEFAULT_TYPES: &str = "text/*,application/json,application/*+json,\
application/javascript,application/x-javascript,application/ecmascript,\
application/xml,application/*+xml,application/wasm,application/x-ndjson,\
image/svg+xml,image/x-icon,image/bmp,font/ttf,font/otf,application/vnd.ms-fontobject";

/// gRPC (`application/grpc`, `application/grpc+proto`, `+json`, ...):
/// never compressed whatever the list says (`application/*+json` would
/// take `application/grpc+json`). gRPC compresses each message itself
/// (`grpc-encoding`); an HTTP content coding over the stream is not gRPC,
/// and a compressor holding bytes back would delay each streamed message.
fn is_grpc(essence: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    essence.len() >= GRPC.len()
        && essence[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(essence.get(GRPC.len()), None | Some(b'+'))
}

/// A route's compression settings, resolved from the option table.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Codings the route generates, in server preference order.
    pub codings: Vec<Coding>,
    /// Levels of compress-once variants of files.
    pub static_levels: Levels,
    /// Levels of streamed (proxied) bodies.
    pub dynamic_levels: Levels,
    /// Bodies shorter than this are sent as they are.
    pub min_size: u64,
    /// Media types that compress.
    pub types: TypeList,
}

impl Policy {
    /// Whether a body of this `Content-Type` is worth compressing.
    pub fn compressible(&self, content_type: &[u8]) -> bool {
        self.types.allows(content_type)
    }
}

/// A list of media types (`type/subtype`), where `type/*` matches every
/// subtype and `type/*+suffix` every structured-syntax subtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeList {
    /// Each pattern's type and subtype, split once here rather than on
    /// every response (splitting there cost 61 of a proxied request's
    /// 20,969 instructions, bench/instructions/run).
    patterns: Vec<(String, String)>,
}

impl TypeList {
    /// Parses patterns, lower-cased; empty ones, and ones without a `/`
    /// (which match nothing), are dropped.
    pub fn new<S: AsRef<str>>(patterns: impl IntoIterator<Item = S>) -> TypeList {
        TypeList {
            patterns: patterns
                .into_iter()
                .flat_map(|p| {
                    p.as_ref()
                        .split(',')
                        .filter_map(|s| {
                            let (ty, sub) = s.trim().split_once('/')?;
                            Some((ty.to_ascii_lowercase(), sub.to_ascii_lowercase()))
                        })
                        .collect::<Vec<_>>()
                })
                .collect(),
        }
    }

    /// Whether `content_type` (parameters allowed) is on the list.
    pub fn allows(&self, content_type: &[u8]) -> bool {
        let essence = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default();
        let essence = hayate_core::field::trim_ows(essence);
        // Patterns are lower case; the type is compared without copying it.
        // Server-sent events are delivered as they come; never buffer them.
        if essence.eq_ignore_ascii_case(b"text/event-stream") || is_grpc(essence) {
            return false;
        }
        let Some(slash) = essence.iter().position(|&b| b == b'/') else {
            return false;
        };
        let (ty, sub) = (&essence[..slash], &essence[slash + 1..]);
        self.patterns.iter().any(|(pty, psub)| {
            if pty != "*" && !ty.eq_ignore_ascii_case(pty.as_bytes()) {
                return false;
            }
            match psub.strip_prefix('*') {
                Some("") => true,
                Some(suffix) => {
                    sub.len() > suffix.len()
                        && sub[sub.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
                }
                None => sub.eq_ignore_ascii_case(psub.as_bytes()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_types() {
        let list = TypeList::new([DEFAULT_TYPES]);
        for yes in [
            "text/html",
            "text/html; charset=utf-8",
            "TEXT/CSS",
            "application/json",
            "application/problem+json",
            "Application/Problem+JSON; Charset=UTF-8",
            "application/javascript; charset=utf-8",
            "application/atom+xml",
            "image/svg+xml",
            "application/wasm",
        ] {
            assert!(list.allows(yes.as_bytes()), "{yes}");
        }
        for no in [
            "text/event-stream",
            "text/event-stream; charset=utf-8",
            "image/png",
            "image/jpeg",
            "video/mp4",
            "application/zip",
            "application/gzip",
            "application/octet-stream",
            "font/woff2",
            "application/+json",
            "",
            "garbage",
            "\u{ff}/x",
        ] {
            assert!(!list.allows(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn wildcards() {
        let list = TypeList::new(["*/*"]);
        assert!(list.allows(b"image/png"));
        assert!(!list.allows(b"text/event-stream"));
        for grpc in [
            &b"application/grpc"[..],
            b"application/grpc+json",
            b"Application/GRPC+proto",
        ] {
            assert!(!TypeList::new([DEFAULT_TYPES]).allows(grpc), "{grpc:?}");
            assert!(!list.allows(grpc), "{grpc:?}");
        }
        assert!(
            list.allows(b"application/grpc-web-text"),
            "gRPC-Web is not gRPC"
        );
        let list = TypeList::new(["application/json", ""]);
        assert!(list.allows(b"application/json"));
        assert!(!list.allows(b"text/plain"));
    }
}
