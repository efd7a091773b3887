//! What the runner reads from the services' `/metrics` during a round:
//! user-service's counters of a transport (and the load's start, seen as
//! they move), and a replica's own counters.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::measure::prom;

/// user-service's counters of transport `via`, from its `metrics`.
pub(super) fn upstream_now(
    (addr, path): &(SocketAddr, String),
    via: &str,
) -> anyhow::Result<prom::Upstream> {
    let r = crate::measure::http::get(*addr, path, Duration::from_secs(5))?;
    let text = String::from_utf8_lossy(&r.body);
    prom::Upstream::of(&prom::parse(&text)?, via)
}

/// Waits until user-service's count of calls over `via` moves: the load
/// began (k6 makes its VUs first). Gives up after 30 s, or when `ended`
/// says the load is over; `what` names what waited, for the error.
pub(super) fn load_began(
    metrics: &(SocketAddr, String),
    via: &str,
    what: &str,
    ended: impl Fn() -> bool,
) -> anyhow::Result<()> {
    let before = upstream_now(metrics, via)?.calls;
    let waiting = Instant::now();
    while upstream_now(metrics, via)?.calls <= before {
        anyhow::ensure!(
            waiting.elapsed() < Duration::from_secs(30),
            "the load did not begin within 30 s: no {what}"
        );
        anyhow::ensure!(
            !ended(),
            "the load ended before it was seen to begin: no {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// One replica's counters, from its own /metrics.
pub(super) fn replica(rest: SocketAddr, path: &str) -> anyhow::Result<prom::ReplicaCounters> {
    let r = crate::measure::http::get(rest, path, Duration::from_secs(5))
        .with_context(|| format!("scraping the order-service replica at {rest}"))?;
    if r.status != 200 {
        bail!(
            "the order-service replica at {rest} answered /metrics with {}",
            r.status
        );
    }
    Ok(prom::ReplicaCounters::of(&prom::parse(
        &String::from_utf8_lossy(&r.body),
    )?))
}
