//! A stack the lab measures without starting, restarting or stopping it
//! (`lab run … --target`): its URLs, checked before the first round, and
//! what the report says of it.

use std::net::SocketAddr;

use anyhow::Context as _;

/// An already-running stack, measured without starting, restarting or
/// stopping anything (`lab run … --target`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// user-service's base URL, `http://host:port`.
    pub user_url: String,
    /// user-service's metrics, `http://host:port/metrics`.
    pub user_metrics: String,
    /// Each order-service replica's metrics URL.
    #[serde(default)]
    pub order_metrics: Vec<String>,
    /// order-service's REST and gRPC addresses, for what calls it directly.
    #[serde(default)]
    pub order_rest: Option<String>,
    #[serde(default)]
    pub order_grpc: Option<String>,
}

/// `http://host:port[/path]` as an address and a path.
pub fn http_endpoint(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let rest = url.strip_prefix("http://").with_context(|| {
        format!("{url}: only http:// URLs (the lab speaks plain HTTP/1.1 to a target)")
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .with_context(|| format!("{url}: resolving {authority} (host:port)"))?
        .next()
        .with_context(|| format!("{url}: {authority} resolves to no address"))?;
    Ok((addr, path.to_owned()))
}

impl Target {
    /// Every URL parsed, so that a typo fails before the first round.
    pub fn check(&self) -> anyhow::Result<()> {
        http_endpoint(&self.user_url)?;
        http_endpoint(&self.user_metrics)?;
        for m in &self.order_metrics {
            http_endpoint(m)?;
        }
        for a in self.order_rest.iter().chain(&self.order_grpc) {
            std::net::ToSocketAddrs::to_socket_addrs(a.as_str())
                .with_context(|| format!("resolving {a} (host:port)"))?;
        }
        Ok(())
    }

    /// What the report says of it.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "an already-running stack: user-service at {} (metrics {})",
            self.user_url, self.user_metrics
        );
        if !self.order_metrics.is_empty() {
            s.push_str(&format!(
                ", {} order-service replicas' metrics ({})",
                self.order_metrics.len(),
                self.order_metrics.join(", ")
            ));
        }
        s
    }
}
