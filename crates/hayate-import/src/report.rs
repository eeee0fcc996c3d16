//! What every import reports: where a directive was written (`Pos`), why
//! a file could not be read (`ParseError`), and what became of a directive
//! (`Note`, `Kind`). Shared by the nginx and the Caddyfile importers.

use std::fmt;
use std::path::PathBuf;

/// Where a directive (or an error) was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    /// The file, as named on the command line or resolved from an include.
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub col: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// Why a configuration could not be read: a position (file:line:col) when
/// the text is at fault.
#[derive(Debug)]
pub struct ParseError {
    /// Where; the file alone (line 0) when it could not be read.
    pub pos: Pos,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pos.line == 0 {
            write!(f, "{}: {}", self.pos.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.pos.file.display(),
                self.pos.line,
                self.pos.col,
                self.message
            )
        }
    }
}

impl std::error::Error for ParseError {}

/// What became of a reported directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// hayate does it by default, or better.
    NotNeeded,
    /// Carried over, behaving differently as the note says.
    Differs,
    /// Known, but this use of it could not be carried over.
    NotCarried,
    /// hayate has no equivalent.
    NotSupported,
}

impl Kind {
    /// How the report line says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NotNeeded => "not needed",
            Kind::Differs => "carried with a difference",
            Kind::NotCarried => "not carried",
            Kind::NotSupported => "not supported",
        }
    }

    /// Whether something of the original config is left behind.
    pub fn is_loss(self) -> bool {
        matches!(self, Kind::NotCarried | Kind::NotSupported)
    }
}

/// One line of the report: a directive not carried over, or carried over
/// with a difference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Where the directive was.
    pub pos: Pos,
    /// Its name.
    pub directive: String,
    /// What became of it.
    pub kind: Kind,
    /// Why, or how it differs.
    pub what: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pos, directive) = (&self.pos, &self.directive);
        write!(
            f,
            "{pos}: {directive}: {}: {}",
            self.kind.as_str(),
            self.what
        )
    }
}
