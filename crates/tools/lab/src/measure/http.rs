//! A small blocking HTTP/1.1 client that counts every byte on the socket.
//!
//! The lab needs few HTTP calls (readiness, `/metrics`, and the direct
//! wire-size probes) and one thing no general client gives: the exact bytes
//! written and read, headers and framing included, for the gRPC-web row of
//! the wire-size table, measured the same way user-service counts its own
//! sockets. So it speaks the few lines of HTTP/1.1 it needs itself.

use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context as _, bail};

/// An answer and what it cost on the wire.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Request bytes written, headers included.
    pub bytes_written: u64,
    /// Response bytes read, status line, headers and chunk framing included.
    pub bytes_read: u64,
}

impl Response {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Counts what is read through it.
struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// One keep-alive connection.
pub struct Conn {
    reader: BufReader<Counting<TcpStream>>,
    writer: TcpStream,
    host: String,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("host", &self.host).finish()
    }
}

impl Conn {
    /// Connects with `timeout` for the connect and for every read and write.
    pub fn open(addr: SocketAddr, timeout: Duration) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        let writer = stream.try_clone()?;
        Ok(Conn {
            reader: BufReader::new(Counting {
                inner: stream,
                read: 0,
            }),
            writer,
            host: addr.to_string(),
        })
    }

    /// Sends one request and reads its whole answer.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> anyhow::Result<Response> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\n", self.host);
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            head.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        self.writer
            .write_all(&out)
            .with_context(|| format!("sending {method} {path}"))?;
        let before = self.reader.get_ref().read;
        let buffered_before = self.reader.buffer().len() as u64;
        let (status, headers, body) = self
            .read_response()
            .with_context(|| format!("reading the answer to {method} {path}"))?;
        // Bytes of this answer = socket bytes since, minus what is still
        // buffered unread, plus what was buffered before (a pipelined
        // leftover; never the case here, but it keeps the count exact).
        let after = self.reader.get_ref().read;
        let buffered_after = self.reader.buffer().len() as u64;
        Ok(Response {
            status,
            headers,
            body,
            bytes_written: out.len() as u64,
            bytes_read: (after - before) + buffered_before - buffered_after,
        })
    }

    fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line)?;
        if n == 0 {
            bail!("the connection closed mid-answer");
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_owned())
    }

    #[allow(clippy::type_complexity)]
    fn read_response(&mut self) -> anyhow::Result<(u16, Vec<(String, String)>, Vec<u8>)> {
        let status_line = self.read_line()?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {status_line:?}"))?;
        let mut headers = Vec::new();
        loop {
            let line = self.read_line()?;
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let size_line = self.read_line()?;
                let size_hex = size_line.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(size_hex, 16)
                    .with_context(|| format!("bad chunk size {size_line:?}"))?;
                if size == 0 {
                    // Trailers, then the blank line.
                    while !self.read_line()?.is_empty() {}
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                self.reader.read_exact(&mut body[start..])?;
                let crlf = self.read_line()?;
                if !crlf.is_empty() {
                    bail!("a chunk is not followed by CRLF");
                }
            }
        } else if let Some(len) = find("content-length") {
            let len: usize = len
                .parse()
                .with_context(|| format!("bad content-length {len:?}"))?;
            body.resize(len, 0);
            self.reader.read_exact(&mut body)?;
        } else if status != 204 && status != 304 {
            self.reader.read_to_end(&mut body)?;
        }
        Ok((status, headers, body))
    }
}

/// One GET on a fresh connection.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> anyhow::Result<Response> {
    Conn::open(addr, timeout)?.request("GET", path, &[("connection", "close")], &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-connection server that answers each request with the next
    /// canned answer and returns what it read.
    fn serve(answers: Vec<&'static [u8]>) -> (SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let mut got = Vec::new();
            for a in answers {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).expect("read");
                got.extend_from_slice(&buf[..n]);
                s.write_all(a).expect("write");
            }
            got
        });
        (addr, h)
    }

    #[test]
    fn content_length_and_chunked_answers_are_read_and_counted() {
        let a1: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-via: grpc\r\n\r\nhello";
        let a2: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let (addr, server) = serve(vec![a1, a2]);
        let mut c = Conn::open(addr, Duration::from_secs(5)).expect("connect");
        let r1 = c.request("GET", "/a", &[], &[]).expect("first");
        assert_eq!(r1.status, 200);
        assert_eq!(r1.body, b"hello");
        assert_eq!(r1.header("x-via"), Some("grpc"));
        assert_eq!(r1.bytes_read, a1.len() as u64);
        let r2 = c
            .request("POST", "/b", &[("content-type", "x")], b"12345")
            .expect("second");
        assert_eq!(r2.body, b"abcde");
        assert_eq!(r2.bytes_read, a2.len() as u64);
        let sent = server.join().expect("server");
        assert_eq!(r1.bytes_written + r2.bytes_written, sent.len() as u64);
        assert!(String::from_utf8_lossy(&sent).contains("content-length: 5\r\n\r\n12345"));
    }

    #[test]
    fn a_closed_connection_mid_answer_is_an_error() {
        let (addr, _server) = serve(vec![b"HTTP/1.1 200 OK\r\ncontent-len"]);
        let mut c = Conn::open(addr, Duration::from_secs(5)).expect("connect");
        assert!(c.request("GET", "/", &[], &[]).is_err());
    }
}
