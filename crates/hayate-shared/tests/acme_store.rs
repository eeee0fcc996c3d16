//! ACME's Redis store against a real redis-server: the per-name lock, the
//! certificates and account with their keys sealed, the notice of a stored
//! certificate, and a challenge answer that every box holds before the
//! ordering box tells the CA to look.

use std::sync::Arc;
use std::time::Duration;

use hayate_shared::RedisAcmeStore;
use hayate_testkit::eventually_async;
use hayate_testkit::redis::Redis;
use hayate_tls::acme::Challenges;
use hayate_tls::acme_store::{AcmeStore, ChallengeAnswer, StoredCertificate};

const KEY: &str = "8d0c2bd8b1e5e3f1a1c6f0a4d2b7e9c3a5f8d1e2c4b6a7f9e0d3c5b8a1f2e4d6";
const DIR: &str = "127.0.0.1-14000-dir";

fn store(redis: &Redis, key: &str) -> RedisAcmeStore {
    RedisAcmeStore::new(&redis.url(), Duration::from_millis(500), DIR, key).expect("store")
}

fn run(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(test);
}

async fn raw(redis: &Redis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// A blocking query on a connection of its own (for checks polled by
/// `eventually_async`, which lets the stores' tasks run between them).
fn ask<T: redis::FromRedisValue>(redis: &Redis, cmd: &mut redis::Cmd) -> Result<T, String> {
    let client = redis::Client::open(redis.url()).map_err(|e| e.to_string())?;
    let mut conn = client.get_connection().map_err(|e| e.to_string())?;
    cmd.query(&mut conn).map_err(|e| e.to_string())
}

/// Waits until `n` clients follow ACME's channel.
async fn followers(redis: &Redis, n: i64) {
    eventually_async("the stores following", || {
        let (_, count): (String, i64) = ask(
            redis,
            redis::cmd("PUBSUB").arg("NUMSUB").arg("hayate:acme-events"),
        )?;
        (count >= n)
            .then_some(())
            .ok_or(format!("{count} followers"))
    })
    .await;
}

#[test]
fn a_name_is_locked_by_one_box_until_released_or_expired() {
    let redis = Redis::start();
    run(async {
        let (a, b) = (store(&redis, KEY), store(&redis, KEY));
        let ttl = Duration::from_secs(60);
        let held = a
            .lock("cert:a.test", ttl)
            .await
            .expect("redis")
            .expect("free");
        assert_eq!(b.lock("cert:a.test", ttl).await.expect("redis"), None);
        // Another name is another lock.
        assert!(b.lock("cert:b.test", ttl).await.expect("redis").is_some());
        // Only the holder extends or releases it.
        let mut stolen = held.clone();
        stolen.token.push('x');
        assert!(!b.extend(&stolen, ttl).await.expect("redis"));
        b.unlock(&stolen).await.expect("redis");
        assert_eq!(b.lock("cert:a.test", ttl).await.expect("redis"), None);
        assert!(a.extend(&held, ttl).await.expect("redis"));
        a.unlock(&held).await.expect("redis");
        let taken = b
            .lock("cert:a.test", ttl)
            .await
            .expect("redis")
            .expect("free");
        // A released lock is not released again by its old holder.
        a.unlock(&held).await.expect("redis");
        assert_eq!(a.lock("cert:a.test", ttl).await.expect("redis"), None);
        b.unlock(&taken).await.expect("redis");
        // A holder that dies: the lock expires.
        let short = a
            .lock("cert:c.test", Duration::from_millis(100))
            .await
            .expect("redis")
            .expect("free");
        assert!(!short.token.is_empty());
        let lock_key = format!("hayate:acme:{DIR}:lock:cert:c.test");
        eventually_async("the lock expired", || {
            let exists: bool = ask(&redis, redis::cmd("EXISTS").arg(&lock_key))?;
            (!exists).then_some(()).ok_or("still held".to_string())
        })
        .await;
        let taken = b.lock("cert:c.test", ttl).await.expect("redis");
        assert!(taken.is_some(), "the lock expired");
        assert!(!a.extend(&short, ttl).await.expect("redis"), "lost");
    });
}

#[test]
fn certificates_and_the_account_are_shared_with_their_keys_sealed() {
    let redis = Redis::start();
    run(async {
        let (a, b) = (store(&redis, KEY), store(&redis, KEY));
        let mut conn = raw(&redis).await;
        let stored_at_b = b.watch(Arc::new(Challenges::default())).expect("shared");
        followers(&redis, 1).await;
        let cert = StoredCertificate {
            chain_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            key_pem: "-----BEGIN PRIVATE KEY-----\nsecret-key-bytes\n-----END PRIVATE KEY-----\n"
                .into(),
        };
        assert_eq!(b.load_certificate("a.test").await.expect("redis"), None);
        a.save_certificate("a.test", &cert).await.expect("save");
        let mut stored_at_b = stored_at_b;
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(5), stored_at_b.recv())
                .await
                .expect("a notice")
                .expect("open")
        };
        // Subscribed: "look at every name"; then the one stored.
        assert_eq!(next().await, "");
        assert_eq!(next().await, "a.test");
        assert_eq!(
            b.load_certificate("a.test").await.expect("redis"),
            Some(cert.clone())
        );
        // In Redis, the chain as it is and the key sealed.
        let key = format!("hayate:acme:{DIR}:cert:a.test");
        let (chain, sealed): (String, Vec<u8>) = redis::cmd("HMGET")
            .arg(&key)
            .arg("chain")
            .arg("key")
            .query_async(&mut conn)
            .await
            .expect("hmget");
        assert_eq!(chain, cert.chain_pem);
        assert!(!sealed.windows(16).any(|w| w == b"secret-key-bytes"));
        // Another shared_key opens nothing.
        let other = store(&redis, &KEY.replace('8', "9"));
        let refused = other.load_certificate("a.test").await.expect_err("refused");
        assert!(refused.contains("cannot open"), "{refused}");

        assert_eq!(b.load_account().await.expect("redis"), None);
        a.save_account("{\"id\":\"acct\"}").await.expect("save");
        assert_eq!(
            b.load_account().await.expect("redis").as_deref(),
            Some("{\"id\":\"acct\"}")
        );
        let raw_account: Vec<u8> = redis::cmd("GET")
            .arg(format!("hayate:acme:{DIR}:account"))
            .query_async(&mut conn)
            .await
            .expect("get");
        assert!(!raw_account.windows(4).any(|w| w == b"acct"));
    });
}

#[test]
fn every_box_holds_a_challenge_answer_before_the_ca_is_told_to_look() {
    let redis = Redis::start();
    run(async {
        let (a, b, c) = (store(&redis, KEY), store(&redis, KEY), store(&redis, KEY));
        let (at_b, at_c) = (
            Arc::new(Challenges::default()),
            Arc::new(Challenges::default()),
        );
        let _b = b.watch(at_b.clone());
        let _c = c.watch(at_c.clone());
        followers(&redis, 2).await;
        // Write access to Redis is not enough: an answer not sealed with
        // shared_key is refused (published first, so taken before the next).
        let forged: i64 = ask(
            &redis,
            redis::cmd("PUBLISH")
                .arg("hayate:acme-events")
                .arg("v1\nintruder\nanswer\nhttp-01\nevil\nevil.thumbprint"),
        )
        .expect("publish");
        assert_eq!(forged, 2);
        let answer = ChallengeAnswer::Http01 {
            token: "tok123".into(),
            key_authorization: "tok123.thumbprint".into(),
        };
        a.publish_challenge(&answer, Duration::from_secs(60))
            .await
            .expect("publish");
        assert_eq!(at_b.http01(b"evil"), None);
        // Returned: both other boxes answer, with no wait.
        assert_eq!(at_b.http01(b"tok123").as_deref(), Some("tok123.thumbprint"));
        assert_eq!(at_c.http01(b"tok123").as_deref(), Some("tok123.thumbprint"));
        // A box that starts following during the order gets it too.
        let late = store(&redis, KEY);
        let at_late = Arc::new(Challenges::default());
        let _late = late.watch(at_late.clone());
        eventually_async("the late box's answer", || {
            at_late.http01(b"tok123").ok_or("not yet".to_string())
        })
        .await;
        a.withdraw_challenge(&answer).await.expect("withdraw");
        eventually_async("the answer withdrawn everywhere", || {
            match (at_b.http01(b"tok123"), at_c.http01(b"tok123")) {
                (None, None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    });
}
