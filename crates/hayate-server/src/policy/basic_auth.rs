//! basic_auth: users and passwords from an htpasswd file (RFC 7617; nginx's
//! `auth_basic_user_file`, Caddy's `basic_auth`).
//!
//! - Only slow, salted hashes are accepted: bcrypt (`$2y$`, `$2b$`, `$2a$`,
//!   what `htpasswd -B` makes), SHA-crypt (`$5$`, `$6$`) and argon2id. MD5
//!   (`$apr1$`), SHA-1 (`{SHA}`), crypt(3) and plain text are refused when
//!   the file is loaded, naming the line.
//! - A password is checked with the hash's own constant-time comparison; an
//!   unknown user costs the same hash as a known one, so timing does not
//!   tell which users exist.
//! - A credential that passed is remembered for [`REMEMBER`], under a keyed
//!   hash (HMAC-SHA-256, a key made at start) of the header's token, never
//!   the password: a logged-in browser, which sends the header with every
//!   request, pays the hash (bcrypt cost 10: about 50 ms of CPU) once, not
//!   per request as under nginx. What is remembered is forgotten when the
//!   file changes.
//! - The file is checked for changes at most once a second (one `stat`)
//!   and reloaded; a file that no longer loads keeps the previous users,
//!   with a WARN naming the line.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use hayate_core::{Response, Status};
use ring::rand::SecureRandom;
use siphasher::sip128::{Hasher128, SipHasher13};

use super::prehashed::{self, PrehashedMap};
use super::{Access, AccessPolicy, AccessRequest};

/// How long a verified credential is remembered.
const REMEMBER: Duration = Duration::from_secs(300);
/// Most credentials remembered per route and worker; past it the memory is
/// cleared (only credentials that passed are ever remembered, so this is
/// the number of distinct logged-in users, not of attempts).
const REMEMBER_MAX: usize = 4096;
/// Longest Authorization value read; longer is a 401 without decoding.
const MAX_TOKEN: usize = 4096;
/// Longest password checked. SHA-crypt's work grows with the password's
/// length (5,000 rounds over it): a 10 KB password would cost a request
/// ~0.2 s of CPU. bcrypt reads 72 bytes at most anyway.
const MAX_PASSWORD: usize = 1024;
/// How often the file is looked at for changes.
const RECHECK: Duration = Duration::from_secs(1);

/// Failed basic-auth attempts since start, every route (on /metrics).
pub static FAILURES: AtomicU64 = AtomicU64::new(0);

/// One route's basic authentication (each worker has its own: the
/// remembered credentials need no lock).
pub struct BasicAuth {
    path: PathBuf,
    /// The `WWW-Authenticate` value of a 401.
    challenge: Vec<u8>,
    /// The key of the remembered credentials' tags (random, per route and
    /// worker).
    key: [u8; 16],
    state: RefCell<State>,
}

/// The users of a file and their hashes.
type Users = HashMap<String, PasswordHash>;
/// A file's modification time and length, to tell when it changed.
type Stamp = (SystemTime, u64);

struct State {
    users: Users,
    /// The file's stamp when it was read.
    stamp: Option<Stamp>,
    checked: Instant,
    /// Credentials that passed, by a keyed 128-bit tag of the
    /// Authorization value (the password itself is never kept).
    remembered: PrehashedMap<u128, Instant>,
}

/// A stored password hash, by its scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PasswordHash {
    Bcrypt(String),
    ShaCrypt(String),
    Argon2(String),
}

impl PasswordHash {
    /// Reads one hash; `Err` says why it is refused.
    fn parse(hash: &str) -> Result<PasswordHash, String> {
        let refused = |what: &str| {
            Err(format!(
                "{what} is refused (too fast to guess against); make the file with htpasswd -B (bcrypt)"
            ))
        };
        let h = hash.to_string();
        let parsed = if ["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p)) {
            PasswordHash::Bcrypt(h)
        } else if hash.starts_with("$5$") || hash.starts_with("$6$") {
            PasswordHash::ShaCrypt(h)
        } else if hash.starts_with("$argon2id$") {
            PasswordHash::Argon2(h)
        } else if hash.starts_with("$apr1$") || hash.starts_with("$1$") {
            return refused("an MD5 hash");
        } else if hash.starts_with("{SHA}") {
            return refused("a SHA-1 hash");
        } else if hash.starts_with('$') {
            return Err("an unknown hash scheme (bcrypt, SHA-crypt or argon2id are read)".into());
        } else {
            return refused("a crypt(3) hash or a plain password");
        };
        // A hash its library cannot read is refused now, not at a login.
        match parsed.check(b"") {
            Ok(_) => Ok(parsed),
            Err(()) => Err("a malformed hash".into()),
        }
    }

    /// Whether `password` is the one hashed; `Err` when the hash cannot be
    /// read.
    fn check(&self, password: &[u8]) -> Result<bool, ()> {
        match self {
            PasswordHash::Bcrypt(h) => bcrypt::verify(password, h).map_err(|_| ()),
            PasswordHash::ShaCrypt(h) => {
                if !sha_crypt_well_formed(h) {
                    return Err(());
                }
                let Ok(password) = std::str::from_utf8(password) else {
                    return Ok(false);
                };
                Ok(if h.starts_with("$6$") {
                    sha_crypt::sha512_check(password, h).is_ok()
                } else {
                    sha_crypt::sha256_check(password, h).is_ok()
                })
            }
            PasswordHash::Argon2(h) => {
                use argon2::password_hash::{PasswordHash as Phc, PasswordVerifier};
                let phc = Phc::new(h).map_err(|_| ())?;
                match argon2::Argon2::default().verify_password(password, &phc) {
                    Ok(()) => Ok(true),
                    Err(argon2::password_hash::Error::Password) => Ok(false),
                    Err(_) => Err(()),
                }
            }
        }
    }
}

/// Whether a SHA-crypt hash has its shape, `$5$[rounds=N$]SALT$HASH`
/// (43 characters of hash for SHA-256, 86 for SHA-512): the crate tells a
/// malformed hash from a wrong password only through a private type.
fn sha_crypt_well_formed(hash: &str) -> bool {
    let parts: Vec<&str> = hash.split('$').collect();
    let (id, rest) = match parts.as_slice() {
        ["", id, rest @ ..] => (*id, rest),
        _ => return false,
    };
    let rest = match rest {
        [rounds, rest @ ..] if rounds.starts_with("rounds=") => {
            if rounds["rounds=".len()..].parse::<u32>().is_err() {
                return false;
            }
            rest
        }
        rest => rest,
    };
    let crypt_alphabet = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/')
    };
    match (id, rest) {
        ("5", [salt, hash]) => salt.len() <= 16 && hash.len() == 43 && crypt_alphabet(hash),
        ("6", [salt, hash]) => salt.len() <= 16 && hash.len() == 86 && crypt_alphabet(hash),
        _ => false,
    }
}

/// Reads an htpasswd file's text: `user:hash` lines, `#` comments and
/// blank lines ignored. `Err` names the first refused line.
fn parse_htpasswd(text: &str) -> Result<Users, String> {
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((user, hash)) = line.split_once(':') else {
            return Err(format!("line {}: expected user:hash", n + 1));
        };
        // Apache's htpasswd may append fields after the hash (`user:hash:`).
        let hash = hash.split(':').next().unwrap_or_default();
        let hash = PasswordHash::parse(hash)
            .map_err(|e| format!("line {} (user {user:?}): {e}", n + 1))?;
        users.insert(user.to_string(), hash);
    }
    if users.is_empty() {
        return Err("no users in it".into());
    }
    Ok(users)
}

/// Reads and parses the file, with its stamp.
fn load_file(path: &Path) -> Result<(Users, Stamp), String> {
    let at = |e: String| format!("basic_auth {}: {e}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| at(e.to_string()))?;
    let text = std::fs::read_to_string(path).map_err(|e| at(e.to_string()))?;
    let users = parse_htpasswd(&text).map_err(at)?;
    Ok((users, stamp(&meta)))
}

fn stamp(meta: &std::fs::Metadata) -> Stamp {
    (
        meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        meta.len(),
    )
}

impl BasicAuth {
    /// Loads `path`; `realm` is shown by browsers. `Err` says what is wrong
    /// with the file (unreadable, a refused hash and its line).
    pub fn load(path: &Path, realm: &str) -> Result<BasicAuth, String> {
        if realm.chars().any(|c| c.is_control()) {
            return Err(format!("basic_auth_realm {realm:?}: control characters"));
        }
        let (users, stamp) = load_file(path)?;
        let realm = realm.replace('\\', "\\\\").replace('"', "\\\"");
        let rng = ring::rand::SystemRandom::new();
        let mut key = [0u8; 16];
        rng.fill(&mut key)
            .map_err(|_| "no randomness for basic_auth's key".to_string())?;
        Ok(BasicAuth {
            path: path.to_path_buf(),
            challenge: format!("Basic realm=\"{realm}\", charset=\"UTF-8\"").into_bytes(),
            key,
            state: RefCell::new(State {
                users,
                stamp: Some(stamp),
                checked: Instant::now(),
                remembered: prehashed::map(),
            }),
        })
    }

    /// Reloads the file if it changed (looked at once per [`RECHECK`]).
    fn refresh(&self, state: &mut State, now: Instant) {
        if now.saturating_duration_since(state.checked) < RECHECK {
            return;
        }
        state.checked = now;
        let current = std::fs::metadata(&self.path).ok().map(|m| stamp(&m));
        if current == state.stamp {
            return;
        }
        match load_file(&self.path) {
            Ok((users, stamp)) => {
                log::info!("{} reloaded ({} users)", self.path.display(), users.len());
                state.users = users;
                state.stamp = Some(stamp);
                state.remembered.clear();
            }
            Err(e) => {
                // Tried again at the next change only.
                state.stamp = current;
                log::warn!("{e}; the previous users stay");
            }
        }
    }

    /// A refusal of credentials that were sent: counted.
    fn fail(&self) -> Access {
        FAILURES.fetch_add(1, Ordering::Relaxed);
        self.refuse()
    }

    fn refuse(&self) -> Access {
        let mut r = Response::error(Status::UNAUTHORIZED);
        r.header("WWW-Authenticate", &self.challenge);
        Access::Refuse(r)
    }

    /// Whether the decoded `user:password` credential is right.
    fn verify(&self, state: &State, credential: &[u8]) -> bool {
        let Some(colon) = credential.iter().position(|&b| b == b':') else {
            return false;
        };
        let (user, password) = (&credential[..colon], &credential[colon + 1..]);
        if password.len() > MAX_PASSWORD {
            return false;
        }
        let known = std::str::from_utf8(user)
            .ok()
            .and_then(|u| state.users.get(u));
        match known {
            Some(hash) => hash.check(password).unwrap_or(false),
            None => {
                // The same work as for a known user, thrown away.
                if let Some(any) = state.users.values().next() {
                    let _ = any.check(password);
                }
                false
            }
        }
    }
}

impl BasicAuth {
    /// The tag a credential is remembered by: SipHash-1-3's 128-bit output
    /// under a random key, a keyed function nobody without the key can
    /// aim a collision at (2^64 tries for a birthday, 2^128 for a given
    /// tag). HMAC-SHA-256 cost a logged-in request 4,252 instructions, a
    /// quarter of a whole proxied request (bench/instructions/run,
    /// policy-auth); this costs about a hundred.
    fn tag(&self, token: &[u8]) -> u128 {
        let mut h = SipHasher13::new_with_key(&self.key);
        std::hash::Hasher::write(&mut h, token);
        h.finish128().as_u128()
    }
}

impl AccessPolicy for BasicAuth {
    fn check(&self, request: &AccessRequest<'_>) -> Access {
        let mut state = self.state.borrow_mut();
        self.refresh(&mut state, request.now);
        let Some(value) = request.head.headers_named(b"authorization").next() else {
            return self.refuse();
        };
        // From here every refusal is a failed attempt (counted).
        let token = match value.split_at_checked(6) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"basic ") => rest.trim_ascii(),
            _ => return self.fail(),
        };
        if token.is_empty() || token.len() > MAX_TOKEN {
            return self.fail();
        }
        let tag = self.tag(token);
        if let Some(at) = state.remembered.get(&tag) {
            if request.now.saturating_duration_since(*at) < REMEMBER {
                return Access::Pass;
            }
        }
        let engine = base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new()
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
        );
        let passed = engine
            .decode(token)
            .is_ok_and(|credential| self.verify(&state, &credential));
        if !passed {
            return self.fail();
        }
        if state.remembered.len() >= REMEMBER_MAX {
            state.remembered.clear();
        }
        state.remembered.insert(tag, request.now);
        Access::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hayate_core::request::{RequestHead, Version};
    use hayate_core::transport::Scheme;

    fn bcrypt_of(password: &str) -> String {
        // Cost 4, the least: these tests check logic, not cost.
        bcrypt::hash(password, 4).expect("bcrypt")
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(f.path(), text).expect("write");
        f
    }

    fn status(auth: &BasicAuth, authorization: Option<&[u8]>, now: Instant) -> u16 {
        let mut head = RequestHead::new(b"GET", b"/", Version::Http11, Scheme::Https);
        if let Some(v) = authorization {
            head.push_field(b"Authorization", v);
        }
        let request = AccessRequest {
            head: &head,
            client_ip: None,
            now,
        };
        match auth.check(&request) {
            Access::Pass | Access::Delay(_) => 200,
            Access::Refuse(r) => {
                assert_eq!(
                    r.field(b"www-authenticate"),
                    Some(&b"Basic realm=\"admin \\\"area\\\"\", charset=\"UTF-8\""[..])
                );
                r.status.code()
            }
        }
    }

    fn basic(credential: &str) -> Vec<u8> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(credential);
        format!("Basic {b64}").into_bytes()
    }

    #[test]
    fn users_of_every_accepted_scheme_log_in_and_nobody_else() {
        // SHA-crypt hashes of "sesame", made by glibc's crypt(3).
        let sha256 = "$5$rounds=5000$saltsaltsaltsalt$9ApwDgBVFOqGU.mt5NsiapFBafZI43cel8peCtTK3UD";
        let sha512 = "$6$saltsalt$g3uPFdehVnKoLXdidvSAg1zlVgYomPr0X/xgdXSBn2LuxZUOGgYW4IULZkguZ77fzYteIur49AGHmF9iek6Sf1";
        let f = file(&format!(
            "# admins\nalice:{}\ncarol:{sha256}\ndave:{sha512}:extra\n\n",
            bcrypt_of("wonderland")
        ));
        let auth = BasicAuth::load(f.path(), "admin \"area\"").expect("load");
        let now = Instant::now();
        let failures_before = FAILURES.load(Ordering::Relaxed);
        assert_eq!(status(&auth, Some(&basic("alice:wonderland")), now), 200);
        assert_eq!(
            status(&auth, Some(b"basic  YWxpY2U6d29uZGVybGFuZA"), now),
            200
        );
        for refused in [
            basic("alice:wrong"),
            basic("alice:"),
            basic("mallory:wonderland"),
            basic("alicewonderland"),
            basic(&format!("alice:{}", "x".repeat(10_000))),
            b"Basic !!!not-base64!!!".to_vec(),
            b"Bearer abc".to_vec(),
            b"Basic ".to_vec(),
        ] {
            assert_eq!(status(&auth, Some(&refused), now), 401, "{refused:?}");
        }
        assert_eq!(status(&auth, None, now), 401);
        // Every refusal is counted for /metrics (other tests count too).
        assert!(FAILURES.load(Ordering::Relaxed) >= failures_before + 8);
        let mut metrics = String::new();
        super::super::render_metrics(&mut metrics);
        assert!(
            metrics.contains("\nhayate_basic_auth_failures_total "),
            "{metrics}"
        );
        assert_eq!(status(&auth, Some(&basic("carol:sesame")), now), 200);
        assert_eq!(status(&auth, Some(&basic("dave:sesame")), now), 200);
        assert_eq!(status(&auth, Some(&basic("carol:guess")), now), 401);
        assert_eq!(status(&auth, Some(&basic("dave:wonderland")), now), 401);
    }

    #[test]
    fn argon2id_hashes_are_read() {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let salt = SaltString::encode_b64(b"a salt of 16 b..").expect("salt");
        let hash = argon2::Argon2::default()
            .hash_password(b"open sesame", &salt)
            .expect("hash")
            .to_string();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        let f = file(&format!("erin:{hash}\n"));
        let auth = BasicAuth::load(f.path(), "admin \"area\"").expect("load");
        let now = Instant::now();
        assert_eq!(status(&auth, Some(&basic("erin:open sesame")), now), 200);
        assert_eq!(status(&auth, Some(&basic("erin:open says me")), now), 401);
        let broken = file("erin:$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$\n");
        let err = BasicAuth::load(broken.path(), "r").err().expect("refused");
        assert!(err.contains("malformed"), "{err}");
    }

    #[test]
    fn weak_and_malformed_hashes_are_refused_at_load_naming_the_line() {
        for (text, says) in [
            ("bob:$apr1$abc$def\n", "line 1 (user \"bob\"): an MD5 hash"),
            ("# x\nbob:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", "line 2"),
            ("bob:plaintext\n", "plain password"),
            ("bob:$2y$10$tooshort\n", "malformed"),
            ("bob:$6$salt$tooshort\n", "malformed"),
            ("no colon here\n", "expected user:hash"),
            ("\n# only comments\n", "no users"),
        ] {
            let f = file(text);
            let err = BasicAuth::load(f.path(), "r").err().expect("refused");
            assert!(err.contains(says), "{text:?}: {err}");
        }
        let err = BasicAuth::load(Path::new("/nonexistent/htpasswd"), "r")
            .err()
            .expect("refused");
        assert!(err.contains("/nonexistent/htpasswd"), "{err}");
    }

    #[test]
    fn a_verified_credential_is_remembered_until_the_file_changes() {
        let f = file(&format!("alice:{}\n", bcrypt_of("one")));
        let auth = BasicAuth::load(f.path(), "admin \"area\"").expect("load");
        let t0 = Instant::now();
        assert_eq!(status(&auth, Some(&basic("alice:one")), t0), 200);
        assert_eq!(auth.state.borrow().remembered.len(), 1);
        // The password changes in the file: the old one stops working at
        // the next look at the file, remembered or not.
        std::fs::write(f.path(), format!("alice:{}\n# changed\n", bcrypt_of("two")))
            .expect("write");
        let later = t0 + RECHECK;
        assert_eq!(status(&auth, Some(&basic("alice:one")), later), 401);
        assert_eq!(status(&auth, Some(&basic("alice:two")), later), 200);
        // A broken file keeps the users that were.
        std::fs::write(f.path(), "alice:$apr1$x$y\n").expect("write");
        let later = later + RECHECK;
        assert_eq!(status(&auth, Some(&basic("alice:two")), later), 200);
    }
}
