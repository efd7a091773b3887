//! HTTP/3 clients: a QUIC endpoint with the caller's TLS (ALPN `h3`), and
//! connections to one server on it (h3-util's, which open the QUIC
//! connection on first use and again after it closes, requests
//! multiplexed on it as HTTP/2's are).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How often a client connection pings when nothing else is sent: a
/// server that has gone away is noticed [`IDLE`] after its last word, not
/// at the first call after it.
pub const KEEP_ALIVE: Duration = Duration::from_secs(2);
/// A client connection that hears nothing for this long is closed (QUIC
/// takes the smaller of the two sides' idle timeouts): a dead server or a
/// silent path, which QUIC cannot tell apart, ends the connection then,
/// and the next call opens a new one.
pub const IDLE: Duration = Duration::from_secs(6);

/// Makes a connection to the server, once per QUIC connection.
pub type Connector = h3_util::quinn::H3QuinnConnector;

/// Requests with bodies of type `B` to one server over one QUIC
/// connection at a time (opened on first use and after it ends).
pub type Connection<B> = h3_util::client::H3Connection<Connector, B>;

/// A client endpoint (a UDP socket of its own) for servers at addresses
/// of `to`'s family, trusting what `tls` trusts.
pub fn endpoint(tls: &tls::ClientTls, to: SocketAddr) -> std::io::Result<quinn::Endpoint> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls.rustls_config(tls::ALPN_H3))
        .map_err(|e| std::io::Error::other(format!("TLS cannot serve QUIC: {e}")))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(KEEP_ALIVE))
        .max_idle_timeout(Some(IDLE.try_into().expect("6 s is a QUIC idle timeout")));
    config.transport_config(Arc::new(transport));
    let local: SocketAddr = match to {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let mut endpoint = quinn::Endpoint::client(local)?;
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

/// A connector to `addr` on `endpoint`, checking the server's certificate
/// for `server_name`.
pub fn connector(endpoint: &quinn::Endpoint, addr: SocketAddr, server_name: &str) -> Connector {
    h3_util::quinn::H3QuinnConnector::new(origin(addr), server_name.to_owned(), endpoint.clone())
}

/// `https://addr`.
fn origin(addr: SocketAddr) -> http::Uri {
    format!("https://{addr}")
        .parse()
        .expect("a socket address makes a URI")
}

/// A connection to `addr` for bodies of type `B`.
pub fn connection<B>(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    server_name: &str,
) -> Connection<B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    h3_util::client::H3Connection::new(connector(endpoint, addr, server_name), origin(addr), None)
}
