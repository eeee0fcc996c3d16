//! A response as the shared tier keeps it: one binary Redis value holding
//! the status, the fields, the body, the Vary values it was chosen for, its
//! freshness lifetime and its age when written; or, under a primary key
//! whose responses vary, the field names that pick the variant.
//!
//! Layout (integers big-endian, byte strings as a u32 length then bytes):
//! `HYL2`, version 1, kind (1 response, 2 variant names), then for a
//! response: status u16, age at write in ms u64, the Redis TTL set in ms
//! u64, lifetime in s u64, own control (u8 present, bytes), field count
//! u16 and name/value pairs, Vary count u16 and name / (u8 present, value)
//! pairs, body. For variant names: count u16 and the names.
//!
//! Whatever is read back is checked as if it came from the network (Redis
//! is shared, and a value may be from another version or corrupt): every
//! length within the value, field names tokens, values without CR, LF or
//! NUL, a status 100-999, nothing left over. Anything else is `None`, a
//! miss.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hayate_cache::store::Stored;
use hayate_cache::{ResponseFacts, VaryKey};
use hayate_core::{Fields, Status};

const MAGIC: &[u8; 4] = b"HYL2";
/// The largest age, TTL and lifetime a value may carry, in ms: 2^32 s,
/// beyond the cache's own bound on delta-seconds (2^31).
const MOST_MS: u64 = (u32::MAX as u64) * 1000;
const VERSION: u8 = 1;
const RESPONSE: u8 = 1;
const VARIANTS: u8 = 2;

/// A value read from the shared tier.
#[derive(Debug)]
pub enum Value {
    /// A response.
    Response(Record),
    /// The field names the responses under this primary key vary on.
    Variants(Vec<Vec<u8>>),
}

/// A response read back, before it is placed in time.
#[derive(Debug)]
pub struct Record {
    status: Status,
    head: Fields,
    own_control: Option<Bytes>,
    vary: VaryKey,
    lifetime: Duration,
    /// Its age when it was written, in ms.
    age_ms: u64,
    /// The TTL its key was given then, in ms: what Redis has counted down
    /// since is how long it waited there, on Redis's clock alone.
    ttl_ms: u64,
    body: Bytes,
}

/// The value for `stored`, `age_ms` old now, written with a TTL of
/// `ttl_ms`.
pub fn encode_response(stored: &Stored, age_ms: u64, ttl_ms: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + stored.head.wire().len() + stored.body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[VERSION, RESPONSE]);
    out.extend_from_slice(&stored.status.code().to_be_bytes());
    out.extend_from_slice(&age_ms.to_be_bytes());
    out.extend_from_slice(&ttl_ms.to_be_bytes());
    out.extend_from_slice(&stored.lifetime.as_secs().to_be_bytes());
    optional(&mut out, stored.own_control.as_deref());
    count(&mut out, stored.head.len());
    for (name, value) in stored.head.iter() {
        bytes(&mut out, name);
        bytes(&mut out, value);
    }
    let parts: Vec<_> = stored.vary.parts().collect();
    count(&mut out, parts.len());
    for (name, value) in parts {
        bytes(&mut out, name);
        optional(&mut out, value);
    }
    bytes(&mut out, &stored.body);
    out
}

/// The value naming the fields a primary key's responses vary on.
pub fn encode_variants<'n>(names: impl ExactSizeIterator<Item = &'n [u8]>) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&[VERSION, VARIANTS]);
    count(&mut out, names.len());
    for n in names {
        bytes(&mut out, n);
    }
    out
}

/// The part of a variant's Redis key that tells it from its siblings: its
/// Vary names and values, in the layout of a response's.
pub fn variant_suffix(vary: &VaryKey) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in vary.parts() {
        bytes(&mut out, name);
        optional(&mut out, value);
    }
    out
}

/// Reads a value; `None` for anything that is not a well-formed one.
pub fn decode(value: &[u8]) -> Option<Value> {
    let mut r = Reader(value);
    if r.take(4)? != MAGIC || r.u8()? != VERSION {
        return None;
    }
    let decoded = match r.u8()? {
        RESPONSE => Value::Response(response(&mut r)?),
        VARIANTS => {
            let n = r.u16()?;
            let names = (0..n)
                .map(|_| r.bytes().filter(|n| is_token(n)).map(<[u8]>::to_vec))
                .collect::<Option<Vec<_>>>()?;
            Value::Variants(names)
        }
        _ => return None,
    };
    r.0.is_empty().then_some(decoded)
}

fn response(r: &mut Reader<'_>) -> Option<Record> {
    let status = Status::any(r.u16()?)?;
    // Ages and lifetimes as the cache counts them (delta-seconds, at most
    // 2^31 s): larger numbers are not hayate's, and would overflow sums.
    let age_ms = r.u64().filter(|&n| n <= MOST_MS)?;
    let ttl_ms = r.u64().filter(|&n| n <= MOST_MS)?;
    let lifetime = Duration::from_secs(r.u64().filter(|&n| n <= MOST_MS / 1000)?);
    let own_control = r
        .optional()?
        .map(|v| is_value(v).then(|| Bytes::copy_from_slice(v)))
        .map_or(Some(None), |v| v.map(Some))?;
    let mut head = Fields::new();
    for _ in 0..r.u16()? {
        let (name, value) = (r.bytes()?, r.bytes()?);
        if !is_token(name) || !is_value(value) {
            return None;
        }
        head.push(name, value);
    }
    let mut vary = Vec::new();
    for _ in 0..r.u16()? {
        let name = r.bytes().filter(|n| is_token(n))?;
        let value = r.optional()?;
        vary.push((name.into(), value.map(Into::into)));
    }
    let body = Bytes::copy_from_slice(r.bytes()?);
    Some(Record {
        status,
        head,
        own_control,
        vary: VaryKey::from_parts(vary),
        lifetime,
        age_ms,
        ttl_ms,
        body,
    })
}

impl Record {
    /// Whether this is the variant for a request with Vary key `vary`.
    pub fn is_variant(&self, vary: &VaryKey) -> bool {
        self.vary == *vary
    }

    /// The entry for the local store, `remaining_ms` before its Redis key
    /// expires: its age is its age when written plus the time Redis has
    /// held it (RFC 9111 §4.2.3: it must not look younger than it is), so
    /// the boxes' clocks need not agree.
    pub fn into_stored(self, remaining_ms: u64, now: Instant) -> Stored {
        // Both at most MOST_MS (`decode`): no overflow; and the sum kept
        // within it, so the entry can be written and read again.
        let age_ms = (self.age_ms + self.ttl_ms.saturating_sub(remaining_ms)).min(MOST_MS);
        let mut fields: Vec<(&[u8], &[u8])> = self.head.iter().collect();
        if let Some(own) = &self.own_control {
            fields.push((hayate_cache::targeted::OWN_FIELD, own));
        }
        let facts = ResponseFacts::from_fields(fields);
        // Resident time counts from `stored_at`: the part of a second it
        // is already into counts too.
        let into_second = Duration::from_millis(age_ms % 1000);
        Stored {
            status: self.status,
            etag: facts.etag.clone(),
            last_modified: facts.last_modified.as_ref().map(|(raw, _)| raw.clone()),
            cc: facts.cc,
            tags: facts
                .tags
                .iter()
                .map(|t| t.clone().into_boxed_slice())
                .collect(),
            head: Arc::new(self.head),
            body: self.body,
            vary: self.vary,
            lifetime: self.lifetime,
            initial_age: age_ms / 1000,
            stored_at: now.checked_sub(into_second).unwrap_or(now),
            own_control: self.own_control,
        }
    }
}

/// RFC 9110 token characters.
fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A field value that cannot split or end a head.
fn is_value(s: &[u8]) -> bool {
    !s.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0))
}

fn count(out: &mut Vec<u8>, n: usize) {
    // Fields and Vary names per response are far below 65,535 (heads are
    // limited to tens of KiB).
    out.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes());
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

fn optional(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            out.push(1);
            bytes(out, b);
        }
        None => out.push(0),
    }
}

/// A cursor over a value; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn optional(&mut self) -> Option<Option<&'a [u8]>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.bytes()?)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_cache::ResponseDirectives;

    fn stored() -> Stored {
        let names = vec![b"accept-language".to_vec(), b"x-absent".to_vec()];
        Stored {
            status: Status::OK,
            head: Arc::new(Fields::parse_wire(
                b"Content-Type: text/plain\r\nCache-Control: max-age=60, stale-while-revalidate=5\r\n\
                  ETag: \"v1\"\r\nSurrogate-Key: a b\r\nDate: Tue, 24 Nov 2026 01:00:00 GMT\r\n",
            )),
            body: Bytes::from_static(b"hello\r\n\0binary"),
            vary: VaryKey::new(&names, |n: &[u8]| {
                if n == b"accept-language" {
                    vec![&b"EN"[..]]
                } else {
                    vec![]
                }
            }),
            etag: Some(Bytes::from_static(b"\"v1\"")),
            last_modified: None,
            cc: ResponseDirectives::default(),
            lifetime: Duration::from_secs(60),
            initial_age: 3,
            stored_at: Instant::now(),
            tags: Box::new([]),
            own_control: Some(Bytes::from_static(b"max-age=60")),
        }
    }

    #[test]
    fn a_response_round_trips_and_ages_by_the_time_redis_held_it() {
        let s = stored();
        let value = encode_response(&s, 3_400, 65_000);
        let Some(Value::Response(r)) = decode(&value) else {
            panic!("not read back");
        };
        assert!(r.is_variant(&s.vary));
        let now = Instant::now();
        // Redis counted 2.8 s down since: 3.4 + 2.8 = 6.2 s old.
        let back = r.into_stored(62_200, now);
        assert_eq!(back.status, s.status);
        assert_eq!(back.head.wire(), s.head.wire());
        assert_eq!(back.body, s.body);
        assert_eq!(back.vary, s.vary);
        assert_eq!(back.lifetime, s.lifetime);
        assert_eq!(back.own_control, s.own_control);
        assert_eq!(back.etag, s.etag);
        assert_eq!(back.age(now), 6);
        assert_eq!(back.age(now + Duration::from_millis(800)), 7);
        // The facts are read again from the fields it came with: the
        // targeted field wins over Cache-Control (RFC 9213).
        assert_eq!(back.cc.max_age, Some(60));
        assert_eq!(back.cc.stale_while_revalidate, None);
        let tags: Vec<&[u8]> = back.tags.iter().map(|t| &t[..]).collect();
        assert_eq!(tags, [&b"a"[..], b"b"]);
    }

    #[test]
    fn variant_names_round_trip() {
        let value = encode_variants([&b"accept-encoding"[..], b"cookie"].into_iter());
        let Some(Value::Variants(names)) = decode(&value) else {
            panic!("not read back");
        };
        assert_eq!(names, [b"accept-encoding".to_vec(), b"cookie".to_vec()]);
    }

    #[test]
    fn junk_is_not_a_value() {
        let good = encode_response(&stored(), 0, 1000);
        // Every truncation, and one byte too many.
        for n in 0..good.len() {
            assert!(decode(&good[..n]).is_none(), "cut at {n}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(decode(&long).is_none());
        // Another version, another kind, plain text.
        for (at, byte) in [(4, 2u8), (5, 9)] {
            let mut v = good.clone();
            v[at] = byte;
            assert!(decode(&v).is_none(), "byte {at} = {byte}");
        }
        assert!(decode(b"<html>hello</html>").is_none());
        // Ages beyond what the cache counts.
        assert!(decode(&encode_response(&stored(), u64::MAX, 1000)).is_none());
        assert!(decode(&encode_response(&stored(), 0, u64::MAX)).is_none());
        // A field value carrying a line break would split the head, a name
        // with a space is not a name (patched in: Fields refuses both).
        for (field, from, to) in [
            (
                (&b"X-A"[..], &b"1  Set-Cookie: x=1"[..]),
                &b"1  Set"[..],
                &b"1\r\nSet"[..],
            ),
            (
                (&b"Bad_Name"[..], &b"1"[..]),
                &b"Bad_Name"[..],
                &b"Bad Name"[..],
            ),
        ] {
            let mut s = stored();
            s.head = Arc::new(Fields::from_iter([field]));
            let mut v = encode_response(&s, 0, 1000);
            assert!(decode(&v).is_some());
            let at = v
                .windows(from.len())
                .position(|w| w == from)
                .expect("found");
            v[at..at + to.len()].copy_from_slice(to);
            assert!(decode(&v).is_none(), "{:?}", String::from_utf8_lossy(to));
        }
        // A length beyond the value.
        let mut v = good;
        let at = v.len() - stored().body.len() - 4;
        v[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&v).is_none());
    }

    #[test]
    fn mutated_values_never_panic_and_what_reads_writes_again() {
        // The fuzz target's property (fuzz/fuzz_targets/l2_record.rs) over
        // 20,000 single- and multi-byte mutations of a good value.
        let good = encode_response(&stored(), 3_000, 60_000);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let now = Instant::now();
        for _ in 0..20_000 {
            let mut v = good.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() % v.len() as u64) as usize;
                v[at] = next() as u8;
            }
            let Some(Value::Response(r)) = decode(&v) else {
                continue;
            };
            let s = r.into_stored(0, now);
            let again = encode_response(&s, s.age(now) * 1000, 1000);
            let Some(Value::Response(back)) = decode(&again) else {
                panic!("read, but not readable once written again: {v:?}");
            };
            assert_eq!(back.into_stored(1000, now).head.wire(), s.head.wire());
        }
    }
}
