//! A stall of order-service during a measured run ([`Env::stall_ms`]):
//! stopped with SIGSTOP halfway through the load, continued with SIGCONT
//! the stall's length later, from a thread of its own while k6 runs. The
//! load's start is seen, not assumed (k6 makes its VUs first): the thread
//! waits for user-service's count of upstream calls to move.
//!
//! [`Env::stall_ms`]: crate::measure::cell::Env::stall_ms

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::scrape::load_began;

/// A stall on its way; [`Stall::finish`] waits for its end.
pub(super) struct Stall(JoinHandle<anyhow::Result<Duration>>);

impl Stall {
    /// Stops process `pid` `after` the load began (the calls over `via`
    /// counted at user-service's `metrics` moved), for `length`.
    pub(super) fn start(
        pid: u32,
        (metrics, via): ((SocketAddr, String), String),
        after: Duration,
        length: Duration,
    ) -> Stall {
        Stall(std::thread::spawn(move || {
            let pid = Pid::from_raw(i32::try_from(pid).context("a process id")?);
            load_began(&metrics, &via, "stall", || false)?;
            std::thread::sleep(after);
            kill(pid, Signal::SIGSTOP).context("stopping order-service for the stall")?;
            let stopped = Instant::now();
            std::thread::sleep(length);
            // Continued however the sleep went: a process left stopped
            // would fail every later round.
            let cont = kill(pid, Signal::SIGCONT);
            let lasted = stopped.elapsed();
            cont.context("continuing order-service after the stall")?;
            Ok(lasted)
        }))
    }

    /// How long the process was stopped, once it runs again.
    pub(super) fn finish(self) -> anyhow::Result<Duration> {
        self.0
            .join()
            .map_err(|_| anyhow::anyhow!("the stall's thread panicked"))?
    }
}
