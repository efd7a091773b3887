//! A small seeded generator (SplitMix64): the path's losses and jitter are
//! repeatable from a seed, and no dependency is needed for it.

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of stream `stream` of `seed`: streams of one seed
    /// (a direction's losses, its jitter, the other direction's) draw
    /// apart, so turning one on or off leaves the others' draws as they were.
    pub fn stream(seed: u64, stream: u64) -> Rng {
        Rng(Rng(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03)).next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn streams_of_one_seed_differ_and_repeat() {
        let draw = |mut r: Rng| (0..4).map(|_| r.next_u64()).collect::<Vec<_>>();
        assert_eq!(draw(Rng::stream(7, 1)), draw(Rng::stream(7, 1)));
        assert_ne!(draw(Rng::stream(7, 1)), draw(Rng::stream(7, 2)));
        assert_ne!(draw(Rng::stream(7, 1)), draw(Rng::stream(8, 1)));
    }
}
