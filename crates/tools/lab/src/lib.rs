//! The transport lab: runs whole experiments on user-service →
//! order-service and writes a report a skeptic can check.
//!
//! `lab run EXPERIMENT` builds both services in release mode, starts them
//! fresh for every round on free ports, warms up, drives load with k6 (the
//! scripts in `k6/`), reads user-service's `/metrics` and every process's
//! `/proc` before and after, repeats each cell R times with rounds
//! interleaved, and writes `results/<timestamp>-<experiment>/` with the raw
//! JSON of every round, `report.json` (every table as typed values),
//! `report.md`, a self-contained `report.html` and SVG charts.
//!
//! # Layout
//! - [`cli`]: the command line (`run`, `report`, `compare`, `list`).
//! - [`session`]: one whole run: plans, schedules run by kind (grids,
//!   ladders, probes, benchmarks), the results directory, the report. It
//!   names no experiment.
//! - [`experiment`]: the trait every experiment implements, the run's knobs
//!   and the context a section is built from.
//! - [`experiments`]: one file per experiment and the registry that lists
//!   them; `experiments::tables` holds what several sections share.
//! - [`measure`]: services, the delay proxy and TLS of a cell's
//!   environment, k6, `/proc`, `/metrics`, the machine, the raw records and
//!   schedules: the measurement layer, which knows no experiment.
//! - [`analysis`]: a run's rounds by cell, with spreads, ratios and their
//!   rerun intervals; it reads the measurement layer, never the reverse.
//! - [`stats`]: medians, spreads, pooled noise and rerun intervals over
//!   plain numbers, below every other layer.
//! - [`report`]: the report model with typed cell values, rendered as JSON,
//!   Markdown and HTML, and SVG charts.
//! - [`compare`]: two runs' `report.json` compared, number against interval.
//! - [`synthetic`]: plausible rounds for tests, made without services.

pub mod analysis;
pub mod cli;
pub mod compare;
pub mod experiment;
pub mod experiments;
pub mod measure;
pub mod merge;
pub mod report;
pub mod session;
pub mod stats;
pub mod synthetic;
