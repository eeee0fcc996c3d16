//! A body that is still arriving, read by many: the fill of a cache miss
//! streams to its own client and to every request waiting on it, each at
//! its own pace, while the upstream is still sending.
//!
//! The writer appends chunks and finally marks the end (or a failure);
//! readers walk the chunk list from the start and wait on a version
//! counter (a `watch` channel, so readers on any worker are woken) when
//! they have caught up. The chunks are shared (`Bytes`), not copied per
//! reader.
//!
//! While the body may still be stored, every chunk is kept (it is at most
//! the cache's object size cap: a larger body is let go, below). A body
//! of unknown length (chunked or close-delimited) that outgrows the cap is
//! *let go* ([`Growing::let_go`]): from then on a chunk is dropped once
//! every reader has passed it, no new reader may join, and the writer
//! waits ([`Growing::room`]) while the chunks held pass the cap, so the
//! slowest reader paces the upstream and memory stays within the cap
//! whatever the body's size.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use hayate_core::BodySource;
use tokio::sync::{watch, Notify};

/// A body being received.
#[derive(Debug)]
pub struct Growing {
    state: Mutex<State>,
    version: watch::Sender<u64>,
    /// Woken when readers move on or leave (the writer waits on it once
    /// the body is let go).
    moved: Notify,
}

#[derive(Debug)]
struct State {
    chunks: VecDeque<Bytes>,
    /// The index, counted from the body's first chunk, of `chunks[0]`
    /// (above zero once chunks every reader passed were dropped).
    first: usize,
    /// Bytes in `chunks`.
    held: u64,
    /// `Some(true)`: complete; `Some(false)`: the upstream failed.
    end: Option<bool>,
    /// Every chunk is kept (for the store); false once let go.
    whole: bool,
    /// Each reader's next chunk, by the reader's slot; `None`: a free slot.
    readers: Vec<Option<usize>>,
}

impl State {
    /// Drops the chunks every reader has passed, once the body is let go.
    /// Whether any was dropped.
    fn trim(&mut self) -> bool {
        if self.whole {
            return false;
        }
        let slowest = self.readers.iter().flatten().min().copied();
        let upto = slowest.unwrap_or(self.first + self.chunks.len());
        let mut dropped = false;
        while self.first < upto {
            let Some(c) = self.chunks.pop_front() else {
                break;
            };
            self.held -= c.len() as u64;
            self.first += 1;
            dropped = true;
        }
        dropped
    }
}

impl Growing {
    /// An empty body, still open.
    pub fn new() -> Arc<Growing> {
        Arc::new(Growing {
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                first: 0,
                held: 0,
                end: None,
                whole: true,
                readers: Vec::new(),
            }),
            version: watch::Sender::new(0),
            moved: Notify::new(),
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
        {
            let mut state = self.state();
            state.held += chunk.len() as u64;
            state.chunks.push_back(chunk);
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Marks the end: complete (`true`) or failed (readers get an error
    /// after the bytes they have, so their clients see a cut response).
    pub fn finish(&self, complete: bool) {
        self.state().end.get_or_insert(complete);
        self.version.send_modify(|v| *v += 1);
    }

    /// Stops keeping the whole body: it will not be stored. Chunks every
    /// reader has passed are dropped from now on, and no reader may join.
    pub fn let_go(&self) {
        let mut state = self.state();
        state.whole = false;
        state.trim();
    }

    /// Waits until the chunks held are at most `limit` bytes, the slowest
    /// reader having moved on (only a body let go drops chunks). False
    /// when no reader is left: nobody wants the rest.
    pub async fn room(&self, limit: u64) -> bool {
        loop {
            {
                let state = self.state();
                if state.readers.iter().all(Option::is_none) {
                    return false;
                }
                if state.whole || state.held <= limit {
                    return true;
                }
            }
            // `notify_one` keeps a wake-up given between the look above
            // and this wait.
            self.moved.notified().await;
        }
    }

    /// The whole body, once it is complete (one copy; none for a body that
    /// came in one chunk).
    pub fn concat(&self) -> Bytes {
        let state = self.state();
        match state.chunks.len() {
            0 => Bytes::new(),
            1 => state.chunks[0].clone(),
            _ => {
                let mut all = Vec::with_capacity(state.held as usize);
                for c in &state.chunks {
                    all.extend_from_slice(c);
                }
                Bytes::from(all)
            }
        }
    }

    /// A reader from the first byte; `None` once the body was let go (its
    /// first chunks may be gone).
    pub fn reader(self: &Arc<Growing>) -> Option<GrowingReader> {
        let mut state = self.state();
        if !state.whole {
            return None;
        }
        let slot = match state.readers.iter().position(Option::is_none) {
            Some(i) => {
                state.readers[i] = Some(0);
                i
            }
            None => {
                state.readers.push(Some(0));
                state.readers.len() - 1
            }
        };
        drop(state);
        Some(GrowingReader {
            body: self.clone(),
            slot,
            next: 0,
            seen: self.version.subscribe(),
            wait: None,
        })
    }
}

type Changed = Pin<Box<dyn Future<Output = watch::Receiver<u64>> + Send>>;

/// One reader of a [`Growing`] body.
pub struct GrowingReader {
    body: Arc<Growing>,
    /// Its slot in the body's reader positions.
    slot: usize,
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

impl Drop for GrowingReader {
    fn drop(&mut self) {
        let mut state = self.body.state();
        state.readers[self.slot] = None;
        state.trim();
        drop(state);
        self.body.moved.notify_one();
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
                let mut state = self.body.state();
                // A registered reader's chunks are never dropped before it
                // passed them.
                let at = self.next.checked_sub(state.first);
                let chunk = at.and_then(|i| state.chunks.get(i)).cloned();
                if let Some(chunk) = chunk {
                    self.next += 1;
                    state.readers[self.slot] = Some(self.next);
                    if state.trim() {
                        drop(state);
                        self.body.moved.notify_one();
                    }
                    return Poll::Ready(Ok(Some(chunk)));
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
            .map(|_| tokio::spawn(read_all(body.reader().expect("open"))))
            .collect();
        let mut first = body.reader().expect("open");
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
        assert_eq!(
            read_all(body.reader().expect("open")).await.expect("read"),
            want
        );
        assert_eq!(body.concat(), want);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_body_ends_every_reader_with_an_error() {
        let body = Growing::new();
        let r = tokio::spawn(read_all(body.reader().expect("open")));
        body.push(Bytes::from_static(b"part"));
        body.finish(false);
        // finishing twice keeps the first end
        body.finish(true);
        assert!(r.await.expect("join").is_err());
        assert!(read_all(body.reader().expect("open")).await.is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_body_let_go_drops_what_every_reader_passed_and_paces_the_writer() {
        let body = Growing::new();
        let mut fast = body.reader().expect("open");
        let mut slow = body.reader().expect("open");
        for i in 0..4u8 {
            body.push(Bytes::from(vec![i; 10]));
        }
        body.let_go();
        // Nobody joins a body whose start may be gone.
        assert!(body.reader().is_none());
        // 40 bytes held, over a 20-byte cap, until the slowest moves on.
        let next = |r: &mut GrowingReader| {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            match r.poll_chunk(&mut cx) {
                Poll::Ready(Ok(Some(c))) => c,
                other => panic!("no chunk: {other:?}"),
            }
        };
        for _ in 0..4 {
            next(&mut fast);
        }
        let mut room = Box::pin(body.room(20));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(room.as_mut().poll(&mut cx).is_pending());
        assert_eq!(next(&mut slow)[0], 0);
        assert_eq!(next(&mut slow)[0], 1);
        assert!(matches!(room.as_mut().poll(&mut cx), Poll::Ready(true)));
        assert_eq!(body.state().held, 20);
        // Every reader gone: nobody wants the rest.
        drop((fast, slow));
        assert!(!body.room(20).await);
        assert_eq!(body.state().held, 0);
    }
}
