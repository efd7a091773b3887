//! One direction of the path as a model, with no devices: what happens to a
//! packet of `len` bytes that arrives at time `now`. It waits behind the
//! packets before it at the rate cap (dropped when the queue is full), may
//! be lost on the way, and arrives after the one-way delay plus jitter.
//! Pure and seeded, so its behaviour is tested without root.

use std::time::{Duration, Instant};

use crate::rng::Rng;
use crate::spec::{Jitter, Link, Loss, Queue};

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Delivered at this instant.
    Deliver(Instant),
    /// Dropped at the tail of a full queue.
    QueueFull,
    /// Lost on the way (the loss model).
    Lost,
}

/// The state of one direction.
#[derive(Debug)]
pub struct Direction {
    link: Link,
    /// Losses and jitter draw from streams of their own: jitter on or off
    /// leaves which packets are lost as it was.
    loss_rng: Rng,
    jitter_rng: Rng,
    /// When the rate-capped link finishes sending what it holds.
    link_free: Option<Instant>,
    /// Gilbert–Elliott: in the bad (losing) state.
    bad: bool,
    /// The last delivery time handed out (no reordering: none goes earlier).
    last_release: Option<Instant>,
}

impl Direction {
    /// A direction drawing from `seed`'s streams `2 × stream` (losses) and
    /// `2 × stream + 1` (jitter): each direction of a path has its own
    /// `stream`.
    pub fn new(link: Link, seed: u64, stream: u64) -> Direction {
        Direction {
            link,
            loss_rng: Rng::stream(seed, 2 * stream),
            jitter_rng: Rng::stream(seed, 2 * stream + 1),
            link_free: None,
            bad: false,
            last_release: None,
        }
    }

    /// The bytes a queue of this kind holds at the link's rate.
    fn queue_bytes(&self, rate_bps: u64) -> u64 {
        match self.link.queue {
            Queue::Bytes(b) => b,
            Queue::Time(t) => (t.as_secs_f64() * rate_bps as f64 / 8.0) as u64,
        }
    }

    /// The fate of a packet of `len` bytes arriving at `now`.
    pub fn admit(&mut self, now: Instant, len: usize) -> Fate {
        // 1. The bottleneck: serialised at the rate behind what it holds.
        let sent = match self.link.rate_bps {
            None => now,
            Some(rate) => {
                let free = self.link_free.filter(|f| *f > now).unwrap_or(now);
                let backlog = free.duration_since(now).as_secs_f64() * rate as f64 / 8.0;
                if backlog + len as f64 > self.queue_bytes(rate) as f64 {
                    return Fate::QueueFull;
                }
                let end = free + Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
                self.link_free = Some(end);
                end
            }
        };
        // 2. The wire loses it (having used the bottleneck's time).
        if self.lost() {
            return Fate::Lost;
        }
        // 3. Propagation: the delay and its jitter.
        let mut at = sent + self.one_way();
        if !self.link.reorder {
            if let Some(last) = self.last_release {
                at = at.max(last);
            }
            self.last_release = Some(at);
        }
        Fate::Deliver(at)
    }

    fn lost(&mut self) -> bool {
        match self.link.loss {
            Loss::None => false,
            Loss::Random(p) => self.loss_rng.unit() < p,
            Loss::GilbertElliott { p, r } => {
                let u = self.loss_rng.unit();
                self.bad = if self.bad { u >= r } else { u < p };
                self.bad
            }
        }
    }

    fn one_way(&mut self) -> Duration {
        let d = self.link.delay.as_secs_f64();
        let j = match self.link.jitter {
            Jitter::None => 0.0,
            Jitter::Uniform(j) => (self.jitter_rng.unit() * 2.0 - 1.0) * j.as_secs_f64(),
            Jitter::Normal(j) => self.jitter_rng.normal() * j.as_secs_f64(),
        };
        Duration::from_secs_f64((d + j).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Link;

    fn link(s: &str) -> Link {
        s.parse().expect("spec")
    }

    #[test]
    fn a_packet_arrives_after_the_delay() {
        let mut d = Direction::new(link("delay=10ms"), 1, 0);
        let t = Instant::now();
        assert_eq!(
            d.admit(t, 100),
            Fate::Deliver(t + Duration::from_millis(10))
        );
    }

    #[test]
    fn the_rate_cap_serialises_and_the_queue_drops_at_its_tail() {
        // 8 Mbit/s: 1,000 bytes take 1 ms; the queue holds 3,000 bytes.
        let mut d = Direction::new(link("rate=8mbit queue=3000b"), 1, 0);
        let t = Instant::now();
        let fates: Vec<Fate> = (0..5).map(|_| d.admit(t, 1000)).collect();
        assert_eq!(fates[0], Fate::Deliver(t + Duration::from_millis(1)));
        assert_eq!(fates[2], Fate::Deliver(t + Duration::from_millis(3)));
        assert_eq!(fates[3], Fate::QueueFull);
        // Once the link has sent one, there is room again.
        assert_eq!(
            d.admit(t + Duration::from_millis(1), 1000),
            Fate::Deliver(t + Duration::from_millis(4))
        );
    }

    #[test]
    fn without_reordering_jitter_never_overtakes() {
        let mut d = Direction::new(link("delay=5ms jitter=4ms"), 7, 0);
        let t = Instant::now();
        let mut last = t;
        for i in 0..10_000u64 {
            let Fate::Deliver(at) = d.admit(t + Duration::from_micros(i * 10), 100) else {
                panic!("nothing is lost on this link")
            };
            assert!(at >= last);
            last = at;
        }
    }

    #[test]
    fn jitter_leaves_the_losses_as_they_were_and_seeds_draw_apart() {
        let lost = |spec: &str, seed: u64| -> Vec<bool> {
            let mut d = Direction::new(link(spec), seed, 0);
            let t = Instant::now();
            (0..2_000).map(|_| d.admit(t, 100) == Fate::Lost).collect()
        };
        let plain = lost("delay=5ms loss=5%", 11);
        assert_eq!(plain, lost("delay=5ms jitter=2ms loss=5%", 11));
        assert_ne!(plain, lost("delay=5ms loss=5%", 12));
        // The other direction of the same seed draws its own.
        let mut other = Direction::new(link("delay=5ms loss=5%"), 11, 1);
        let t = Instant::now();
        let theirs: Vec<bool> = (0..2_000)
            .map(|_| other.admit(t, 100) == Fate::Lost)
            .collect();
        assert_ne!(plain, theirs);
    }

    #[test]
    fn gilbert_elliott_loses_p_over_p_plus_r_in_bursts_of_one_over_r() {
        let mut d = Direction::new(link("loss=ge:2%,25%"), 3, 0);
        let t = Instant::now();
        let lost: Vec<bool> = (0..200_000)
            .map(|_| d.admit(t, 100) == Fate::Lost)
            .collect();
        let rate = lost.iter().filter(|l| **l).count() as f64 / lost.len() as f64;
        let expected = 0.02 / 0.27;
        assert!((rate - expected).abs() < 0.01, "{rate} vs {expected}");
        let bursts = lost.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
        let mean_burst = lost.iter().filter(|l| **l).count() as f64 / bursts;
        assert!((mean_burst - 4.0).abs() < 0.4, "mean burst {mean_burst}");
    }
}
