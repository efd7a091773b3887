//! A whole run: plan it, measure it, and write its results directory.
//!
//! ```text
//! results/<timestamp>-<experiment>/
//!   run.json          what was asked, the knobs and every experiment's plan,
//!                     on what machine, and how it ended
//!   rounds/*.json     the raw record of every load round, written as it finishes
//!   probes/*.json     the rounds of probes; bench/*.json benchmark results
//!   failures.json     rounds that produced no numbers, and why
//!   logs/             the services' and the load generator's output; certs/ for TLS cells
//!   report.json       every table as typed values, and run.json inside
//!   report.md, report.html, *.svg
//! ```
//!
//! The session runs schedules by their shape, never by the experiment they
//! came from: every grid's cells first (a cell two experiments share is
//! measured once, rounds interleaved across all of them), then ladders,
//! then probes, then benchmarks on a machine the services have left.
//! Everything the report says is rebuilt from `run.json` and the raw
//! records, so `lab report DIR` can render an interrupted run again, or
//! render a run with newer analysis code.
//!
//! This file only lists the parts and re-exports what the rest of the lab
//! uses; no part reads it back, so that the parts import one another one
//! way only.
//!
//! # Layout
//! - [`info`]: what `lab run` was asked ([`RunOptions`]), `run.json`
//!   ([`RunInfo`], its parts and skipped cells), how a run ended, and
//!   reading a results directory back ([`load`]).
//! - [`preflight`]: the options checked, and what a run needs found or
//!   made before its first round (target, root, binaries, Postgres,
//!   HAProxy, taskset); cells this machine cannot measure skipped.
//! - [`generators`]: the load generators the run's cells use, found (or
//!   installed), and the cells of one that is missing skipped.
//! - [`plan`]: the knobs and timing, every experiment's plan and schedule,
//!   and the schedules sorted by shape into the work of the run.
//! - [`resume`]: `--resume`: the first part read back, what differs since,
//!   what it measured kept.
//! - [`execute`]: [`run`], those steps in order, the runner, and the end.
//! - [`report`]: the whole report of a run ([`build_report`]), and
//!   [`rerender`] for `lab report DIR`.

pub mod execute;
pub mod generators;
pub mod info;
pub mod plan;
pub mod preflight;
pub mod report;
pub mod resume;

pub use execute::run;
pub use info::{Outcome, RunInfo, RunOptions, RunPart, Skipped, load};
pub use plan::{Planned, default_timing, plan};
pub use preflight::{without_haproxy, without_postgres};
pub use report::{build_report, rerender};
