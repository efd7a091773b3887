//! How figures are written in tables: three significant figures, thousands
//! separated, and always with the spread they came with.

use crate::stats::Spread;

/// What an empty cell says. The smoke test fails on it: a cell with no
/// data means a round failed or a metric was not measured.
pub const MISSING: &str = "n/a";

/// A number with about three significant figures: 12,345 · 123 · 12.3 · 1.23 · 0.123.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return MISSING.to_owned();
    }
    let a = v.abs();
    // Below what the other branches would print, a value is zero (a sum of
    // effects that cancel leaves 1e-14, not information).
    if a < 0.0005 {
        "0".to_owned()
    } else if a >= 100.0 {
        thousands(v.round())
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A count: a whole number, thousands separated (`1,370`, `16`).
pub fn count(v: f64) -> String {
    if v.is_finite() {
        thousands(v.round())
    } else {
        MISSING.to_owned()
    }
}

fn thousands(v: f64) -> String {
    let neg = v < 0.0;
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if neg { format!("-{out}") } else { out }
}

/// `median (min–max)`; one value alone when every round agreed.
pub fn range(s: Option<Spread>) -> String {
    match s {
        None => MISSING.to_owned(),
        Some(s) if num(s.min) == num(s.max) => num(s.median),
        Some(s) => format!("{} ({}–{})", num(s.median), num(s.min), num(s.max)),
    }
}

/// `median ±x%`: the compact form for wide tables.
pub fn pm(s: Option<Spread>) -> String {
    match s {
        None => MISSING.to_owned(),
        Some(s) => {
            let r = s.relative_half_range() * 100.0;
            if r < 0.5 {
                num(s.median)
            } else {
                format!("{} ±{:.0}%", num(s.median), r)
            }
        }
    }
}

/// A ratio: `×1.52 (1.48–1.55)`, the parentheses holding whatever interval
/// the spread carries (a 95% rerun interval for the lab's ratios).
pub fn ratio(s: Option<Spread>) -> String {
    match s {
        None => MISSING.to_owned(),
        Some(s) => {
            let f = |v: f64| format!("{v:.2}");
            if f(s.min) == f(s.max) {
                format!("×{}", f(s.median))
            } else {
                format!("×{} ({}–{})", f(s.median), f(s.min), f(s.max))
            }
        }
    }
}

/// A signed difference with its spread: `+123 (+100…+140)`.
pub fn signed(s: Option<Spread>) -> String {
    let sg = |v: f64| {
        if num(v) == "0" {
            "0".to_owned()
        } else if v >= 0.0 {
            format!("+{}", num(v))
        } else {
            num(v)
        }
    };
    match s {
        None => MISSING.to_owned(),
        Some(s) if sg(s.min) == sg(s.max) => sg(s.median),
        Some(s) => format!("{} ({} to {})", sg(s.median), sg(s.min), sg(s.max)),
    }
}

/// A share as a percentage with its spread.
pub fn percent(s: Option<Spread>) -> String {
    match s {
        None => MISSING.to_owned(),
        Some(s) => {
            let f = |v: f64| format!("{:.0}%", v * 100.0);
            if f(s.min) == f(s.max) {
                f(s.median)
            } else {
                format!("{} ({}–{})", f(s.median), f(s.min), f(s.max))
            }
        }
    }
}

/// "1 order", "1,000 orders".
pub fn orders(n: u32) -> String {
    if n == 1 {
        "1 order".to_owned()
    } else {
        format!("{} orders", thousands(f64::from(n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(v: &[f64]) -> Option<Spread> {
        Spread::of(v)
    }

    #[test]
    fn numbers_keep_about_three_significant_figures() {
        assert_eq!(num(12_345.6), "12,346");
        assert_eq!(num(1_234_567.0), "1,234,567");
        assert_eq!(num(123.4), "123");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(1.234), "1.23");
        assert_eq!(num(0.1234), "0.123");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(-1e-14), "0");
        assert_eq!(signed(sp(&[-1e-14, 1e-14])), "0");
        assert_eq!(num(-1500.0), "-1,500");
        assert_eq!(num(f64::NAN), MISSING);
    }

    #[test]
    fn spreads_are_written_with_their_range() {
        assert_eq!(range(sp(&[100.0, 120.0, 110.0])), "110 (100–120)");
        assert_eq!(range(sp(&[5.0, 5.0])), "5.00");
        assert_eq!(range(None), MISSING);
        assert_eq!(pm(sp(&[90.0, 110.0])), "100 ±10%");
        assert_eq!(ratio(sp(&[1.5, 1.6])), "×1.55 (1.50–1.60)");
        assert_eq!(ratio(sp(&[2.0])), "×2.00");
        assert_eq!(signed(sp(&[-3.0, -1.0])), "-2.00 (-3.00 to -1.00)");
        assert_eq!(percent(sp(&[0.25, 0.35])), "30% (25%–35%)");
        assert_eq!(orders(1), "1 order");
        assert_eq!(orders(10000), "10,000 orders");
        assert_eq!(orders(10), "10 orders");
    }
}
