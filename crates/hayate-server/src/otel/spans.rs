//! Where finished spans wait for the exporter: one buffer per worker
//! thread, each span encoded straight into it as it would sit in a batch
//! (a `spans` field, 2, of `ScopeSpans`). A span then costs its worker no
//! allocation, no channel and no wake-up of the exporter, only its
//! encoding and an uncontended lock; the exporter takes every buffer whole
//! once a second, or when one holds a batch, and cuts what it took into
//! batches.
//!
//! Before this, each span was a `Vec` of its own sent through a bounded
//! channel and freed on the exporter's thread: with every request traced,
//! 25,409 instructions per proxied request against 19,516 untraced
//! (`bench/instructions/run --cases tcp,traced`), ~1,100 of them in the
//! allocator and the channel.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::proto::{Message, SPANS_FIELD};

/// Spans per batch at most: the OpenTelemetry SDKs' batch processor's
/// default (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`), about 320 KiB at hayate's
/// ~650 bytes a proxied request's span (`otel.rs`'s test), under the 4 MiB
/// a collector's gRPC receiver takes by default. A worker rings the
/// exporter when its buffer holds this many; below it, the exporter looks
/// once per `BATCH_DELAY`. Waking it for each span cost a context switch
/// per request: 48 -> 68 us of CPU per proxied request with every request
/// traced (bench lab case TR, 2026-11-28), where the issue allows 1.15x.
pub(crate) const MAX_BATCH: usize = 512;

/// The bytes a new buffer starts with: a full batch's, so a worker under
/// load does not grow it by doubling (each growth a copy of all of it).
const CAPACITY: usize = MAX_BATCH * 700;

/// The buffers of one exporter, and its bell.
pub(crate) struct Spans {
    /// Tells a thread's buffer of this exporter from one it kept for an
    /// exporter that ended (a reload that changed the otel_* options).
    id: u64,
    buffers: Mutex<Vec<Arc<Mutex<Buffer>>>>,
    /// Buffers the exporter sent and gave back, emptied, to be swapped
    /// for full ones: no allocation per batch.
    spare: Mutex<Vec<Vec<u8>>>,
    /// Spans a thread's buffer holds at most (`otel_queue`); past it, a
    /// span is dropped and counted.
    cap: usize,
    /// Rung when a buffer holds a batch.
    pub(crate) full: Notify,
}

/// A thread's spans: encoded `spans` fields, back to back.
struct Buffer {
    spans: Message,
    count: usize,
}

/// What the exporter took from one buffer.
pub(crate) struct Taken {
    /// `count` encoded `spans` fields.
    pub(crate) bytes: Vec<u8>,
    pub(crate) count: usize,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's buffer, and the id of the exporter it belongs to.
    static LOCAL: RefCell<Option<(u64, Arc<Mutex<Buffer>>)>> = const { RefCell::new(None) };
}

impl Spans {
    /// Buffers of `cap` spans each.
    pub(crate) fn new(cap: usize) -> Spans {
        Spans {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            buffers: Mutex::default(),
            spare: Mutex::default(),
            cap: cap.max(1),
            full: Notify::new(),
        }
    }

    /// Appends the span `write` encodes to this thread's buffer; false
    /// (and nothing written) when the buffer is full.
    pub(crate) fn push(&self, write: impl FnOnce(&mut Message)) -> bool {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            if !matches!(&*local, Some((id, _)) if *id == self.id) {
                let buffer = Arc::new(Mutex::new(Buffer {
                    spans: Message(Vec::with_capacity(CAPACITY)),
                    count: 0,
                }));
                lock(&self.buffers).push(buffer.clone());
                *local = Some((self.id, buffer));
            }
            let Some((_, buffer)) = local.as_ref() else {
                return false;
            };
            let mut b = lock(buffer);
            if b.count >= self.cap {
                return false;
            }
            // A span is 128 bytes to 16 KiB: its length takes 2 bytes.
            b.spans.message_with_room(SPANS_FIELD, 2, write);
            b.count += 1;
            if b.count == MAX_BATCH {
                self.full.notify_one();
            }
            true
        })
    }

    /// Takes what every buffer holds, each swapped for an empty one. A
    /// buffer whose thread ended is taken a last time and forgotten.
    pub(crate) fn take(&self) -> Vec<Taken> {
        let mut buffers = lock(&self.buffers);
        let mut spare = lock(&self.spare);
        let mut taken = Vec::new();
        buffers.retain(|buffer| {
            let mut b = lock(buffer);
            if b.count > 0 {
                let empty = spare.pop().unwrap_or_else(|| Vec::with_capacity(CAPACITY));
                let spans = std::mem::replace(&mut b.spans.0, empty);
                taken.push(Taken {
                    bytes: spans,
                    count: std::mem::take(&mut b.count),
                });
            }
            drop(b);
            Arc::strong_count(buffer) > 1
        });
        taken
    }

    /// Gives back buffers taken and sent, to be used again.
    pub(crate) fn give_back(&self, taken: Vec<Taken>) {
        let mut spare = lock(&self.spare);
        for mut t in taken {
            t.bytes.clear();
            spare.push(t.bytes);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Cuts what was taken into batches of `max` spans at most: each a list
/// of runs of encoded `spans` fields, and its span count.
pub(crate) fn batches(taken: &[Taken], max: usize) -> Vec<(Vec<&[u8]>, usize)> {
    let mut batches = Vec::new();
    let mut current: (Vec<&[u8]>, usize) = (Vec::new(), 0);
    for t in taken {
        let mut rest = t.bytes.as_slice();
        let mut left = t.count;
        while left > 0 {
            let room = max - current.1;
            let (run, n) = match left <= room {
                true => (rest, left),
                false => (&rest[..fields_len(rest, room)], room),
            };
            current.0.push(run);
            current.1 += n;
            rest = &rest[run.len()..];
            left -= n;
            if current.1 == max {
                batches.push(std::mem::take(&mut current));
            }
        }
    }
    if current.1 > 0 {
        batches.push(current);
    }
    batches
}

/// The bytes of the first `n` length-delimited fields of `bytes`, each a
/// one-byte key, a varint length and that many bytes (as `push` wrote
/// them).
fn fields_len(bytes: &[u8], n: usize) -> usize {
    let mut at = 0;
    for _ in 0..n {
        let mut len = 0usize;
        let mut shift = 0;
        at += 1;
        loop {
            let b = bytes[at];
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        at += len;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(s: &mut Message, n: usize) {
        s.bytes(5, &vec![b'x'; n]);
    }

    #[test]
    fn spans_are_buffered_per_thread_and_cut_into_batches() {
        let spans = Arc::new(Spans::new(10));
        for n in [1, 200, 3] {
            assert!(spans.push(|s| span(s, n)));
        }
        // Joined, not scoped: a scoped thread's join can return before its
        // thread-locals are dropped.
        let other = spans.clone();
        std::thread::spawn(move || {
            for n in [4, 5] {
                assert!(other.push(|s| span(s, n)));
            }
        })
        .join()
        .expect("the other thread");
        let taken = spans.take();
        assert_eq!(taken.iter().map(|t| t.count).sum::<usize>(), 5);
        // The other thread ended: its buffer was taken and forgotten.
        assert_eq!(lock(&spans.buffers).len(), 1);
        let batches = batches(&taken, 2);
        assert_eq!(batches.iter().map(|b| b.1).collect::<Vec<_>>(), [2, 2, 1]);
        // Every batch is whole fields: the same bytes as the spans
        // encoded one by one.
        let mut plain = Message::default();
        for n in [1, 200, 3, 4, 5] {
            plain.message(SPANS_FIELD, |s| span(s, n));
        }
        let joined: Vec<u8> = batches.iter().flat_map(|b| b.0.concat()).collect();
        assert_eq!(joined, plain.0);
        assert!(spans.take().is_empty(), "taken once");
        spans.give_back(taken);
        assert!(spans.push(|s| span(s, 6)));
        let again = spans.take();
        assert_eq!(again[0].bytes.len(), 2 + 2 + 6, "a spare, emptied, took it");
        assert_eq!(lock(&spans.spare).len(), 1, "one spare left of two");
    }

    #[test]
    fn a_full_buffer_drops_the_span() {
        let spans = Spans::new(2);
        assert!(spans.push(|s| span(s, 1)));
        assert!(spans.push(|s| span(s, 1)));
        assert!(!spans.push(|s| span(s, 1)));
        assert_eq!(spans.take()[0].count, 2);
        assert!(spans.push(|s| span(s, 1)), "room again once taken");
    }

    #[test]
    fn a_thread_keeps_apart_the_buffers_of_two_exporters() {
        let (a, b) = (Spans::new(4), Spans::new(4));
        assert!(a.push(|s| span(s, 1)));
        assert!(b.push(|s| span(s, 2)));
        assert!(a.push(|s| span(s, 3)));
        assert_eq!(a.take().iter().map(|t| t.count).sum::<usize>(), 2);
        assert_eq!(b.take().iter().map(|t| t.count).sum::<usize>(), 1);
    }
}
