//! A body that is still arriving, read by many: the fill of a cache miss
//! streams to its own client and to every request waiting on it, each at
//! its own pace, while the upstream is still sending.
//!
//! The writer appends chunks and finally marks the end (or a failure);
//! readers walk the chunk list from the start and wait on a version
//! counter (a `watch` channel, so readers on any worker are woken) when
//! they have caught up. The chunks are shared (`Bytes`), not copied per
//! reader; the whole body stays in memory until the last reader is done,
//! which is bounded by the cache's object size cap (only bodies that fit
//! are streamed this way).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use hayate_core::BodySource;
use tokio::sync::watch;

/// A body being received.
#[derive(Debug)]
pub struct Growing {
    state: Mutex<State>,
    version: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    chunks: Vec<Bytes>,
    /// `Some(true)`: complete; `Some(false)`: the upstream failed.
    end: Option<bool>,
}

impl Growing {
    /// An empty body, still open.
    pub fn new() -> Arc<Growing> {
        Arc::new(Growing {
            state: Mutex::default(),
            version: watch::Sender::new(0),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a chunk and wakes the readers.
    pub fn push(&self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.state().chunks.push(chunk);
        self.version.send_modify(|v| *v += 1);
    }

    /// Marks the end: complete (`true`) or failed (readers get an error
    /// after the bytes they have, so their clients see a cut response).
    pub fn finish(&self, complete: bool) {
        self.state().end.get_or_insert(complete);
        self.version.send_modify(|v| *v += 1);
    }

    /// The whole body, once it is complete (one copy; none for a body that
    /// came in one chunk).
    pub fn concat(&self) -> Bytes {
        let state = self.state();
        match state.chunks.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => Bytes::from(many.concat()),
        }
    }

    /// A reader from the first byte.
    pub fn reader(self: &Arc<Growing>) -> GrowingReader {
        GrowingReader {
            body: self.clone(),
            next: 0,
            seen: self.version.subscribe(),
            wait: None,
        }
    }
}

type Changed = Pin<Box<dyn Future<Output = watch::Receiver<u64>> + Send>>;

/// One reader of a [`Growing`] body.
pub struct GrowingReader {
    body: Arc<Growing>,
    next: usize,
    seen: watch::Receiver<u64>,
    wait: Option<Changed>,
}

impl std::fmt::Debug for GrowingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrowingReader")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl BodySource for GrowingReader {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        loop {
            if let Some(wait) = &mut self.wait {
                match wait.as_mut().poll(cx) {
                    Poll::Ready(rx) => {
                        self.seen = rx;
                        self.wait = None;
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
            // Mark the version seen before looking: a chunk pushed after
            // the look bumps the version past it, so the wait below ends.
            self.seen.borrow_and_update();
            {
                let state = self.body.state();
                if let Some(chunk) = state.chunks.get(self.next) {
                    self.next += 1;
                    return Poll::Ready(Ok(Some(chunk.clone())));
                }
                match state.end {
                    Some(true) => return Poll::Ready(Ok(None)),
                    Some(false) => {
                        return Poll::Ready(Err(io::Error::other(
                            "the upstream body failed while it filled the cache",
                        )))
                    }
                    None => {}
                }
            }
            let mut rx = self.seen.clone();
            self.wait = Some(Box::pin(async move {
                // A closed sender (the Growing dropped) cannot happen while
                // this reader holds it; either way the loop looks again.
                let _ = rx.changed().await;
                rx
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Duration;

    async fn read_all(mut r: GrowingReader) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(c) = poll_fn(|cx| r.poll_chunk(cx)).await? {
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    #[tokio::test(flavor = "current_thread")]
    #[allow(clippy::disallowed_methods)] // the writer is another thread that pauses
    async fn readers_get_every_chunk_as_it_arrives_and_late_ones_from_the_start() {
        let body = Growing::new();
        let early: Vec<_> = (0..4)
            .map(|_| tokio::spawn(read_all(body.reader())))
            .collect();
        let mut first = body.reader();
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        let writer = {
            let body = body.clone();
            std::thread::spawn(move || {
                body.push(Bytes::from_static(b"ab"));
                let _ = wait_go.recv();
                for i in 0..100u8 {
                    body.push(Bytes::from(vec![i; 3]));
                    if i % 10 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                body.finish(true);
            })
        };
        // A reader on this runtime sees the writer's first chunk before
        // the body is complete.
        let c = tokio::time::timeout(Duration::from_secs(5), poll_fn(|cx| first.poll_chunk(cx)))
            .await
            .expect("a chunk before the end")
            .expect("ok");
        assert_eq!(c.as_deref(), Some(&b"ab"[..]));
        go.send(()).expect("go");
        let mut want = b"ab".to_vec();
        for i in 0..100u8 {
            want.extend_from_slice(&[i; 3]);
        }
        for r in early {
            assert_eq!(r.await.expect("join").expect("read"), want);
        }
        assert_eq!(read_all(first).await.expect("read"), &want[2..]);
        writer.join().expect("writer");
        assert_eq!(read_all(body.reader()).await.expect("read"), want);
        assert_eq!(body.concat(), want);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_body_ends_every_reader_with_an_error() {
        let body = Growing::new();
        let r = tokio::spawn(read_all(body.reader()));
        body.push(Bytes::from_static(b"part"));
        body.finish(false);
        // finishing twice keeps the first end
        body.finish(true);
        assert!(r.await.expect("join").is_err());
        assert!(read_all(body.reader()).await.is_err());
    }
}
