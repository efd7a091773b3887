//! A cell's packet path ([`netpath`]): user-service in namespace A,
//! order-service in namespace B, the kernels' own TCP between them through
//! the emulator in this process. The lab reaches each service over its
//! namespace's control link (no emulation), k6 reaches user-service the
//! same way, and each service reaches the host's Postgres through a relay
//! inside its namespace, so only the call from user-service to
//! order-service crosses the path.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path as FsPath;

use anyhow::Context as _;
use netpath::{Path, PathConfig, Relay, Side};

use crate::measure::cell::PacketPath;

/// The path of a round and what hangs on it.
pub struct OnPath {
    pub path: Path,
    /// One per service with a database: inside its namespace, to the host.
    relays: Vec<Relay>,
    /// Each side's TCP as the kernel reports it (congestion control on a
    /// socket across the path, slow start after idle, initial window).
    pub facts: [netpath::TcpFacts; 2],
}

impl std::fmt::Debug for OnPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnPath").field("path", &self.path).finish()
    }
}

/// A seed no round before drew: from the hasher keys the standard library
/// takes from the operating system's randomness once per thread and steps
/// for every hasher after, mixed with the time.
pub fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Why this machine cannot run cells on a packet path, or `None`.
pub fn unavailable() -> Option<String> {
    netpath::ns::unavailable()
}

impl OnPath {
    /// Brings the path of `p` up, checked (the congestion control asked
    /// for is what a socket across it runs), drawing from `seed` (`--seed`)
    /// or, without one, from a [`fresh_seed`].
    pub fn up(p: &PacketPath, seed: Option<u64>) -> anyhow::Result<OnPath> {
        let seed = seed.unwrap_or_else(fresh_seed);
        let link = p.link();
        let config = PathConfig {
            a_to_b: link,
            b_to_a: link,
            mtu: 1500,
            cc: p.cc,
            seed,
        };
        let path = Path::up(&config).context("bringing the packet path up")?;
        let facts = [path.tcp_facts(Side::A)?, path.tcp_facts(Side::B)?];
        Ok(OnPath {
            path,
            relays: Vec::new(),
            facts,
        })
    }

    /// The namespace of user-service (A) or order-service (B).
    pub fn ns(&self, side: Side) -> &str {
        self.path.ns(side)
    }

    /// `url` as a service inside `side` dials it: through a relay on that
    /// namespace's loopback to the database's own address.
    pub fn database_url(&mut self, side: Side, url: &str) -> anyhow::Result<String> {
        let at = super::postgres::authority(url);
        let with_port = if at.contains(':') {
            at.to_owned()
        } else {
            format!("{at}:5432")
        };
        let target: SocketAddr = with_port
            .to_socket_addrs()
            .with_context(|| format!("resolving {with_port}"))?
            .next()
            .with_context(|| format!("{with_port} resolves to no address"))?;
        let relay = self.path.relay_to_host(
            side,
            SocketAddr::from(([127, 0, 0, 1], target.port())),
            target,
        )?;
        let inside = relay.local_addr();
        self.relays.push(relay);
        Ok(url.replacen(at, &inside.to_string(), 1))
    }

    /// What run.json and the round files state about the path: each side's
    /// TCP, read back from the kernel.
    pub fn stated(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for (side, f) in [
            ("user-service side", &self.facts[0]),
            ("order-service side", &self.facts[1]),
        ] {
            m.insert(
                format!("path {side} tcp_congestion_control"),
                f.congestion_control.clone(),
            );
            m.insert(
                format!("path {side} tcp_slow_start_after_idle"),
                u8::from(f.slow_start_after_idle).to_string(),
            );
            m.insert(format!("path {side} initcwnd"), f.initcwnd.to_string());
        }
        m
    }
}

/// TCP segments a process's namespace retransmitted so far
/// (`RetransSegs` of /proc/PID/net/snmp: every socket of the namespace,
/// which on a packet path is the service's own).
pub fn retransmitted(pid: u32) -> anyhow::Result<u64> {
    let file = FsPath::new("/proc").join(pid.to_string()).join("net/snmp");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    parse_retrans(&text).with_context(|| format!("{} has no Tcp RetransSegs", file.display()))
}

fn parse_retrans(snmp: &str) -> Option<u64> {
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let names = tcp.next()?;
    let values = tcp.next()?;
    let i = names.split_whitespace().position(|n| n == "RetransSegs")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retransmissions_are_read_from_the_tcp_lines() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RtoMin RetransSegs InErrs\nTcp: 1 200 37 0\nUdp: InDatagrams\nUdp: 5\n";
        assert_eq!(parse_retrans(snmp), Some(37));
        assert_eq!(parse_retrans("Ip: x\nIp: 1\n"), None);
        // This process's own namespace has the line too.
        assert!(retransmitted(std::process::id()).is_ok());
    }
}
