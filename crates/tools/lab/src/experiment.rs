//! What an experiment is: the [`Experiment`] trait every file under
//! `experiments/` implements, the run's [`Knobs`] each derives its plan
//! from, and the [`Context`] a report section is built from.
//!
//! An experiment has a name and a one-line description; a typed plan made
//! from the knobs (kept in `run.json`, so that a report rebuilt later uses
//! the plan that was measured); a [`Schedule`] (a grid of cells, a ladder,
//! a probe or a benchmark) whose cells carry their own environment (RTT,
//! TLS), from which the run's needs follow; and a report section. The
//! session sees experiments only through [`Entry`], the trait with the
//! types erased, so it never names one.

use std::marker::PhantomData;

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::analysis::Data;
use crate::measure::Timing;
use crate::measure::cell::Cell;
use crate::measure::figures::Metric;
use crate::measure::load::Generator;
use crate::measure::results::Results;
use crate::measure::schedule::Schedule;
use crate::report::Section;
use crate::report::value::Value;

/// What `lab run` was asked that shapes every plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Knobs {
    /// The quick plan: fewer sizes and rates.
    pub quick: bool,
    /// `--transports`, when given.
    #[serde(default)]
    pub transports: Option<Vec<String>>,
    /// `--sizes`, when given.
    #[serde(default)]
    pub sizes: Option<Vec<u32>>,
    /// The run's store is Postgres (`--database-url`), not memory: an
    /// experiment with a store axis then shares its Postgres cells, not its
    /// memory ones, with the other experiments.
    #[serde(default)]
    pub on_postgres: bool,
    /// The taster (`lab run taster`): the experiments that have a taster
    /// plan measure only its few cells.
    #[serde(default)]
    pub taster: bool,
    /// What carries the experiments that emulate a network between the
    /// services (rtt, compression, tls): `--path`.
    #[serde(default = "PathChoice::before_packets")]
    pub path: PathChoice,
    /// TCP's congestion control on a packet path (`--cc`): every packet
    /// cell's, but for the loss experiment's comparison column, which runs
    /// the other of cubic and bbr.
    #[serde(default)]
    pub cc: netpath::CongestionControl,
    /// The load generator of every cell that names none (`--load`); runs
    /// made before the lab had its own engine were k6's.
    #[serde(default = "Generator::before_engine")]
    pub load: Generator,
}

/// What emulates the network between the services.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum PathChoice {
    /// A packet-level path (netpath): each service in its own network
    /// namespace, the kernels' own TCP between them (slow start, loss,
    /// retransmission, congestion control). Needs root and /dev/net/tun.
    #[default]
    Packets,
    /// The delay proxy: TCP terminated on both sides, bytes held RTT/2 each
    /// way (no loss, no congestion window over the path).
    Proxy,
}

impl PathChoice {
    /// Runs recorded before the packet path existed ran on the proxy.
    pub fn before_packets() -> PathChoice {
        PathChoice::Proxy
    }

    pub fn name(self) -> &'static str {
        match self {
            PathChoice::Packets => "packets",
            PathChoice::Proxy => "proxy",
        }
    }
}

impl Knobs {
    /// Closed-loop VUs of the cells several experiments share.
    pub const VUS: u32 = 8;
    /// user-service's pool for them: as many connections as callers, so
    /// that no call waits for a slot.
    pub const POOL: u16 = 8;

    /// The taster's transports: REST with JSON, REST with protobuf, gRPC.
    pub const TASTER_TRANSPORTS: [&str; 3] =
        [transports::H1_JSON, transports::H1_PROTO, transports::GRPC];

    /// `--transports`, else every transport user-service has (the
    /// taster's three in the taster).
    pub fn transports(&self) -> Vec<String> {
        self.transports.clone().unwrap_or_else(|| {
            let all: &[&str] = if self.taster {
                &Self::TASTER_TRANSPORTS
            } else {
                &transports::ALL
            };
            all.iter().map(|s| (*s).to_owned()).collect()
        })
    }

    /// `--sizes`, or the quick or full default.
    pub fn sizes(&self, quick: &[u32], full: &[u32]) -> Vec<u32> {
        self.sizes.clone().unwrap_or_else(|| {
            if self.quick {
                quick.to_vec()
            } else {
                full.to_vec()
            }
        })
    }

    /// A closed-loop cell at the shared load.
    pub fn closed(via: &str, orders: u32) -> Cell {
        Cell::closed(via, orders, Knobs::VUS, Knobs::POOL)
    }
}

/// One experiment: a file under `experiments/` and a line in its registry.
pub trait Experiment: 'static {
    /// What it measures, made from the knobs; kept in `run.json`.
    type Plan: Serialize + DeserializeOwned;
    /// The name on the command line.
    const NAME: &'static str;
    /// One line for `lab list` and `lab run --help`.
    const ABOUT: &'static str;
    fn plan(knobs: &Knobs) -> Self::Plan;
    fn schedule(plan: &Self::Plan) -> Schedule;
    /// What `lab list` adds after the schedule's size ("RTT 0, 1, 5, 20 ms").
    fn describe(_plan: &Self::Plan) -> String {
        String::new()
    }
    /// The report section, from the measured data.
    fn section(plan: &Self::Plan, cx: &Context) -> Section;
    /// Whether it can measure a stack it did not start (`--target`): its
    /// cells must differ in request parameters only. `Err` says what it
    /// would need to control.
    fn target() -> Result<(), &'static str> {
        Err("its cells need services it starts and configures itself")
    }
    /// Whether it calls order-service directly, so that a target must give
    /// order-service's addresses.
    fn calls_order_service() -> bool {
        false
    }
}

/// An experiment with its plan's type erased: what the session and the
/// command line work with.
pub trait Entry: Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    fn plan(&self, knobs: &Knobs) -> anyhow::Result<serde_json::Value>;
    fn schedule(&self, plan: &serde_json::Value) -> anyhow::Result<Schedule>;
    fn describe(&self, plan: &serde_json::Value) -> anyhow::Result<String>;
    fn section(&self, plan: &serde_json::Value, cx: &Context) -> anyhow::Result<Section>;
    fn target(&self) -> Result<(), &'static str>;
    fn calls_order_service(&self) -> bool;
}

impl std::fmt::Debug for dyn Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The [`Entry`] of an [`Experiment`].
pub struct Registered<E>(PhantomData<fn() -> E>);

/// The registry's entry for `E`.
pub fn entry<E: Experiment>() -> &'static dyn Entry {
    // A zero-sized value: leaking it allocates nothing.
    Box::leak(Box::new(Registered::<E>(PhantomData)))
}

impl<E: Experiment> Registered<E> {
    fn typed(plan: &serde_json::Value) -> anyhow::Result<E::Plan> {
        E::Plan::deserialize(plan).with_context(|| format!("reading the plan of {}", E::NAME))
    }
}

impl<E: Experiment> Entry for Registered<E> {
    fn name(&self) -> &'static str {
        E::NAME
    }

    fn about(&self) -> &'static str {
        E::ABOUT
    }

    fn plan(&self, knobs: &Knobs) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::to_value(E::plan(knobs))?)
    }

    fn schedule(&self, plan: &serde_json::Value) -> anyhow::Result<Schedule> {
        Ok(E::schedule(&Self::typed(plan)?))
    }

    fn describe(&self, plan: &serde_json::Value) -> anyhow::Result<String> {
        Ok(E::describe(&Self::typed(plan)?))
    }

    fn section(&self, plan: &serde_json::Value, cx: &Context) -> anyhow::Result<Section> {
        Ok(E::section(&Self::typed(plan)?, cx))
    }

    fn target(&self) -> Result<(), &'static str> {
        E::target()
    }

    fn calls_order_service(&self) -> bool {
        E::calls_order_service()
    }
}

/// Why a figure read from the services' processes is missing for a target.
pub const NOT_SEEN: &str =
    "not measured: the services ran outside the lab (--target), so /proc does not show them";

/// Everything a section is built from.
#[derive(Debug)]
pub struct Context<'a> {
    pub timing: &'a Timing,
    pub data: &'a Data,
    pub results: &'a Results,
    /// The store the services ran on, as the report names it.
    pub store: &'a str,
}

impl Context<'_> {
    /// A cell's figure: median (min–max) over rounds, in the metric's unit.
    pub fn fig(&self, cell: &Cell, m: Metric) -> Value {
        match self.data.spread(cell, m) {
            None if self.unseen(cell, m) => Value::missing(NOT_SEEN),
            s => Value::range(s, m.unit()),
        }
    }

    /// A cell's figure as median ±half the range.
    pub fn pm(&self, cell: &Cell, m: Metric) -> Value {
        match self.data.spread(cell, m) {
            None if self.unseen(cell, m) => Value::missing(NOT_SEEN),
            s => Value::pm(s, m.unit()),
        }
    }

    /// `a / b` of a metric, round by round, with its rerun interval.
    pub fn ratio(&self, a: &Cell, b: &Cell, m: Metric) -> Value {
        match self.data.ratio(a, b, m) {
            None if self.unseen(a, m) || self.unseen(b, m) => Value::missing(NOT_SEEN),
            s => Value::ratio(s),
        }
    }

    /// The load generator that drove `cell`'s rounds (the first's, if
    /// they differed), if it has any.
    pub fn generator(&self, cell: &Cell) -> Option<Generator> {
        self.results
            .records
            .iter()
            .find(|r| &r.cell == cell)
            .map(|r| r.generator)
    }

    /// Whether `m` is missing from `cell` because its rounds ran on a
    /// target whose processes the lab cannot read.
    fn unseen(&self, cell: &Cell, m: Metric) -> bool {
        m.needs_proc()
            && self
                .results
                .records
                .iter()
                .filter(|r| r.cell == *cell)
                .any(|r| r.no_proc)
    }

    /// A cell's figure beside its ratio to `base` (the baseline itself
    /// gets ×1).
    pub fn fig_vs(&self, cell: &Cell, base: &Cell, m: Metric) -> Value {
        let ratio = if cell == base {
            Value::Baseline
        } else {
            self.ratio(cell, base, m)
        };
        Value::parts(vec![self.fig(cell, m), ratio])
    }

    /// An experiment's probe rounds, read back as `T`.
    pub fn probes<T: DeserializeOwned>(&self, experiment: &str) -> anyhow::Result<Vec<(u32, T)>> {
        self.results
            .probes_of(experiment)
            .into_iter()
            .map(|p| {
                Ok((
                    p.round,
                    T::deserialize(&p.data).with_context(|| {
                        format!("reading {experiment}'s probe round {}", p.round)
                    })?,
                ))
            })
            .collect()
    }

    /// An experiment's benchmark result, read back as `T`.
    pub fn bench<T: DeserializeOwned>(&self, experiment: &str) -> anyhow::Result<Option<T>> {
        self.results
            .bench_of(experiment)
            .map(|b| {
                T::deserialize(&b.data)
                    .with_context(|| format!("reading {experiment}'s benchmark result"))
            })
            .transpose()
    }
}
