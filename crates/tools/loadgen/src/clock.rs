//! Time as the engine keeps it: nanoseconds of `CLOCK_MONOTONIC` (the clock
//! `std::time::Instant` reads on Linux), and a timer that wakes the event
//! loop at an absolute time of that clock to the microsecond.
//!
//! Tokio's own timer rounds every sleep up to the next millisecond. At
//! 10,000 requests a second the open loop's requests are 100 µs apart, so a
//! schedule kept with it would send them in bursts up to a millisecond late,
//! and that lateness, counted from each request's intended time, would be
//! measured as the services' latency. A `timerfd` armed at the due time is
//! an `hrtimer`: the kernel makes it readable within microseconds of it, and
//! Tokio's event loop wakes on it like on any socket.

use std::os::fd::{AsFd as _, AsRawFd, RawFd};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::time::{ClockId as TimeClock, clock_gettime};
use tokio::io::unix::AsyncFd;

/// Nanoseconds of `CLOCK_MONOTONIC`.
pub fn now_ns() -> u64 {
    let t = clock_gettime(TimeClock::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always there");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// A timerfd, for [`AsyncFd`] (which wants a raw fd).
struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A one-shot timer on `CLOCK_MONOTONIC`, armed at absolute times.
pub struct Timer {
    fd: AsyncFd<Fd>,
}

impl Timer {
    /// A timer registered with the current Tokio runtime's event loop.
    pub fn new() -> anyhow::Result<Timer> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        // `AsyncFd::new` is deprecated because a `T` that merely borrows
        // its fd could close it while it is registered; `Fd` owns its
        // timerfd, and `AsyncFd` deregisters it before dropping it. The
        // replacement, `AsyncFd::register`, is `unsafe`, which this
        // workspace forbids.
        #[allow(deprecated)]
        let fd = AsyncFd::new(Fd(fd))?;
        Ok(Timer { fd })
    }

    /// Waits until [`now_ns`] reaches `at_ns` (at once if it has).
    pub async fn sleep_until(&self, at_ns: u64) -> anyhow::Result<()> {
        if now_ns() >= at_ns {
            return Ok(());
        }
        let at = TimeSpec::new(
            (at_ns / 1_000_000_000) as i64,
            (at_ns % 1_000_000_000) as i64,
        );
        self.fd.get_ref().0.set(
            Expiration::OneShot(at),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )?;
        loop {
            let mut ready = self.fd.readable().await?;
            // Reading the expiry count clears it; EAGAIN means not yet.
            match ready.try_io(|fd| fd.get_ref().0.wait().map_err(std::io::Error::from)) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => return Err(e.into()),
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timer_wakes_at_its_time_not_at_the_next_millisecond() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let timer = Timer::new().expect("timerfd");
            // 200 sleeps of 250 µs: a timer that rounds up to the next
            // millisecond, as Tokio's does, would wake every one of them at
            // least 750 µs late. Waking early would be a bug whatever the
            // machine does.
            let mut late = Vec::new();
            for _ in 0..200 {
                let at = now_ns() + 250_000;
                timer.sleep_until(at).await.expect("sleeps");
                let woke = now_ns();
                assert!(woke >= at, "woke {} ns early", at - woke);
                late.push(woke - at);
            }
            // A busy machine makes some wakes late, never all of them.
            let least = late.iter().min().copied().unwrap_or(u64::MAX);
            assert!(least < 500_000, "every wake at least {least} ns late");
        });
    }
}
