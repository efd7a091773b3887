//! Where order-service is and how an adapter reaches it: [`Endpoints`],
//! TLS to it ([`UpstreamTls`]), and the same endpoints on one replica.

use std::time::Duration;

use anyhow::Context as _;

use super::wire;
use crate::metrics::TransportMetrics;

/// How an adapter reaches order-service; built once, at start.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Base URL of the REST port, e.g. `http://127.0.0.1:8082`.
    pub rest_url: http::Uri,
    /// URL of the gRPC port, e.g. `http://127.0.0.1:50052`.
    pub grpc_url: http::Uri,
    /// `host:port` of the raw-TCP port.
    pub tcp_addr: String,
    /// `host:port` of the HTTP/3 (QUIC, UDP) port.
    pub h3_addr: String,
    /// Connections per transport.
    pub pool_size: usize,
    /// The upstream timeout, also sent as the gRPC deadline.
    pub timeout: Duration,
    /// TLS to order-service on every transport, when configured.
    pub tls: Option<UpstreamTls>,
    /// Ask for gzip on the REST and gRPC transports (`USER_UPSTREAM_GZIP`).
    pub gzip: bool,
    /// Ask for zstd on the same transports (`USER_UPSTREAM_ZSTD`).
    pub zstd: bool,
    /// Time each call's parts (`USER_UPSTREAM_BREAKDOWN`): the shared
    /// readers of bidi streams and raw-TCP connections time their decodes
    /// only then.
    pub breakdown: bool,
    /// How every TCP connection notices a dead peer or path.
    pub live: wire::Liveness,
}

/// TLS to order-service: the client configuration (trusted CA, optional
/// client certificate) every transport's connector is made from, so that
/// they share one session cache and can resume.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    pub client: tls::ClientTls,
    /// The name the server certificate must carry; `None`: each target's host.
    pub server_name: Option<String>,
}

/// `uri` with its host replaced by `ip`, its port and path kept.
fn with_host(uri: &http::Uri, ip: std::net::IpAddr) -> anyhow::Result<http::Uri> {
    let host = match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let authority = match uri.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    };
    let mut parts = uri.clone().into_parts();
    parts.authority = Some(authority.parse()?);
    Ok(http::Uri::from_parts(parts)?)
}

impl Endpoints {
    /// The same endpoints on one replica: every host replaced by `ip`, the
    /// ports kept. With TLS, the certificate name stays the configured
    /// host's, as a replica's certificate names the service, not the pod.
    pub fn for_replica(&self, ip: std::net::IpAddr) -> anyhow::Result<Endpoints> {
        let tcp_port = self
            .tcp_addr
            .rsplit_once(':')
            .map(|(_, p)| p)
            .with_context(|| format!("{} has no port", self.tcp_addr))?;
        let h3_port = self
            .h3_addr
            .rsplit_once(':')
            .map(|(_, p)| p)
            .with_context(|| format!("{} has no port", self.h3_addr))?;
        let tls = self.tls.clone().map(|mut t| {
            t.server_name
                .get_or_insert_with(|| self.rest_url.host().unwrap_or_default().to_owned());
            t
        });
        Ok(Endpoints {
            rest_url: with_host(&self.rest_url, ip)?,
            grpc_url: with_host(&self.grpc_url, ip)?,
            tcp_addr: std::net::SocketAddr::new(ip, tcp_port.parse()?).to_string(),
            h3_addr: std::net::SocketAddr::new(ip, h3_port.parse()?).to_string(),
            pool_size: self.pool_size,
            timeout: self.timeout,
            tls,
            gzip: self.gzip,
            zstd: self.zstd,
            breakdown: self.breakdown,
            live: self.live,
        })
    }

    /// How a transport offering `alpn` reaches `addr` (`host:port`): plain,
    /// or TLS counting into `metrics`' handshake counters.
    pub fn dialer(&self, addr: String, alpn: &[&[u8]], metrics: &TransportMetrics) -> wire::Dialer {
        match &self.tls {
            None => wire::Dialer::plain(addr).with_liveness(self.live),
            Some(t) => {
                let name = t
                    .server_name
                    .clone()
                    .unwrap_or_else(|| host_of(&addr).to_owned());
                let connector = t.client.connector(alpn, metrics.tls_counters().clone());
                wire::Dialer::tls(addr, connector, name).with_liveness(self.live)
            }
        }
    }
}

/// The host of `host:port` or `[v6]:port`.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address_is_its_certificate_name() {
        assert_eq!(host_of("order-service:50062"), "order-service");
        assert_eq!(host_of("127.0.0.1:1"), "127.0.0.1");
        assert_eq!(host_of("[::1]:50062"), "::1");
    }
}
