//! Sticky sessions (`proxy_balance = "sticky"`): hayate's own cookie names
//! the member that served a client, and the client's later requests go back
//! to that member while it is up. Apps that keep a session in one process
//! need it: socket.io's and SockJS's long-polling handshake, and any
//! in-memory session store.
//!
//! The cookie's value is an opaque member id: a keyed hash (SipHash, the
//! key drawn once per hayate process) of the member's label, so it names
//! neither an address nor a port, and it is the same on every worker and
//! across reloads that keep the member. A cookie that names no member that
//! can take the request (ejected, at its limit, gone, or minted by another
//! hayate process) is ignored: the request goes where the group's normal
//! choice (least outstanding) sends it, and the answer sets the cookie anew.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use hayate_core::transport::Scheme;
use hayate_core::Response;

/// The cookie's name unless `sticky:NAME` gives one.
pub const DEFAULT_COOKIE: &str = "hayate_sticky";

/// The key member ids are hashed with: one per process, so ids agree
/// across workers and reloads, and nobody outside can map an id back to
/// an address by hashing candidates.
fn key() -> &'static RandomState {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new)
}

/// A member's id in the cookie, from its label (`host:port`, a socket path
/// or `app[i]`).
pub(crate) fn member_id(label: &str) -> u64 {
    key().hash_one(label)
}

/// The id a cookie value names, if it is one (16 hex digits).
pub(crate) fn parse_id(value: &[u8]) -> Option<u64> {
    if value.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(value).ok()?, 16).ok()
}

/// The value of cookie `name` in the request's Cookie fields.
pub(crate) fn cookie<'r>(headers: &[(&'r [u8], &'r [u8])], name: &str) -> Option<&'r [u8]> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
        .flat_map(|(_, v)| v.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii_start();
            let (k, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            (k == name.as_bytes()).then(|| v[1..].trim_ascii_end())
        })
}

/// Adds the cookie that sends this client back to member `id`, unless the
/// request already carried it (`sent`). A session cookie (no Max-Age: the
/// affinity lasts as long as the browser's session), for the whole site,
/// not readable by scripts, sent on top-level navigations from other sites
/// (SameSite=Lax) and only over HTTPS when it was set over HTTPS.
pub(crate) fn stick(
    response: &mut Response,
    name: &str,
    id: u64,
    sent: Option<u64>,
    scheme: Scheme,
) {
    if sent == Some(id) {
        return;
    }
    let secure = if scheme == Scheme::Https {
        "; Secure"
    } else {
        ""
    };
    let value = format!("{name}={id:016x}; Path=/; HttpOnly; SameSite=Lax{secure}");
    response.header("set-cookie", value.as_bytes());
}

/// Warns, once per process, when a socket.io client's session was not
/// found (engine.io answers 400 to a `sid` it does not know): its requests
/// went to instances that take turns, and `sticky` is the fix.
pub(crate) fn warn_on_lost_session(target: &[u8], status: u16) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let socket_io = target.starts_with(b"/socket.io/") && target.windows(4).any(|w| w == b"sid=");
    if status == 400 && socket_io && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::warn!(
            "a socket.io session was not found on the member that got its request (400): \
             socket.io, SockJS and long polling need each client on one member; set \
             proxy_balance = \"sticky\" (--proxy-balance sticky, hayate run's default)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::status::Status;

    #[test]
    fn ids_are_stable_opaque_and_parse_back() {
        let id = member_id("10.0.0.5:3000");
        assert_eq!(id, member_id("10.0.0.5:3000"), "same label, same id");
        assert_ne!(id, member_id("10.0.0.6:3000"));
        let text = format!("{id:016x}");
        assert!(!text.contains("3000"), "{text}");
        assert_eq!(parse_id(text.as_bytes()), Some(id));
        assert_eq!(parse_id(b"10.0.0.5:3000"), None);
        assert_eq!(parse_id(b"zzzzzzzzzzzzzzzz"), None);
    }

    #[test]
    fn cookie_is_found_among_others() {
        let headers: Vec<(&[u8], &[u8])> = vec![
            (b"Accept", b"*/*"),
            (b"Cookie", b"a=1; hayate_sticky=00000000000000ff ;b=2"),
        ];
        assert_eq!(
            cookie(&headers, DEFAULT_COOKIE),
            Some(&b"00000000000000ff"[..])
        );
        assert_eq!(cookie(&headers, "c"), None);
        assert_eq!(cookie(&[], DEFAULT_COOKIE), None);
    }

    #[test]
    fn set_cookie_attributes_and_secure_on_https() {
        let set = |sent, scheme| {
            let mut r = Response::new(Status::OK);
            stick(&mut r, "s", 255, sent, scheme);
            r.field(b"set-cookie")
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            set(None, Scheme::Http).as_deref(),
            Some("s=00000000000000ff; Path=/; HttpOnly; SameSite=Lax")
        );
        assert_eq!(
            set(Some(7), Scheme::Https).as_deref(),
            Some("s=00000000000000ff; Path=/; HttpOnly; SameSite=Lax; Secure")
        );
        assert_eq!(set(Some(255), Scheme::Http), None, "already carried");
    }

    #[test]
    fn a_cookie_keeps_its_member_until_it_is_ejected() {
        use crate::{Balance, ProxySettings, UpstreamAddr, UpstreamGroup};
        let addrs: Vec<UpstreamAddr> = (0..3)
            .map(|i| UpstreamAddr::parse(&format!("127.0.0.1:{}", 1000 + i)).expect("addr"))
            .collect();
        let g = UpstreamGroup::new(
            &addrs,
            ProxySettings {
                balance: Balance::Sticky("s".into()),
                max_fails: 1,
                ..Default::default()
            },
        );
        let now = std::time::Instant::now();
        let cookie = format!("{:016x}", g.members[1].sticky_id);
        // The busiest member, yet its clients stay on it.
        g.members[1].outstanding.set(5);
        for _ in 0..5 {
            assert_eq!(g.pick(now, &[], Some(cookie.as_bytes())), Ok(1));
        }
        // Retried elsewhere when it failed this request.
        assert_ne!(g.pick(now, &[1], Some(cookie.as_bytes())), Ok(1));
        // An unknown id, or none: the normal choice.
        assert_ne!(g.pick(now, &[], Some(b"0123456789abcdef")), Ok(1));
        assert_ne!(g.pick(now, &[], None), Ok(1));
        // Ejected: its clients go elsewhere (and get a new cookie).
        g.members[1].failed(&g.settings);
        assert_ne!(g.pick(now, &[], Some(cookie.as_bytes())), Ok(1));
    }
}
