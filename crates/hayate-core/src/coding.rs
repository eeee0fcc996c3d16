//! Content codings hayate can serve (RFC 9110 §8.4.1).

/// A content coding of a representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    /// Brotli (`br`).
    Br,
    /// Zstandard (`zstd`).
    Zstd,
    /// Gzip (`gzip`, also accepted as `x-gzip`).
    Gzip,
    /// No coding.
    Identity,
}

impl Coding {
    /// Every coding other than identity, in hayate's default preference order.
    pub const COMPRESSED: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// The token used in `Content-Encoding` and `Accept-Encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
            Coding::Identity => "identity",
        }
    }

    /// The file-name suffix of a precompressed sibling (`index.html.br`).
    pub fn file_suffix(self) -> Option<&'static str> {
        match self {
            Coding::Br => Some(".br"),
            Coding::Zstd => Some(".zst"),
            Coding::Gzip => Some(".gz"),
            Coding::Identity => None,
        }
    }

    /// Parses a coding token, case-insensitively. Unknown codings give `None`.
    pub fn from_token(token: &[u8]) -> Option<Coding> {
        let eq = |s: &str| token.eq_ignore_ascii_case(s.as_bytes());
        if eq("br") {
            Some(Coding::Br)
        } else if eq("zstd") {
            Some(Coding::Zstd)
        } else if eq("gzip") || eq("x-gzip") {
            Some(Coding::Gzip)
        } else if eq("identity") {
            Some(Coding::Identity)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for c in [Coding::Br, Coding::Zstd, Coding::Gzip, Coding::Identity] {
            assert_eq!(Coding::from_token(c.as_str().as_bytes()), Some(c));
        }
        assert_eq!(Coding::from_token(b"X-GZIP"), Some(Coding::Gzip));
        assert_eq!(Coding::from_token(b"compress"), None);
    }
}
