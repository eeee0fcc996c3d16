//! The few pieces of protobuf's wire format hayate reads and writes by
//! hand (OTLP's spans and its collector's answers, gRPC's health check):
//! varints, and the fields of a message read one by one. Messages this
//! small need no generated code (decision 0022).

/// A field's value as read: a varint, or length-delimited bytes (a string,
/// bytes or an embedded message); fixed-width values are read past.
#[derive(Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5 (64 and 32 bits).
    Fixed,
}

/// The fields of `message` as (field number, value), in order, until its
/// end or the first one that is cut or of an unknown wire type: what a
/// peer sent is read for what it can say, never trusted to be whole.
pub fn fields(mut message: &[u8]) -> impl Iterator<Item = (u64, Value<'_>)> {
    std::iter::from_fn(move || {
        let (key, rest) = read_varint(message)?;
        let (value, rest) = match key & 7 {
            0 => {
                let (n, rest) = read_varint(rest)?;
                (Value::Varint(n), rest)
            }
            1 => (Value::Fixed, rest.get(8..)?),
            2 => {
                let (n, rest) = read_varint(rest)?;
                let n = usize::try_from(n).ok()?;
                (Value::Bytes(rest.get(..n)?), rest.get(n..)?)
            }
            5 => (Value::Fixed, rest.get(4..)?),
            _ => return None,
        };
        message = rest;
        Some((key >> 3, value))
    })
}

/// Appends `v` as a varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint and what follows it; `None` when `bytes` is empty or cut.
fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut n = 0u64;
    for (i, b) in bytes.iter().enumerate().take(10) {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((n, &bytes[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_both_ways_and_fields_until_one_is_cut() {
        let mut m = Vec::new();
        put_varint(&mut m, 300);
        assert_eq!(m, [0xac, 0x02]);
        // field 1 = 300, field 2 = "hi", field 3 fixed64, then a cut field 4
        let message = [
            0x08, 0xac, 0x02, 0x12, 2, b'h', b'i', 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0x22, 5, b'x',
        ];
        let read: Vec<_> = fields(&message).collect();
        assert_eq!(
            read,
            [
                (1, Value::Varint(300)),
                (2, Value::Bytes(b"hi")),
                (3, Value::Fixed)
            ]
        );
        assert_eq!(fields(&[0x0b]).count(), 0, "wire type 3 is not read");
    }
}
