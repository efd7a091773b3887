//! An HTTP/2 connection's frames as they pass through its socket, read from
//! their 9-byte headers only: whether a request's head (a HEADERS frame and
//! its CONTINUATIONs) is on its way, and which streams are open. The
//! listeners use it to bound what hyper and tonic leave unbounded once the
//! preface is in: a head trickled byte by byte, and a connection that keeps
//! answering pings with no call in flight.
//!
//! Frame layout (RFC 9113 §4.1): a 24-bit length, an 8-bit type, 8 bits of
//! flags, a reserved bit and a 31-bit stream id, then the payload.

use std::collections::{HashMap, HashSet};

use super::stream_budget::Share;

/// The connection preface an HTTP/2 client opens with (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The bytes a vectored write of `n` bytes took from `bufs`, slice by
/// slice.
pub(crate) fn written<'a>(
    bufs: &'a [std::io::IoSlice<'_>],
    n: usize,
) -> impl Iterator<Item = &'a [u8]> {
    let mut left = n;
    bufs.iter().map_while(move |b| {
        (left > 0).then(|| {
            let take = left.min(b.len());
            left -= take;
            &b[..take]
        })
    })
}

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const CONTINUATION: u8 = 0x9;
const DATA: u8 = 0x0;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub len: usize,
}

const SETTINGS: u8 = 0x4;
const WINDOW_UPDATE: u8 = 0x8;
/// The payloads kept whole: the few that carry flow-control numbers.
const KEPT: usize = 1024;

/// Splits a byte stream into frames, whatever the chunks it arrives in.
#[derive(Debug, Default)]
pub(crate) struct FrameSplitter {
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame not yet passed.
    left: usize,
    /// The current frame, while its payload passes.
    current: Option<Frame>,
    /// The current frame's payload, when it is one of those kept
    /// (SETTINGS, WINDOW_UPDATE).
    kept: Option<Vec<u8>>,
}

impl FrameSplitter {
    /// Passes `bytes`, calling `on_frame` as each frame's header completes.
    pub fn feed(&mut self, bytes: &[u8], on_frame: impl FnMut(Frame)) {
        self.feed_kept(bytes, on_frame, |_, _| {});
    }

    /// [`FrameSplitter::feed`], and `on_payload` with the whole payload of
    /// each SETTINGS and WINDOW_UPDATE frame.
    pub fn feed_kept(
        &mut self,
        mut bytes: &[u8],
        mut on_frame: impl FnMut(Frame),
        mut on_payload: impl FnMut(Frame, &[u8]),
    ) {
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                if let Some(kept) = self.kept.as_mut() {
                    kept.extend_from_slice(&bytes[..n]);
                }
                self.left -= n;
                bytes = &bytes[n..];
                if self.left == 0 {
                    if let (Some(f), Some(kept)) = (self.current.take(), self.kept.take()) {
                        on_payload(f, &kept);
                    }
                    self.current = None;
                }
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < 9 {
                return;
            }
            self.have = 0;
            let h = &self.header;
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let frame = Frame {
                kind: h[3],
                flags: h[4],
                stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                len,
            };
            self.left = len;
            self.current = (len > 0).then_some(frame);
            self.kept =
                ((frame.kind == SETTINGS || frame.kind == WINDOW_UPDATE) && len > 0 && len <= KEPT)
                    .then(|| Vec::with_capacity(len));
            on_frame(frame);
        }
    }

    /// The frame whose header or payload is partly passed, if any
    /// (`Some(None)`: a header is partly in).
    fn partial(&self) -> Option<Option<Frame>> {
        if self.have > 0 {
            Some(None)
        } else {
            self.current.map(Some)
        }
    }
}

/// One HTTP/2 connection as its listener watches it, both ways through one
/// splitter each: whether a request's head is on its way, which of the
/// client's streams (its calls) the server has not ended, and the
/// flow-control room the client gives the server's answers (RFC 9113 §6.9).
#[derive(Debug)]
pub(crate) struct H2Watch {
    reads: FrameSplitter,
    writes: FrameSplitter,
    /// A HEADERS frame without END_HEADERS was read: CONTINUATIONs follow.
    block_open: bool,
    /// The highest stream id the client opened.
    highest: u32,
    /// The client's streams the server has not ended: opened by a client
    /// HEADERS, ended by the server's END_STREAM (on DATA or trailers) or a
    /// reset from either side.
    open: HashSet<u32>,
    /// The connection's window: granted by the client minus DATA sent.
    connection: i64,
    /// SETTINGS_INITIAL_WINDOW_SIZE, as the client last set it.
    initial: i64,
    /// Per stream with an answer begun: granted by WINDOW_UPDATE minus
    /// sent (its window is `initial` plus this).
    windows: HashMap<u32, i64>,
    /// The connection's part of the process's open-stream budget.
    share: Share,
}

impl Default for H2Watch {
    fn default() -> Self {
        H2Watch {
            reads: FrameSplitter::default(),
            writes: FrameSplitter::default(),
            block_open: false,
            highest: 0,
            open: HashSet::new(),
            connection: 65_535,
            initial: 65_535,
            windows: HashMap::new(),
            share: Share::default(),
        }
    }
}

impl H2Watch {
    /// Passes bytes the client sent (after the preface); whether they
    /// opened a stream.
    pub fn read(&mut self, bytes: &[u8]) -> bool {
        let mut opened = false;
        let mut reset = Vec::new();
        let (block_open, highest, open) = (&mut self.block_open, &mut self.highest, &mut self.open);
        let (connection, initial, windows) =
            (&mut self.connection, &mut self.initial, &mut self.windows);
        self.reads.feed_kept(
            bytes,
            |f| match f.kind {
                HEADERS => {
                    *block_open = f.flags & END_HEADERS == 0;
                    if f.stream > *highest {
                        *highest = f.stream;
                        open.insert(f.stream);
                        opened = true;
                    }
                }
                CONTINUATION => *block_open = f.flags & END_HEADERS == 0,
                RST_STREAM => reset.push(f.stream),
                _ => {}
            },
            |f, payload| match f.kind {
                SETTINGS if f.flags & 0x1 == 0 => {
                    for entry in payload.chunks_exact(6) {
                        if u16::from_be_bytes([entry[0], entry[1]]) == 0x4 {
                            *initial = i64::from(u32::from_be_bytes([
                                entry[2], entry[3], entry[4], entry[5],
                            ]));
                        }
                    }
                }
                WINDOW_UPDATE if payload.len() == 4 => {
                    let inc = i64::from(
                        u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                            & 0x7fff_ffff,
                    );
                    match f.stream {
                        0 => *connection += inc,
                        s => {
                            if let Some(w) = windows.get_mut(&s) {
                                *w += inc;
                            }
                        }
                    }
                }
                _ => {}
            },
        );
        for s in reset {
            self.end(s);
        }
        if opened {
            self.share.set(self.open.len());
        }
        opened
    }

    /// Passes bytes the server wrote.
    pub fn wrote(&mut self, bytes: &[u8]) {
        let mut ended = Vec::new();
        let (connection, windows) = (&mut self.connection, &mut self.windows);
        self.writes.feed(bytes, |f| match f.kind {
            DATA => {
                *connection -= f.len as i64;
                *windows.entry(f.stream).or_insert(0) -= f.len as i64;
                if f.flags & END_STREAM != 0 {
                    ended.push(f.stream);
                }
            }
            HEADERS | RST_STREAM if f.kind == RST_STREAM || f.flags & END_STREAM != 0 => {
                ended.push(f.stream);
            }
            // An answer begun: its DATA is to follow.
            HEADERS => {
                windows.entry(f.stream).or_insert(0);
            }
            _ => {}
        });
        for s in ended {
            self.end(s);
        }
    }

    fn end(&mut self, stream: u32) {
        if self.open.remove(&stream) {
            self.share.set(self.open.len());
        }
        self.windows.remove(&stream);
    }

    /// Whether the process's open-stream budget evicted this connection
    /// (if not, `cx`'s task is woken when it does).
    pub fn evicted(&self, cx: &std::task::Context<'_>) -> bool {
        self.share.evicted(cx)
    }

    /// Whether a request's head is on its way: a HEADERS or CONTINUATION
    /// frame partly read, a frame header partly read, or a header block
    /// not yet ended.
    pub fn head_in_progress(&self) -> bool {
        self.block_open
            || match self.reads.partial() {
                Some(Some(f)) => f.kind == HEADERS || f.kind == CONTINUATION,
                Some(None) => true,
                None => false,
            }
    }

    /// The client's streams the server has not ended: its calls in flight.
    pub fn calls(&self) -> usize {
        self.open.len()
    }

    /// Whether the client has left no room for the server to send an
    /// answer it has begun: the connection's window, or the stream's, is
    /// used up.
    pub fn window_shut(&self) -> bool {
        !self.windows.is_empty()
            && (self.connection <= 0 || self.windows.values().any(|w| self.initial + w <= 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_window_is_shut_once_the_server_sent_what_the_client_granted() {
        let mut w = H2Watch::default();
        // The client: initial stream window 100.
        w.read(&frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 100]));
        w.wrote(&frame(HEADERS, END_HEADERS, 1, &[0; 5]));
        assert!(!w.window_shut());
        w.wrote(&frame(DATA, 0, 1, &[0; 60]));
        assert!(!w.window_shut(), "40 bytes left");
        w.wrote(&frame(DATA, 0, 1, &[0; 40]));
        assert!(w.window_shut(), "stream 1 used up");
        // The client opens it again, in two chunks.
        let update = frame(WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes());
        w.read(&update[..7]);
        assert!(w.window_shut());
        w.read(&update[7..]);
        assert!(!w.window_shut());
        // The connection's own window (65,535) used up by another stream.
        for _ in 0..4 {
            w.wrote(&frame(DATA, 0, 3, &[0; 16_384]));
        }
        assert!(w.window_shut(), "the connection's window is used up");
        w.read(&frame(WINDOW_UPDATE, 0, 0, &70_000u32.to_be_bytes()));
        // Stream 3's own window is used up too (initial 100).
        assert!(w.window_shut());
        w.wrote(&frame(RST_STREAM, 0, 3, &[0; 4]));
        assert!(!w.window_shut(), "the stream that was shut is gone");
    }

    #[test]
    fn a_vectored_write_is_split_where_it_stopped() {
        let (a, b, c) = (*b"abc", *b"de", *b"fgh");
        let bufs = [
            std::io::IoSlice::new(&a),
            std::io::IoSlice::new(&b),
            std::io::IoSlice::new(&c),
        ];
        let took: Vec<&[u8]> = written(&bufs, 4).collect();
        assert_eq!(took, [&b"abc"[..], &b"d"[..]]);
        assert_eq!(written(&bufs, 0).count(), 0);
        assert_eq!(written(&bufs, 8).map(<[u8]>::len).sum::<usize>(), 8);
    }

    #[test]
    fn frames_are_found_whatever_the_chunks() {
        let mut bytes = frame(0x4, 0, 0, &[0; 6]); // SETTINGS
        bytes.extend(frame(HEADERS, END_HEADERS, 1, &[7; 20]));
        bytes.extend(frame(DATA, END_STREAM, 1, &[]));
        for chunk in [1, 2, 5, 9, 10, 64] {
            let mut s = FrameSplitter::default();
            let mut seen = Vec::new();
            for c in bytes.chunks(chunk) {
                s.feed(c, |f| seen.push((f.kind, f.stream)));
            }
            assert_eq!(
                seen,
                [(0x4, 0), (HEADERS, 1), (DATA, 1)],
                "chunks of {chunk}"
            );
            assert_eq!(s.partial(), None);
        }
    }

    #[test]
    fn a_head_is_in_progress_until_its_block_ends() {
        let mut r = H2Watch::default();
        let headers = frame(HEADERS, 0, 1, &[1; 10]);
        assert!(!r.read(&headers[..4]));
        assert!(r.head_in_progress(), "a frame header partly in");
        assert!(r.read(&headers[4..12]), "stream 1 opened");
        assert!(r.head_in_progress(), "HEADERS partly in");
        assert!(!r.read(&headers[12..]));
        assert!(r.head_in_progress(), "no END_HEADERS yet");
        r.read(&frame(CONTINUATION, END_HEADERS, 1, &[2; 3]));
        assert!(!r.head_in_progress());
        // A DATA frame partly in is a body, not a head.
        assert!(!r.read(&frame(DATA, 0, 1, &[0; 100])[..50]));
        assert!(!r.head_in_progress());
        assert_eq!(r.calls(), 1);
    }

    #[test]
    fn a_stream_is_open_until_the_server_ends_it_or_either_side_resets_it() {
        let mut open = H2Watch::default();
        let mut reads = Vec::new();
        for s in [1, 3, 5] {
            reads.extend(frame(HEADERS, END_HEADERS | END_STREAM, s, &[0; 4]));
        }
        reads.extend(frame(RST_STREAM, 0, 5, &[0; 4]));
        assert!(open.read(&reads));
        assert_eq!(open.calls(), 2, "5 reset by the client");
        // The server: headers and data on 1 (not ended), trailers ending 1,
        // a reset of 3, each in odd chunks.
        let mut writes = frame(HEADERS, END_HEADERS, 1, &[0; 8]);
        writes.extend(frame(DATA, 0, 1, &[0; 30]));
        open.wrote(&writes);
        assert_eq!(open.calls(), 2);
        let mut end = frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0; 5]);
        end.extend(frame(RST_STREAM, 0, 3, &[0; 4]));
        for c in end.chunks(3) {
            open.wrote(c);
        }
        assert_eq!(open.calls(), 0);
    }
}
