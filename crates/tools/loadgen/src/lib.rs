//! The lab's load engine: HTTP/1.1 keep-alive load on user-service (or any
//! HTTP/1.1 server), in a closed loop of N callers or an open loop on a
//! fixed schedule, every answer checked by the lab's counting rules, and
//! every latency kept in an HDR histogram.
//!
//! Why the lab has its own: on the project's 2-core machine k6 spent more
//! CPU per request than both services together, so it capped the fastest
//! transports first and pulled their ratios toward ×1. This engine does
//! what the lab's k6 scripts did, on one thread and with nothing per
//! request that it does not need: the request's bytes are made once, the
//! answer's head parsed in place, the body read to its length and thrown
//! away, the verdict a few comparisons (the `generator` experiment
//! measures its cost beside k6's and wrk's).
//!
//! # Layout
//! - [`options`]: the command line, parsed and checked into a [`run::Plan`].
//! - [`run`]: the closed and open loops on one thread.
//! - [`http1`]: one keep-alive HTTP/1.1 connection and one exchange on it.
//! - [`check`]: what makes an answer good, bad or shed.
//! - [`tally`]: the counts and histograms of a run, and the [`tally::Summary`]
//!   written at its end (the JSON the lab reads).
//! - [`clock`]: the monotonic clock in ns, and a timer exact to the
//!   microsecond for the open loop's schedule.

pub mod check;
pub mod clock;
pub mod http1;
pub mod options;
pub mod run;
pub mod tally;
