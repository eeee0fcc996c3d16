//! The value types of serving files: which symbolic links are followed.

use super::OptValue;
pub use hayate_core::path::Symlinks;

impl OptValue for Symlinks {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "owner" => Ok(Symlinks::Owner),
            "never" => Ok(Symlinks::Never),
            "always" => Ok(Symlinks::Always),
            _ => Err(format!("expected owner, never or always, got {s:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_parse_from_their_three_names() {
        for s in [Symlinks::Owner, Symlinks::Never, Symlinks::Always] {
            assert_eq!(Symlinks::parse_str(s.as_str()), Ok(s));
        }
        assert_eq!(Symlinks::parse_str(" Always "), Ok(Symlinks::Always));
        assert!(Symlinks::parse_str("true").is_err());
    }
}
