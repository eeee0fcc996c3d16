//! Compression wiring: a route's options become a [`Policy`]; static roots
//! get their compressed variants from the process-wide [`VariantStore`]
//! (one per process, shared by every worker, so each file is compressed
//! once); proxied responses go through [`compress_proxied`].

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use hayate_compress::{
    AcceptEncoding, FileStamp, Levels, Policy, RequestFacts, StoreLimits, TypeList, VariantStore,
};
use hayate_config::{GlobalOptions, RouteOptions};
use hayate_core::{Coding, Response};
use hayate_static::{VariantSource, VariantState};

use hayate_proxy::ProxyRequest;

/// The store of compressed file variants for this process.
pub fn store(g: &GlobalOptions) -> Arc<VariantStore> {
    Arc::new(VariantStore::new(StoreLimits {
        budget: g.compress_cache_size.0,
        max_file: g.compress_max_file.0,
        queue: g.compress_queue as usize,
    }))
}

/// Compression's figures for `/metrics` (and so `/status.json`): the
/// store's variants built, bytes read and produced building them, bytes
/// held; proxied bodies compressed as they streamed, their bytes in and out.
pub fn render_metrics(store: &VariantStore, out: &mut String) {
    use hayate_core::metrics::{family, sample, Kind};
    let s = store.stats();
    let (bodies, streamed_in, streamed_out) = hayate_compress::stream::STREAM_STATS.get();
    let counters = [
        (
            "hayate_compression_variants_total",
            "Compressed variants of static files built",
            s.variants,
        ),
        (
            "hayate_compression_variant_input_bytes_total",
            "Bytes of static files compressed into variants",
            s.bytes_in,
        ),
        (
            "hayate_compression_variant_output_bytes_total",
            "Bytes of the compressed variants built",
            s.bytes_out,
        ),
        (
            "hayate_compression_streamed_bodies_total",
            "Proxied response bodies compressed as they streamed, to their end",
            bodies,
        ),
        (
            "hayate_compression_streamed_input_bytes_total",
            "Bytes of those bodies before compression",
            streamed_in,
        ),
        (
            "hayate_compression_streamed_output_bytes_total",
            "Bytes of those bodies sent compressed",
            streamed_out,
        ),
    ];
    for (name, help, value) in counters {
        family(out, name, help, Kind::Counter);
        sample(out, name, &[], value);
    }
    let name = "hayate_compression_variant_bytes";
    family(out, name, "Bytes of compressed variants held", Kind::Gauge);
    sample(out, name, &[], store.bytes());
}

/// A route's compression policy; `None` when it compresses nothing.
pub fn policy(o: &RouteOptions) -> Option<Policy> {
    if !o.compress || o.compress_encodings.0.is_empty() {
        return None;
    }
    let levels = |base: Levels, set: &[(Coding, i32)]| {
        set.iter().fold(base, |l, &(c, level)| l.with(c, level))
    };
    Some(Policy {
        codings: o.compress_encodings.0.clone(),
        static_levels: levels(Levels::STATIC, &o.compress_static_levels.0),
        dynamic_levels: levels(Levels::DYNAMIC, &o.compress_dynamic_levels.0),
        min_size: o.compress_min_size.0,
        types: TypeList::new(&o.compress_types.0),
    })
}

/// A static root's source of compressed variants.
#[derive(Debug)]
pub struct FileVariants {
    /// The route's policy.
    pub policy: Rc<Policy>,
    /// The process-wide store.
    pub store: Arc<VariantStore>,
}

impl VariantSource for FileVariants {
    fn codings(&self, content_type: &str, len: u64) -> Vec<Coding> {
        let worth = len >= self.policy.min_size
            && len <= self.store.limits().max_file
            && self.policy.compressible(content_type.as_bytes());
        match worth {
            true => self.policy.codings.clone(),
            false => Vec::new(),
        }
    }

    fn variant(&self, fs_path: &Path, stamp: FileStamp, coding: Coding) -> VariantState {
        let level = self.policy.static_levels.get(coding);
        self.store.get(fs_path, stamp, coding, level)
    }

    fn forget(&self, stamp: FileStamp) {
        self.store.forget(stamp);
    }
}

/// Compresses a proxied response for this request when the route's policy
/// allows (hayate-compress::stream says when).
pub fn compress_proxied(response: Response, req: &ProxyRequest<'_>, policy: &Policy) -> Response {
    let accept = AcceptEncoding::parse(req.values(b"accept-encoding"));
    let facts = RequestFacts {
        method: req.method,
        accept: &accept,
        range: req.field(b"range").is_some(),
    };
    hayate_compress::compress_response(response, &facts, policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_config::RouteLayer;

    #[test]
    fn default_types_are_the_crates() {
        let o = RouteLayer::default().resolve();
        assert_eq!(
            TypeList::new(&o.compress_types.0),
            TypeList::new([hayate_compress::policy::DEFAULT_TYPES])
        );
        let p = policy(&o).expect("on by default");
        assert_eq!(p.static_levels, Levels::STATIC);
        assert_eq!(p.dynamic_levels, Levels::DYNAMIC);
    }

    #[test]
    fn off_and_levels() {
        let mut layer = RouteLayer::default();
        layer.set_strs("compress", &["false".into()]).unwrap();
        assert!(policy(&layer.resolve()).is_none());
        let mut layer = RouteLayer::default();
        layer
            .set_strs("compress_static_levels", &["gzip:4".into()])
            .unwrap();
        let p = policy(&layer.resolve()).expect("on");
        assert_eq!(p.static_levels, Levels::STATIC.with(Coding::Gzip, 4));
    }
}
