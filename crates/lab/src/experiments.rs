//! The experiments: which cells each one measures ([`Plan`],
//! [`Experiment::cells`]) and the report section each one writes from the
//! measured data ([`section`]).
//!
//! Cells are shared: `all` measures a cell that two experiments need once
//! (the payload grid also feeds the factorial, the floor and the schema
//! tables), which is what lets `all --quick` fit in a few minutes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cell::{Cell, K6_GRPC_DIRECT, Load, Measures, Metric, SIX_FIELDS};
use crate::report::format::{self as f, MISSING};
use crate::report::svg::{self, BarChart, LineChart, Series};
use crate::report::{Chart, Section, Table};
use crate::runner::{Results, Timing};
use crate::stats::{Noise, Spread, paired_ratios, rerun_interval};
use crate::wire::{Source, WireRecord};

/// Every transport user-service has, in the design's order.
pub const TRANSPORTS: [&str; 10] = [
    "h1-json",
    "h1-json-close",
    "h2c-json",
    "h1-proto",
    "h2c-proto",
    "grpc",
    "grpc-stream",
    "grpc-bidi",
    "tcp-proto",
    "grpc-v1",
];

/// The REST baseline every "×" in the payload tables is relative to.
pub const BASELINE: &str = "h1-json";
/// The floor of the hop.
pub const FLOOR: &str = "tcp-proto";

/// An experiment, as `lab run` names it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// Every transport × 1/10/100/1,000/10,000 orders (seed 001 §4, seed 000).
    Payload,
    /// {HTTP/1.1, HTTP/2} × {JSON, protobuf}: how much is wire, how much encoding.
    Factorial,
    /// Pool 1 and 4, open loop at rising rates until drops appear (seed 001 §5).
    Pool,
    /// Round-trip time 0, 1, 5, 20 ms between the services, through a delay proxy.
    Rtt,
    /// Bytes per call: REST JSON, REST protobuf, gRPC, gRPC-web (seed 001 §6).
    WireSize,
    /// Legacy all-strings v1 vs typed v2, all fields vs six (seed 003).
    Schema,
    /// N lookups as N unary calls vs one server stream vs the bidi stream (seed 002).
    Streaming,
    /// New connection per call vs pooled keep-alive: churn and TIME_WAIT (seed 000).
    Naive,
    /// Every transport's upstream cost as a ratio to raw TCP.
    Floor,
    /// k6's own gRPC client at order-service vs the call timed in user-service (seed 001).
    Pitfall,
    /// Every transport with and without TLS: cost, bytes, handshakes (issue 7).
    Tls,
    /// Serialization alone, no network: the criterion benchmark (seeds 003, 004).
    Codec,
    /// All of the above.
    All,
}

impl Experiment {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Payload => "payload",
            Experiment::Factorial => "factorial",
            Experiment::Pool => "pool",
            Experiment::Rtt => "rtt",
            Experiment::WireSize => "wire-size",
            Experiment::Schema => "schema",
            Experiment::Streaming => "streaming",
            Experiment::Naive => "naive",
            Experiment::Floor => "floor",
            Experiment::Pitfall => "pitfall",
            Experiment::Tls => "tls",
            Experiment::Codec => "codec",
            Experiment::All => "all",
        }
    }

    /// The experiments `self` stands for, in report order.
    pub fn expand(self) -> Vec<Experiment> {
        use Experiment::*;
        match self {
            All => vec![
                Payload, Factorial, Floor, WireSize, Schema, Streaming, Naive, Pool, Rtt, Pitfall,
                Tls, Codec,
            ],
            e => vec![e],
        }
    }

    /// The closed-loop cells this experiment needs (the pool ladder and the
    /// wire-size probes are run separately).
    pub fn cells(self, p: &Plan) -> Vec<Cell> {
        let closed = |via: &str, orders: u32| Cell::closed(via, orders, p.vus, p.pool);
        match self {
            Experiment::Payload | Experiment::Floor => {
                let mut v = Vec::new();
                for &orders in &p.sizes {
                    for via in &p.transports {
                        v.push(closed(via, orders));
                    }
                }
                v
            }
            Experiment::Factorial => p
                .factorial_sizes
                .iter()
                .flat_map(|&o| FACTORIAL.iter().map(move |(via, _, _)| (via, o)))
                .map(|(via, o)| closed(via, o))
                .collect(),
            Experiment::Schema => {
                let mut v = Vec::new();
                for &orders in &p.schema_sizes {
                    for via in ["grpc-v1", "grpc"] {
                        for fields in [None, Some(SIX_FIELDS.to_owned())] {
                            let mut c = closed(via, orders);
                            c.fields = fields;
                            v.push(c);
                        }
                    }
                }
                v
            }
            Experiment::Streaming => streaming_variants(p).into_iter().map(|(_, c)| c).collect(),
            Experiment::Rtt => crate::rtt::cells(&p.rtt),
            Experiment::Tls => crate::tls_exp::cells(&p.tls),
            Experiment::Naive => ["h1-json-close", "h1-json"]
                .iter()
                .map(|via| Cell::closed(via, p.naive_orders, p.naive_vus, p.naive_vus as u16))
                .collect(),
            Experiment::Pitfall => p
                .factorial_sizes
                .iter()
                .flat_map(|&o| [closed(K6_GRPC_DIRECT, o), closed("grpc", o)])
                .collect(),
            Experiment::Pool | Experiment::WireSize | Experiment::Codec | Experiment::All => {
                Vec::new()
            }
        }
    }
}

/// The 2×2: transport, wire, encoding.
const FACTORIAL: [(&str, &str, &str); 4] = [
    ("h1-json", "HTTP/1.1", "JSON"),
    ("h1-proto", "HTTP/1.1", "protobuf"),
    ("h2c-json", "HTTP/2", "JSON"),
    ("h2c-proto", "HTTP/2", "protobuf"),
];

/// The streaming experiment's variants: what each is called and its cell.
fn streaming_variants(p: &Plan) -> Vec<(String, Cell)> {
    let n = p.streaming_n;
    let c = |via: &str, orders: u32, lookups: u32| {
        let mut c = Cell::closed(via, orders, p.streaming_vus, p.pool);
        c.lookups = lookups;
        c
    };
    vec![
        (
            format!("{n} unary REST calls (h1-json)"),
            c("h1-json", 1, n),
        ),
        (format!("{n} unary gRPC calls (grpc)"), c("grpc", 1, n)),
        (
            format!("{n} lookups on the shared bidi stream (grpc-bidi)"),
            c("grpc-bidi", 1, n),
        ),
        (
            format!("one server stream of {n} (grpc-stream)"),
            c("grpc-stream", n, 1),
        ),
        (format!("one unary call of {n} (grpc)"), c("grpc", n, 1)),
    ]
}

/// Sizes, rates and loads of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub quick: bool,
    /// Transports of the payload, floor and wire-size experiments.
    pub transports: Vec<String>,
    /// Orders per call in the payload and floor experiments.
    pub sizes: Vec<u32>,
    /// Closed-loop VUs and the pool that goes with them.
    pub vus: u32,
    pub pool: u16,
    pub factorial_sizes: Vec<u32>,
    pub schema_sizes: Vec<u32>,
    /// Lookups per iteration in the streaming experiment, and its VUs.
    pub streaming_n: u32,
    pub streaming_vus: u32,
    /// Concurrency of the naive experiment (its pool is the same).
    pub naive_vus: u32,
    pub naive_orders: u32,
    /// Orders per call in the pool experiment.
    pub pool_orders: u32,
    pub pool_sizes: Vec<u16>,
    pub pool_vias: Vec<String>,
    /// The rates the pool experiment climbs, iterations per second.
    pub pool_rates: Vec<u32>,
    pub pool_max_vus: u32,
    /// A rate "drops" when more than this share of its iterations was dropped.
    pub drop_threshold_pct: f64,
    pub wire_sizes: Vec<u32>,
    /// The rtt experiment's transports, round-trip times and pools.
    #[serde(default)]
    pub rtt: crate::rtt::RttPlan,
    /// The tls experiment's transports and sizes.
    #[serde(default)]
    pub tls: crate::tls_exp::TlsPlan,
}

impl Plan {
    /// The full or quick plan, with optional `--transports` / `--sizes`.
    pub fn new(quick: bool, transports: Option<&[String]>, sizes: Option<&[u32]>) -> Plan {
        let rtt = crate::rtt::RttPlan::new(quick, transports);
        let all: Vec<String> = TRANSPORTS.iter().map(|s| (*s).to_owned()).collect();
        let transports = transports.map_or(all, <[String]>::to_vec);
        let pool_vias: Vec<String> = ["h1-json", "h2c-json", "grpc"]
            .iter()
            .map(|s| (*s).to_owned())
            .filter(|v| transports.contains(v))
            .collect();
        let mut p = if quick {
            Plan {
                quick,
                transports,
                sizes: vec![1, 1000],
                vus: 8,
                pool: 8,
                factorial_sizes: vec![1, 1000],
                schema_sizes: vec![1000],
                streaming_n: 20,
                streaming_vus: 4,
                naive_vus: 32,
                naive_orders: 1,
                pool_orders: 100,
                pool_sizes: vec![1, 4],
                pool_vias,
                pool_rates: vec![500, 1000, 2000],
                pool_max_vus: 200,
                drop_threshold_pct: 1.0,
                wire_sizes: vec![1, 100, 1000],
                rtt,
                tls: crate::tls_exp::TlsPlan::default(),
            }
        } else {
            Plan {
                quick,
                transports,
                sizes: vec![1, 10, 100, 1000, 10000],
                vus: 8,
                pool: 8,
                factorial_sizes: vec![1, 1000],
                schema_sizes: vec![10, 1000],
                streaming_n: 100,
                streaming_vus: 4,
                naive_vus: 64,
                naive_orders: 1,
                pool_orders: 100,
                pool_sizes: vec![1, 4],
                pool_vias,
                pool_rates: vec![250, 500, 1000, 2000, 4000, 8000, 16000],
                pool_max_vus: 300,
                drop_threshold_pct: 1.0,
                wire_sizes: vec![1, 100, 1000],
                rtt,
                tls: crate::tls_exp::TlsPlan::default(),
            }
        };
        if let Some(s) = sizes {
            p.sizes = s.to_vec();
            p.factorial_sizes = s.to_vec();
            p.schema_sizes = s.to_vec();
            p.wire_sizes = s.to_vec();
            p.rtt.orders = s.to_vec();
        }
        p.tls = crate::tls_exp::TlsPlan::new(quick, Some(&p.transports), p.vus, p.pool);
        if let Some(s) = sizes {
            p.tls.orders = s.to_vec();
        }
        p
    }

    /// The transports the wire-size experiment probes.
    pub fn wire_transports(&self) -> Vec<&str> {
        self.transports.iter().map(String::as_str).collect()
    }
}

/// Fewer degrees of freedom than this and an experiment's pooled noise is
/// too unsure of itself (Student's t above 2.3): the whole run's is used.
pub const MIN_POOLED_DF: f64 = 8.0;

/// The rounds of every cell, by round number.
#[derive(Debug, Clone, Default)]
pub struct Data {
    pub rounds: u32,
    pub cells: BTreeMap<Cell, Vec<Option<Measures>>>,
    /// Flags of each cell's rounds, "r2: k6 used 0.95 cores...".
    pub flags: BTreeMap<Cell, Vec<String>>,
    pub wire: Vec<WireRecord>,
    /// The experiment each cell was measured for (the first by name when
    /// several): its round-to-round noise is pooled with that experiment's
    /// other cells.
    pub experiment: BTreeMap<Cell, String>,
}

impl Data {
    /// Indexes a run's results.
    pub fn new(results: &Results) -> Data {
        let rounds = results
            .records
            .iter()
            .map(|r| r.round)
            .chain(results.wire.iter().map(|w| w.round))
            .max()
            .unwrap_or(0);
        let mut cells: BTreeMap<Cell, Vec<Option<Measures>>> = BTreeMap::new();
        let mut flags: BTreeMap<Cell, Vec<String>> = BTreeMap::new();
        let mut experiment: BTreeMap<Cell, String> = BTreeMap::new();
        for r in &results.records {
            // A cell measured under several names (a shared cell) pools
            // with the first name in order, whatever order the rounds were
            // read back in.
            let e = experiment
                .entry(r.cell.clone())
                .or_insert_with(|| r.experiment.clone());
            if r.experiment < *e {
                e.clone_from(&r.experiment);
            }
            let slot = cells
                .entry(r.cell.clone())
                .or_insert_with(|| vec![None; rounds as usize]);
            if let Some(s) = slot.get_mut(r.round.saturating_sub(1) as usize) {
                *s = Some(Measures::of(r));
            }
            for fl in &r.flags {
                flags
                    .entry(r.cell.clone())
                    .or_default()
                    .push(format!("r{}: {fl}", r.round));
            }
        }
        Data {
            rounds,
            cells,
            flags,
            wire: results.wire.clone(),
            experiment,
        }
    }

    /// A metric of a cell, round by round (`None` where a round is missing).
    pub fn values(&self, cell: &Cell, m: Metric) -> Vec<Option<f64>> {
        self.cells
            .get(cell)
            .map(|v| v.iter().map(|r| r.as_ref().and_then(|x| m.of(x))).collect())
            .unwrap_or_default()
    }

    pub fn spread(&self, cell: &Cell, m: Metric) -> Option<Spread> {
        Spread::of_rounds(&self.values(cell, m))
    }

    /// `a / b`, round by round: its median and 95% rerun interval
    /// ([`rerun_interval`]).
    pub fn ratio(&self, a: &Cell, b: &Cell, m: Metric) -> Option<Spread> {
        self.ratio_of(a, m, b, m, 1.0)
    }

    /// `a.ma / (b.mb · scale)`, round by round, with its rerun interval.
    pub fn ratio_of(
        &self,
        a: &Cell,
        ma: Metric,
        b: &Cell,
        mb: Metric,
        scale: f64,
    ) -> Option<Spread> {
        let den: Vec<Option<f64>> = self
            .values(b, mb)
            .into_iter()
            .map(|v| v.map(|x| x * scale))
            .collect();
        let pair = Noise::pair(self.noise(a, ma), self.noise(b, mb));
        rerun_interval(&paired_ratios(&self.values(a, ma), &den), pair)
    }

    /// The round-to-round noise of `m` pooled over every cell of the
    /// experiment `cell` belongs to ([`Noise::pooled`]), or over every cell
    /// of the run when the experiment alone leaves fewer than
    /// [`MIN_POOLED_DF`] degrees of freedom (a small experiment whose other
    /// cells were measured for another: `schema`'s six-field pair, the
    /// `pitfall` pair). Cells of one experiment share a load shape and
    /// their noise is alike; the whole run mixes quiet cells with noisy
    /// ones, so it is the fallback, not the rule.
    pub fn noise(&self, cell: &Cell, m: Metric) -> Option<Noise> {
        let exp = self.experiment.get(cell)?;
        let pool = |same: bool| {
            let rows: Vec<Vec<Option<f64>>> = self
                .experiment
                .iter()
                .filter(|(_, e)| !same || *e == exp)
                .map(|(c, _)| self.values(c, m))
                .collect();
            Noise::pooled(&rows)
        };
        match pool(true) {
            Some(n) if n.df >= MIN_POOLED_DF => Some(n),
            _ => pool(false),
        }
    }

    /// `combine` of several cells' values, round by round (rounds where any
    /// is missing are left out).
    pub fn combine(
        &self,
        cells: &[&Cell],
        m: Metric,
        combine: impl Fn(&[f64]) -> Option<f64>,
    ) -> Option<Spread> {
        let cols: Vec<Vec<Option<f64>>> = cells.iter().map(|c| self.values(c, m)).collect();
        let mut out = Vec::new();
        for r in 0..self.rounds as usize {
            let row: Option<Vec<f64>> = cols.iter().map(|c| c.get(r).copied().flatten()).collect();
            if let Some(v) = row.and_then(|row| combine(&row)) {
                out.push(v);
            }
        }
        Spread::of(&out)
    }

    pub fn has(&self, cell: &Cell) -> bool {
        self.cells.contains_key(cell)
    }

    /// The median of a metric, for readings.
    pub fn median(&self, cell: &Cell, m: Metric) -> Option<f64> {
        self.spread(cell, m).map(|s| s.median)
    }
}

/// Everything a section needs.
#[derive(Debug)]
pub struct Context<'a> {
    pub plan: &'a Plan,
    pub timing: &'a Timing,
    pub data: &'a Data,
    pub codec: Option<&'a crate::codec::CodecRun>,
}

/// The section of one experiment.
pub fn section(e: Experiment, cx: &Context) -> Section {
    match e {
        Experiment::Payload => payload(cx),
        Experiment::Factorial => factorial(cx),
        Experiment::Pool => pool(cx),
        Experiment::Rtt => crate::rtt::section(cx),
        Experiment::Tls => crate::tls_exp::section(cx),
        Experiment::WireSize => wire_size(cx),
        Experiment::Schema => schema(cx),
        Experiment::Streaming => streaming(cx),
        Experiment::Naive => naive(cx),
        Experiment::Floor => floor(cx),
        Experiment::Pitfall => pitfall(cx),
        Experiment::Codec => crate::codec::section(cx.codec, &cx.plan.sizes),
        Experiment::All => Section::new("all", "All"),
    }
}

pub(crate) fn method(cx: &Context, load: &str) -> String {
    format!(
        "{load}; {} rounds of {} s after a {} s warm-up, both services restarted every round. \
         Cells: median (min–max) over the rounds; `×` is a ratio computed round by round, with \
         its 95% rerun interval.",
        cx.timing.rounds,
        f::num(cx.timing.duration_s),
        f::num(cx.timing.warmup_s)
    )
}

fn baseline(p: &Plan) -> &str {
    if p.transports.iter().any(|t| t == BASELINE) {
        BASELINE
    } else {
        p.transports.first().map_or(BASELINE, String::as_str)
    }
}

/// "best X (×r vs base), worst Y" for one column of cells.
fn rank_reading(cx: &Context, cells: &[(String, Cell)], m: Metric, base: &Cell) -> String {
    let mut vals: Vec<(&str, &Cell, f64)> = cells
        .iter()
        .filter_map(|(n, c)| cx.data.median(c, m).map(|v| (n.as_str(), c, v)))
        .collect();
    if vals.len() < 2 {
        return "too few cells measured to compare".to_owned();
    }
    vals.sort_by(|a, b| a.2.total_cmp(&b.2));
    if m.higher_is_better() {
        vals.reverse();
    }
    let (best, bc, bv) = vals[0];
    let (worst, wc, wv) = vals[vals.len() - 1];
    let vs = |c: &Cell| {
        cx.data
            .ratio(c, base, m)
            .map(|r| format!(" (×{:.2} {})", r.median, base.via))
            .unwrap_or_default()
    };
    format!(
        "best **{best}** {} {}{}, worst **{worst}** {} {}{}",
        f::num(bv),
        m.unit(),
        if bc == base { String::new() } else { vs(bc) },
        f::num(wv),
        m.unit(),
        if wc == base { String::new() } else { vs(wc) },
    )
}

fn payload(cx: &Context) -> Section {
    let p = cx.plan;
    let mut s = Section::new(
        "payload",
        "Payload: every transport × orders per call (seed 001 §4, seed 000's large data)",
    );
    let base = baseline(p);
    s.para(method(
        cx,
        &format!(
            "Closed loop, {} VUs; user-service's pool is {} connections per transport, so no call \
             waits for a slot (the pool experiment studies the budget); in-memory store. \
             Baseline: **{base}** (REST: HTTP/1.1 + JSON)",
            p.vus, p.pool
        ),
    ));
    let cell = |via: &str, o: u32| Cell::closed(via, o, p.vus, p.pool);
    for (m, caption) in [
        (Metric::Rate, "Throughput, req/s (higher is better)"),
        (
            Metric::UpP95,
            "Upstream p95, µs: user-service's round trip to order-service",
        ),
        (Metric::E2eMax, "End-to-end max, ms (seed 001's tail)"),
        (
            Metric::CpuServices,
            "CPU per request, µs: user-service + order-service",
        ),
    ] {
        let mut headers = vec!["transport".to_owned()];
        headers.extend(p.sizes.iter().map(|&o| f::orders(o)));
        let rows = p
            .transports
            .iter()
            .map(|via| {
                let mut r = vec![via.clone()];
                for &o in &p.sizes {
                    let c = cell(via, o);
                    let v = f::range(cx.data.spread(&c, m));
                    if via == base {
                        r.push(format!("{v} · ×1"));
                    } else {
                        r.push(format!(
                            "{v} · {}",
                            f::ratio(cx.data.ratio(&c, &cell(base, o), m))
                        ));
                    }
                }
                r
            })
            .collect();
        let mut reading = Vec::new();
        for &o in [p.sizes.first(), p.sizes.last()].into_iter().flatten() {
            let cells: Vec<(String, Cell)> = p
                .transports
                .iter()
                .map(|v| (v.clone(), cell(v, o)))
                .collect();
            reading.push(format!(
                "at {}: {}",
                f::orders(o),
                rank_reading(cx, &cells, m, &cell(base, o))
            ));
            if p.sizes.len() == 1 {
                break;
            }
        }
        s.table(Table {
            caption: caption.to_owned(),
            headers,
            rows,
            reading: capitalise(&reading.join("; ")) + ".",
        });
    }
    for &o in &p.sizes {
        let cells: Vec<(String, Cell)> = p
            .transports
            .iter()
            .map(|v| (v.clone(), cell(v, o)))
            .collect();
        s.table(everything(
            cx,
            &format!(
                "Everything at {} (median ±half the min–max range)",
                f::orders(o)
            ),
            &cells,
        ));
    }
    // Throughput against payload.
    if p.sizes.len() > 1 {
        let series = p
            .transports
            .iter()
            .map(|via| Series {
                name: via.clone(),
                points: p
                    .sizes
                    .iter()
                    .filter_map(|&o| {
                        cx.data
                            .median(&cell(via, o), Metric::Rate)
                            .map(|v| (f64::from(o), v))
                    })
                    .collect(),
            })
            .collect();
        s.chart(Chart {
            file: "payload-throughput.svg".into(),
            title: "Throughput against payload (closed loop)".into(),
            svg: svg::line_chart(&LineChart {
                title: "Throughput against payload".into(),
                x_label: "orders per call (log)".into(),
                y_label: "req/s (log)".into(),
                x_log: true,
                y_log: true,
                series,
            }),
        });
    }
    for &o in [p.sizes.first(), p.sizes.last()].into_iter().flatten() {
        let cells: Vec<(String, Cell)> = p
            .transports
            .iter()
            .map(|v| (v.clone(), cell(v, o)))
            .collect();
        s.chart(latency_chart(
            cx,
            &format!("payload-latency-{o}.svg"),
            &format!(
                "End-to-end latency percentiles per transport, {}",
                f::orders(o)
            ),
            &cells,
        ));
        if p.sizes.len() == 1 {
            break;
        }
    }
    s
}

/// Grouped bars of p50/p90/p95/p99 per cell.
fn latency_chart(cx: &Context, file: &str, title: &str, cells: &[(String, Cell)]) -> Chart {
    let ms = [
        Metric::E2eP50,
        Metric::E2eP90,
        Metric::E2eP95,
        Metric::E2eP99,
    ];
    Chart {
        file: file.to_owned(),
        title: title.to_owned(),
        svg: svg::bar_chart(&BarChart {
            title: title.to_owned(),
            y_label: "ms".into(),
            y_log: false,
            groups: cells.iter().map(|(n, _)| n.clone()).collect(),
            series: vec!["p50".into(), "p90".into(), "p95".into(), "p99".into()],
            values: cells
                .iter()
                .map(|(_, c)| ms.iter().map(|m| cx.data.median(c, *m)).collect())
                .collect(),
        }),
    }
}

/// Every measured figure of some cells, compactly.
pub fn everything(cx: &Context, caption: &str, cells: &[(String, Cell)]) -> Table {
    use Metric::*;
    let cols: [(Metric, &str); 23] = [
        (Rate, "req/s"),
        (Dropped, "dropped"),
        (E2eP50, "p50 ms"),
        (E2eP90, "p90 ms"),
        (E2eP95, "p95 ms"),
        (E2eP99, "p99 ms"),
        (E2eMax, "max ms"),
        (UpP50, "up p50 µs"),
        (UpP95, "up p95 µs"),
        (UpP99, "up p99 µs"),
        (UpMax, "up max µs"),
        (ConnectionsOpened, "conns opened"),
        (ConnectionsHeld, "conns held"),
        (BytesOut, "B out/call"),
        (BytesIn, "B in/call"),
        (CpuUser, "CPU user µs/req"),
        (CpuOrder, "CPU order µs/req"),
        (CpuK6, "CPU k6 µs/req"),
        (RssUser, "RSS user MiB"),
        (RssOrder, "RSS order MiB"),
        (RssK6, "RSS k6 MiB"),
        (K6Cores, "k6 cores"),
        (OtherCores, "others' cores"),
    ];
    let mut headers = vec!["cell".to_owned()];
    headers.extend(cols.iter().map(|(_, h)| (*h).to_owned()));
    let rows = cells
        .iter()
        .map(|(n, c)| {
            let mut r = vec![n.clone()];
            r.extend(cols.iter().map(|(m, _)| f::pm(cx.data.spread(c, *m))));
            r
        })
        .collect();
    let k6_max = cells
        .iter()
        .filter_map(|(_, c)| cx.data.spread(c, K6Cores).map(|s| s.max))
        .fold(0.0, f64::max);
    let rss = cells
        .iter()
        .filter_map(|(n, c)| cx.data.median(c, RssOrder).map(|v| (n, v)))
        .fold(None, |acc: Option<(&String, f64)>, x| match acc {
            Some(a) if a.1 >= x.1 => Some(a),
            _ => Some(x),
        });
    Table {
        caption: caption.to_owned(),
        headers,
        rows,
        reading: format!(
            "k6 used at most {:.2} cores in any round{}; order-service's peak RSS was largest under {} ({} MiB, the in-memory data set included).",
            k6_max,
            if k6_max >= crate::cell::K6_SATURATED_CORES {
                " — flagged rounds measure k6 as much as the services"
            } else {
                ", so the load generator was not the bottleneck"
            },
            rss.map_or(MISSING.to_owned(), |r| r.0.clone()),
            rss.map_or(MISSING.to_owned(), |r| f::num(r.1)),
        ),
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn factorial(cx: &Context) -> Section {
    let p = cx.plan;
    let mut s = Section::new(
        "factorial",
        "Factorial: {HTTP/1.1, HTTP/2} × {JSON, protobuf} — wire or encoding? (seed 001's open question)",
    );
    s.para(method(
        cx,
        &format!(
            "Closed loop, {} VUs, pool {}; the four REST transports differ only in the wire \
             (h1 / h2c) and the body (JSON / protobuf) of the same `GET /v2/orders`",
            p.vus, p.pool
        ),
    ));
    s.para(
        "Effects in the usual 2×2 sense: **wire** = mean of the HTTP/2 cells − mean of the \
         HTTP/1.1 cells; **encoding** = mean of protobuf − mean of JSON; **interaction** = half \
         of (protobuf's effect on HTTP/2 − its effect on HTTP/1.1). The change from h1-json to \
         h2c-proto is exactly wire + encoding; the shares compare the two effects' sizes \
         (|wire| / (|wire| + |encoding|)), so they stay meaningful when the two pull opposite \
         ways, which the signs show. Computed round by round.",
    );
    let cell = |via: &str, o: u32| Cell::closed(via, o, p.vus, p.pool);
    for &o in &p.factorial_sizes {
        let [h1j, h1p, h2j, h2p] = FACTORIAL.map(|(v, _, _)| cell(v, o));
        s.table(Table {
            caption: format!("Upstream p50, µs, at {}", f::orders(o)),
            headers: vec!["wire \\ body".into(), "JSON".into(), "protobuf".into()],
            rows: vec![
                vec![
                    "HTTP/1.1".into(),
                    f::range(cx.data.spread(&h1j, Metric::UpP50)),
                    f::range(cx.data.spread(&h1p, Metric::UpP50)),
                ],
                vec![
                    "HTTP/2 (h2c)".into(),
                    f::range(cx.data.spread(&h2j, Metric::UpP50)),
                    f::range(cx.data.spread(&h2p, Metric::UpP50)),
                ],
            ],
            reading: format!(
                "h2c-proto takes {} of h1-json's upstream p50; h1-proto {}, h2c-json {}.",
                f::ratio(cx.data.ratio(&h2p, &h1j, Metric::UpP50)),
                f::ratio(cx.data.ratio(&h1p, &h1j, Metric::UpP50)),
                f::ratio(cx.data.ratio(&h2j, &h1j, Metric::UpP50)),
            ),
        });
        let cells = [&h1j, &h1p, &h2j, &h2p];
        let wire = |v: &[f64]| Some(((v[2] + v[3]) - (v[0] + v[1])) / 2.0);
        let enc = |v: &[f64]| Some(((v[1] + v[3]) - (v[0] + v[2])) / 2.0);
        let inter = |v: &[f64]| Some(((v[3] - v[2]) - (v[1] - v[0])) / 2.0);
        // Each main effect's part of the two effects' combined size: always
        // 0–100%, also when the wire and the encoding pull opposite ways.
        let share = |wire_side: bool| {
            move |v: &[f64]| {
                let a = (((v[2] + v[3]) - (v[0] + v[1])) / 2.0).abs();
                let b = (((v[1] + v[3]) - (v[0] + v[2])) / 2.0).abs();
                let total = a + b;
                // Effects too small to split are given no share.
                (total > 1e-9 * v[0].abs().max(1.0))
                    .then(|| if wire_side { a / total } else { b / total })
            }
        };
        let mut rows = Vec::new();
        let mut reading = String::new();
        for (m, name) in [
            (Metric::UpP50, "upstream p50, µs"),
            (Metric::UpP95, "upstream p95, µs"),
            (Metric::CpuServices, "CPU user+order, µs/req"),
            (Metric::Rate, "throughput, req/s"),
            (Metric::BytesIn, "response bytes/call"),
        ] {
            let sw = cx.data.combine(&cells, m, share(true));
            let se = cx.data.combine(&cells, m, share(false));
            if m == Metric::UpP50 {
                reading = format!(
                    "At {}, h1-json → h2c-proto changed the upstream p50 by {} µs: the wire (HTTP/2 instead of HTTP/1.1) {} µs, the encoding (protobuf instead of JSON) {} µs, interaction {} µs; the encoding is {} of the two effects' combined size.",
                    f::orders(o),
                    f::signed(cx.data.combine(&cells, m, |v| Some(v[3] - v[0]))),
                    f::signed(cx.data.combine(&cells, m, wire)),
                    f::signed(cx.data.combine(&cells, m, enc)),
                    f::signed(cx.data.combine(&cells, m, inter)),
                    f::percent(se),
                );
            }
            rows.push(vec![
                name.to_owned(),
                f::range(cx.data.spread(&h1j, m)),
                f::signed(cx.data.combine(&cells, m, wire)),
                f::signed(cx.data.combine(&cells, m, enc)),
                f::signed(cx.data.combine(&cells, m, inter)),
                f::percent(sw),
                f::percent(se),
            ]);
        }
        s.table(Table {
            caption: format!("Effects at {}", f::orders(o)),
            headers: vec![
                "figure".into(),
                "h1-json".into(),
                "wire: HTTP/2 − HTTP/1.1".into(),
                "encoding: protobuf − JSON".into(),
                "interaction".into(),
                "wire's share of |wire|+|encoding|".into(),
                "encoding's share".into(),
            ],
            rows,
            reading,
        });
    }
    s
}

fn floor(cx: &Context) -> Section {
    let p = cx.plan;
    let mut s = Section::new(
        "floor",
        "Floor: every transport's upstream cost as a ratio to raw TCP (tcp-proto)",
    );
    s.para(method(
        cx,
        &format!(
            "The payload experiment's cells (closed loop, {} VUs, pool {}); `tcp-proto` is \
             length-prefixed protobuf on a persistent TCP connection, no HTTP: the least this hop \
             can cost for the same bytes on this machine",
            p.vus, p.pool
        ),
    ));
    let cell = |via: &str, o: u32| Cell::closed(via, o, p.vus, p.pool);
    if !p.transports.iter().any(|t| t == FLOOR) {
        s.para("tcp-proto was not among the transports measured: no floor to compare with.");
        return s;
    }
    for (m, caption) in [
        (Metric::UpP50, "Upstream p50 as a multiple of tcp-proto's"),
        (Metric::UpP95, "Upstream p95 as a multiple of tcp-proto's"),
        (
            Metric::CpuServices,
            "CPU per request (user + order) as a multiple of tcp-proto's",
        ),
    ] {
        let mut headers = vec!["transport".to_owned()];
        headers.extend(p.sizes.iter().map(|&o| f::orders(o)));
        let rows = p
            .transports
            .iter()
            .map(|via| {
                let mut r = vec![via.clone()];
                for &o in &p.sizes {
                    if via == FLOOR {
                        r.push(format!(
                            "{} {}",
                            f::range(cx.data.spread(&cell(via, o), m)),
                            m.unit()
                        ));
                    } else {
                        r.push(f::ratio(cx.data.ratio(&cell(via, o), &cell(FLOOR, o), m)));
                    }
                }
                r
            })
            .collect();
        let mut reading = Vec::new();
        for &o in [p.sizes.first(), p.sizes.last()].into_iter().flatten() {
            let mut ratios: Vec<(&str, f64)> = p
                .transports
                .iter()
                .filter(|v| *v != FLOOR)
                .filter_map(|v| {
                    cx.data
                        .ratio(&cell(v, o), &cell(FLOOR, o), m)
                        .map(|r| (v.as_str(), r.median))
                })
                .collect();
            ratios.sort_by(|a, b| a.1.total_cmp(&b.1));
            if let (Some(lo), Some(hi)) = (ratios.first(), ratios.last()) {
                reading.push(format!(
                    "at {} the closest to the floor is **{}** (×{:.2}), the farthest **{}** (×{:.2})",
                    f::orders(o),
                    lo.0,
                    lo.1,
                    hi.0,
                    hi.1
                ));
            }
            if p.sizes.len() == 1 {
                break;
            }
        }
        s.table(Table {
            caption: caption.to_owned(),
            headers,
            rows,
            reading: if reading.is_empty() {
                "too few cells measured to compare".to_owned()
            } else {
                capitalise(&reading.join("; ")) + "."
            },
        });
    }
    s
}

fn wire_size(cx: &Context) -> Section {
    let p = cx.plan;
    let mut s = Section::new(
        "wire-size",
        "Wire size: bytes per call, each way (seed 001 §6)",
    );
    s.para(format!(
        "Not a load test: after {} uncounted calls, {} calls one at a time per transport and size, \
         {} rounds. user-service rows are its own socket counters on the call to order-service \
         (headers and framing included, steady state of a reused connection). user-service has no \
         gRPC-web adapter, so the **grpc-web** row is the lab's own HTTP/1.1 client calling \
         order-service's `ListOrders` with `application/grpc-web+proto`, counted on its socket the \
         same way; the lab client's REST JSON and REST protobuf rows are the cross-check that the \
         two ways of counting agree. `×` is relative to h1-json's total (request + response).",
        crate::wire::WARM_CALLS,
        crate::wire::COUNTED_CALLS,
        cx.timing.rounds
    ));
    let mut rows_spec: Vec<(String, Source, String)> = p
        .wire_transports()
        .iter()
        .map(|t| ((*t).to_owned(), Source::UserService, (*t).to_owned()))
        .collect();
    for (t, label) in [
        ("grpc-web", "grpc-web (lab client → order-service)"),
        ("rest-json", "REST JSON (lab client → order-service)"),
        ("rest-proto", "REST protobuf (lab client → order-service)"),
    ] {
        rows_spec.push((label.to_owned(), Source::LabClient, t.to_owned()));
    }
    let values = |src: Source, t: &str, o: u32, out: bool| -> Vec<Option<f64>> {
        (1..=cx.data.rounds)
            .map(|r| {
                cx.data
                    .wire
                    .iter()
                    .filter(|w| w.round == r)
                    .flat_map(|w| w.rows.iter())
                    .find(|row| row.source == src && row.transport == t && row.orders == o)
                    .map(|row| {
                        if out {
                            row.out_per_call
                        } else {
                            row.in_per_call
                        }
                    })
            })
            .collect()
    };
    let total = |src: Source, t: &str, o: u32| -> Vec<Option<f64>> {
        values(src, t, o, true)
            .into_iter()
            .zip(values(src, t, o, false))
            .map(|(a, b)| Some(a? + b?))
            .collect()
    };
    let spread = |v: Vec<Option<f64>>| Spread::of_rounds(&v);
    let mut headers = vec!["transport".to_owned()];
    for &o in &p.wire_sizes {
        headers.push(format!("{}: request B", f::orders(o)));
        headers.push(format!("{}: response B", f::orders(o)));
        headers.push(format!("{}: × h1-json", f::orders(o)));
    }
    let rows = rows_spec
        .iter()
        .map(|(label, src, t)| {
            let mut r = vec![label.clone()];
            for &o in &p.wire_sizes {
                r.push(f::range(spread(values(*src, t, o, true))));
                r.push(f::range(spread(values(*src, t, o, false))));
                r.push(f::ratio(rerun_interval(
                    &paired_ratios(&total(*src, t, o), &total(Source::UserService, BASELINE, o)),
                    None,
                )));
            }
            r
        })
        .collect();
    let mid = p
        .wire_sizes
        .iter()
        .copied()
        .find(|&o| o == 100)
        .or_else(|| p.wire_sizes.last().copied())
        .unwrap_or(100);
    let med = |src: Source, t: &str| spread(total(src, t, mid)).map(|s| s.median);
    let base_total = med(Source::UserService, BASELINE);
    let ratio = |src: Source, t: &str| match (med(src, t), base_total) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let mut parts = Vec::new();
    for (src, t, name) in [
        (
            Source::UserService,
            "h2c-json",
            "REST JSON on HTTP/2 (h2c-json)",
        ),
        (Source::UserService, "h1-proto", "REST protobuf (h1-proto)"),
        (Source::UserService, "grpc", "gRPC"),
        (Source::LabClient, "grpc-web", "gRPC-web"),
    ] {
        if let Some(r) = ratio(src, t) {
            parts.push(format!("{name} ×{r:.2}"));
        }
    }
    let verdict = match (
        ratio(Source::UserService, "h2c-json"),
        ratio(Source::UserService, "h1-proto"),
    ) {
        (Some(h2), Some(pb)) if pb < h2 => {
            " The saving follows the encoding (protobuf), not HTTP/2.".to_owned()
        }
        (Some(_), Some(_)) => " HTTP/2 saves more than protobuf here.".to_owned(),
        _ => String::new(),
    };
    let reading = match base_total {
        Some(b) => format!(
            "At {}, per call: REST JSON (h1-json) {} B; {}.{verdict}",
            f::orders(mid),
            f::num(b),
            parts.join("; ")
        ),
        None => format!(
            "h1-json was not measured: no baseline at {}.",
            f::orders(mid)
        ),
    };
    s.table(Table {
        caption: "Bytes per call on the wire".into(),
        headers,
        rows,
        reading,
    });
    s
}

fn schema(cx: &Context) -> Section {
    let p = cx.plan;
    let mut s = Section::new(
        "schema",
        "Schema: legacy all-strings v1 vs typed v2, all fields vs six (seed 003)",
    );
    s.para(method(
        cx,
        &format!(
            "Closed loop, {} VUs, pool {}. `grpc-v1` calls the legacy `order.v1` API (every field a \
             string: prices as \"12.50\", booleans as \"true\"); `grpc` the typed `order.v2`. The \
             six fields are `{SIX_FIELDS}` (of 16). v1 has no field selection: all fields cross \
             the wire and user-service drops the others, which is the point of the comparison",
            p.vus, p.pool
        ),
    ));
    for &o in &p.schema_sizes {
        let mk = |via: &str, six: bool| {
            let mut c = Cell::closed(via, o, p.vus, p.pool);
            if six {
                c.fields = Some(SIX_FIELDS.to_owned());
            }
            c
        };
        let base = mk("grpc", false);
        let variants = [
            ("v2 typed (grpc), all fields", mk("grpc", false)),
            ("v2 typed (grpc), 6 fields", mk("grpc", true)),
            ("v1 all-strings (grpc-v1), all fields", mk("grpc-v1", false)),
            ("v1 all-strings (grpc-v1), 6 fields", mk("grpc-v1", true)),
        ];
        let rows = variants
            .iter()
            .map(|(n, c)| {
                vec![
                    (*n).to_owned(),
                    f::range(cx.data.spread(c, Metric::Rate)),
                    f::range(cx.data.spread(c, Metric::UpP50)),
                    f::ratio(cx.data.ratio(c, &base, Metric::UpP50)),
                    f::range(cx.data.spread(c, Metric::UpP95)),
                    f::range(cx.data.spread(c, Metric::BytesIn)),
                    f::ratio(cx.data.ratio(c, &base, Metric::BytesIn)),
                    f::range(cx.data.spread(c, Metric::CpuServices)),
                    f::ratio(cx.data.ratio(c, &base, Metric::CpuServices)),
                ]
            })
            .collect();
        let r = |a: &Cell, m| {
            cx.data
                .ratio(a, &base, m)
                .map_or(MISSING.to_owned(), |s| format!("×{:.2}", s.median))
        };
        let change = |m| {
            cx.data
                .ratio(&variants[1].1, &base, m)
                .map_or(MISSING.to_owned(), |s| {
                    format!("{:+.0}%", (s.median - 1.0) * 100.0)
                })
        };
        s.table(Table {
            caption: format!("At {}", f::orders(o)),
            headers: vec![
                "API, selection".into(),
                "req/s".into(),
                "upstream p50 µs".into(),
                "× v2 all".into(),
                "upstream p95 µs".into(),
                "response B/call".into(),
                "× v2 all".into(),
                "CPU user+order µs/req".into(),
                "× v2 all".into(),
            ],
            rows,
            reading: format!(
                "v1 takes {} of v2's upstream p50 and {} of its CPU at {}; selecting six fields changes v2's bytes by {}, its upstream p50 by {} and its CPU by {} (v1's bytes do not change: it has no selection).",
                r(&variants[2].1, Metric::UpP50),
                r(&variants[2].1, Metric::CpuServices),
                f::orders(o),
                change(Metric::BytesIn),
                change(Metric::UpP50),
                change(Metric::CpuServices),
            ),
        });
    }
    s
}

fn streaming(cx: &Context) -> Section {
    let p = cx.plan;
    let n = p.streaming_n;
    let mut s = Section::new(
        "streaming",
        "Streaming: N lookups as N unary calls, on one bidi stream, or as one server stream (seed 002)",
    );
    s.para(method(
        cx,
        &format!(
            "Closed loop, {} VUs; each k6 iteration needs {n} orders of the same user. \
             \"{n} unary\" and \"bidi\" variants send {n} requests to user-service at once \
             (`http.batch`), each fetching 1 order: user-service then makes {n} unary calls \
             (its pool of {} connections, multiplexed for gRPC) or puts {n} lookups on its \
             long-lived `LookupOrders` bidi streams. \"One server stream\" asks once for {n} \
             orders over `StreamOrders` (one message per order); \"one unary call\" asks once \
             over `ListOrders` (one message). Seed 002's service looped over the backend; here the \
             {n} lookups leave together, which is how a service fanning out would do it. A set is \
             one iteration",
            p.streaming_vus, p.pool
        ),
    ));
    let variants = streaming_variants(p);
    let base = &variants[1].1;
    let rows = variants
        .iter()
        .map(|(name, c)| {
            vec![
                name.clone(),
                f::range(cx.data.spread(c, Metric::IterationRate)),
                f::range(cx.data.spread(c, Metric::IterP50)),
                f::ratio(cx.data.ratio(c, base, Metric::IterP50)),
                f::range(cx.data.spread(c, Metric::IterP95)),
                f::range(cx.data.spread(c, Metric::UpstreamCallsPerIteration)),
                f::range(cx.data.spread(c, Metric::BytesPerIteration)),
                f::range(cx.data.spread(c, Metric::CpuServicesPerIteration)),
                f::ratio(cx.data.ratio(c, base, Metric::CpuServicesPerIteration)),
            ]
        })
        .collect();
    let cells: Vec<(String, Cell)> = variants.clone();
    s.table(Table {
        caption: format!("{n} orders per set"),
        headers: vec![
            "variant".into(),
            "sets/s".into(),
            "time per set p50 ms".into(),
            format!("× {n} unary gRPC"),
            "time per set p95 ms".into(),
            "upstream calls per set".into(),
            "wire bytes per set".into(),
            "CPU user+order µs/set".into(),
            format!("× {n} unary gRPC"),
        ],
        rows,
        reading: {
            let r = rank_reading(cx, &cells, Metric::IterP50, base);
            format!("Time per set: {r}.")
        },
    });
    s.chart(latency_chart_iter(cx, n, &variants));
    s
}

fn latency_chart_iter(cx: &Context, n: u32, v: &[(String, Cell)]) -> Chart {
    let title = format!("Time per set of {n} lookups");
    Chart {
        file: "streaming-latency.svg".into(),
        title: title.clone(),
        svg: svg::bar_chart(&BarChart {
            title,
            y_label: "ms".into(),
            y_log: false,
            groups: v
                .iter()
                .map(|(name, _)| name.split(" (").next().unwrap_or(name).to_owned())
                .collect(),
            series: vec!["p50".into(), "p95".into()],
            values: v
                .iter()
                .map(|(_, c)| {
                    vec![
                        cx.data.median(c, Metric::IterP50),
                        cx.data.median(c, Metric::IterP95),
                    ]
                })
                .collect(),
        }),
    }
}

fn naive(cx: &Context) -> Section {
    let p = cx.plan;
    let mut s = Section::new(
        "naive",
        "Naive: a new connection per call vs pooled keep-alive (seed 000)",
    );
    let ports = crate::procfs::ephemeral_ports();
    s.para(method(
        cx,
        &format!(
            "Closed loop, {} VUs, {} order per call, pool {} (h1-json may hold that many \
             keep-alive connections; h1-json-close opens one per call, as Go's default \
             `http.Post` did in seed 000). TIME_WAIT sockets are counted from /proc/net/tcp on \
             order-service's REST port (either end), new during the measured run; Linux keeps \
             each for 60 s. Ephemeral ports on this machine: {}",
            p.naive_vus,
            p.naive_orders,
            p.naive_vus,
            ports.map_or("unknown".to_owned(), |n| f::num(f64::from(n)))
        ),
    ));
    let cell = |via: &str| Cell::closed(via, p.naive_orders, p.naive_vus, p.naive_vus as u16);
    let (close, pooled) = (cell("h1-json-close"), cell("h1-json"));
    let secs = cx.timing.duration_s;
    let rows = [("h1-json-close", &close), ("h1-json", &pooled)]
        .iter()
        .map(|(n, c)| {
            let opened_per_s = cx
                .data
                .spread(c, Metric::ConnectionsOpened)
                .map(|s| Spread {
                    median: s.median / secs,
                    min: s.min / secs,
                    max: s.max / secs,
                    q1: s.q1 / secs,
                    q3: s.q3 / secs,
                    n: s.n,
                });
            let steady = opened_per_s.map(|s| s.median * 60.0);
            vec![
                (*n).to_owned(),
                f::range(cx.data.spread(c, Metric::Rate)),
                f::range(cx.data.spread(c, Metric::E2eP50)),
                f::range(cx.data.spread(c, Metric::E2eP99)),
                f::range(cx.data.spread(c, Metric::UpP50)),
                f::range(cx.data.spread(c, Metric::UpP95)),
                f::range(cx.data.spread(c, Metric::ConnectionsOpened)),
                f::range(opened_per_s),
                f::range(cx.data.spread(c, Metric::ConnectionsHeld)),
                f::range(cx.data.spread(c, Metric::TimeWait)),
                steady.map_or(MISSING.to_owned(), |v| {
                    let of = ports.map_or(String::new(), |p| {
                        format!(" ({:.0}% of the ports)", 100.0 * v / f64::from(p))
                    });
                    format!("{}{of}", f::num(v))
                }),
            ]
        })
        .collect();
    let opened = cx.data.median(&close, Metric::ConnectionsOpened);
    let tw = cx.data.median(&close, Metric::TimeWait);
    let pooled_opened = cx.data.median(&pooled, Metric::ConnectionsOpened);
    s.table(Table {
        caption: "Connection churn".into(),
        headers: vec![
            "transport".into(),
            "req/s".into(),
            "p50 ms".into(),
            "p99 ms".into(),
            "upstream p50 µs".into(),
            "upstream p95 µs".into(),
            "connections opened".into(),
            "opened per second".into(),
            "held at the end".into(),
            "new TIME_WAIT sockets".into(),
            "TIME_WAIT at steady state (60 s × opened/s)".into(),
        ],
        rows,
        reading: format!(
            "In {} s h1-json-close opened {} connections and left {} sockets in TIME_WAIT; pooled h1-json opened {} and served {} of its rate ({} its upstream p50).",
            f::num(secs),
            opened.map_or(MISSING.to_owned(), f::num),
            tw.map_or(MISSING.to_owned(), f::num),
            pooled_opened.map_or(MISSING.to_owned(), f::num),
            f::ratio(cx.data.ratio(&pooled, &close, Metric::Rate)),
            f::ratio(cx.data.ratio(&pooled, &close, Metric::UpP50)),
        ),
    });
    s
}

pub(crate) fn scaled(s: Option<Spread>, k: f64) -> Option<Spread> {
    s.map(|s| Spread {
        median: s.median * k,
        min: s.min * k,
        max: s.max * k,
        q1: s.q1 * k,
        q3: s.q3 * k,
        n: s.n,
    })
}

fn pitfall(cx: &Context) -> Section {
    let p = cx.plan;
    let mut s = Section::new(
        "pitfall",
        "Pitfall: k6's own gRPC client vs the call timed inside user-service (seed 001)",
    );
    s.para(method(
        cx,
        &format!(
            "Closed loop, {} VUs. Row one: `k6/grpc-direct.js`, k6's gRPC client calling \
             order-service's `order.v2.OrderService/ListOrders` directly, one connection per VU; k6 \
             has no generated stubs and converts every message through protobuf reflection into \
             JavaScript objects, on the load generator's CPU. Row two: the same `ListOrders` made by \
             user-service's compiled tonic client (`via=grpc`) and timed there, while k6 drives \
             user-service over HTTP/1.1 — the measurement seed 001 switched to after its first, \
             wrong \"gRPC is 3.3× slower\"",
            p.vus
        ),
    ));
    for &o in &p.factorial_sizes {
        let direct = Cell::closed(K6_GRPC_DIRECT, o, p.vus, p.pool);
        let via = Cell::closed("grpc", o, p.vus, p.pool);
        let rows = vec![
            vec![
                "k6's gRPC client → order-service".to_owned(),
                f::range(cx.data.spread(&direct, Metric::Rate)),
                f::range(cx.data.spread(&direct, Metric::E2eP50)),
                f::range(cx.data.spread(&direct, Metric::E2eP95)),
                f::range(cx.data.spread(&direct, Metric::CpuK6)),
                f::range(cx.data.spread(&direct, Metric::CpuOrder)),
            ],
            vec![
                "user-service's tonic client (grpc), timed in user-service".to_owned(),
                f::range(cx.data.spread(&via, Metric::Rate)),
                f::range(scaled(cx.data.spread(&via, Metric::UpP50), 1e-3)),
                f::range(scaled(cx.data.spread(&via, Metric::UpP95), 1e-3)),
                f::range(cx.data.spread(&via, Metric::CpuK6)),
                f::range(cx.data.spread(&via, Metric::CpuOrder)),
            ],
        ];
        let lat = cx
            .data
            .ratio_of(&direct, Metric::E2eP50, &via, Metric::UpP50, 1e-3);
        s.table(Table {
            caption: format!("ListOrders of {}", f::orders(o)),
            headers: vec![
                "who calls and times it".into(),
                "calls/s".into(),
                "ListOrders p50 ms".into(),
                "ListOrders p95 ms".into(),
                "k6 CPU µs per call".into(),
                "order-service CPU µs per call".into(),
            ],
            rows,
            reading: {
                let cpu = cx.data.ratio(&direct, &via, Metric::CpuK6);
                let why = match cpu.map(|c| c.median) {
                    Some(c) if c >= 10.0 => {
                        " With messages this big the direct test measures k6 converting them through reflection, not gRPC."
                    }
                    Some(_) => " k6's CPU alone does not explain this gap.",
                    None => "",
                };
                format!(
                    "At {}, k6's own client times the same ListOrders at {} the latency user-service measures, and k6 spends {} of the CPU per call it spends driving user-service.{why}",
                    f::orders(o),
                    f::ratio(lat),
                    f::ratio(cpu),
                )
            },
        });
    }
    s
}

/// The open-loop cells of the pool experiment at one rate.
pub fn pool_cells(p: &Plan, rate: u32, climbing: &[(String, u16)]) -> Vec<Cell> {
    climbing
        .iter()
        .map(|(via, pool)| Cell {
            via: via.clone(),
            orders: p.pool_orders,
            fields: None,
            load: Load::Open {
                rate,
                max_vus: p.pool_max_vus,
            },
            pool: *pool,
            lookups: 1,
            rtt_ms: None,
            tls: false,
        })
        .collect()
}

/// Whether a pool cell dropped more than the threshold (median of rounds).
pub fn dropped(p: &Plan, data: &Data, cell: &Cell) -> bool {
    data.median(cell, Metric::DroppedShare)
        .is_some_and(|v| v > p.drop_threshold_pct)
}

fn pool(cx: &Context) -> Section {
    let p = cx.plan;
    let d = cx.data;
    let mut s = Section::new(
        "pool",
        "Pool: connection budget 1 vs 4, open loop at rising rates (seed 001 §5)",
    );
    s.para(method(
        cx,
        &format!(
            "Open loop (k6 `constant-arrival-rate`, at most {} VUs), {} orders per call, \
             user-service pool of 1 or 4 TCP connections per transport. Each transport and pool \
             climbs the rates {} and stops at the first rate whose median drops more than {}% of \
             its iterations (dropped iterations: k6 had no free VU because answers came too slowly)",
            p.pool_max_vus,
            p.pool_orders,
            p.pool_rates
                .iter()
                .map(|r| format!("{r}/s"))
                .collect::<Vec<_>>()
                .join(", "),
            p.drop_threshold_pct
        ),
    ));
    let measured: Vec<&Cell> = d
        .cells
        .keys()
        .filter(|c| matches!(c.load, Load::Open { .. }) && c.orders == p.pool_orders)
        .collect();
    let rate_of = |c: &Cell| match c.load {
        Load::Open { rate, .. } => rate,
        Load::Closed { .. } => 0,
    };
    let mut combos: Vec<(String, u16)> = Vec::new();
    for via in &p.pool_vias {
        for &pool in &p.pool_sizes {
            combos.push((via.clone(), pool));
        }
    }
    let mut rows = Vec::new();
    let mut summary_rows = Vec::new();
    let mut series_drop = Vec::new();
    let mut series_p95 = Vec::new();
    for (via, pool) in &combos {
        let mut cells: Vec<&Cell> = measured
            .iter()
            .copied()
            .filter(|c| &c.via == via && c.pool == *pool)
            .collect();
        cells.sort_by_key(|c| rate_of(c));
        let mut clean = None;
        let mut first_drop = None;
        for c in &cells {
            let r = rate_of(c);
            rows.push(vec![
                format!("{via} · pool {pool} · {r}/s"),
                f::range(d.spread(c, Metric::Rate)),
                f::range(d.spread(c, Metric::DroppedShare)),
                f::range(d.spread(c, Metric::E2eP50)),
                f::range(d.spread(c, Metric::E2eP90)),
                f::range(d.spread(c, Metric::E2eP95)),
                f::range(d.spread(c, Metric::E2eP99)),
                f::range(d.spread(c, Metric::UpP95)),
                f::range(d.spread(c, Metric::ConnectionsHeld)),
                f::range(d.spread(c, Metric::K6Cores)),
            ]);
            if dropped(p, d, c) {
                if first_drop.is_none() {
                    first_drop = Some(*c);
                }
            } else if first_drop.is_none() {
                clean = Some(*c);
            }
        }
        summary_rows.push(vec![
            format!("{via} · pool {pool}"),
            clean.map_or("none".to_owned(), |c| {
                format!(
                    "{}/s (p95 {} ms)",
                    rate_of(c),
                    f::num(d.median(c, Metric::E2eP95).unwrap_or(f64::NAN))
                )
            }),
            first_drop.map_or(
                format!("none up to {}/s", cells.last().map_or(0, |c| rate_of(c))),
                |c| {
                    format!(
                        "{}/s: {} req/s achieved, {}% dropped, p95 {} ms",
                        rate_of(c),
                        f::num(d.median(c, Metric::Rate).unwrap_or(f64::NAN)),
                        f::num(d.median(c, Metric::DroppedShare).unwrap_or(f64::NAN)),
                        f::num(d.median(c, Metric::E2eP95).unwrap_or(f64::NAN))
                    )
                },
            ),
        ]);
        let pts = |m: Metric| -> Vec<(f64, f64)> {
            cells
                .iter()
                .filter_map(|c| d.median(c, m).map(|v| (f64::from(rate_of(c)), v)))
                .collect()
        };
        series_drop.push(Series {
            name: format!("{via} pool {pool}"),
            points: pts(Metric::DroppedShare),
        });
        series_p95.push(Series {
            name: format!("{via} pool {pool}"),
            points: pts(Metric::E2eP95),
        });
    }
    let best = summary_rows
        .iter()
        .map(|r| r[0].clone() + ": " + &r[2])
        .collect::<Vec<_>>()
        .join("; ");
    s.table(Table {
        caption: "Where drops begin".into(),
        headers: vec![
            "transport · pool".into(),
            "highest rate without drops".into(),
            "first rate with drops".into(),
        ],
        rows: summary_rows,
        reading: format!("First drops — {best}."),
    });
    s.table(Table {
        caption: "Every rate".into(),
        headers: vec![
            "transport · pool · asked".into(),
            "achieved req/s".into(),
            "dropped %".into(),
            "p50 ms".into(),
            "p90 ms".into(),
            "p95 ms".into(),
            "p99 ms".into(),
            "upstream p95 µs".into(),
            "connections held".into(),
            "k6 cores".into(),
        ],
        rows,
        reading: "Tail latency (p95, p99) climbs at rates where the median still looks fine: saturation shows in the tail first, as seed 001 found.".into(),
    });
    s.chart(Chart {
        file: "pool-drops.svg".into(),
        title: "Dropped iterations against the asked rate".into(),
        svg: svg::line_chart(&LineChart {
            title: "Dropped iterations against the asked rate".into(),
            x_label: "asked rate, iterations/s (log)".into(),
            y_label: "dropped, % of asked".into(),
            x_log: true,
            y_log: false,
            series: series_drop,
        }),
    });
    s.chart(Chart {
        file: "pool-p95.svg".into(),
        title: "End-to-end p95 against the asked rate".into(),
        svg: svg::line_chart(&LineChart {
            title: "End-to-end p95 against the asked rate".into(),
            x_label: "asked rate, iterations/s (log)".into(),
            y_label: "p95, ms (log)".into(),
            x_log: true,
            y_log: true,
            series: series_p95,
        }),
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_expands_to_every_experiment_once() {
        use clap::ValueEnum as _;
        let all = Experiment::All.expand();
        assert!(!all.contains(&Experiment::All));
        let once: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(once.len(), all.len(), "{all:?}");
        assert!(all.contains(&Experiment::Codec));
        assert!(Experiment::value_variants().len() > all.len());
        assert_eq!(Experiment::Floor.expand(), vec![Experiment::Floor]);
    }

    #[test]
    fn the_quick_plan_shares_cells_between_experiments() {
        let p = Plan::new(true, None, None);
        let payload = Experiment::Payload.cells(&p);
        assert_eq!(payload.len(), 20);
        for c in Experiment::Factorial.cells(&p) {
            assert!(payload.contains(&c), "{c:?} not shared");
        }
        let schema = Experiment::Schema.cells(&p);
        assert_eq!(schema.iter().filter(|c| !payload.contains(c)).count(), 2);
        assert_eq!(Experiment::Streaming.cells(&p).len(), 5);
        assert_eq!(Experiment::Naive.cells(&p).len(), 2);
    }

    #[test]
    fn filters_narrow_the_transports_and_sizes() {
        let t = vec!["grpc".to_owned(), "h1-json".to_owned()];
        let p = Plan::new(true, Some(&t), Some(&[10]));
        assert_eq!(Experiment::Payload.cells(&p).len(), 2);
        assert_eq!(p.pool_vias, vec!["h1-json".to_owned(), "grpc".to_owned()]);
        assert_eq!(p.wire_sizes, vec![10]);
    }

    #[test]
    fn experiment_names_match_the_command_line() {
        use clap::ValueEnum as _;
        for e in Experiment::value_variants() {
            let pv = e.to_possible_value().expect("visible");
            assert_eq!(pv.get_name(), e.name());
        }
    }
}
