//! Analysis of measured rounds: medians, spreads, rerun intervals and the
//! index of a run's rounds by cell. It reads what the measurement layer
//! recorded and knows no experiment by name.
//!
//! # Layout
//! - [`stats`]: medians, spreads, pooled noise and 95% rerun intervals.
//! - [`data`]: a run's rounds by cell, with ratios and their intervals.

pub mod data;
pub mod stats;
