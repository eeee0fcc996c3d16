//! Targeted cache control (RFC 9213): `Hayate-Cache-Control` (for hayate
//! alone) and `CDN-Cache-Control` (for every CDN, hayate included) take the
//! place of `Cache-Control` and `Expires` for hayate's storage and
//! freshness decisions.
//!
//! A targeted field is a Structured Field Dictionary (RFC 8941 §3.2): a
//! value that does not parse as one, or an empty one, is ignored as if
//! absent (RFC 9213 §2.1), and the next field of the target list is
//! tried. So is one whose delta-seconds directives (`max-age`, `s-maxage`,
//! `stale-while-revalidate`, `stale-if-error`) are not Integers: RFC 9213
//! maps a Cache-Control token to an Integer and a quoted-string to a
//! String, so `max-age="10000"` is a String where only an Integer means
//! anything, and the field is invalid whole (cache-tests' `cdn-max-age-
//! quoted`: `Cache-Control: no-store` then decides). Directives are then
//! read with the Cache-Control parser.
//!
//! Forwarding: `CDN-Cache-Control` goes on downstream unchanged (other CDN
//! layers in front of hayate are its targets too); `Hayate-Cache-Control`
//! targets no one past hayate and is removed from what a caching route
//! sends.

/// hayate's own targeted field, lowercased.
pub const OWN_FIELD: &[u8] = b"hayate-cache-control";
/// The CDN targeted field, lowercased.
pub const CDN_FIELD: &[u8] = b"cdn-cache-control";

/// The value that decides caching among the targeted fields' values, in
/// target-list order (hayate's own, then CDN's), each the field's lines:
/// the first valid, non-empty one, its lines joined with `, ` as RFC 9110
/// §5.3 combines them; `None`: Cache-Control decides.
pub fn select(by_field: [&[&[u8]]; 2]) -> Option<Vec<u8>> {
    by_field.into_iter().find_map(|lines| {
        if lines.is_empty() {
            return None;
        }
        let combined = lines.join(&b", "[..]);
        is_nonempty_dictionary(&combined).then_some(combined)
    })
}

/// Whether `value` parses as a Structured Field Dictionary with at least
/// one member (RFC 8941 §4.2.2, with RFC 9651's Date and Display String
/// items).
pub fn is_nonempty_dictionary(value: &[u8]) -> bool {
    let mut p = Parser { s: value, at: 0 };
    p.skip(|b| b == b' ');
    if p.done() {
        return false;
    }
    loop {
        let Some(key) = p.key() else {
            return false;
        };
        let ok = if DELTA_SECONDS.contains(&key) {
            p.eat(b'=') && p.non_negative_integer() && p.parameters()
        } else if p.eat(b'=') {
            p.member_value()
        } else {
            p.parameters()
        };
        if !ok {
            return false;
        }
        p.skip(is_ows);
        if p.done() {
            return true;
        }
        if !p.eat(b',') {
            return false;
        }
        p.skip(is_ows);
        if p.done() {
            return false; // a trailing comma
        }
    }
}

/// Directives whose value is a number of seconds: an Integer in a
/// targeted field (RFC 9213 §2.1), nothing else.
const DELTA_SECONDS: [&[u8]; 4] = [
    b"max-age",
    b"s-maxage",
    b"stale-while-revalidate",
    b"stale-if-error",
];

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn done(&self) -> bool {
        self.at >= self.s.len()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.at += usize::from(hit);
        hit
    }

    fn skip(&mut self, f: impl Fn(u8) -> bool) -> usize {
        let start = self.at;
        while self.peek().is_some_and(&f) {
            self.at += 1;
        }
        self.at - start
    }

    /// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
    fn key(&mut self) -> Option<&[u8]> {
        let start = self.at;
        let first = self.peek()?;
        if !(first.is_ascii_lowercase() || first == b'*') {
            return None;
        }
        self.skip(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
        });
        Some(&self.s[start..self.at])
    }

    fn member_value(&mut self) -> bool {
        if self.peek() == Some(b'(') {
            self.inner_list()
        } else {
            self.bare_item() && self.parameters()
        }
    }

    fn inner_list(&mut self) -> bool {
        self.at += 1; // "("
        loop {
            self.skip(|b| b == b' ');
            if self.eat(b')') {
                return self.parameters();
            }
            if !(self.bare_item() && self.parameters()) {
                return false;
            }
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return false;
            }
        }
    }

    fn parameters(&mut self) -> bool {
        while self.eat(b';') {
            self.skip(|b| b == b' ');
            if self.key().is_none() {
                return false;
            }
            if self.eat(b'=') && !self.bare_item() {
                return false;
            }
        }
        true
    }

    fn bare_item(&mut self) -> bool {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'"') => self.string(),
            Some(b':') => self.byte_sequence(),
            Some(b'?') => {
                self.at += 1;
                self.eat(b'0') || self.eat(b'1')
            }
            Some(b'@') => {
                self.at += 1;
                self.peek().is_some_and(|b| b == b'-' || b.is_ascii_digit()) && self.integer()
            }
            Some(b'%') => {
                self.at += 1;
                self.display_string()
            }
            Some(b) if b.is_ascii_alphabetic() || b == b'*' => {
                self.skip(|b| is_tchar(b) || b == b':' || b == b'/');
                true
            }
            _ => false,
        }
    }

    /// An integer (at most 15 digits) or a decimal (12 before the point,
    /// 3 after).
    fn number(&mut self) -> bool {
        self.eat(b'-');
        let int = self.skip(|b| b.is_ascii_digit());
        if int == 0 {
            return false;
        }
        if !self.eat(b'.') {
            return int <= 15;
        }
        let frac = self.skip(|b| b.is_ascii_digit());
        int <= 12 && (1..=3).contains(&frac)
    }

    /// An Integer that is not negative (a number of seconds).
    fn non_negative_integer(&mut self) -> bool {
        self.peek().is_some_and(|b| b.is_ascii_digit()) && self.integer()
    }

    fn integer(&mut self) -> bool {
        self.eat(b'-');
        (1..=15).contains(&self.skip(|b| b.is_ascii_digit())) && self.peek() != Some(b'.')
    }

    fn string(&mut self) -> bool {
        self.at += 1; // DQUOTE
        while let Some(b) = self.peek() {
            self.at += 1;
            match b {
                b'"' => return true,
                b'\\' => {
                    if !(self.eat(b'"') || self.eat(b'\\')) {
                        return false;
                    }
                }
                0x20..=0x7e => {}
                _ => return false,
            }
        }
        false
    }

    fn byte_sequence(&mut self) -> bool {
        self.at += 1; // ":"
        self.skip(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
        self.eat(b':')
    }

    /// `%"..."`: printable ASCII but `%` and `"`, and `%xx` lowercase hex.
    fn display_string(&mut self) -> bool {
        if !self.eat(b'"') {
            return false;
        }
        while let Some(b) = self.peek() {
            self.at += 1;
            match b {
                b'"' => return true,
                b'%' => {
                    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
                    if !(self.peek().is_some_and(hex)
                        && self.s.get(self.at + 1).is_some_and(|&b| hex(b)))
                    {
                        return false;
                    }
                    self.at += 2;
                }
                0x20..=0x7e => {}
                _ => return false,
            }
        }
        false
    }
}

/// RFC 9110 §5.6.2 tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionaries() {
        let valid = [
            "max-age=60",
            "no-store",
            "max-age=60, stale-while-revalidate=30",
            "private=\"set-cookie, x-a\", max-age=5",
            "a=?1;p=1;q, b=(x \"y\" 1);r, c=:aGk=:, d=1.5, e=-3, f=tok/en:x",
            "  max-age=1  ",
            "a=@1700000000, b=%\"caf%c3%a9\"",
            "a=(), b=( 1  2 )",
            "max-age=0, s-maxage=60;p=1, stale-if-error=5, stale-while-revalidate=3",
            "no-cache=\"set-cookie\", max-ages=\"x\"",
        ];
        for v in valid {
            assert!(is_nonempty_dictionary(v.as_bytes()), "{v}");
        }
        let invalid = [
            "",
            "   ",
            "Max-Age=60",
            "max-age=60,",
            ",max-age=60",
            "max-age=60,, no-store",
            "max-age=",
            "max-age=1.2345",
            "max-age=1234567890123456",
            "max-age = 60",
            "a=\"open",
            "a=\"bad\\x\"",
            "a=:aGk=",
            "a=?2",
            "a=(1 2",
            "a=(1,2)",
            "a=1;",
            "1=a",
            "a=%\"%C3\"",
            "a=b c",
            "a=\u{e9}",
            // Delta-seconds directives take an Integer, nothing else.
            "max-age=\"10000\"",
            "no-store, max-age=\"10000\"",
            "s-maxage=1.5",
            "stale-while-revalidate=-1",
            "stale-if-error=soon",
            "max-age",
            "max-age=?1",
            "max-age=(60)",
        ];
        for v in invalid {
            assert!(!is_nonempty_dictionary(v.as_bytes()), "{v:?}");
        }
    }

    #[test]
    fn selection_follows_the_target_list() {
        let own: &[&[u8]] = &[b"max-age=10"];
        let cdn: &[&[u8]] = &[b"max-age=20", b"stale-if-error=5"];
        let bad: &[&[u8]] = &[b"Max-Age=10"];
        assert_eq!(select([own, cdn]).as_deref(), Some(&b"max-age=10"[..]));
        assert_eq!(
            select([&[], cdn]).as_deref(),
            Some(&b"max-age=20, stale-if-error=5"[..])
        );
        assert_eq!(
            select([bad, cdn]).as_deref(),
            Some(&b"max-age=20, stale-if-error=5"[..]),
            "an invalid field is skipped"
        );
        assert_eq!(select([bad, &[]]), None);
        let quoted: &[&[u8]] = &[b"max-age=\"10000\""];
        assert_eq!(
            select([&[], quoted]),
            None,
            "a String max-age: invalid whole"
        );
        assert_eq!(select([&[], &[b""]]), None, "an empty value is no value");
    }
}
