//! HTTP/1.1 on one keep-alive connection, as lean as a client can be: the
//! request's bytes made once and written whole, the answer's head parsed in
//! place (httparse, hyper's own parser), its body read to its
//! `Content-Length` into a buffer that is reused and never kept.
//!
//! An answer whose length cannot be known (no `Content-Length`), that says
//! `Connection: close`, or that is followed by bytes nobody asked for ends
//! its connection: the next request opens a new one.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The largest answer head read (status line and headers), bytes.
pub const MAX_HEAD: usize = 64 * 1024;

/// What the engine asks: one GET, its bytes made once.
#[derive(Debug, Clone)]
pub struct Request {
    pub addr: SocketAddr,
    bytes: Vec<u8>,
}

impl Request {
    /// A GET of `path` (with its query) from `host` at `addr`.
    pub fn get(addr: SocketAddr, host: &str, path: &str) -> Request {
        let bytes = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: lab-loadgen/{}\r\nAccept: */*\r\n\r\n",
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes();
        Request { addr, bytes }
    }
}

/// The headers the checks read, taken from an answer's head.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Head {
    pub status: u16,
    pub content_length: Option<u64>,
    pub retry_after: bool,
    /// Which of the headers asked for ([`Conn::exchange`]'s `wanted`,
    /// name and value) the answer had with exactly that value: bit `i` for
    /// the `i`-th (at most 32), so that no value is copied.
    pub matched: u32,
    pub upstream_micros: Option<u64>,
    pub upstream_parts: Option<String>,
    /// The server will close the connection after this answer.
    pub close: bool,
}

/// How an exchange failed before a whole answer came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection could not be made.
    Connect,
    /// The connection broke or closed before the answer was whole.
    Closed,
    /// The answer was not HTTP/1.1 as it must be (or its head too long).
    Malformed,
    /// No whole answer within the request timeout.
    Timeout,
}

impl Failure {
    pub fn name(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Closed => "closed",
            Failure::Malformed => "malformed",
            Failure::Timeout => "timeout",
        }
    }
}

/// One keep-alive connection and its read buffer.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connects (no Nagle: a request is one write).
    pub async fn open(addr: SocketAddr) -> Result<Conn, Failure> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|_| Failure::Connect)?;
        stream.set_nodelay(true).map_err(|_| Failure::Connect)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Writes `req` and reads its whole answer. On `Ok`, the connection
    /// may carry the next request unless the head says `close`.
    pub async fn exchange(
        &mut self,
        req: &Request,
        wanted: &[(String, String)],
    ) -> Result<Head, Failure> {
        self.stream
            .write_all(&req.bytes)
            .await
            .map_err(|_| Failure::Closed)?;
        self.buf.clear();
        let (head, head_len) = loop {
            if self.read_more().await? == 0 {
                return Err(Failure::Closed);
            }
            if let Some(parsed) = parse_head(&self.buf, wanted)? {
                break parsed;
            }
            if self.buf.len() >= MAX_HEAD {
                return Err(Failure::Malformed);
            }
        };
        let Some(length) = head.content_length else {
            // Its end cannot be found: the answer is judged on its head and
            // the connection is not used again.
            return Ok(Head {
                close: true,
                ..head
            });
        };
        let mut have = (self.buf.len() - head_len) as u64;
        if have > length {
            // Bytes after the answer that nobody asked for.
            return Err(Failure::Malformed);
        }
        while have < length {
            self.buf.clear();
            let n = self.read_more().await? as u64;
            if n == 0 {
                return Err(Failure::Closed);
            }
            have += n;
            if have > length {
                return Err(Failure::Malformed);
            }
        }
        Ok(head)
    }

    /// One read appended to the buffer, into its spare room (16 KiB at
    /// least; never zeroed first).
    async fn read_more(&mut self) -> Result<usize, Failure> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        self.stream
            .read_buf(&mut self.buf)
            .await
            .map_err(|_| Failure::Closed)
    }
}

/// The head at the start of `buf`, and its length, once it is whole.
fn parse_head(buf: &[u8], wanted: &[(String, String)]) -> Result<Option<(Head, usize)>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut res = httparse::Response::new(&mut headers);
    let n = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Failure::Malformed),
    };
    let mut head = Head {
        status: res.code.unwrap_or(0),
        close: res.version == Some(0),
        ..Head::default()
    };
    for h in res.headers.iter() {
        let name = h.name;
        let value = || std::str::from_utf8(h.value).ok().map(str::trim);
        if name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(
                value()
                    .and_then(|v| v.parse().ok())
                    .ok_or(Failure::Malformed)?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked or not, its end is not a length the engine reads to.
            head.content_length = None;
            head.close = true;
        } else if name.eq_ignore_ascii_case("connection") {
            if value().is_some_and(|v| v.eq_ignore_ascii_case("close")) {
                head.close = true;
            }
        } else if name.eq_ignore_ascii_case("retry-after") {
            head.retry_after = true;
        } else if name.eq_ignore_ascii_case("x-upstream-micros") {
            head.upstream_micros = value().and_then(|v| v.parse().ok());
        } else if name.eq_ignore_ascii_case("x-upstream-parts") {
            head.upstream_parts = value().map(str::to_owned);
        }
        for (i, (w, want)) in wanted.iter().enumerate().take(32) {
            if name.eq_ignore_ascii_case(w) && value() == Some(want.as_str()) {
                head.matched |= 1 << i;
            }
        }
    }
    Ok(Some((head, n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gives_the_headers_the_checks_read() {
        let text = b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\nX-Via: grpc\r\nx-upstream-micros: 417\r\nx-upstream-parts: store=1.5,encode=2\r\n\r\n{\"orders\":[]";
        let wanted = [
            ("x-via".to_owned(), "grpc".to_owned()),
            ("x-upstream-calls".to_owned(), "1".to_owned()),
        ];
        let (head, n) = parse_head(text, &wanted).unwrap().unwrap();
        assert_eq!(n, text.len() - 12);
        assert_eq!(head.status, 200);
        assert_eq!(head.content_length, Some(12));
        assert_eq!(head.matched, 0b01, "x-via as asked, no x-upstream-calls");
        let other = [("x-via".to_owned(), "h1-json".to_owned())];
        assert_eq!(parse_head(text, &other).unwrap().unwrap().0.matched, 0);
        assert_eq!(head.upstream_micros, Some(417));
        assert_eq!(head.upstream_parts.as_deref(), Some("store=1.5,encode=2"));
        assert!(!head.close && !head.retry_after);
    }

    #[test]
    fn a_partial_head_waits_and_a_broken_one_fails() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nconte", &[]), Ok(None));
        assert_eq!(
            parse_head(b"NOT HTTP\r\n\r\n", &[]).unwrap_err(),
            Failure::Malformed
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", &[]).unwrap_err(),
            Failure::Malformed
        );
    }

    #[test]
    fn chunked_or_closing_answers_end_their_connection() {
        let (h, _) = parse_head(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            &[],
        )
        .unwrap()
        .unwrap();
        assert!(h.close && h.content_length.is_none());
        let (h, _) = parse_head(
            b"HTTP/1.1 503 Busy\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            &[],
        )
        .unwrap()
        .unwrap();
        assert!(h.close && h.retry_after);
        assert_eq!(h.status, 503);
    }
}
