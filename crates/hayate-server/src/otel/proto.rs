//! OTLP's protobuf messages, the few hayate sends, encoded by hand
//! (opentelemetry/proto/trace/v1/trace.proto and common/v1/common.proto;
//! field numbers in the comments of each writer). A span is encoded once,
//! as its request ends; a batch is the spans' bytes inside one
//! `ExportTraceServiceRequest`.

use hayate_core::protobuf::put_varint;

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// Span kinds (`Span.SpanKind`).
pub(crate) const KIND_SERVER: u64 = 2;

/// `Status.StatusCode.STATUS_CODE_ERROR`.
pub(crate) const STATUS_ERROR: u64 = 2;

/// A protobuf message being written.
#[derive(Default)]
pub(crate) struct Message(pub(crate) Vec<u8>);

impl Message {
    fn key(&mut self, field: u32, wire: u8) {
        put_varint(&mut self.0, u64::from(field << 3 | u32::from(wire)));
    }

    /// A length-delimited field: bytes, a string or an embedded message.
    pub(crate) fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        put_varint(&mut self.0, b.len() as u64);
        self.0.extend_from_slice(b);
    }

    pub(crate) fn uint(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        put_varint(&mut self.0, v);
    }

    pub(crate) fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// An embedded message written by `f`, in place: its length is
    /// written after it, in the one byte kept for it (moved right when it
    /// needs more). Each message in a buffer of its own, copied into its
    /// parent, cost an exported span ~25,000 instructions in the
    /// allocator and memcpy (bench/instructions/run --cases traced).
    pub(crate) fn message(&mut self, field: u32, f: impl FnOnce(&mut Message)) {
        self.key(field, LEN);
        let at = self.0.len();
        self.0.push(0);
        f(self);
        let len = self.0.len() - at - 1;
        if len < 0x80 {
            self.0[at] = len as u8;
        } else {
            let mut prefix = Vec::with_capacity(10);
            put_varint(&mut prefix, len as u64);
            self.0.splice(at..=at, prefix);
        }
    }

    /// A `KeyValue` (key 1, value 2) with an `AnyValue` of `any_len`
    /// bytes, which the caller writes next.
    fn attr_head(&mut self, field: u32, key: &str, any_len: usize) {
        let kv_len = 1 + varint_len(key.len()) + key.len() + 1 + varint_len(any_len) + any_len;
        self.key(field, LEN);
        put_varint(&mut self.0, kv_len as u64);
        self.bytes(1, key.as_bytes());
        self.key(2, LEN);
        put_varint(&mut self.0, any_len as u64);
    }

    /// A `KeyValue` with a string `AnyValue` (1).
    pub(crate) fn str_attr(&mut self, field: u32, key: &str, value: &[u8]) {
        self.attr_head(field, key, 1 + varint_len(value.len()) + value.len());
        self.bytes(1, value);
    }

    /// A `KeyValue` with an int `AnyValue` (3).
    pub(crate) fn int_attr(&mut self, field: u32, key: &str, value: u64) {
        self.attr_head(field, key, 1 + varint_len(value as usize));
        self.uint(3, value);
    }

    /// A `KeyValue` with a double `AnyValue` (4).
    pub(crate) fn float_attr(&mut self, field: u32, key: &str, value: f64) {
        self.attr_head(field, key, 1 + 8);
        self.fixed64(4, value.to_bits());
    }
}

/// Bytes of `v` as a varint.
fn varint_len(v: usize) -> usize {
    (usize::BITS - (v | 1).leading_zeros()).div_ceil(7) as usize
}

/// Who exports: the OpenTelemetry resource every batch names (the
/// semantic conventions' service, host and process attributes), so a
/// trace viewer tells a fleet's boxes apart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resource {
    pub(crate) service_name: String,
    /// `host.name`: the kernel's host name.
    pub(crate) host: String,
    /// `process.pid`.
    pub(crate) pid: u32,
}

impl Resource {
    /// This process's resource, named `service_name`.
    pub(crate) fn this_process(service_name: &str) -> Resource {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        Resource {
            service_name: service_name.to_string(),
            host,
            pid: std::process::id(),
        }
    }
}

/// An `ExportTraceServiceRequest` of `spans` (each an encoded `Span`):
/// one `ResourceSpans` (1) with the resource (1) and one `ScopeSpans` (2)
/// of scope (1) `hayate` and the spans (2).
pub(crate) fn export_request(resource: &Resource, spans: &[Vec<u8>]) -> Vec<u8> {
    let mut r = Message::default();
    r.str_attr(1, "service.name", resource.service_name.as_bytes());
    r.str_attr(1, "service.version", env!("CARGO_PKG_VERSION").as_bytes());
    // Unique per process (the conventions ask for it to be unique per
    // instance of the service): host and pid.
    let instance = format!("{}:{}", resource.host, resource.pid);
    r.str_attr(1, "service.instance.id", instance.as_bytes());
    if !resource.host.is_empty() {
        r.str_attr(1, "host.name", resource.host.as_bytes());
    }
    r.int_attr(1, "process.pid", u64::from(resource.pid));
    let mut scope = Message::default();
    scope.bytes(1, b"hayate");
    scope.bytes(2, env!("CARGO_PKG_VERSION").as_bytes());
    // The spans are most of it (~330 KiB for a full batch): every length
    // is known before a byte is written, so they are copied once, into a
    // buffer of the right size.
    let field_len = |len: usize| 1 + varint_len(len) + len;
    let spans_len: usize = spans.iter().map(|s| field_len(s.len())).sum();
    let scope_spans_len = field_len(scope.0.len()) + spans_len;
    let resource_spans_len = field_len(r.0.len()) + field_len(scope_spans_len);
    let mut req = Message(Vec::with_capacity(field_len(resource_spans_len)));
    req.key(1, LEN);
    put_varint(&mut req.0, resource_spans_len as u64);
    req.bytes(1, &r.0);
    req.key(2, LEN);
    put_varint(&mut req.0, scope_spans_len as u64);
    req.bytes(1, &scope.0);
    for span in spans {
        req.bytes(2, span);
    }
    req.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_are_protobufs() {
        let mut m = Message::default();
        m.uint(1, 300);
        assert_eq!(m.0, [0x08, 0xac, 0x02]);
        let mut m = Message::default();
        m.bytes(2, b"hi");
        assert_eq!(m.0, [0x12, 2, b'h', b'i']);
        let mut m = Message::default();
        m.fixed64(7, 1);
        assert_eq!(m.0, [0x39, 1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn nested_messages_are_written_in_place_whatever_their_length() {
        for n in [0usize, 1, 127, 128, 300, 20_000] {
            let value = vec![b'x'; n];
            let mut in_place = Message::default();
            in_place.str_attr(9, "k", &value);
            in_place.message(4, |m| m.bytes(1, &value));
            // The same messages written the plain way: each in a buffer of
            // its own, then copied in.
            let mut any = Message::default();
            any.bytes(1, &value);
            let mut kv = Message::default();
            kv.bytes(1, b"k");
            kv.bytes(2, &any.0);
            let mut plain = Message::default();
            plain.bytes(9, &kv.0);
            plain.bytes(4, &any.0);
            assert_eq!(in_place.0, plain.0, "value of {n} bytes");
        }
        let mut m = Message::default();
        m.int_attr(9, "n", 300);
        m.float_attr(9, "f", 1.5);
        let mut any = Message::default();
        any.uint(3, 300);
        let mut kv = Message::default();
        kv.bytes(1, b"n");
        kv.bytes(2, &any.0);
        let mut plain = Message::default();
        plain.bytes(9, &kv.0);
        let mut any = Message::default();
        any.fixed64(4, 1.5f64.to_bits());
        let mut kv = Message::default();
        kv.bytes(1, b"f");
        kv.bytes(2, &any.0);
        plain.bytes(9, &kv.0);
        assert_eq!(m.0, plain.0);
    }

    #[test]
    fn an_export_request_nests_the_spans_under_one_resource() {
        let resource = Resource {
            service_name: "svc".into(),
            host: "box1".into(),
            pid: 7,
        };
        let body = export_request(&resource, &[vec![0x0a, 0x00]]);
        // ResourceSpans (field 1, length-delimited), then its resource.
        assert_eq!(body[0], 0x0a);
        assert!(body.windows(3).any(|w| w == b"svc"));
        assert!(body.windows(6).any(|w| w == b"hayate"));
        assert!(body.ends_with(&[0x12, 2, 0x0a, 0x00]));
    }
}
