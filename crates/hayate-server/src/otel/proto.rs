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

    /// An embedded message written by `f`.
    pub(crate) fn message(&mut self, field: u32, f: impl FnOnce(&mut Message)) {
        let mut inner = Message::default();
        f(&mut inner);
        self.bytes(field, &inner.0);
    }

    /// A `KeyValue` (key 1, value 2) with a string `AnyValue` (1).
    pub(crate) fn str_attr(&mut self, field: u32, key: &str, value: &[u8]) {
        self.message(field, |kv| {
            kv.bytes(1, key.as_bytes());
            kv.message(2, |any| any.bytes(1, value));
        });
    }

    /// A `KeyValue` with an int `AnyValue` (3).
    pub(crate) fn int_attr(&mut self, field: u32, key: &str, value: u64) {
        self.message(field, |kv| {
            kv.bytes(1, key.as_bytes());
            kv.message(2, |any| any.uint(3, value));
        });
    }

    /// A `KeyValue` with a double `AnyValue` (4).
    pub(crate) fn float_attr(&mut self, field: u32, key: &str, value: f64) {
        self.message(field, |kv| {
            kv.bytes(1, key.as_bytes());
            kv.message(2, |any| any.fixed64(4, value.to_bits()));
        });
    }
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
    let mut req = Message::default();
    req.message(1, |rs| {
        rs.message(1, |r| {
            r.str_attr(1, "service.name", resource.service_name.as_bytes());
            r.str_attr(1, "service.version", env!("CARGO_PKG_VERSION").as_bytes());
            // Unique per process (the conventions ask for it to be unique
            // per instance of the service): host and pid.
            let instance = format!("{}:{}", resource.host, resource.pid);
            r.str_attr(1, "service.instance.id", instance.as_bytes());
            if !resource.host.is_empty() {
                r.str_attr(1, "host.name", resource.host.as_bytes());
            }
            r.int_attr(1, "process.pid", u64::from(resource.pid));
        });
        rs.message(2, |ss| {
            ss.message(1, |scope| {
                scope.bytes(1, b"hayate");
                scope.bytes(2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            for span in spans {
                ss.bytes(2, span);
            }
        });
    });
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
