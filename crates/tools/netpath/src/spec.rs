//! What a path is asked to be, and the one-line errors for settings it
//! cannot be: a [`Link`] per direction (parsed from `key=value` words),
//! the path's MTU and its TCP congestion control. Everything is checked
//! before a namespace or device is made.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Jitter added to each packet's one-way delay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "distribution", content = "ms", rename_all = "kebab-case")]
pub enum Jitter {
    None,
    /// Uniform in ±j.
    Uniform(#[serde(serialize_with = "ms")] Duration),
    /// Normal with standard deviation j (a delay below zero is taken as zero).
    Normal(#[serde(serialize_with = "ms")] Duration),
}

/// How a direction loses packets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "model", rename_all = "kebab-case")]
pub enum Loss {
    None,
    /// Each packet independently, with this probability (Bernoulli).
    Random(f64),
    /// Gilbert–Elliott with a lossless good state and a losing bad one:
    /// `p` the chance per packet of going bad, `r` of coming back. Mean loss
    /// p/(p+r), mean burst 1/r packets.
    GilbertElliott {
        p: f64,
        r: f64,
    },
}

impl Loss {
    /// The long-run fraction of packets lost.
    pub fn mean(self) -> f64 {
        match self {
            Loss::None => 0.0,
            Loss::Random(p) => p,
            Loss::GilbertElliott { p, r } => p / (p + r),
        }
    }
}

/// The drop-tail queue in front of a rate cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Queue {
    Bytes(u64),
    /// What the cap sends in this time (a bufferbloat setting).
    Time(#[serde(serialize_with = "ms")] Duration),
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// One direction of the path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    #[serde(rename = "delay_ms", serialize_with = "ms")]
    pub delay: Duration,
    pub jitter: Jitter,
    /// Jitter may reorder packets; off, a packet never leaves before the
    /// one ahead of it (which lengthens some delays).
    pub reorder: bool,
    pub loss: Loss,
    /// The cap in bits per second; `None`: as fast as the emulator forwards.
    pub rate_bps: Option<u64>,
    pub queue: Queue,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            delay: Duration::ZERO,
            jitter: Jitter::None,
            reorder: false,
            loss: Loss::None,
            rate_bps: None,
            queue: Queue::Time(Duration::from_millis(50)),
        }
    }
}

/// A setting the path cannot take, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSetting(pub String);

impl fmt::Display for BadSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadSetting {}

fn bad(msg: impl Into<String>) -> BadSetting {
    BadSetting(msg.into())
}

/// `10ms`, `250us`, `1.5s`; a bare number is milliseconds.
pub fn parse_duration(key: &str, v: &str) -> Result<Duration, BadSetting> {
    let (num, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else {
        (v, 1e-3)
    };
    let x: f64 = num.trim().parse().map_err(|_| {
        bad(format!(
            "{key}={v}: not a duration (say 10ms, 250us or 1.5s)"
        ))
    })?;
    if !x.is_finite() || x < 0.0 {
        return Err(bad(format!("{key}={v}: a duration cannot be negative")));
    }
    if x * scale > 60.0 {
        return Err(bad(format!("{key}={v}: more than 60 s")));
    }
    Ok(Duration::from_secs_f64(x * scale))
}

/// `1%`, `0.1%` or a fraction `0.01`, within 0–100%.
fn parse_fraction(key: &str, v: &str) -> Result<f64, BadSetting> {
    let x = match v.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => v.trim().parse::<f64>(),
    }
    .map_err(|_| bad(format!("{key}={v}: not a percentage (say 1% or 0.1%)")))?;
    if !(0.0..=1.0).contains(&x) {
        return Err(bad(format!("{key}={v}: loss must be within 0–100%")));
    }
    Ok(x)
}

/// `50mbit`, `800kbit`, `1gbit`, `100000bit`.
fn parse_rate(v: &str) -> Result<u64, BadSetting> {
    let lower = v.to_ascii_lowercase();
    let (num, scale) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(s, m)| lower.strip_suffix(s).map(|n| (n.to_owned(), *m)))
        .ok_or_else(|| bad(format!("rate={v}: say 50mbit, 800kbit or 1gbit")))?;
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| bad(format!("rate={v}: not a number of bits per second")))?;
    let bps = x * scale;
    if !bps.is_finite() || bps < 8_000.0 {
        return Err(bad(format!(
            "rate={v}: a rate must be at least 8kbit (0 would carry nothing)"
        )));
    }
    Ok(bps as u64)
}

impl FromStr for Link {
    type Err = BadSetting;

    /// Space- or comma-separated `key=value` words: `delay=10ms
    /// jitter=1ms dist=normal reorder loss=1% rate=50mbit queue=50ms`;
    /// `loss=ge:P,R` is Gilbert–Elliott. An empty string is a plain link.
    fn from_str(s: &str) -> Result<Link, BadSetting> {
        let mut link = Link::default();
        let mut jitter = None;
        let mut dist = "uniform".to_owned();
        for word in s.split_whitespace() {
            let (k, v) = word.split_once('=').unwrap_or((word, ""));
            match k {
                "delay" => link.delay = parse_duration(k, v)?,
                "jitter" => jitter = Some(parse_duration(k, v)?),
                "dist" => dist = v.to_owned(),
                "reorder" => link.reorder = true,
                "loss" => {
                    link.loss = match v.strip_prefix("ge:") {
                        Some(pr) => {
                            let (p, r) = pr.split_once(',').ok_or_else(|| {
                                bad(format!(
                                    "loss={v}: Gilbert–Elliott is ge:P,R (say ge:1%,30%)"
                                ))
                            })?;
                            let (p, r) = (parse_fraction(k, p)?, parse_fraction(k, r)?);
                            if r == 0.0 {
                                return Err(bad(format!(
                                    "loss={v}: R (the chance of leaving the bad state) cannot be 0"
                                )));
                            }
                            Loss::GilbertElliott { p, r }
                        }
                        None => match parse_fraction(k, v)? {
                            0.0 => Loss::None,
                            p => Loss::Random(p),
                        },
                    }
                }
                "rate" => link.rate_bps = Some(parse_rate(v)?),
                "queue" => {
                    link.queue = match v.to_ascii_lowercase().strip_suffix('b') {
                        Some(n) if !n.ends_with('m') && !n.ends_with('u') => {
                            let (num, scale) = match n.strip_suffix('k') {
                                Some(k) => (k, 1024),
                                None => (n, 1),
                            };
                            Queue::Bytes(
                                num.parse::<u64>().map_err(|_| {
                                    bad(format!("queue={v}: say 64kb, 3000b or 50ms"))
                                })? * scale,
                            )
                        }
                        _ => Queue::Time(parse_duration(k, v)?),
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "{word}: unknown setting (delay, jitter, dist, reorder, loss, rate, queue)"
                    )));
                }
            }
        }
        link.jitter = match (jitter, dist.as_str()) {
            (None | Some(Duration::ZERO), "uniform" | "normal") => Jitter::None,
            (Some(j), "uniform") => Jitter::Uniform(j),
            (Some(j), "normal") => Jitter::Normal(j),
            (_, other) => {
                return Err(bad(format!(
                    "dist={other}: unknown jitter distribution (uniform or normal)"
                )));
            }
        };
        Ok(link)
    }
}

/// The kernel's TCP congestion control on both ends of the path, applied to
/// the path's routes (`congctl`), so nothing host-wide changes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum CongestionControl {
    /// Linux's own default, and what most servers run.
    #[default]
    Cubic,
    Bbr,
    Reno,
}

impl CongestionControl {
    pub const ALL: [CongestionControl; 3] = [
        CongestionControl::Cubic,
        CongestionControl::Bbr,
        CongestionControl::Reno,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CongestionControl::Cubic => "cubic",
            CongestionControl::Bbr => "bbr",
            CongestionControl::Reno => "reno",
        }
    }
}

impl FromStr for CongestionControl {
    type Err = BadSetting;
    fn from_str(s: &str) -> Result<Self, BadSetting> {
        CongestionControl::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                bad(format!(
                    "cc={s}: unknown congestion control (cubic, bbr or reno)"
                ))
            })
    }
}

impl fmt::Display for CongestionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A whole path: side A to side B and back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PathConfig {
    pub a_to_b: Link,
    pub b_to_a: Link,
    /// Of both TUN devices, bytes.
    pub mtu: u16,
    pub cc: CongestionControl,
    /// Of the loss and jitter draws: each direction's losses and its jitter
    /// draw from streams of their own ([`crate::link::Direction::new`]).
    pub seed: u64,
}

impl Default for PathConfig {
    fn default() -> PathConfig {
        PathConfig {
            a_to_b: Link::default(),
            b_to_a: Link::default(),
            mtu: 1500,
            cc: CongestionControl::Cubic,
            seed: 1,
        }
    }
}

impl PathConfig {
    /// The same link both ways.
    pub fn symmetric(link: Link) -> PathConfig {
        PathConfig {
            a_to_b: link,
            b_to_a: link,
            ..PathConfig::default()
        }
    }

    /// The settings that parse but cannot work together.
    pub fn check(&self) -> Result<(), BadSetting> {
        if !(576..=9000).contains(&self.mtu) {
            return Err(bad(format!("mtu={}: must be within 576–9000", self.mtu)));
        }
        for (name, l) in [("a-to-b", &self.a_to_b), ("b-to-a", &self.b_to_a)] {
            if let Some(rate) = l.rate_bps {
                let bytes = match l.queue {
                    Queue::Bytes(b) => b,
                    Queue::Time(t) => (t.as_secs_f64() * rate as f64 / 8.0) as u64,
                };
                if bytes < u64::from(self.mtu) {
                    return Err(bad(format!(
                        "{name} queue: {bytes} bytes is smaller than one {}-byte packet",
                        self.mtu
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_reads_every_setting() {
        let l: Link = "delay=10ms jitter=1ms dist=normal loss=1% rate=50mbit queue=64kb"
            .parse()
            .unwrap();
        assert_eq!(l.delay, Duration::from_millis(10));
        assert_eq!(l.jitter, Jitter::Normal(Duration::from_millis(1)));
        assert_eq!(l.loss, Loss::Random(0.01));
        assert_eq!(l.rate_bps, Some(50_000_000));
        assert_eq!(l.queue, Queue::Bytes(65536));
        let ge: Link = "loss=ge:1%,30% queue=20ms".parse().unwrap();
        assert_eq!(ge.loss, Loss::GilbertElliott { p: 0.01, r: 0.3 });
        assert_eq!(ge.queue, Queue::Time(Duration::from_millis(20)));
    }

    #[test]
    fn bad_settings_are_named_in_one_line() {
        for (spec, names) in [
            ("delay=-5ms", "delay=-5ms"),
            ("loss=120%", "loss=120%"),
            ("loss=-1%", "loss=-1%"),
            ("rate=0mbit", "rate=0mbit"),
            ("jitter=1ms dist=pareto", "dist=pareto"),
            ("speed=10", "speed=10"),
        ] {
            let e = spec.parse::<Link>().expect_err(spec).to_string();
            assert!(e.starts_with(names), "{spec}: {e}");
            assert!(!e.contains('\n'));
        }
        let tiny = PathConfig::symmetric("rate=10mbit queue=1000b".parse().unwrap());
        let e = tiny.check().expect_err("a queue under one MTU").to_string();
        assert!(e.contains("smaller than one 1500-byte packet"), "{e}");
        assert!("vegas".parse::<CongestionControl>().is_err());
    }
}
