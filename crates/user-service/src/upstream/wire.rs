//! The sockets under every transport: opened here, counted here.
//!
//! [`connect`] is the only way an adapter gets a TCP connection to
//! order-service, so the connection counters cannot miss one; [`CountingIo`]
//! wraps the socket so that the byte counters see exactly what crosses it,
//! HTTP headers, HTTP/2 and gRPC framing and length prefixes included.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::metrics::{ConnectionGuard, TransportMetrics};

/// A socket (or half of one) whose reads and writes are counted.
#[derive(Debug)]
pub struct CountingIo<T> {
    inner: T,
    metrics: Arc<TransportMetrics>,
    /// Shared by the halves of a split socket: the connection counts as
    /// closed when the last of them is dropped.
    _conn: Arc<ConnectionGuard>,
}

impl<T> CountingIo<T> {
    /// Wraps `inner`, which belongs to the connection `conn`.
    pub fn new(inner: T, metrics: Arc<TransportMetrics>, conn: Arc<ConnectionGuard>) -> Self {
        CountingIo {
            inner,
            metrics,
            _conn: conn,
        }
    }
}

impl CountingIo<TcpStream> {
    /// Splits into counted owned halves, so that a reader task and a writer
    /// task can each own one without a lock between them.
    pub fn into_split(
        self,
    ) -> (
        CountingIo<tokio::net::tcp::OwnedReadHalf>,
        CountingIo<tokio::net::tcp::OwnedWriteHalf>,
    ) {
        let (r, w) = self.inner.into_split();
        (
            CountingIo::new(r, self.metrics.clone(), self._conn.clone()),
            CountingIo::new(w, self.metrics, self._conn),
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CountingIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        self.metrics.add_read(buf.filled().len() - before);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CountingIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        self.metrics.add_written(n);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, bufs))?;
        self.metrics.add_written(n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Opens a counted TCP connection to `addr` (`host:port`).
///
/// Nagle is off: every transport here sends a request and waits for its
/// answer, the pattern Nagle plus delayed ACKs turns into 40 ms stalls.
pub async fn connect(
    addr: &str,
    metrics: &Arc<TransportMetrics>,
) -> io::Result<CountingIo<TcpStream>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let guard = Arc::new(metrics.connection_opened());
    Ok(CountingIo::new(stream, metrics.clone(), guard))
}

/// `host:port` of an `http://` URL, with the scheme's default port.
pub fn authority(url: &http::Uri) -> anyhow::Result<String> {
    let host = url
        .host()
        .ok_or_else(|| anyhow::anyhow!("{url} has no host"))?;
    let port = url.port_u16().unwrap_or(match url.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    if url.scheme_str().is_some_and(|s| s != "http") {
        anyhow::bail!("{url}: only http:// (cleartext) is supported");
    }
    Ok(if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test]
    async fn bytes_and_connections_are_counted_on_the_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(b"pong!!!").await.unwrap();
        });
        let m = Arc::new(TransportMetrics::new());
        let mut io = connect(&addr, &m).await.unwrap();
        io.write_all(b"ping!").await.unwrap();
        let mut got = Vec::new();
        io.read_to_end(&mut got).await.unwrap();
        server.await.unwrap();
        let s = m.snapshot();
        assert_eq!((s.bytes_written, s.bytes_read), (5, 7));
        assert_eq!((s.connections_opened, s.connections_open), (1, 1));
        let (r, w) = io.into_split();
        drop(r);
        assert_eq!(m.snapshot().connections_open, 1, "one half still holds it");
        drop(w);
        assert_eq!(m.snapshot().connections_open, 0);
    }

    #[test]
    fn authority_adds_the_default_port() {
        let a = |s: &str| authority(&s.parse().unwrap()).unwrap();
        assert_eq!(a("http://127.0.0.1:8082"), "127.0.0.1:8082");
        assert_eq!(a("http://order-service"), "order-service:80");
        assert!(authority(&"https://x:1".parse().unwrap()).is_err());
    }
}
