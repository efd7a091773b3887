//! Latencies in HDR histograms: user-service's record of each transport's
//! good upstream calls (served at `/metrics/hdr`), which the lab reads after
//! each round, merges and draws. Next to the Prometheus histogram's few
//! buckets it keeps every value: microseconds from 1 µs to an hour, 3
//! significant digits (each value within 0.1%), so every percentile up to
//! the largest call is there, not only those a bucket boundary sits on.
//!
//! Two forms go out: HdrHistogram's compressed V2 encoding in base64 (what
//! its log files hold and its tools read, [`encode`] / [`decode`]), and the
//! percentile distribution its plotter reads ([`percentile_distribution`],
//! the `.hgrm` form wrk2 prints).

use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};

/// The longest call kept as itself, in microseconds (an hour); longer ones
/// are kept as this.
const HIGHEST_US: u64 = 3_600_000_000;

/// One transport's histogram of good calls, in microseconds.
#[derive(Debug)]
pub struct Recorder(Mutex<Histogram<u64>>);

impl Default for Recorder {
    fn default() -> Self {
        Recorder(Mutex::new(empty()))
    }
}

impl Recorder {
    /// Records one good call's time.
    pub fn record(&self, elapsed: Duration) {
        let us = (elapsed.as_micros() as u64).clamp(1, HIGHEST_US);
        self.lock().saturating_record(us);
    }

    /// A copy of the histogram, emptied if `reset`.
    pub fn take(&self, reset: bool) -> Histogram<u64> {
        let mut h = self.lock();
        if reset {
            std::mem::replace(&mut *h, empty())
        } else {
            h.clone()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histogram<u64>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A histogram from [`encode`]'s form.
pub fn decode(text: &str) -> anyhow::Result<Histogram<u64>> {
    use base64::Engine as _;
    use hdrhistogram::serialization::Deserializer;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim())?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| anyhow::anyhow!("not an HdrHistogram V2 encoding: {e:?}"))
}

/// An empty histogram of the bounds [`Recorder`] keeps (a merge's start).
pub fn empty() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_US, 3).expect("valid bounds")
}

/// `h` in HdrHistogram's compressed V2 form, base64 (`HISTFAAA…`).
pub fn encode(h: &Histogram<u64>) -> String {
    use base64::Engine as _;
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("a histogram serializes into memory");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `h`'s percentile distribution as HdrHistogram's
/// `outputPercentileDistribution` writes it (the `.hgrm` form its plotter
/// and wrk2 users read), values in milliseconds, 5 ticks per half distance.
pub fn percentile_distribution(h: &Histogram<u64>) -> String {
    use std::fmt::Write as _;
    let ms = |us: u64| us as f64 / 1000.0;
    let mut out = String::from("       Value     Percentile TotalCount 1/(1-Percentile)\n\n");
    let total = h.len();
    let mut count = 0;
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        count += v.count_since_last_iteration();
        if q < 1.0 {
            let _ = writeln!(
                out,
                "{:12.3} {:14.12} {:10} {:14.2}",
                ms(v.value_iterated_to()),
                q,
                count,
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(
                out,
                "{:12.3} {:14.12} {:10}",
                ms(v.value_iterated_to()),
                q,
                count
            );
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean() / 1000.0,
        h.stdev() / 1000.0
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        ms(h.max()),
        total
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        // HdrHistogram's sub-bucket count: 2 × 10^digits, up to a power of 2.
        1u64 << (2.0 * 10f64.powi(i32::from(h.sigfig()))).log2().ceil() as u32
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_with_reset_empties_and_keeps_every_value() {
        let r = Recorder::default();
        for us in [100, 200, 300, 5_000_000] {
            r.record(Duration::from_micros(us));
        }
        let h = r.take(false);
        assert_eq!(h.len(), 4);
        assert_eq!(r.take(true).len(), 4);
        assert_eq!(r.take(false).len(), 0);
        // Within 3 significant digits.
        assert!((4_995_000..=5_005_000).contains(&h.max()), "{}", h.max());
        assert_eq!(h.value_at_quantile(0.5), 200);
    }

    #[test]
    fn the_encoded_form_decodes_to_the_same_histogram() {
        let r = Recorder::default();
        for us in 1..=1000 {
            r.record(Duration::from_micros(us * 7));
        }
        let h = r.take(false);
        let text = encode(&h);
        assert!(text.starts_with("HISTF"), "{text}");
        assert_eq!(decode(&text).unwrap(), h);
        assert!(decode("not base64!").is_err());
        assert!(decode("aGVsbG8=").is_err());
    }

    #[test]
    fn the_distribution_ends_at_the_largest_value_with_the_total_count() {
        let r = Recorder::default();
        for us in 1..=10_000 {
            r.record(Duration::from_micros(us));
        }
        let text = percentile_distribution(&r.take(false));
        let rows: Vec<Vec<f64>> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .skip(1)
            .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
            .collect();
        let last = rows.last().unwrap();
        assert!((last[0] - 10.0).abs() < 0.01, "{last:?}");
        assert_eq!(last[1], 1.0);
        assert_eq!(last[2], 10_000.0);
        let median = rows.iter().find(|r| r[1] >= 0.5).unwrap();
        assert!((median[0] - 5.0).abs() < 0.01, "{median:?}");
        assert!(text.contains("Total count    =        10000"), "{text}");
    }
}
