//! An HTTP/2 connection's frames as they pass through its socket, read from
//! their 9-byte headers only: whether a request's head (a HEADERS frame and
//! its CONTINUATIONs) is on its way, and which streams are open. The
//! listeners use it to bound what hyper and tonic leave unbounded once the
//! preface is in: a head trickled byte by byte, and a connection that keeps
//! answering pings with no call in flight.
//!
//! Frame layout (RFC 9113 §4.1): a 24-bit length, an 8-bit type, 8 bits of
//! flags, a reserved bit and a 31-bit stream id, then the payload.

use std::collections::HashSet;

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

/// The flow-control windows the client grants the server (RFC 9113 §6.9):
/// the connection's, and each open stream's. Fed with the client's SETTINGS
/// and WINDOW_UPDATE frames and the server's DATA frames.
#[derive(Debug)]
pub(crate) struct Windows {
    reads: FrameSplitter,
    writes: FrameSplitter,
    connection: i64,
    /// SETTINGS_INITIAL_WINDOW_SIZE, as the client last set it.
    initial: i64,
    /// Per stream the server has sent DATA on: granted by WINDOW_UPDATE
    /// minus sent (its window is `initial` plus this).
    streams: std::collections::HashMap<u32, i64>,
}

impl Default for Windows {
    fn default() -> Self {
        Windows {
            reads: FrameSplitter::default(),
            writes: FrameSplitter::default(),
            connection: 65_535,
            initial: 65_535,
            streams: std::collections::HashMap::new(),
        }
    }
}

impl Windows {
    /// Passes bytes the client sent (after the preface).
    pub fn read(&mut self, bytes: &[u8]) {
        let (connection, initial, streams) =
            (&mut self.connection, &mut self.initial, &mut self.streams);
        let mut reset = Vec::new();
        self.reads.feed_kept(
            bytes,
            |f| {
                if f.kind == RST_STREAM {
                    reset.push(f.stream);
                }
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
                            if let Some(w) = streams.get_mut(&s) {
                                *w += inc;
                            }
                        }
                    }
                }
                _ => {}
            },
        );
        for s in reset {
            streams.remove(&s);
        }
    }

    /// Passes bytes the server wrote.
    pub fn wrote(&mut self, bytes: &[u8]) {
        let (connection, streams) = (&mut self.connection, &mut self.streams);
        self.writes.feed(bytes, |f| match f.kind {
            DATA => {
                *connection -= f.len as i64;
                let w = streams.entry(f.stream).or_insert(0);
                *w -= f.len as i64;
                if f.flags & END_STREAM != 0 {
                    streams.remove(&f.stream);
                }
            }
            HEADERS if f.flags & END_STREAM != 0 => {
                streams.remove(&f.stream);
            }
            // An answer begun: its DATA is to follow.
            HEADERS => {
                streams.entry(f.stream).or_insert(0);
            }
            RST_STREAM => {
                streams.remove(&f.stream);
            }
            _ => {}
        });
    }

    /// Whether the client has left no room for the server to send an
    /// answer it has begun: the connection's window, or the stream's, is
    /// used up.
    pub fn shut(&self) -> bool {
        !self.streams.is_empty()
            && (self.connection <= 0 || self.streams.values().any(|w| self.initial + w <= 0))
    }
}

/// A stream the client opened or reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    Opened(u32),
    Reset(u32),
}

/// What the client has sent, frame by frame: a head in progress, and the
/// streams it opened that the server has not ended.
#[derive(Debug, Default)]
pub(crate) struct H2Reads {
    frames: FrameSplitter,
    /// A HEADERS frame without END_HEADERS was read: CONTINUATIONs follow.
    block_open: bool,
    /// The highest stream id the client opened.
    highest: u32,
}

impl H2Reads {
    /// Passes bytes the client sent; `on` hears of each stream the client
    /// opened or reset.
    pub fn feed(&mut self, bytes: &[u8], mut on: impl FnMut(Client)) {
        let (block_open, highest) = (&mut self.block_open, &mut self.highest);
        self.frames.feed(bytes, |f| match f.kind {
            HEADERS => {
                *block_open = f.flags & END_HEADERS == 0;
                if f.stream > *highest {
                    *highest = f.stream;
                    on(Client::Opened(f.stream));
                }
            }
            CONTINUATION => *block_open = f.flags & END_HEADERS == 0,
            RST_STREAM => on(Client::Reset(f.stream)),
            _ => {}
        });
    }

    /// Whether a request's head is on its way: a HEADERS or CONTINUATION
    /// frame partly read, a frame header partly read, or a header block
    /// not yet ended.
    pub fn head_in_progress(&self) -> bool {
        self.block_open
            || match self.frames.partial() {
                Some(Some(f)) => f.kind == HEADERS || f.kind == CONTINUATION,
                Some(None) => true,
                None => false,
            }
    }
}

/// The client's streams the server has not yet ended: opened by a client
/// HEADERS, ended by the server's END_STREAM (on DATA or trailers) or a
/// reset from either side.
#[derive(Debug, Default)]
pub(crate) struct OpenStreams {
    open: HashSet<u32>,
    writes: FrameSplitter,
}

impl OpenStreams {
    /// Notes what the client did to a stream.
    pub fn client(&mut self, event: Client) {
        match event {
            Client::Opened(s) => self.open.insert(s),
            Client::Reset(s) => self.open.remove(&s),
        };
    }

    /// Passes bytes the server wrote.
    pub fn wrote(&mut self, bytes: &[u8]) {
        let open = &mut self.open;
        self.writes.feed(bytes, |f| match f.kind {
            HEADERS | DATA if f.flags & END_STREAM != 0 => {
                open.remove(&f.stream);
            }
            RST_STREAM => {
                open.remove(&f.stream);
            }
            _ => {}
        });
    }

    pub fn count(&self) -> usize {
        self.open.len()
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
        let mut w = Windows::default();
        // The client: initial stream window 100.
        w.read(&frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 100]));
        w.wrote(&frame(HEADERS, END_HEADERS, 1, &[0; 5]));
        assert!(!w.shut());
        w.wrote(&frame(DATA, 0, 1, &[0; 60]));
        assert!(!w.shut(), "40 bytes left");
        w.wrote(&frame(DATA, 0, 1, &[0; 40]));
        assert!(w.shut(), "stream 1 used up");
        // The client opens it again, in two chunks.
        let update = frame(WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes());
        w.read(&update[..7]);
        assert!(w.shut());
        w.read(&update[7..]);
        assert!(!w.shut());
        // The connection's own window (65,535) used up by another stream.
        for _ in 0..4 {
            w.wrote(&frame(DATA, 0, 3, &[0; 16_384]));
        }
        assert!(w.shut(), "the connection's window is used up");
        w.read(&frame(WINDOW_UPDATE, 0, 0, &70_000u32.to_be_bytes()));
        // Stream 3's own window is used up too (initial 100).
        assert!(w.shut());
        w.wrote(&frame(RST_STREAM, 0, 3, &[0; 4]));
        assert!(!w.shut(), "the stream that was shut is gone");
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
        let mut r = H2Reads::default();
        let mut seen = Vec::new();
        let headers = frame(HEADERS, 0, 1, &[1; 10]);
        r.feed(&headers[..4], |e| seen.push(e));
        assert!(r.head_in_progress(), "a frame header partly in");
        r.feed(&headers[4..12], |e| seen.push(e));
        assert!(r.head_in_progress(), "HEADERS partly in");
        r.feed(&headers[12..], |e| seen.push(e));
        assert!(r.head_in_progress(), "no END_HEADERS yet");
        r.feed(&frame(CONTINUATION, END_HEADERS, 1, &[2; 3]), |e| {
            seen.push(e)
        });
        assert!(!r.head_in_progress());
        // A DATA frame partly in is a body, not a head.
        r.feed(&frame(DATA, 0, 1, &[0; 100])[..50], |e| seen.push(e));
        assert!(!r.head_in_progress());
        assert_eq!(seen, [Client::Opened(1)]);
    }

    #[test]
    fn a_stream_is_open_until_the_server_ends_it_or_either_side_resets_it() {
        let mut r = H2Reads::default();
        let mut open = OpenStreams::default();
        let mut reads = Vec::new();
        for s in [1, 3, 5] {
            reads.extend(frame(HEADERS, END_HEADERS | END_STREAM, s, &[0; 4]));
        }
        reads.extend(frame(RST_STREAM, 0, 5, &[0; 4]));
        r.feed(&reads, |e| open.client(e));
        assert_eq!(open.count(), 2, "5 reset by the client");
        // The server: headers and data on 1 (not ended), trailers ending 1,
        // a reset of 3, each in odd chunks.
        let mut writes = frame(HEADERS, END_HEADERS, 1, &[0; 8]);
        writes.extend(frame(DATA, 0, 1, &[0; 30]));
        assert!({
            open.wrote(&writes);
            open.count() == 2
        });
        let mut end = frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0; 5]);
        end.extend(frame(RST_STREAM, 0, 3, &[0; 4]));
        for c in end.chunks(3) {
            open.wrote(c);
        }
        assert_eq!(open.count(), 0);
    }
}
