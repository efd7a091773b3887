//! The hand-over between one direction's reader and its writer: chunks in
//! read order, each with the instant it may be written, bounded in bytes.
//!
//! A plain FIFO is what keeps the byte order: the writer takes chunks in
//! the order they were read and the reader never gives a chunk an earlier
//! release than the chunk before it, so jitter can stretch the gaps between
//! chunks but never swap two of them.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// What the reader saw, to be replayed on the other socket at `release`.
#[derive(Debug)]
pub enum Item {
    /// Bytes read.
    Data { release: Instant, bytes: Vec<u8> },
    /// The source half-closed (read returned 0): pass the FIN on.
    Eof { release: Instant },
    /// Reading failed (e.g. a reset): end the connection.
    Failed { release: Instant },
}

impl Item {
    pub fn release(&self) -> Instant {
        match self {
            Item::Data { release, .. } | Item::Eof { release } | Item::Failed { release } => {
                *release
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Item::Data { bytes, .. } => bytes.len(),
            _ => 0,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Item>,
    bytes: usize,
    /// The writer has given up: the reader should stop.
    closed: bool,
}

/// A FIFO of [`Item`]s holding at most about `cap` bytes.
#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
    /// Signalled when an item arrives or the queue closes.
    filled: Condvar,
    /// Signalled when bytes leave or the queue closes.
    drained: Condvar,
    cap: usize,
}

impl Queue {
    pub fn new(cap: usize) -> Queue {
        Queue {
            state: Mutex::new(State::default()),
            filled: Condvar::new(),
            drained: Condvar::new(),
            cap: cap.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking peer thread leaves consistent state behind (every
        // change is a single push or pop), so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends an item, waiting while `cap` bytes are already queued (the
    /// back-pressure that makes a slow reader of the far side slow the
    /// near side down, as a full TCP window would). False when the writer
    /// has closed the queue: the reader should stop.
    pub fn push(&self, item: Item) -> bool {
        let mut s = self.lock();
        while s.bytes >= self.cap && !s.closed {
            s = self.drained.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        if s.closed {
            return false;
        }
        s.bytes += item.len();
        s.items.push_back(item);
        self.filled.notify_one();
        true
    }

    /// The oldest item, waiting for one; `None` once closed.
    pub fn pop(&self) -> Option<Item> {
        let mut s = self.lock();
        loop {
            if s.closed {
                return None;
            }
            if let Some(item) = s.items.pop_front() {
                s.bytes -= item.len();
                self.drained.notify_one();
                return Some(item);
            }
            s = self.filled.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Drops what is queued and wakes both sides for good.
    pub fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.items.clear();
        s.bytes = 0;
        self.filled.notify_all();
        self.drained.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn data(n: u8) -> Item {
        Item::Data {
            release: Instant::now(),
            bytes: vec![n; 10],
        }
    }

    #[test]
    fn items_come_out_in_the_order_they_went_in() {
        let q = Queue::new(1 << 20);
        for i in 0..5 {
            assert!(q.push(data(i)));
        }
        for i in 0..5 {
            match q.pop() {
                Some(Item::Data { bytes, .. }) => assert_eq!(bytes[0], i),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_full_queue_holds_the_reader_until_the_writer_takes_something() {
        let q = Arc::new(Queue::new(10));
        assert!(q.push(data(1)));
        let q2 = Arc::clone(&q);
        let t = std::thread::spawn(move || q2.push(data(2)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished(), "the second push waits for room");
        assert!(q.pop().is_some());
        assert!(t.join().expect("no panic"));
    }

    #[test]
    fn closing_releases_a_waiting_reader_and_refuses_more() {
        let q = Arc::new(Queue::new(10));
        assert!(q.push(data(1)));
        let q2 = Arc::clone(&q);
        let t = std::thread::spawn(move || q2.push(data(2)));
        std::thread::sleep(Duration::from_millis(20));
        q.close();
        assert!(!t.join().expect("no panic"));
        assert!(q.pop().is_none());
    }
}
