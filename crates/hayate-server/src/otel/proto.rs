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

/// `ScopeSpans.spans`: where each span of a batch sits.
pub(crate) const SPANS_FIELD: u32 = 2;

/// `Status.StatusCode.STATUS_CODE_ERROR`.
pub(crate) const STATUS_ERROR: u64 = 2;

/// A protobuf message being written.
#[derive(Default)]
pub(crate) struct Message(pub(crate) Vec<u8>);

impl Message {
    /// A field's key: one byte for the field numbers OTLP's messages use
    /// (under 16), the branch folded away where `field` is a constant.
    #[inline]
    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field << 3 | u32::from(wire)));
    }

    #[inline]
    fn varint(&mut self, v: u64) {
        match v < 0x80 {
            true => self.0.push(v as u8),
            false => put_varint(&mut self.0, v),
        }
    }

    /// A length-delimited field: bytes, a string or an embedded message.
    #[inline]
    pub(crate) fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    /// A length-delimited field of `parts` joined, with no buffer of its
    /// own.
    pub(crate) fn bytes_joined(&mut self, field: u32, parts: &[&[u8]]) {
        self.key(field, LEN);
        self.varint(parts.iter().map(|p| p.len()).sum::<usize>() as u64);
        for part in parts {
            self.0.extend_from_slice(part);
        }
    }

    #[inline]
    pub(crate) fn uint(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        self.varint(v);
    }

    #[inline]
    pub(crate) fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// An embedded message written by `f`, in place: its length is
    /// written after it, in the one byte kept for it (the rest moved right
    /// when it needs more). Each message in a buffer of its own, copied
    /// into its parent, cost an exported span ~25,000 instructions in the
    /// allocator and memcpy (bench/instructions/run --cases traced).
    pub(crate) fn message(&mut self, field: u32, f: impl FnOnce(&mut Message)) {
        self.message_with_room(field, 1, f);
    }

    /// [`Message::message`] with `room` bytes kept for the length: as many
    /// as the message is expected to need, so its bytes are not moved.
    pub(crate) fn message_with_room(
        &mut self,
        field: u32,
        room: usize,
        f: impl FnOnce(&mut Message),
    ) {
        self.key(field, LEN);
        let at = self.0.len();
        self.0.resize(at + room, 0);
        f(self);
        let len = self.0.len() - at - room;
        let mut prefix = [0u8; 10];
        let n = varint_into(&mut prefix, len as u64);
        if n != room {
            // Moved to fit the length exactly (protobuf readers need not
            // take a padded varint).
            let body = at + room..at + room + len;
            if n > room {
                self.0.resize(self.0.len() + n - room, 0);
            }
            self.0.copy_within(body, at + n);
            self.0.truncate(at + n + len);
        }
        self.0[at..at + n].copy_from_slice(&prefix[..n]);
    }

    /// The bytes of a `KeyValue` (key 1, value 2) before its `AnyValue`'s
    /// own bytes, `any_len` of them, which the caller writes next.
    #[inline(always)]
    fn attr_head(field: u32, key: &str, any_len: usize) -> Head {
        // Attribute names are the conventions' (none over 40 bytes), and
        // constants: this folds away.
        assert!(key.len() <= MAX_KEY, "{key}");
        let kv_len = 2 + key.len() + 1 + varint_len(any_len) + any_len;
        let mut h = Head::default();
        h.varint(u64::from(field << 3 | u32::from(LEN)));
        h.varint(kv_len as u64);
        h.byte(0x0a);
        h.byte(key.len() as u8);
        h.slice(key.as_bytes());
        h.byte(0x12);
        h.varint(any_len as u64);
        h
    }

    /// Appends `h`'s bytes: a copy of the whole array (a constant size:
    /// a few vector moves, not a call to memcpy), then cut to its length.
    #[inline(always)]
    fn put_head(&mut self, h: &Head) {
        let at = self.0.len();
        self.0.extend_from_slice(&h.buf);
        self.0.truncate(at + h.n);
    }

    /// A `KeyValue` with a string `AnyValue` (1).
    #[inline(always)]
    pub(crate) fn str_attr(&mut self, field: u32, key: &str, value: &[u8]) {
        let any_len = 1 + varint_len(value.len()) + value.len();
        let mut h = Message::attr_head(field, key, any_len);
        h.byte(0x0a);
        h.varint(value.len() as u64);
        self.put_head(&h);
        self.0.extend_from_slice(value);
    }

    /// A `KeyValue` with an int `AnyValue` (3).
    #[inline(always)]
    pub(crate) fn int_attr(&mut self, field: u32, key: &str, value: u64) {
        let any_len = 1 + varint_len(value as usize);
        let mut h = Message::attr_head(field, key, any_len);
        h.byte(3 << 3 | VARINT);
        h.varint(value);
        self.put_head(&h);
    }

    /// A `Span.Event` (time 1, name 2) as field `field`: one copy of its
    /// bytes built on the stack (an event's name is a few words).
    #[inline(always)]
    pub(crate) fn event(&mut self, field: u32, at: u64, name: &[u8]) {
        let name = &name[..name.len().min(MAX_KEY)];
        let mut h = Head::default();
        h.varint(u64::from(field << 3 | u32::from(LEN)));
        h.byte((1 + 8 + 2 + name.len()) as u8);
        h.byte(1 << 3 | FIXED64);
        h.slice(&at.to_le_bytes());
        h.byte(2 << 3 | LEN);
        h.byte(name.len() as u8);
        h.slice(name);
        self.put_head(&h);
    }

    /// A `KeyValue` with a double `AnyValue` (4).
    #[inline(always)]
    pub(crate) fn float_attr(&mut self, field: u32, key: &str, value: f64) {
        let mut h = Message::attr_head(field, key, 1 + 8);
        h.byte(4 << 3 | FIXED64);
        h.slice(&value.to_bits().to_le_bytes());
        self.put_head(&h);
    }
}

/// The longest attribute or event name written.
const MAX_KEY: usize = 40;

/// An attribute's bytes before its value's own (or all of them, for a
/// number), built on the stack and appended in one copy: written into the
/// buffer field by field, each attribute cost ~200 instructions, the
/// length of the `Vec` stored and its capacity checked at every byte.
struct Head {
    buf: [u8; 64],
    n: usize,
}

impl Default for Head {
    #[inline(always)]
    fn default() -> Head {
        Head { buf: [0; 64], n: 0 }
    }
}

impl Head {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.buf[self.n] = b;
        self.n += 1;
    }

    #[inline(always)]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    #[inline(always)]
    fn slice(&mut self, b: &[u8]) {
        self.buf[self.n..self.n + b.len()].copy_from_slice(b);
        self.n += b.len();
    }
}

/// Writes `v` as a varint at the start of `out`; returns its length.
fn varint_into(out: &mut [u8; 10], mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        out[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    n + 1
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

/// The start of an `ExportTraceServiceRequest` of spans that take
/// `spans_len` bytes as encoded `spans` fields (as `spans::Spans` buffers
/// them): one `ResourceSpans` (1) with the resource (1) and one
/// `ScopeSpans` (2) of scope (1) `hayate` and the spans (2), which follow
/// as they are. They are most of a batch (~330 KiB when full): sent from
/// where they were buffered, never copied into the request.
pub(crate) fn export_head(resource: &Resource, spans_len: usize) -> Vec<u8> {
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
    let field_len = |len: usize| 1 + varint_len(len) + len;
    let scope_spans_len = field_len(scope.0.len()) + spans_len;
    let resource_spans_len = field_len(r.0.len()) + field_len(scope_spans_len);
    let mut req = Message::default();
    req.key(1, LEN);
    req.varint(resource_spans_len as u64);
    req.bytes(1, &r.0);
    req.key(2, LEN);
    req.varint(scope_spans_len as u64);
    req.bytes(1, &scope.0);
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
            in_place.message_with_room(4, 2, |m| m.bytes(1, &value));
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
            plain.bytes(4, &any.0);
            // An event, as the plain way writes it.
            if n <= MAX_KEY {
                in_place.event(11, 7, &value);
                plain.message(11, |ev| {
                    ev.fixed64(1, 7);
                    ev.bytes(2, &value);
                });
            }
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
    fn an_event_name_longer_than_max_key_is_cut_not_overflowed() {
        // One byte past MAX_KEY, and far past it: the length bytes would
        // no longer fit in one byte beyond 127.
        for n in [MAX_KEY + 1, 300] {
            let name = vec![b'e'; n];
            let mut cut = Message::default();
            cut.event(11, 7, &name);
            let mut plain = Message::default();
            plain.message(11, |ev| {
                ev.fixed64(1, 7);
                ev.bytes(2, &name[..MAX_KEY]);
            });
            assert_eq!(cut.0, plain.0, "a name of {n} bytes");
        }
    }

    #[test]
    fn an_export_request_nests_the_spans_under_one_resource() {
        let resource = Resource {
            service_name: "svc".into(),
            host: "box1".into(),
            pid: 7,
        };
        let mut span = Message::default();
        span.message(SPANS_FIELD, |s| s.bytes(1, b""));
        let body = [export_head(&resource, span.0.len()), span.0].concat();
        // ResourceSpans (field 1, length-delimited), then its resource.
        assert_eq!(body[0], 0x0a);
        assert!(body.windows(3).any(|w| w == b"svc"));
        assert!(body.windows(6).any(|w| w == b"hayate"));
        assert!(body.ends_with(&[0x12, 2, 0x0a, 0x00]));
        // The head's lengths cover the spans that follow it.
        let all: Vec<_> = hayate_core::protobuf::fields(&body).collect();
        assert!(
            matches!(all[..], [(1, hayate_core::protobuf::Value::Bytes(b))] if body.ends_with(b)),
            "one ResourceSpans, the whole request"
        );
    }
}
