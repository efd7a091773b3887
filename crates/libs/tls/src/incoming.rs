//! A TLS listener as the `incoming` stream of a tonic server
//! (`serve_with_incoming_shutdown`), so that gRPC gets the same acceptor,
//! counters and session tickets as every other listener.
//!
//! Handshakes run in tasks of their own: a slow or silent client holds up
//! only itself, never the accept loop. The loop ends when the server drops
//! the stream (at shutdown), which closes the listening socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::{Acceptor, ServerStream};

/// One accepted TLS connection, as tonic wants it.
#[derive(Debug)]
pub struct TlsConn(ServerStream<TcpStream>);

impl Connected for TlsConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        let tcp = self.0.get_ref().0;
        TcpConnectInfo {
            local_addr: tcp.local_addr().ok(),
            remote_addr: tcp.peer_addr().ok(),
        }
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Accepts on `listener`, Nagle off, and yields each connection whose
/// handshake completed. Failed handshakes are counted by the acceptor and
/// logged at debug; they never end the stream.
pub fn incoming(listener: TcpListener, acceptor: Acceptor) -> ReceiverStream<io::Result<TlsConn>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (socket, peer) = tokio::select! {
                () = tx.closed() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Nagle would hold small frames back until the peer's delayed ACK.
            let _ = socket.set_nodelay(true);
            let (tx, acceptor) = (tx.clone(), acceptor.clone());
            tokio::spawn(async move {
                match acceptor.accept(socket).await {
                    Ok(stream) => {
                        let _ = tx.send(Ok(TlsConn(stream))).await;
                    }
                    Err(e) => tracing::debug!(%peer, error = %e, "gRPC TLS handshake failed"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
