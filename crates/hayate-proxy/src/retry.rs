//! When a failed attempt may be tried again (DESIGN.md, "Retries"): only
//! what cannot apply a request twice. A request none of whose bytes reached
//! the upstream may go again anywhere; one that was written but got no
//! answer only if it is [`repeatable`](crate::ProxyRequest::repeatable)
//! (the upstream may have acted on it before dying); nothing is tried again
//! once an answer began, nor without the whole body at hand to resend.
//! A failure of hayate's own (no descriptor for a connect) is nobody's: the
//! request waits for one, and no member is blamed.

use std::io;

/// Why an attempt failed, and how far the request had got.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client's body failed (bad framing, too large, timeout, gone).
    Client(io::Error),
    /// No byte of the request reached the connection.
    NotSent(io::Error),
    /// The request was written (whole or in part), and no byte of an answer
    /// came back.
    NoAnswer(io::Error),
    /// The upstream failed after it began to answer, or sent garbage.
    Upstream(io::Error),
    /// hayate was short of a descriptor, socket buffer, memory or local
    /// port for the attempt (`hayate_core::error::is_local_shortage`): no
    /// byte was sent, and the upstream is not to blame.
    Local(io::Error),
    /// The member's listen queue stayed full for as long as the request
    /// could wait (a Unix socket answers EAGAIN rather than queue a
    /// connect): busy, not broken, so no failure is counted against it.
    Full(io::Error),
}

impl Failure {
    /// A connect's failure: hayate's own shortage, or the upstream's
    /// (refused, unreachable, timed out) with nothing sent.
    pub(crate) fn connecting(e: io::Error) -> Failure {
        if hayate_core::error::is_local_shortage(&e) {
            Failure::Local(e)
        } else if e.kind() == io::ErrorKind::WouldBlock {
            Failure::Full(e)
        } else {
            Failure::NotSent(e)
        }
    }

    /// The cause.
    pub(crate) fn into_cause(self) -> io::Error {
        match self {
            Failure::Client(e)
            | Failure::NotSent(e)
            | Failure::NoAnswer(e)
            | Failure::Upstream(e)
            | Failure::Local(e)
            | Failure::Full(e) => e,
        }
    }
}

/// What was true of a failed attempt, besides its [`Failure`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt {
    /// It went on a pooled connection (which the upstream may have closed
    /// as it was reused: the pool race).
    pub reused: bool,
    /// The whole body is buffered, so the request can be sent again.
    pub body_buffered: bool,
    /// The request may be applied twice ([`crate::ProxyRequest::repeatable`]).
    pub repeatable: bool,
    /// Another member is left to try.
    pub other_member: bool,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Send it again to the same member, on a fresh connection (once).
    Replay,
    /// Send it to another member (this one counts a failure).
    OtherMember,
    /// Answer with the error.
    GiveUp,
    /// Wait in the group's queue for a descriptor or a pooled connection,
    /// then try again; no member counts a failure.
    Wait,
}

/// The retry policy.
pub(crate) fn after(failure: &Failure, attempt: Attempt) -> Next {
    let may_resend = match failure {
        Failure::Local(_) => return Next::Wait,
        // It waited as long as the request may: nothing is left to wait for.
        Failure::Full(_) => return Next::GiveUp,
        Failure::Client(_) | Failure::Upstream(_) => false,
        Failure::NotSent(_) => attempt.body_buffered,
        Failure::NoAnswer(_) => attempt.body_buffered && attempt.repeatable,
    };
    if !may_resend {
        Next::GiveUp
    } else if attempt.reused {
        Next::Replay
    } else if attempt.other_member {
        Next::OtherMember
    } else {
        Next::GiveUp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e() -> io::Error {
        io::ErrorKind::ConnectionReset.into()
    }

    #[test]
    fn the_policy_table() {
        use Next::*;
        let base = Attempt {
            reused: true,
            body_buffered: true,
            repeatable: true,
            other_member: true,
        };
        let post = Attempt {
            repeatable: false,
            ..base
        };
        let fresh = Attempt {
            reused: false,
            ..base
        };
        let cases: [(&str, Failure, Attempt, Next); 13] = [
            (
                "GET, reused, no answer: the pool race",
                Failure::NoAnswer(e()),
                base,
                Replay,
            ),
            (
                "POST, reused, written, no answer: may have been applied",
                Failure::NoAnswer(e()),
                post,
                GiveUp,
            ),
            (
                "POST, reused, nothing written",
                Failure::NotSent(e()),
                post,
                Replay,
            ),
            (
                "GET, fresh, no answer: another member",
                Failure::NoAnswer(e()),
                fresh,
                OtherMember,
            ),
            (
                "POST, fresh, no answer",
                Failure::NoAnswer(e()),
                Attempt {
                    reused: false,
                    ..post
                },
                GiveUp,
            ),
            (
                "POST, fresh, nothing written",
                Failure::NotSent(e()),
                Attempt {
                    reused: false,
                    ..post
                },
                OtherMember,
            ),
            (
                "GET, fresh, no member left",
                Failure::NoAnswer(e()),
                Attempt {
                    other_member: false,
                    ..fresh
                },
                GiveUp,
            ),
            (
                "streamed body",
                Failure::NotSent(e()),
                Attempt {
                    body_buffered: false,
                    ..base
                },
                GiveUp,
            ),
            ("an answer began", Failure::Upstream(e()), base, GiveUp),
            (
                "the client's body failed",
                Failure::Client(e()),
                base,
                GiveUp,
            ),
            (
                "no descriptor for a connect: wait, whatever the request",
                // EMFILE (Linux): the process has no descriptor left.
                Failure::connecting(io::Error::from_raw_os_error(24)),
                post,
                Wait,
            ),
            (
                "a refused connect is the upstream's",
                Failure::connecting(io::ErrorKind::ConnectionRefused.into()),
                Attempt {
                    reused: false,
                    ..post
                },
                OtherMember,
            ),
            (
                "POST with an Idempotency-Key counts as repeatable",
                Failure::NoAnswer(e()),
                Attempt {
                    repeatable: true,
                    ..post
                },
                Replay,
            ),
        ];
        for (what, failure, attempt, next) in cases {
            assert_eq!(after(&failure, attempt), next, "{what}");
        }
    }
}
