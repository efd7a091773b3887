//! The sockets under every transport: opened here, counted here.
//!
//! [`connect`] is the only way an adapter gets a TCP connection to
//! order-service, so the connection counters cannot miss one; [`CountingIo`]
//! wraps the socket so that the byte counters see exactly what crosses it,
//! HTTP headers, HTTP/2 and gRPC framing and length prefixes included.
//!
//! With TLS on, a [`Dialer`] runs the handshake over the counted socket, so
//! the counters still see the bytes on the wire: TLS records, handshakes and
//! all, not the plaintext inside them.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

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

/// How an upstream connection notices that order-service, or the path to
/// it, is gone (`USER_UPSTREAM_CONNECT_TIMEOUT_MS`,
/// `USER_UPSTREAM_KEEPALIVE_MS`); the default is none of it, as the
/// libraries' own defaults are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Liveness {
    /// A TCP connect that takes longer fails, rather than waiting through
    /// the kernel's SYN retries until the call's own timeout.
    pub connect_timeout: Option<Duration>,
    /// TCP keep-alive probes after this much idle time (this far apart,
    /// two unanswered ones close the connection), and `TCP_USER_TIMEOUT`
    /// of twice it: a connection whose sent bytes stay unacknowledged that
    /// long is closed, rather than retransmitting for about 15 minutes. The
    /// gRPC channels also send HTTP/2 PINGs this often, and close the
    /// connection when one goes unanswered as long.
    pub keepalive: Option<Duration>,
}

/// Opens a counted TCP connection to `addr` (`host:port`), with `live`'s
/// connect timeout and keep-alive.
///
/// Nagle is off: every transport here sends a request and waits for its
/// answer, the pattern Nagle plus delayed ACKs turns into 40 ms stalls.
pub async fn connect(
    addr: &str,
    metrics: &Arc<TransportMetrics>,
    live: Liveness,
) -> io::Result<CountingIo<TcpStream>> {
    let stream = match live.connect_timeout {
        None => TcpStream::connect(addr).await?,
        Some(t) => tokio::time::timeout(t, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection to {addr} within {} ms", t.as_millis()),
                )
            })??,
    };
    if let Some(k) = live.keepalive {
        let sock = socket2::SockRef::from(&stream);
        sock.set_tcp_keepalive(
            &socket2::TcpKeepalive::new()
                .with_time(k)
                .with_interval(k)
                .with_retries(2),
        )?;
        sock.set_tcp_user_timeout(Some(k * 2))?;
    }
    stream.set_nodelay(true)?;
    let guard = Arc::new(metrics.connection_opened());
    Ok(CountingIo::new(stream, metrics.clone(), guard))
}

/// How one transport reaches one of order-service's ports: the address,
/// and, with TLS on, the connector (its ALPN, its handshake counters) and
/// the name the certificate must carry.
#[derive(Debug, Clone)]
pub struct Dialer {
    /// `host:port`.
    pub addr: String,
    tls: Option<(tls::Connector, String)>,
    live: Liveness,
}

impl Dialer {
    /// Cleartext to `addr`.
    pub fn plain(addr: String) -> Self {
        Dialer {
            addr,
            tls: None,
            live: Liveness::default(),
        }
    }

    /// TLS to `addr`, checking the certificate against `server_name`.
    pub fn tls(addr: String, connector: tls::Connector, server_name: String) -> Self {
        Dialer {
            addr,
            tls: Some((connector, server_name)),
            live: Liveness::default(),
        }
    }

    /// The same dialer with `live`'s connect timeout and keep-alive.
    pub fn with_liveness(mut self, live: Liveness) -> Self {
        self.live = live;
        self
    }

    /// The scheme calls over these connections carry (HTTP/2's `:scheme`):
    /// `https` with TLS, `http` without.
    pub fn scheme(&self) -> http::uri::Scheme {
        if self.tls.is_some() {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        }
    }

    /// `path_and_query` on this address in the absolute form HTTP/2 wants:
    /// it becomes `:scheme` and `:authority`.
    pub fn absolute(&self, path_and_query: &str) -> String {
        format!("{}://{}{path_and_query}", self.scheme(), self.addr)
    }

    /// A counted connection: TCP (see [`connect`]), then the TLS handshake
    /// when TLS is on.
    pub async fn connect(&self, metrics: &Arc<TransportMetrics>) -> io::Result<Conn> {
        let tcp = connect(&self.addr, metrics, self.live).await?;
        Ok(match &self.tls {
            None => Conn::Plain(tcp),
            Some((connector, name)) => Conn::Tls(Box::new(connector.connect(name, tcp).await?)),
        })
    }
}

/// A connection to order-service, cleartext or TLS; counted underneath.
#[derive(Debug)]
pub enum Conn {
    Plain(CountingIo<TcpStream>),
    Tls(Box<tls::ClientStream<CountingIo<TcpStream>>>),
}

/// A TLS error met after the handshake (in TLS 1.3 a server refusing the
/// client's certificate says so only then, with an alert), reworded so that
/// whoever reads it knows it was TLS.
fn tls_error(e: io::Error) -> io::Error {
    if e.get_ref()
        .is_some_and(|inner| inner.is::<tls::rustls::Error>())
    {
        io::Error::new(e.kind(), format!("TLS with order-service failed: {e}"))
    } else {
        e
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Conn::Tls(io) => Pin::new(io).poll_read(cx, buf).map_err(tls_error),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Conn::Tls(io) => Pin::new(io).poll_write(cx, buf).map_err(tls_error),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Conn::Tls(io) => Pin::new(io)
                .poll_write_vectored(cx, bufs)
                .map_err(tls_error),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(io) => io.is_write_vectored(),
            Conn::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_flush(cx),
            Conn::Tls(io) => Pin::new(io).poll_flush(cx).map_err(tls_error),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Conn::Tls(io) => Pin::new(io).poll_shutdown(cx).map_err(tls_error),
        }
    }
}

/// An error and every error under it, joined by ": ": hyper's and tonic's
/// own messages ("connection error") leave out the cause that says what
/// went wrong, such as a TLS alert.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        next = cause.source();
    }
    text
}

/// `host:port` of an `http://` or `https://` URL, with the scheme's default
/// port. Whether TLS is used is the settings' choice (`USER_ORDER_TLS_CA`),
/// not the scheme's: `Upstreams::new` refuses an `https://` URL without it.
pub fn authority(url: &http::Uri) -> anyhow::Result<String> {
    let host = url
        .host()
        .ok_or_else(|| anyhow::anyhow!("{url} has no host"))?;
    let port = url.port_u16().unwrap_or(match url.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    if url
        .scheme_str()
        .is_some_and(|s| s != "http" && s != "https")
    {
        anyhow::bail!("{url}: only http:// and https:// are supported");
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
        let mut io = connect(&addr, &m, Liveness::default()).await.unwrap();
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
        assert_eq!(a("https://order-service"), "order-service:443");
        assert!(authority(&"ftp://x:1".parse().unwrap()).is_err());
    }
}
