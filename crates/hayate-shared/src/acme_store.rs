//! ACME's state shared by several boxes in Redis: one account, one
//! certificate per name ordered by one box at a time, challenge answers
//! every box gives, and a notice when a certificate is stored, so every box
//! serves it without a restart. The ACME side is `hayate_tls::acme`; this
//! is its [`AcmeStore`] over Redis.
//!
//! Keys (`DIR` is the ACME directory URL made a name, as in the state
//! directory: `acme-v02.api.letsencrypt.org-directory`):
//! - `hayate:acme:DIR:account`: the account's credentials, sealed;
//! - `hayate:acme:DIR:cert:NAME`: a hash, `chain` (PEM) and `key` (the PEM
//!   key, sealed), written in one HSET so no box reads a chain with the
//!   other key;
//! - `hayate:acme:DIR:lock:WHAT` (`WHAT`: `account`, `cert:NAME`): the
//!   holder's random token, `SET NX PX`; released and extended only by the
//!   holder (compare-and-delete in a Lua script), it expires by itself if
//!   the holder dies;
//! - `hayate:acme:challenge:http-01:TOKEN`, `…:tls-alpn-01:NAME`: an answer
//!   (sealed) while its order lasts (PX: twice the order timeout), read by
//!   a box that subscribes during an order; `hayate:acme:ack:…` the same
//!   way: how many boxes took it;
//! - channel `hayate:acme-events`: `v1`, the sender, then `stored DIR NAME`,
//!   `answer SEALED` or `forget SEALED`, one field a line.
//!
//! Sealed values (`SealingKey`): the private keys are encrypted with
//! `shared_key`, so Redis, its backups and its replicas hold no usable key;
//! and challenge answers are sealed too, so that write access to Redis does
//! not make the boxes answer a challenge for someone else's order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hayate_tls::acme::Challenges;
use hayate_tls::acme_store::{AcmeStore, ChallengeAnswer, Lock, Pending, StoredCertificate};
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;

use crate::sealing::{from_hex, to_hex, SealingKey};
use crate::{random_suffix, MAX_BACKOFF};

/// The channel of ACME's notices.
const CHANNEL: &str = "hayate:acme-events";
/// Releases a lock only for its holder (KEYS[1] the lock, ARGV[1] the token).
const UNLOCK: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
/// Extends a lock only for its holder (ARGV[2]: the new TTL in ms).
const EXTEND: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
/// What a sealed challenge answer is bound to.
const ANSWER_CONTEXT: &str = "hayate:acme:challenge";
/// Longest wait for the other boxes to take a challenge answer before the
/// CA is told to look: they take it within a few ms on one network; one
/// that does not answer in 2 s (stopped, cut off) is not waited for.
const ACK_WAIT: Duration = Duration::from_secs(2);
/// Between looks at the acknowledgement count during ACK_WAIT.
const ACK_POLL: Duration = Duration::from_millis(10);
/// The shortest bound on one call: ACME runs off the request path, where
/// `shared_timeout` (tens of ms) is sized for requests.
const MIN_CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// ACME's state in Redis.
#[derive(Clone)]
pub struct RedisAcmeStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    /// The bound on every call.
    timeout: Duration,
    /// `hayate:acme:DIR`.
    prefix: String,
    /// `DIR`, as notices name it.
    directory: String,
    sealing: SealingKey,
    /// This box in notices.
    id: String,
    /// Made on first use, on the ACME thread's runtime.
    conn: tokio::sync::Mutex<Option<ConnectionManager>>,
}

impl std::fmt::Debug for RedisAcmeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAcmeStore")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisAcmeStore {
    /// The store at `url` for the ACME directory `directory_id`, sealing
    /// keys with `shared_key` (64 hex digits). Connects on first use.
    pub fn new(
        url: &str,
        timeout: Duration,
        directory_id: &str,
        shared_key: &str,
    ) -> Result<RedisAcmeStore, String> {
        let client = redis::Client::open(url).map_err(|e| format!("shared {url}: {e}"))?;
        let sealing = SealingKey::from_hex(shared_key)?;
        Ok(RedisAcmeStore {
            inner: Arc::new(Inner {
                client,
                timeout: timeout.max(MIN_CALL_TIMEOUT),
                prefix: format!("hayate:acme:{directory_id}"),
                directory: directory_id.to_string(),
                sealing,
                id: format!("{}-{}", std::process::id(), random_suffix()),
                conn: tokio::sync::Mutex::new(None),
            }),
        })
    }
}

impl Inner {
    async fn conn(&self) -> Result<ConnectionManager, String> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(MAX_BACKOFF);
        let connecting = self.client.get_connection_manager_with_config(config);
        let c = tokio::time::timeout(self.timeout, connecting)
            .await
            .map_err(|_| format!("Redis did not answer in {:?}", self.timeout))?
            .map_err(|e| format!("Redis: {e}"))?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs `cmd`, bounded by the timeout.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, String> {
        let mut conn = self.conn().await?;
        tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut conn))
            .await
            .map_err(|_| format!("Redis did not answer in {:?}", self.timeout))?
            .map_err(|e| format!("Redis: {e}"))
    }

    /// Runs `script` on `lock`'s key with its token (and `arg`): what a
    /// holder only may do.
    async fn as_holder(&self, script: &str, lock: &Lock, arg: Option<u64>) -> Result<i64, String> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script)
            .arg(1)
            .arg(self.key(&format!("lock:{}", lock.what)))
            .arg(&lock.token);
        if let Some(arg) = arg {
            cmd.arg(arg);
        }
        self.query(&cmd).await
    }

    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }

    /// `answer` sealed, in hex: only a box given `shared_key` makes one
    /// that the boxes take, so write access to Redis is not enough to
    /// have them answer a challenge (and a CA issue a certificate for
    /// their names to someone else).
    fn seal_answer(&self, answer: &ChallengeAnswer) -> Result<String, String> {
        let sealed = self
            .sealing
            .seal(ANSWER_CONTEXT, encode_answer(answer).as_bytes())?;
        Ok(to_hex(&sealed))
    }

    fn open_answer(&self, hex: &str) -> Option<ChallengeAnswer> {
        let plain = self.sealing.open(ANSWER_CONTEXT, &from_hex(hex)?).ok()?;
        decode_answer(std::str::from_utf8(&plain).ok()?)
    }

    fn notice(&self, fields: &[&str]) -> String {
        let mut m = format!("v1\n{}", self.id);
        for f in fields {
            m.push('\n');
            m.push_str(f);
        }
        m
    }

    /// Answers another box's challenge here and says so (only for a
    /// published answer: the publisher counts the boxes PUBLISH reached).
    async fn take_answer(&self, challenges: &Challenges, answer: &ChallengeAnswer) {
        if let Err(e) = challenges.answer(answer) {
            log::warn!("ACME: cannot answer another box's challenge: {e}");
            return;
        }
        let ack = ack_key(answer);
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg(&ack).ignore();
        pipe.cmd("PEXPIRE")
            .arg(&ack)
            .arg(ACK_WAIT.as_millis() as u64 * 2)
            .ignore();
        let sent = match self.conn().await {
            Ok(mut c) => tokio::time::timeout(self.timeout, pipe.query_async::<()>(&mut c))
                .await
                .map_err(|_| "Redis did not answer".to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            log::debug!("ACME: acknowledging a challenge: {e}");
        }
    }

    /// The answers of orders in progress, for a box that (re)subscribes
    /// while one lasts.
    async fn pending_answers(&self) -> Result<Vec<ChallengeAnswer>, String> {
        let mut keys: Vec<String> = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = self
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg("hayate:acme:challenge:*")
                        .arg("COUNT")
                        .arg(100),
                )
                .await?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let mut answers = Vec::new();
        for key in keys {
            let value: Option<String> = self.query(redis::cmd("GET").arg(&key)).await?;
            if let Some(a) = value.as_deref().and_then(|v| self.open_answer(v)) {
                answers.push(a);
            }
        }
        Ok(answers)
    }

    /// Follows the other boxes' notices for the process's life.
    async fn follow(
        self: Arc<Self>,
        challenges: Arc<Challenges>,
        stored: mpsc::UnboundedSender<String>,
    ) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let subscribed = async {
                let mut pubsub = self.client.get_async_pubsub().await?;
                pubsub.subscribe(CHANNEL).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            match tokio::time::timeout(self.timeout, subscribed).await {
                Ok(Ok(pubsub)) => {
                    backoff = Duration::from_millis(100);
                    log::info!("ACME: following the other boxes on {CHANNEL}");
                    match self.pending_answers().await {
                        Ok(answers) => {
                            for a in answers {
                                if let Err(e) = challenges.answer(&a) {
                                    log::warn!("ACME: cannot answer another box's challenge: {e}");
                                }
                            }
                        }
                        Err(e) => log::warn!("ACME: reading the challenges in progress: {e}"),
                    }
                    // Certificates stored while this box did not follow.
                    let _ = stored.send(String::new());
                    let mut messages = pubsub.into_on_message();
                    while let Some(msg) = messages.next().await {
                        self.on_notice(msg.get_payload_bytes(), &challenges, &stored)
                            .await;
                    }
                    log::warn!("ACME: the subscription to {CHANNEL} ended; reconnecting");
                }
                Ok(Err(e)) => log::warn!(
                    "ACME: cannot follow the other boxes (Redis: {e}); retrying in {backoff:?}"
                ),
                Err(_) => log::warn!(
                    "ACME: cannot follow the other boxes (Redis did not answer); retrying in {backoff:?}"
                ),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn on_notice(
        &self,
        payload: &[u8],
        challenges: &Challenges,
        stored: &mpsc::UnboundedSender<String>,
    ) {
        let Some(text) = std::str::from_utf8(payload).ok() else {
            return;
        };
        let mut fields = text.splitn(4, '\n');
        let (Some("v1"), Some(from), Some(kind), Some(rest)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            log::warn!("ACME: a notice hayate cannot read on {CHANNEL}");
            return;
        };
        match kind {
            // Every box takes an answer, this one too: the sender counts
            // the takers PUBLISH reached.
            "answer" => match self.open_answer(rest) {
                Some(a) => self.take_answer(challenges, &a).await,
                None => log::warn!(
                    "ACME: refused a challenge answer not sealed with this box's shared_key"
                ),
            },
            "forget" if from != self.id => {
                if let Some(a) = self.open_answer(rest) {
                    challenges.forget(&a);
                }
            }
            "stored" if from != self.id => {
                if let Some((dir, name)) = rest.split_once('\n') {
                    if dir == self.directory {
                        let _ = stored.send(name.to_string());
                    }
                }
            }
            _ => {}
        }
    }
}

/// Where `answer` waits in Redis.
fn answer_key(answer: &ChallengeAnswer) -> String {
    match answer {
        ChallengeAnswer::Http01 { token, .. } => format!("hayate:acme:challenge:http-01:{token}"),
        ChallengeAnswer::TlsAlpn01 { name, .. } => {
            format!("hayate:acme:challenge:tls-alpn-01:{name}")
        }
    }
}

/// Where the boxes that took `answer` are counted.
fn ack_key(answer: &ChallengeAnswer) -> String {
    answer_key(answer).replacen(":challenge:", ":ack:", 1)
}

/// `http-01 TOKEN KEY-AUTHORIZATION` or `tls-alpn-01 NAME HEX-DIGEST`, one
/// a line (none holds a newline: tokens and key authorizations are
/// base64url, names DNS names).
fn encode_answer(answer: &ChallengeAnswer) -> String {
    match answer {
        ChallengeAnswer::Http01 {
            token,
            key_authorization,
        } => format!("http-01\n{token}\n{key_authorization}"),
        ChallengeAnswer::TlsAlpn01 { name, digest } => {
            format!("tls-alpn-01\n{name}\n{}", to_hex(digest))
        }
    }
}

fn decode_answer(text: &str) -> Option<ChallengeAnswer> {
    let mut fields = text.split('\n');
    let (kind, first, second) = (fields.next()?, fields.next()?, fields.next()?);
    if fields.next().is_some() || first.is_empty() || second.is_empty() {
        return None;
    }
    match kind {
        "http-01" => Some(ChallengeAnswer::Http01 {
            token: first.to_string(),
            key_authorization: second.to_string(),
        }),
        "tls-alpn-01" => {
            let digest = from_hex(second).filter(|d| d.len() == 32)?;
            Some(ChallengeAnswer::TlsAlpn01 {
                name: first.to_ascii_lowercase(),
                digest,
            })
        }
        _ => None,
    }
}

impl AcmeStore for RedisAcmeStore {
    fn is_shared(&self) -> bool {
        true
    }

    fn load_account(&self) -> Pending<'_, Option<String>> {
        Box::pin(async move {
            let s = &self.inner;
            let key = s.key("account");
            let sealed: Option<Vec<u8>> = s.query(redis::cmd("GET").arg(&key)).await?;
            let Some(sealed) = sealed else {
                return Ok(None);
            };
            let plain = s.sealing.open(&key, &sealed)?;
            String::from_utf8(plain)
                .map(Some)
                .map_err(|_| format!("{key}: not text"))
        })
    }

    fn save_account<'a>(&'a self, credentials: &'a str) -> Pending<'a, ()> {
        Box::pin(async move {
            let s = &self.inner;
            let key = s.key("account");
            let sealed = s.sealing.seal(&key, credentials.as_bytes())?;
            s.query(redis::cmd("SET").arg(&key).arg(sealed)).await
        })
    }

    fn load_certificate<'a>(&'a self, name: &'a str) -> Pending<'a, Option<StoredCertificate>> {
        Box::pin(async move {
            let s = &self.inner;
            let key = s.key(&format!("cert:{name}"));
            let (chain, sealed): (Option<String>, Option<Vec<u8>>) = s
                .query(redis::cmd("HMGET").arg(&key).arg("chain").arg("key"))
                .await?;
            let (Some(chain_pem), Some(sealed)) = (chain, sealed) else {
                return Ok(None);
            };
            let key_pem = String::from_utf8(s.sealing.open(&key, &sealed)?)
                .map_err(|_| format!("{key}: the key is not text"))?;
            Ok(Some(StoredCertificate { chain_pem, key_pem }))
        })
    }

    fn save_certificate<'a>(
        &'a self,
        name: &'a str,
        cert: &'a StoredCertificate,
    ) -> Pending<'a, ()> {
        Box::pin(async move {
            let s = &self.inner;
            let key = s.key(&format!("cert:{name}"));
            let sealed = s.sealing.seal(&key, cert.key_pem.as_bytes())?;
            let _: i64 = s
                .query(
                    redis::cmd("HSET")
                        .arg(&key)
                        .arg("chain")
                        .arg(&cert.chain_pem)
                        .arg("key")
                        .arg(sealed),
                )
                .await?;
            let notice = s.notice(&["stored", &s.directory, name]);
            let _: i64 = s
                .query(redis::cmd("PUBLISH").arg(CHANNEL).arg(notice))
                .await?;
            Ok(())
        })
    }

    fn lock<'a>(&'a self, what: &'a str, ttl: Duration) -> Pending<'a, Option<Lock>> {
        Box::pin(async move {
            let s = &self.inner;
            let token = format!("{}-{}", s.id, random_suffix());
            let set: Option<String> = s
                .query(
                    redis::cmd("SET")
                        .arg(s.key(&format!("lock:{what}")))
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl.as_millis() as u64),
                )
                .await?;
            Ok(set.map(|_| Lock {
                what: what.to_string(),
                token,
            }))
        })
    }

    fn extend<'a>(&'a self, lock: &'a Lock, ttl: Duration) -> Pending<'a, bool> {
        let ttl_ms = ttl.as_millis() as u64;
        Box::pin(async move { Ok(self.inner.as_holder(EXTEND, lock, Some(ttl_ms)).await? == 1) })
    }

    fn unlock<'a>(&'a self, lock: &'a Lock) -> Pending<'a, ()> {
        Box::pin(async move { self.inner.as_holder(UNLOCK, lock, None).await.map(drop) })
    }

    fn publish_challenge<'a>(
        &'a self,
        answer: &'a ChallengeAnswer,
        ttl: Duration,
    ) -> Pending<'a, ()> {
        Box::pin(async move {
            let s = &self.inner;
            let encoded = s.seal_answer(answer)?;
            let ack = ack_key(answer);
            let _: () = s.query(redis::cmd("DEL").arg(&ack)).await?;
            let _: () = s
                .query(
                    redis::cmd("SET")
                        .arg(answer_key(answer))
                        .arg(&encoded)
                        .arg("PX")
                        .arg(ttl.as_millis() as u64),
                )
                .await?;
            let reached: i64 = s
                .query(
                    redis::cmd("PUBLISH")
                        .arg(CHANNEL)
                        .arg(s.notice(&["answer", &encoded])),
                )
                .await?;
            let until = Instant::now() + ACK_WAIT;
            loop {
                let took: Option<i64> = s.query(redis::cmd("GET").arg(&ack)).await?;
                let took = took.unwrap_or(0);
                if took >= reached {
                    log::debug!("ACME: {took} boxes answer the challenge");
                    return Ok(());
                }
                if Instant::now() >= until {
                    log::warn!(
                        "ACME: {took} of {reached} boxes took the challenge answer in {ACK_WAIT:?}; going on"
                    );
                    return Ok(());
                }
                tokio::time::sleep(ACK_POLL).await;
            }
        })
    }

    fn withdraw_challenge<'a>(&'a self, answer: &'a ChallengeAnswer) -> Pending<'a, ()> {
        Box::pin(async move {
            let s = &self.inner;
            let _: i64 = s
                .query(
                    redis::cmd("DEL")
                        .arg(answer_key(answer))
                        .arg(ack_key(answer)),
                )
                .await?;
            let notice = s.notice(&["forget", &s.seal_answer(answer)?]);
            let _: i64 = s
                .query(redis::cmd("PUBLISH").arg(CHANNEL).arg(notice))
                .await?;
            Ok(())
        })
    }

    fn watch(&self, challenges: Arc<Challenges>) -> Option<mpsc::UnboundedReceiver<String>> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(self.inner.clone().follow(challenges, tx));
        Some(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_junk_is_refused() {
        let answers = [
            ChallengeAnswer::Http01 {
                token: "tok_-1".into(),
                key_authorization: "tok_-1.thumb".into(),
            },
            ChallengeAnswer::TlsAlpn01 {
                name: "a.test".into(),
                digest: (0..32).collect(),
            },
        ];
        for a in answers {
            assert_eq!(decode_answer(&encode_answer(&a)), Some(a));
        }
        for junk in [
            "",
            "http-01\ntok",
            "http-01\n\nx",
            "http-01\na\nb\nc",
            "dns-01\na\nb",
            "tls-alpn-01\na.test\nabcd",
            &format!("tls-alpn-01\na.test\n{}", "zz".repeat(32)),
        ] {
            assert_eq!(decode_answer(junk), None, "{junk:?}");
        }
    }
}
