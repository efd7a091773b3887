//! The transport lab: runs whole experiments on user-service →
//! order-service and writes a report a skeptic can check.
//!
//! `lab run EXPERIMENT` builds both services in release mode, starts them
//! fresh for every round on free ports, warms up, drives load with k6 (the
//! scripts in `k6/`), reads user-service's `/metrics` and every process's
//! `/proc` before and after, repeats each cell R times with rounds
//! interleaved, and writes `results/<timestamp>-<experiment>/` with the raw
//! JSON of every round, `report.md`, a self-contained `report.html` and SVG
//! charts. Each experiment reproduces one seed post's table and answers
//! the question it left open (see `experiments`).
//!
//! # Layout
//! - [`cli`]: the command line (`run`, `report`, `list`).
//! - [`session`]: one whole run: plan, measure, results directory, report.
//! - [`experiments`]: which cells each experiment measures, and the report
//!   section each writes (tables, readings, charts).
//! - [`rtt`]: the rtt experiment: its plan, cells and report section.
//! - [`runner`]: one round of one cell: services, warm-up, k6, readings.
//! - [`cell`]: a cell, the raw record of a round, the measures derived from
//!   it and the [`cell::Metric`]s tables read.
//! - [`services`]: building, starting, readiness and stopping of the services.
//! - [`compare`]: two runs' ratios against each other's stated spreads.
//! - [`tls_exp`]: the tls experiment: cleartext against TLS per transport.
//! - [`codec`]: the criterion serialization benchmark, run and tabled.
//! - [`wire`]: bytes per call, through user-service and a direct gRPC-web client.
//! - [`k6`]: finding or installing k6; parsing its summary JSON.
//! - [`prom`]: Prometheus text parsing; user-service's upstream counters.
//! - [`procfs`]: CPU, peak RSS, TCP states and machine facts from `/proc`.
//! - [`http`]: a tiny blocking HTTP/1.1 client that counts bytes on the socket.
//! - [`stats`]: medians, spreads and round-by-round ratios.
//! - [`report`]: the report model, its Markdown and HTML renderings, SVG charts.
//! - [`machine`]: the machine, versions and commit every report records.

pub mod cell;
pub mod cli;
pub mod codec;
pub mod compare;
pub mod experiments;
pub mod http;
pub mod k6;
pub mod machine;
pub mod procfs;
pub mod prom;
pub mod report;
pub mod rtt;
pub mod runner;
pub mod services;
pub mod session;
pub mod stats;
pub mod tls_exp;
pub mod wire;
