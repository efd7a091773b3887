//! The typed value of a table cell: what `report.json` holds and what
//! `report.md` and `report.html` render, so that both renderings and every
//! program reading the JSON see the same numbers. A cell is a label, a
//! figure (median, min and max with its unit), a ratio with its 95% rerun
//! interval, a flag with its reason, n/a with its reason, or several of
//! these side by side.

use serde::{Deserialize, Serialize};

use crate::report::format as f;
use crate::stats::Spread;

/// Why a figure is missing when nothing more precise is known.
pub const NO_ROUND: &str = "no round of this cell has this figure";
/// Why a ratio is missing when nothing more precise is known.
pub const NO_PAIR: &str = "the two cells share no round with both figures";

/// One table cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Value {
    /// A label or a phrase.
    Text { text: String },
    /// A figure over rounds: the median with the lowest and highest round
    /// (or, for a benchmark of one round, its own confidence interval).
    Figure {
        median: f64,
        min: f64,
        max: f64,
        unit: String,
        #[serde(default)]
        form: Form,
    },
    /// A ratio computed round by round: its median and 95% rerun interval.
    Ratio { median: f64, low: f64, high: f64 },
    /// The baseline a row's ratios are relative to (×1 by definition).
    Baseline,
    /// Something to read with care, and why.
    Flag { reason: String },
    /// No value, and why.
    Missing { reason: String },
    /// Several values in one cell, rendered side by side.
    Parts { parts: Vec<Value> },
}

/// How a figure is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Form {
    /// `median (min–max)`.
    #[default]
    Range,
    /// `median ±x%` (half the range, relative): wide tables.
    PlusMinus,
    /// `+median (+min to +max)`: a difference.
    Signed,
    /// A fraction written as a percentage.
    Share,
    /// Nanoseconds written in the unit that suits them, `±x%`.
    Time,
}

impl Value {
    pub fn text(s: impl Into<String>) -> Value {
        Value::Text { text: s.into() }
    }

    pub fn missing(reason: impl Into<String>) -> Value {
        Value::Missing {
            reason: reason.into(),
        }
    }

    /// A figure in a form, or n/a ([`NO_ROUND`]).
    pub fn figure(s: Option<Spread>, unit: &str, form: Form) -> Value {
        match s {
            None => Value::missing(NO_ROUND),
            Some(s) => Value::Figure {
                median: s.median,
                min: s.min,
                max: s.max,
                unit: unit.to_owned(),
                form,
            },
        }
    }

    /// `median (min–max)`.
    pub fn range(s: Option<Spread>, unit: &str) -> Value {
        Value::figure(s, unit, Form::Range)
    }

    /// `median ±x%`.
    pub fn pm(s: Option<Spread>, unit: &str) -> Value {
        Value::figure(s, unit, Form::PlusMinus)
    }

    /// A signed difference.
    pub fn signed(s: Option<Spread>, unit: &str) -> Value {
        Value::figure(s, unit, Form::Signed)
    }

    /// A fraction, written as a percentage.
    pub fn share(s: Option<Spread>) -> Value {
        Value::figure(s, "fraction", Form::Share)
    }

    /// One number with no spread.
    pub fn single(v: f64, unit: &str) -> Value {
        Value::range(Some(Spread::single(v)), unit)
    }

    /// A ratio with its interval, or n/a ([`NO_PAIR`]).
    pub fn ratio(s: Option<Spread>) -> Value {
        match s {
            None => Value::missing(NO_PAIR),
            Some(s) => Value::Ratio {
                median: s.median,
                low: s.min,
                high: s.max,
            },
        }
    }

    pub fn parts(parts: Vec<Value>) -> Value {
        Value::Parts { parts }
    }

    /// Whether the value (or a part of it) is missing or blank.
    pub fn is_empty(&self) -> bool {
        match self {
            Value::Missing { .. } => true,
            Value::Text { text } => text.trim().is_empty() || text.contains(f::MISSING),
            Value::Parts { parts } => parts.is_empty() || parts.iter().any(Value::is_empty),
            _ => false,
        }
    }

    /// The reasons of every missing part.
    pub fn missing_reasons(&self) -> Vec<&str> {
        match self {
            Value::Missing { reason } => vec![reason.as_str()],
            Value::Parts { parts } => parts.iter().flat_map(Value::missing_reasons).collect(),
            _ => Vec::new(),
        }
    }

    /// Every ratio in the cell, in order: (median, low, high).
    pub fn ratios(&self) -> Vec<(f64, f64, f64)> {
        match self {
            Value::Ratio { median, low, high } => vec![(*median, *low, *high)],
            Value::Parts { parts } => parts.iter().flat_map(Value::ratios).collect(),
            _ => Vec::new(),
        }
    }

    /// The text of a label cell ("" for any other value).
    pub fn label(&self) -> &str {
        match self {
            Value::Text { text } => text,
            _ => "",
        }
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::text(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::text(s)
    }
}

fn spread(median: f64, min: f64, max: f64) -> Spread {
    Spread {
        median,
        min,
        max,
        q1: median,
        q3: median,
        n: 0,
    }
}

/// A duration in nanoseconds, in the unit that suits it.
pub fn time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{} ms", f::num(ns / 1e6))
    } else if ns >= 1e3 {
        format!("{} µs", f::num(ns / 1e3))
    } else {
        format!("{} ns", f::num(ns))
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Text { text } => out.write_str(text),
            Value::Figure {
                median,
                min,
                max,
                form,
                ..
            } => {
                let s = Some(spread(*median, *min, *max));
                match form {
                    Form::Range => out.write_str(&f::range(s)),
                    Form::PlusMinus => out.write_str(&f::pm(s)),
                    Form::Signed => out.write_str(&f::signed(s)),
                    Form::Share => out.write_str(&f::percent(s)),
                    Form::Time => {
                        let half = spread(*median, *min, *max).relative_half_range() * 100.0;
                        if half.is_finite() && half >= 0.5 {
                            write!(out, "{} ±{half:.0}%", time(*median))
                        } else {
                            out.write_str(&time(*median))
                        }
                    }
                }
            }
            Value::Ratio { median, low, high } => {
                out.write_str(&f::ratio(Some(spread(*median, *low, *high))))
            }
            Value::Baseline => out.write_str("×1"),
            Value::Flag { reason } => out.write_str(reason),
            Value::Missing { .. } => out.write_str(f::MISSING),
            Value::Parts { parts } => {
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        out.write_str(" · ")?;
                    }
                    write!(out, "{p}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(v: &[f64]) -> Option<Spread> {
        Spread::of(v)
    }

    #[test]
    fn values_render_as_the_report_writes_them() {
        assert_eq!(
            Value::range(sp(&[100.0, 120.0, 110.0]), "req/s").to_string(),
            "110 (100–120)"
        );
        assert_eq!(Value::pm(sp(&[90.0, 110.0]), "µs").to_string(), "100 ±10%");
        assert_eq!(
            Value::parts(vec![
                Value::range(sp(&[5.0, 5.0]), "ms"),
                Value::ratio(sp(&[1.5, 1.6])),
            ])
            .to_string(),
            "5.00 · ×1.55 (1.50–1.60)"
        );
        assert_eq!(Value::share(sp(&[0.25, 0.35])).to_string(), "30% (25%–35%)");
        assert_eq!(Value::Baseline.to_string(), "×1");
        let t = Value::figure(sp(&[4000.0, 4400.0]), "ns", Form::Time);
        assert_eq!(t.to_string(), "4.20 µs ±5%");
        assert_eq!(Value::range(None, "ms").to_string(), f::MISSING);
    }

    #[test]
    fn missing_values_keep_their_reason_through_json() {
        let v = Value::parts(vec![Value::range(None, "ms"), Value::ratio(None)]);
        assert!(v.is_empty());
        assert_eq!(v.missing_reasons(), vec![NO_ROUND, NO_PAIR]);
        let json = serde_json::to_string(&v).expect("serialises");
        assert!(json.contains(r#""kind":"missing""#), "{json}");
        let back: Value = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back, v);
        let r = Value::ratio(sp(&[1.5, 1.6]));
        assert_eq!(r.ratios(), vec![(1.55, 1.5, 1.6)]);
        assert!(!r.is_empty());
    }
}
