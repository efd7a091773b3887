//! What one measurement is: a [`Cell`] (transport, payload, load, pool), the
//! raw [`RoundRecord`] of one round of it, and the [`Measures`] derived from
//! that record, which every table reads through a [`Metric`].

use serde::{Deserialize, Serialize};

use crate::measure::k6;
use crate::measure::procfs::TcpStates;
use crate::measure::prom::Upstream;

/// The `via` of cells where k6's own gRPC client calls order-service
/// directly (`k6/grpc-direct.js`): the Spring Boot post's load-tool pitfall. No
/// user-service hop is measured in them.
pub const K6_GRPC_DIRECT: &str = "k6-grpc-direct";

/// The six order fields of the type-fix post's selection (of the 16 an order has).
pub const SIX_FIELDS: &str = "id,product_name,total_minor,currency,status,created_at";

/// The data set's user owning exactly `orders` orders (0, 1, 10, 100, 1,000
/// or 10,000); for any other count, the 10,000-order user (as the k6
/// scripts' `userFor`).
pub fn fixed_user(orders: u32) -> String {
    let n = if [0, 1, 10, 100, 1000, 10000].contains(&orders) {
        orders
    } else {
        10000
    };
    format!("00000000-0000-0000-0000-{n:012}")
}

/// How k6 drives load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Load {
    /// `vus` virtual users, each sending its next request when answered.
    Closed { vus: u32 },
    /// `rate` iterations started per second, whatever the answers do.
    Open { rate: u32, max_vus: u32 },
}

/// One point of an experiment's grid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Cell {
    /// user-service's transport to order-service (`via`).
    pub via: String,
    /// Orders per user (the limit): with one user, the fixed user owning
    /// that many; with several, each one's first `orders`.
    pub orders: u32,
    /// Selected order fields; `None` is all of them.
    pub fields: Option<String>,
    pub load: Load,
    /// user-service's connection budget per transport (`USER_POOL_SIZE`).
    pub pool: u16,
    /// Users per k6 request: 1 asks one user's orders
    /// (`/v1/users/{id}/orders`); N > 1 asks the first orders of the data
    /// set's other users 1..N in one request (`/v1/orders?users=…`), which
    /// user-service fetches as N calls, or as one when `batch`. Round files
    /// written before it call it `lookups`: N requests sent at once.
    #[serde(alias = "lookups")]
    pub users: u32,
    /// With several users, user-service makes one call that answers them all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch: bool,
    /// What surrounds the two services in this cell: the launcher gets it
    /// whole. Flattened, so a cell's JSON keeps its fields at the top.
    #[serde(flatten)]
    pub env: Env,
}

/// The environment of a cell: everything between and around the services
/// that is not the transport, handed to the launcher as one value. The
/// default is two services talking directly, in cleartext.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Env {
    /// Round-trip time emulated between user-service and order-service by
    /// the delay proxy (half each way), in ms; `None`: no proxy, the services
    /// talk directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<u32>,
    /// Every listener of order-service serves TLS and user-service dials it
    /// over TLS with the run's certificates; cleartext otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
    /// Several order-service replicas and how user-service reaches them;
    /// `None`: one order-service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Replicas>,
    /// A bandwidth cap on the link between the services, Mbit/s each way
    /// (the delay proxy's token bucket); `None`: no cap. With it, the
    /// services talk through the proxy even without an RTT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<u32>,
    /// gzip between the services: order-service compresses REST and gRPC
    /// answers (`ORDER_REST_GZIP`, `ORDER_GRPC_GZIP`) and user-service asks
    /// for it (`USER_UPSTREAM_GZIP`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gzip: bool,
    /// zstd between the services, as `gzip` (`ORDER_REST_ZSTD`,
    /// `ORDER_GRPC_ZSTD`, `USER_UPSTREAM_ZSTD`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zstd: bool,
    /// Where both services keep their data in this cell; `None`: the run's
    /// store (memory, or `--database-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<Store>,
    /// Each call's parts recorded: order-service's account of its time
    /// (`ORDER_SERVER_TIMING`) and user-service's decoding
    /// (`USER_UPSTREAM_BREAKDOWN`). The account adds bytes to every answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub breakdown: bool,
}

/// A store a cell asks for whatever the run's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Store {
    /// In memory, even on a run with `--database-url`.
    Memory,
    /// Postgres: `--database-url`, or the local default
    /// ([`crate::measure::services::DEFAULT_DATABASE_URL`]).
    Postgres,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Postgres => "postgres",
        }
    }
}

/// The most replicas a cell may have.
pub const MAX_REPLICAS: usize = 8;

/// Several order-service replicas, on the same ports at 127.0.0.1, .2, …
/// (as pods serve on the same ports at their own addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Replicas {
    /// How many (2 to [`MAX_REPLICAS`]).
    pub n: u8,
    pub balance: Balance,
    /// The last replica is behind a delay proxy adding [`SLOW_RTT_MS`] to
    /// every round trip to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slow: bool,
    /// Every replica rotates its connections past [`ROTATION_AGE_MS`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotation: bool,
}

/// What a slow replica adds to each round trip, ms.
pub const SLOW_RTT_MS: u32 = 20;
/// The connection age past which replicas rotate connections, ms.
pub const ROTATION_AGE_MS: u32 = 2_000;

/// How user-service reaches the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// One address: the first replica only.
    Direct,
    /// One address: HAProxy in `mode tcp`, balancing connections.
    L4,
    /// One address: HAProxy in `mode http`, balancing requests (HTTP/2
    /// streams and gRPC calls included).
    L7,
    /// Every replica's address (`USER_ORDER_REPLICAS`): user-service
    /// balances its own calls, round robin.
    Client,
    /// The same, picking the less busy of two replicas (power of two
    /// choices, by calls in flight: `USER_ORDER_PICK=p2c`).
    ClientP2c,
}

impl Balance {
    pub const ALL: [Balance; 5] = [
        Balance::Direct,
        Balance::L4,
        Balance::L7,
        Balance::Client,
        Balance::ClientP2c,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Balance::Direct => "direct",
            Balance::L4 => "l4",
            Balance::L7 => "l7",
            Balance::Client => "client",
            Balance::ClientP2c => "client-p2c",
        }
    }

    /// Whether user-service balances (knows every replica).
    pub fn by_client(self) -> bool {
        matches!(self, Balance::Client | Balance::ClientP2c)
    }
}

impl Replicas {
    fn id(&self) -> String {
        format!(
            "-r{}{}{}{}",
            self.n,
            self.balance.name(),
            if self.slow { "-slow" } else { "" },
            if self.rotation { "-rot" } else { "" }
        )
    }

    fn label(&self) -> String {
        format!(
            ", {} replicas {}{}{}",
            self.n,
            self.balance.name(),
            if self.slow { ", one slow" } else { "" },
            if self.rotation { ", rotation" } else { "" }
        )
    }
}

impl Env {
    /// The part of a cell id that says the environment ("" when direct).
    fn id(&self) -> String {
        let rtt = self.rtt_ms.map_or(String::new(), |r| format!("-rtt{r}"));
        let tls = if self.tls { "-tls" } else { "" };
        let replicas = self.replicas.map_or(String::new(), |r| r.id());
        let store = match self.store {
            None => "",
            Some(Store::Memory) => "-mem",
            Some(Store::Postgres) => "-pg",
        };
        let rate = self
            .rate_mbit
            .map_or(String::new(), |r| format!("-{r}mbit"));
        let gzip = if self.gzip { "-gzip" } else { "" };
        let gzip = if self.zstd {
            format!("{gzip}-zstd")
        } else {
            gzip.to_owned()
        };
        let parts = if self.breakdown { "-parts" } else { "" };
        format!("{rtt}{rate}{tls}{replicas}{store}{gzip}{parts}")
    }

    /// The part of a progress label that says the environment.
    fn label(&self) -> String {
        let mut s = String::new();
        if let Some(r) = self.rtt_ms {
            s.push_str(&format!(", RTT {r} ms"));
        }
        if self.tls {
            s.push_str(", TLS");
        }
        if let Some(r) = self.replicas {
            s.push_str(&r.label());
        }
        if let Some(r) = self.rate_mbit {
            s.push_str(&format!(", {r} Mbit/s"));
        }
        if self.gzip {
            s.push_str(", gzip");
        }
        if self.zstd {
            s.push_str(", zstd");
        }
        if self.breakdown {
            s.push_str(", parts timed");
        }
        match self.store {
            None => {}
            Some(Store::Memory) => s.push_str(", in memory"),
            Some(Store::Postgres) => s.push_str(", on Postgres"),
        }
        s
    }
}

impl Cell {
    /// A closed-loop cell of one lookup per iteration.
    pub fn closed(via: &str, orders: u32, vus: u32, pool: u16) -> Cell {
        Cell {
            via: via.to_owned(),
            orders,
            fields: None,
            load: Load::Closed { vus },
            pool,
            users: 1,
            batch: false,
            env: Env::default(),
        }
    }

    /// The same cell asking for the first `orders` of `users` users in one
    /// request, fetched as one call per user or one `batch` call.
    pub fn many_users(mut self, users: u32, batch: bool) -> Cell {
        self.users = users;
        self.batch = batch;
        self
    }

    /// The same cell in another environment.
    pub fn with_env(mut self, env: Env) -> Cell {
        self.env = env;
        self
    }

    /// A file-name-safe identifier, unique per cell.
    pub fn id(&self) -> String {
        let fields = match &self.fields {
            None => "all".to_owned(),
            Some(f) if f == SIX_FIELDS => "six".to_owned(),
            Some(f) => f.replace(',', "+"),
        };
        let load = match self.load {
            Load::Closed { vus } => format!("vu{vus}"),
            Load::Open { rate, .. } => format!("rate{rate}"),
        };
        let users = match (self.users > 1, self.batch) {
            (false, _) => String::new(),
            (true, false) => format!("-x{}", self.users),
            (true, true) => format!("-x{}-batch", self.users),
        };
        format!(
            "{}-o{}-{fields}-{load}-p{}{users}{}",
            self.via,
            self.orders,
            self.pool,
            self.env.id()
        )
    }

    /// A short human description for progress lines.
    pub fn label(&self) -> String {
        let orders = match self.orders {
            1 => "1 order".to_owned(),
            n if n >= 1000 => format!("{},{:03} orders", n / 1000, n % 1000),
            n => format!("{n} orders"),
        };
        let mut s = format!("{} {orders}", self.via);
        if self.fields.is_some() {
            s.push_str(" (6 fields)");
        }
        if self.users > 1 {
            s.push_str(&format!(" x{} users", self.users));
            if self.batch {
                s.push_str(" in one call");
            }
        }
        match self.load {
            Load::Closed { vus } => s.push_str(&format!(", {vus} VUs")),
            Load::Open { rate, .. } => s.push_str(&format!(", open loop {rate}/s")),
        }
        s.push_str(&format!(", pool {}", self.pool));
        s.push_str(&self.env.label());
        s
    }
}

/// CPU time of each process over the measured part of a round, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    pub order_us: f64,
    pub user_us: f64,
    pub k6_us: f64,
}

/// Peak resident set of each process, in kB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rss {
    pub order_kb: f64,
    pub user_kb: f64,
    pub k6_kb: f64,
}

/// Everything recorded about one round of one cell: the raw JSON of the
/// results directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundRecord {
    pub experiment: String,
    pub cell: Cell,
    /// 1-based.
    pub round: u32,
    pub started_at: String,
    /// The measured duration asked of k6, in seconds.
    pub duration_s: f64,
    pub k6: k6::Summary,
    /// user-service's counters for `cell.via` before and after.
    pub upstream_before: Upstream,
    pub upstream_after: Upstream,
    pub cpu: Cpu,
    pub rss: Rss,
    /// Sockets on order-service's REST port before and after the measured run.
    pub tcp_before: TcpStates,
    pub tcp_after: TcpStates,
    /// Cores of the machine, to express CPU as a share of it.
    pub cores: u32,
    /// CPU the rest of the machine used during the measured run (other
    /// programs, the lab itself), in µs: a busy neighbour slows every cell.
    #[serde(default)]
    pub other_cpu_us: f64,
    /// Whether each process was pinned, and where (`--pin`).
    pub pinning: Option<String>,
    /// Why this round's numbers should be read with care.
    pub flags: Vec<String>,
    /// The delay proxy's figures over the measured run (cells with an RTT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyRecord>,
    /// The wall time the CPU figures were counted over, s (`None` in rounds
    /// recorded before it was kept: the measured duration stands in).
    #[serde(default)]
    pub window_s: Option<f64>,
    /// The local Postgres server's CPU over the window, µs, with
    /// `--database-url` on this machine.
    #[serde(default)]
    pub postgres_us: Option<f64>,
    /// The environment each service was started with (everything else is
    /// cleared): `order-service NAME` and `user-service NAME` to its value.
    #[serde(default)]
    pub service_env: std::collections::BTreeMap<String, String>,
    /// k6's full summary data, as its handleSummary wrote it.
    pub k6_summary: serde_json::Value,
    /// With several replicas: what each did over the measured run, in
    /// replica order (the slow one last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<ReplicaRecord>>,
    /// HAProxy's CPU over the window, µs, when it balanced the cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balancer_cpu_us: Option<f64>,
    /// The services were a target the lab did not start: their processes,
    /// CPU, memory and sockets are not this machine's to read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_proc: bool,
}

/// One replica over a measured run, from its own `/metrics` and /proc.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaRecord {
    /// The address its clients reach it at.
    pub addr: String,
    /// Calls for orders it answered well, every transport's route.
    pub calls: f64,
    /// Its CPU over the window, µs.
    pub cpu_us: f64,
    /// Connections open on its listeners at the end of the run.
    pub connections: f64,
}

/// What the delay proxy between the services did during a measured run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProxyRecord {
    /// The one-way delay asked of each direction, µs.
    pub one_way_us: f64,
    /// Chunks written (both directions) and connections accepted.
    pub chunks: f64,
    pub connections: f64,
    /// How much later than asked chunks were written, µs: the mean over the
    /// measured run, the maximum over the whole round (warm-up included).
    pub late_mean_us: f64,
    pub late_max_us: f64,
    /// CPU of the lab's process, where the proxy's threads run, µs.
    pub cpu_us: f64,
}

/// The share of a core above which k6 counts as the bottleneck.
pub const K6_SATURATED_CORES: f64 = 0.9;

/// Other processes' CPU, in cores, above which a round is flagged as run on
/// a busy machine.
pub const BUSY_NEIGHBOUR_CORES: f64 = 0.25;

/// The whole machine's CPU share (every process, HAProxy and the rest
/// included) past which a round with several replicas is flagged: the
/// replicas then compete for cores, which can skew their shares.
pub const MACHINE_SATURATED: f64 = 0.95;

/// The share of a round's answers (shed ones aside) that may be bad before
/// the round is failed: left out of medians and ratios.
pub const FAILED_BAD_SHARE_PCT: f64 = 1.0;

/// The figures of one round, derived from its [`RoundRecord`]. Rates,
/// latencies and CPU per request count good answers only (a 200 over the
/// transport asked for with the expected body); a figure with no sample is
/// `None`, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measures {
    /// Every answer k6 got, good or not.
    pub requests: f64,
    pub good: f64,
    pub bad_answers: f64,
    pub shed: f64,
    /// Sets of lookups whose every answer was good.
    pub sets: f64,
    /// Good answers, and good sets, per second.
    pub rate: f64,
    pub set_rate: f64,
    pub dropped: f64,
    /// Iterations k6 started (open loop: with the dropped ones, what was asked).
    pub iterations: f64,
    pub e2e_ms: Option<k6::Percentiles>,
    pub set_ms: Option<k6::Percentiles>,
    pub upstream_us: Option<k6::Percentiles>,
    /// Where the round trips went, when the cell recorded it.
    pub parts: Option<k6::PartsSummary>,
    pub upstream_calls: f64,
    pub upstream_errors: f64,
    pub connections_opened: f64,
    pub connections_held: f64,
    pub bytes_out_per_call: Option<f64>,
    pub bytes_in_per_call: Option<f64>,
    pub cpu: Cpu,
    pub rss: Rss,
    pub time_wait_new: f64,
    pub time_wait_after: f64,
    /// The wall time CPU is counted over, s: from the readings before k6
    /// started to those after it exited.
    pub window_s: f64,
    /// k6's CPU over the window, in cores.
    pub k6_cores: f64,
    /// All three processes' CPU as a share of the machine.
    pub machine_busy: f64,
    /// Other processes' CPU during the window, in cores.
    pub other_cores: f64,
    /// The Postgres server's CPU over the window, µs (a run with a local
    /// database).
    pub postgres_us: Option<f64>,
    /// The delay proxy's lateness (mean, µs) and CPU (cores); `None`
    /// without a proxy.
    pub proxy_late_us: Option<f64>,
    pub proxy_cores: Option<f64>,
    /// TLS handshakes user-service made to order-service during the
    /// measured run, full and resumed, per 1,000 upstream calls.
    pub tls_full_per_1k: Option<f64>,
    pub tls_resumed_per_1k: Option<f64>,
    /// With several replicas: each one's share of the calls, CPU and
    /// connections.
    pub replicas: Option<ReplicaMeasures>,
    /// HAProxy's CPU over the window, cores, when it balanced the cell.
    pub balancer_cores: Option<f64>,
    /// The services' processes were not the lab's (`--target`): their
    /// CPU, memory and sockets are missing.
    pub no_proc: bool,
}

/// Each replica's share of a round, in replica order.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReplicaMeasures {
    pub n: usize,
    /// Share of the calls the replicas answered, %; `None` when they
    /// answered none.
    pub share_pct: [Option<f64>; MAX_REPLICAS],
    pub cores: [f64; MAX_REPLICAS],
    pub connections: [f64; MAX_REPLICAS],
    /// The largest replica's calls over the fair share of them (1 is
    /// even; n is all on one), from the counts themselves.
    pub imbalance: Option<f64>,
}

impl ReplicaMeasures {
    fn of(rs: &[ReplicaRecord], window_s: f64) -> ReplicaMeasures {
        let n = rs.len().min(MAX_REPLICAS);
        let total: f64 = rs.iter().map(|r| r.calls).sum();
        let mut m = ReplicaMeasures {
            n,
            share_pct: [None; MAX_REPLICAS],
            cores: [0.0; MAX_REPLICAS],
            connections: [0.0; MAX_REPLICAS],
            imbalance: None,
        };
        let largest = rs.iter().take(n).map(|r| r.calls).fold(0.0, f64::max);
        m.imbalance = (total > 0.0).then(|| largest * n as f64 / total);
        for (i, r) in rs.iter().take(n).enumerate() {
            m.share_pct[i] = (total > 0.0).then(|| 100.0 * r.calls / total);
            m.cores[i] = r.cpu_us / 1e6 / window_s;
            m.connections[i] = r.connections;
        }
        m
    }

    /// The largest share over the fair one (1 is even; n is all on one).
    pub fn imbalance(&self) -> Option<f64> {
        self.imbalance
    }
}

impl Measures {
    /// Derives a round's figures.
    pub fn of(r: &RoundRecord) -> Measures {
        let d = r.upstream_after.since(&r.upstream_before);
        let per_call = |x: f64| (d.calls > 0.0).then(|| x / d.calls);
        let window = r.window_s.unwrap_or(r.duration_s).max(1e-9);
        let total_cpu = r.cpu.order_us + r.cpu.user_us + r.cpu.k6_us;
        let k = &r.k6.counted();
        Measures {
            requests: k.requests,
            good: k.good,
            bad_answers: k.bad_answers,
            shed: k.shed,
            sets: k.good_sets,
            rate: k.good_rate,
            set_rate: if k.run_seconds > 0.0 {
                k.good_sets / k.run_seconds
            } else {
                0.0
            },
            dropped: k.dropped,
            iterations: k.iterations,
            e2e_ms: k.good_ms,
            set_ms: k.good_set_ms,
            upstream_us: k.upstream_us,
            parts: k.parts,
            upstream_calls: d.calls,
            upstream_errors: d.errors,
            connections_opened: d.connections_opened,
            connections_held: d.connections_open,
            bytes_out_per_call: per_call(d.bytes_written),
            bytes_in_per_call: per_call(d.bytes_read),
            cpu: r.cpu,
            rss: r.rss,
            time_wait_new: (f64::from(r.tcp_after.time_wait) - f64::from(r.tcp_before.time_wait))
                .max(0.0),
            time_wait_after: f64::from(r.tcp_after.time_wait),
            window_s: window,
            k6_cores: r.cpu.k6_us / 1e6 / window,
            machine_busy: total_cpu / 1e6 / window / f64::from(r.cores.max(1)),
            other_cores: r.other_cpu_us / 1e6 / window,
            postgres_us: r.postgres_us,
            proxy_late_us: r.proxy.map(|p| p.late_mean_us),
            proxy_cores: r.proxy.map(|p| p.cpu_us / 1e6 / window),
            tls_full_per_1k: per_call(d.tls_full).map(|x| x * 1000.0),
            tls_resumed_per_1k: per_call(d.tls_resumed).map(|x| x * 1000.0),
            replicas: r
                .replicas
                .as_deref()
                .map(|rs| ReplicaMeasures::of(rs, window)),
            balancer_cores: r.balancer_cpu_us.map(|us| us / 1e6 / window),
            no_proc: r.no_proc,
        }
    }

    /// Bad answers as a share of the answers that were not shed, %.
    pub fn bad_share_pct(&self) -> f64 {
        let judged = self.requests - self.shed;
        if judged > 0.0 {
            100.0 * self.bad_answers / judged
        } else {
            0.0
        }
    }

    /// Why the round is failed, if it is: more than
    /// [`FAILED_BAD_SHARE_PCT`] of its answers bad, or none good.
    pub fn failed(&self) -> Option<String> {
        if self.good <= 0.0 {
            return Some(format!(
                "no good answer ({} bad, {} shed)",
                self.bad_answers, self.shed
            ));
        }
        let share = self.bad_share_pct();
        (share > FAILED_BAD_SHARE_PCT).then(|| {
            format!(
                "{} bad answers of {} ({share:.1}%, over {FAILED_BAD_SHARE_PCT}%)",
                self.bad_answers,
                self.requests - self.shed
            )
        })
    }

    /// Per good answer (one lookup).
    fn per_request(&self, us: f64) -> Option<f64> {
        (self.good > 0.0).then(|| us / self.good)
    }

    /// Per good set of lookups.
    fn per_iteration(&self, us: f64) -> Option<f64> {
        (self.sets > 0.0).then(|| us / self.sets)
    }
}

/// Replica `i`'s measures, when the round had that many replicas.
fn replica(m: &Measures, i: u8) -> Option<&ReplicaMeasures> {
    m.replicas.as_ref().filter(|r| usize::from(i) < r.n)
}

/// A figure a table can show; each knows how to read itself from
/// [`Measures`] and what its unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Rate,
    IterationRate,
    Dropped,
    DroppedShare,
    E2eP50,
    E2eP90,
    E2eP95,
    E2eP99,
    E2eMax,
    IterP50,
    IterP95,
    UpP50,
    UpP95,
    UpP99,
    UpMax,
    ConnectionsOpened,
    ConnectionsHeld,
    BytesOut,
    BytesIn,
    BytesTotal,
    UpstreamCallsPerIteration,
    BytesPerIteration,
    CpuOrder,
    CpuUser,
    CpuServices,
    CpuK6,
    CpuServicesPerIteration,
    RssOrder,
    RssUser,
    RssK6,
    TimeWait,
    K6Cores,
    OtherCores,
    BadAnswers,
    /// Bad answers as a share of the answers not shed, %.
    BadShare,
    /// Answers shed by user-service at its limit (503 with Retry-After),
    /// and their share of every answer, %.
    Shed,
    ShedShare,
    /// The local Postgres server's CPU per good answer, µs.
    CpuPostgres,
    /// The delay proxy: mean lateness of a chunk (µs), and its CPU (cores).
    ProxyLate,
    ProxyCores,
    /// TLS handshakes to order-service per 1,000 upstream calls.
    TlsFullPer1k,
    TlsResumedPer1k,
    /// Replica i's (0-based) share of the calls, %; its CPU, cores; the
    /// connections open on it at the end of the run.
    ReplicaShare(u8),
    ReplicaCores(u8),
    ReplicaConnections(u8),
    /// The largest replica share over the fair share.
    Imbalance,
    /// HAProxy's CPU, cores.
    BalancerCores,
    /// The whole machine's CPU as a share of it, %.
    MachineBusy,
    /// A part of the round trip (see [`Part`]): its median and its mean, µs.
    PartP50(Part),
    PartMean(Part),
    /// The share of answers whose parts pass a check, %: store + encode
    /// within order-service's total; total + decode within the round trip.
    ServerCheck,
    ClientCheck,
}

/// A part of one call's round trip, as `x-upstream-parts` splits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// order-service's store call.
    Store,
    /// order-service's conversion and serialization of the answer.
    Encode,
    /// order-service's whole time, from the request read to the answer
    /// handed over.
    Total,
    /// user-service's decode-and-convert.
    Decode,
    /// What the others leave of the round trip: the wire and its framing.
    Wire,
}

impl Part {
    fn of(self, p: &k6::PartsSummary) -> &k6::Percentiles {
        match self {
            Part::Store => &p.store,
            Part::Encode => &p.encode,
            Part::Total => &p.total,
            Part::Decode => &p.decode,
            Part::Wire => &p.wire,
        }
    }
}

impl Metric {
    /// Reads the figure; `None` when it does not exist for this round (no
    /// sample of it), never a 0 that stands for nothing.
    pub fn of(self, m: &Measures) -> Option<f64> {
        use Metric::*;
        let per_iteration = |x: f64| (m.iterations > 0.0).then(|| x / m.iterations);
        if m.no_proc && self.needs_proc() {
            return None;
        }
        Some(match self {
            Rate => m.rate,
            IterationRate => m.set_rate,
            Dropped => m.dropped,
            DroppedShare => {
                let asked = m.iterations + m.dropped;
                if asked > 0.0 {
                    100.0 * m.dropped / asked
                } else {
                    return None;
                }
            }
            E2eP50 => m.e2e_ms?.p50,
            E2eP90 => m.e2e_ms?.p90,
            E2eP95 => m.e2e_ms?.p95,
            E2eP99 => m.e2e_ms?.p99,
            E2eMax => m.e2e_ms?.max,
            IterP50 => m.set_ms?.p50,
            IterP95 => m.set_ms?.p95,
            UpP50 => m.upstream_us?.p50,
            UpP95 => m.upstream_us?.p95,
            UpP99 => m.upstream_us?.p99,
            UpMax => m.upstream_us?.max,
            ConnectionsOpened => m.connections_opened,
            ConnectionsHeld => m.connections_held,
            BytesOut => m.bytes_out_per_call?,
            BytesIn => m.bytes_in_per_call?,
            BytesTotal => m.bytes_out_per_call? + m.bytes_in_per_call?,
            // What one started set costs on the wire, good or not: a
            // property of the variant, not of its answers.
            UpstreamCallsPerIteration => per_iteration(m.upstream_calls)?,
            BytesPerIteration => {
                per_iteration((m.bytes_in_per_call? + m.bytes_out_per_call?) * m.upstream_calls)?
            }
            CpuOrder => return m.per_request(m.cpu.order_us),
            CpuUser => return m.per_request(m.cpu.user_us),
            CpuServices => return m.per_request(m.cpu.order_us + m.cpu.user_us),
            CpuK6 => return m.per_request(m.cpu.k6_us),
            CpuPostgres => return m.per_request(m.postgres_us?),
            CpuServicesPerIteration => return m.per_iteration(m.cpu.order_us + m.cpu.user_us),
            RssOrder => m.rss.order_kb / 1024.0,
            RssUser => m.rss.user_kb / 1024.0,
            RssK6 => m.rss.k6_kb / 1024.0,
            TimeWait => m.time_wait_new,
            K6Cores => m.k6_cores,
            OtherCores => m.other_cores,
            BadAnswers => m.bad_answers,
            BadShare => m.bad_share_pct(),
            Shed => m.shed,
            ShedShare => {
                if m.requests > 0.0 {
                    100.0 * m.shed / m.requests
                } else {
                    return None;
                }
            }
            ProxyLate => return m.proxy_late_us,
            ProxyCores => return m.proxy_cores,
            TlsFullPer1k => return m.tls_full_per_1k,
            TlsResumedPer1k => return m.tls_resumed_per_1k,
            ReplicaShare(i) => return replica(m, i)?.share_pct[usize::from(i)],
            ReplicaCores(i) => replica(m, i)?.cores[usize::from(i)],
            ReplicaConnections(i) => replica(m, i)?.connections[usize::from(i)],
            Imbalance => return m.replicas?.imbalance(),
            BalancerCores => return m.balancer_cores,
            MachineBusy => 100.0 * m.machine_busy,
            PartP50(p) => p.of(m.parts.as_ref()?).p50,
            PartMean(p) => p.of(m.parts.as_ref()?).avg,
            ServerCheck | ClientCheck => {
                let parts = m.parts.as_ref()?;
                if parts.reported <= 0.0 {
                    return None;
                }
                let ok = if self == ServerCheck {
                    parts.server_ok
                } else {
                    parts.client_ok
                };
                // The ratio first: all answers passing is exactly 100.
                100.0 * (ok / parts.reported)
            }
        })
    }

    /// The unit shown beside the figure.
    pub fn unit(self) -> &'static str {
        use Metric::*;
        match self {
            Rate | IterationRate => "req/s",
            Dropped | ConnectionsOpened | ConnectionsHeld | TimeWait | BadAnswers | Shed => "",
            DroppedShare | BadShare | ShedShare => "%",
            E2eP50 | E2eP90 | E2eP95 | E2eP99 | E2eMax | IterP50 | IterP95 => "ms",
            UpP50 | UpP95 | UpP99 | UpMax | ProxyLate => "µs",
            BytesOut | BytesIn | BytesTotal | BytesPerIteration => "B",
            UpstreamCallsPerIteration => "calls",
            CpuOrder | CpuUser | CpuServices | CpuK6 | CpuPostgres | CpuServicesPerIteration => {
                "µs"
            }
            RssOrder | RssUser | RssK6 => "MiB",
            K6Cores | OtherCores | ProxyCores => "cores",
            TlsFullPer1k | TlsResumedPer1k => "per 1,000 calls",
            ReplicaShare(_) | MachineBusy => "%",
            ReplicaCores(_) | BalancerCores => "cores",
            ReplicaConnections(_) => "",
            Imbalance => "× fair",
            PartP50(_) | PartMean(_) => "µs",
            ServerCheck | ClientCheck => "%",
        }
    }

    /// Whether it is read from the services' processes in /proc (so is
    /// missing for a target the lab did not start).
    pub fn needs_proc(self) -> bool {
        use Metric::*;
        matches!(
            self,
            CpuOrder
                | CpuUser
                | CpuServices
                | CpuServicesPerIteration
                | RssOrder
                | RssUser
                | TimeWait
                | OtherCores
                | ReplicaCores(_)
                | MachineBusy
        )
    }

    /// Whether a bigger figure is better (for the one-line readings).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Rate | Metric::IterationRate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RoundRecord {
        RoundRecord {
            experiment: "payload".into(),
            cell: Cell::closed("grpc", 100, 8, 8),
            round: 1,
            started_at: "now".into(),
            duration_s: 2.0,
            k6: k6::Summary {
                requests: 1000.0,
                iterations: 500.0,
                request_rate: 499.0,
                dropped: 10.0,
                counting: Some("good-answers-1".into()),
                good: 1000.0,
                good_rate: 499.0,
                good_sets: 500.0,
                good_ms: Some(k6::Percentiles {
                    p50: 1.5,
                    ..Default::default()
                }),
                upstream_us: Some(k6::Percentiles {
                    p50: 300.0,
                    ..Default::default()
                }),
                ..Default::default()
            },
            upstream_before: Upstream {
                calls: 100.0,
                bytes_read: 1000.0,
                bytes_written: 100.0,
                connections_opened: 8.0,
                ..Default::default()
            },
            upstream_after: Upstream {
                calls: 1100.0,
                bytes_read: 5_001_000.0,
                bytes_written: 200_100.0,
                connections_opened: 8.0,
                connections_open: 8.0,
                ..Default::default()
            },
            cpu: Cpu {
                order_us: 400_000.0,
                user_us: 600_000.0,
                k6_us: 1_900_000.0,
            },
            rss: Rss {
                order_kb: 2048.0,
                user_kb: 1024.0,
                k6_kb: 512.0,
            },
            tcp_before: TcpStates {
                established: 8,
                time_wait: 5,
            },
            tcp_after: TcpStates {
                established: 8,
                time_wait: 3,
            },
            cores: 2,
            other_cpu_us: 500_000.0,
            pinning: None,
            flags: vec![],
            proxy: None,
            window_s: None,
            postgres_us: None,
            service_env: Default::default(),
            k6_summary: serde_json::Value::Null,
            replicas: None,
            balancer_cpu_us: None,
            no_proc: false,
        }
    }

    #[test]
    fn replica_shares_come_from_the_replicas_counts_and_none_is_not_zero() {
        let mut r = record();
        r.replicas = Some(
            [60.0, 30.0, 10.0]
                .iter()
                .enumerate()
                .map(|(i, calls)| ReplicaRecord {
                    addr: format!("127.0.0.{}", i + 1),
                    calls: *calls,
                    cpu_us: 1e6,
                    connections: 1.0,
                })
                .collect(),
        );
        let m = Measures::of(&r);
        assert_eq!(Metric::ReplicaShare(0).of(&m), Some(60.0));
        assert_eq!(Metric::ReplicaShare(2).of(&m), Some(10.0));
        assert_eq!(Metric::ReplicaShare(3).of(&m), None, "no fourth replica");
        let x = Metric::Imbalance.of(&m).unwrap();
        assert!((x - 1.8).abs() < 1e-9, "{x}");
        if let Some(rs) = r.replicas.as_mut() {
            for rep in rs {
                rep.calls = 0.0;
            }
        }
        let m = Measures::of(&r);
        assert_eq!(Metric::ReplicaShare(0).of(&m), None);
        assert_eq!(Metric::Imbalance.of(&m), None);
        assert_eq!(Metric::ReplicaShare(0).of(&Measures::of(&record())), None);
    }

    #[test]
    fn per_call_and_per_request_figures_come_from_deltas() {
        let m = Measures::of(&record());
        assert_eq!(m.upstream_calls, 1000.0);
        assert_eq!(m.bytes_in_per_call, Some(5000.0));
        assert_eq!(m.bytes_out_per_call, Some(200.0));
        assert_eq!(m.connections_opened, 0.0);
        assert_eq!(m.connections_held, 8.0);
        assert_eq!(Metric::CpuServices.of(&m), Some(1000.0));
        assert_eq!(Metric::CpuK6.of(&m), Some(1900.0));
        assert_eq!(Metric::CpuServicesPerIteration.of(&m), Some(2000.0));
        assert_eq!(Metric::RssOrder.of(&m), Some(2.0));
        assert!((m.k6_cores - 0.95).abs() < 1e-12);
        assert!((m.machine_busy - 0.725).abs() < 1e-12);
        assert!((m.other_cores - 0.25).abs() < 1e-12);
        // TIME_WAIT sockets that expired do not make a negative count.
        assert_eq!(m.time_wait_new, 0.0);
        let share = Metric::DroppedShare.of(&m).expect("defined");
        assert!((share - 100.0 * 10.0 / 510.0).abs() < 1e-9);
    }

    #[test]
    fn a_round_without_requests_has_no_per_request_cost() {
        let mut r = record();
        r.k6.requests = 0.0;
        r.k6.good = 0.0;
        r.k6.good_sets = 0.0;
        r.k6.iterations = 0.0;
        let m = Measures::of(&r);
        assert_eq!(Metric::CpuUser.of(&m), None);
        assert_eq!(Metric::UpstreamCallsPerIteration.of(&m), None);
        assert!(m.failed().is_some());
    }

    #[test]
    fn the_fixed_users_spell_their_order_counts() {
        assert_eq!(fixed_user(100), "00000000-0000-0000-0000-000000000100");
        assert_eq!(fixed_user(10000), "00000000-0000-0000-0000-000000010000");
        assert_eq!(fixed_user(50), "00000000-0000-0000-0000-000000010000");
    }

    #[test]
    fn a_figure_with_no_sample_is_missing_not_zero() {
        let mut r = record();
        r.k6.upstream_us = None;
        r.k6.good_ms = None;
        r.upstream_after = r.upstream_before;
        let m = Measures::of(&r);
        for metric in [
            Metric::UpP50,
            Metric::E2eP95,
            Metric::BytesIn,
            Metric::TlsFullPer1k,
        ] {
            assert_eq!(metric.of(&m), None, "{metric:?}");
        }
    }

    #[test]
    fn rates_latencies_and_cpu_count_good_answers_only() {
        // 1,000 answers of which 100 were fast failures: the rate and the
        // CPU per request are the 900 good ones'.
        let mut r = record();
        r.k6.good = 900.0;
        r.k6.good_rate = 449.0;
        r.k6.bad_answers = 100.0;
        let m = Measures::of(&r);
        assert_eq!(Metric::Rate.of(&m), Some(449.0));
        let cpu = Metric::CpuServices.of(&m).expect("defined");
        assert!((cpu - 1_000_000.0 / 900.0).abs() < 1e-9, "{cpu}");
        assert_eq!(Metric::E2eP50.of(&m), Some(1.5));
        // 10% bad: the round is failed.
        assert_eq!(Metric::BadShare.of(&m), Some(10.0));
        assert!(
            m.failed()
                .expect("failed")
                .contains("100 bad answers of 1000")
        );
        // 1% is still a round; shed answers are neither good nor bad.
        r.k6.good = 990.0;
        r.k6.bad_answers = 9.0;
        r.k6.shed = 100.0;
        let m = Measures::of(&r);
        assert!(m.failed().is_none(), "{:?}", m.failed());
        assert_eq!(Metric::ShedShare.of(&m), Some(10.0));
    }

    #[test]
    fn a_round_recorded_before_the_counting_rules_still_reads() {
        // An older lab's record: no counting rules, no good answers kept.
        let mut r = record();
        r.k6.counting = None;
        r.k6.good = 0.0;
        r.k6.good_rate = 0.0;
        r.k6.good_ms = None;
        r.k6.bad_answers = 5.0;
        r.k6.duration_ms.p50 = 2.0;
        let m = Measures::of(&r);
        assert!(m.failed().is_none(), "{:?}", m.failed());
        assert_eq!(m.good, 995.0);
        assert!((m.rate - 499.0 * 0.995).abs() < 1e-9);
        assert_eq!(Metric::E2eP50.of(&m), Some(2.0));
    }

    #[test]
    fn cores_are_counted_over_the_window_the_cpu_was() {
        // k6 lived 3.8 s (start-up and summary around 2 s of load): its
        // 1.9 s of CPU is half a core, not 0.95.
        let mut r = record();
        r.window_s = Some(3.8);
        let m = Measures::of(&r);
        assert!((m.k6_cores - 0.5).abs() < 1e-12, "{}", m.k6_cores);
        assert!((m.other_cores - 0.5 / 3.8).abs() < 1e-12);
    }

    #[test]
    fn cell_ids_are_unique_and_file_name_safe() {
        let a = Cell::closed("grpc", 1000, 8, 8);
        let mut b = a.clone();
        b.fields = Some(SIX_FIELDS.into());
        let mut c = a.clone();
        c.load = Load::Open {
            rate: 2000,
            max_vus: 200,
        };
        let d = a.clone().many_users(20, false);
        let g = a.clone().many_users(20, true);
        let e = a.clone().with_env(Env {
            rtt_ms: Some(5),
            ..Env::default()
        });
        let f = a.clone().with_env(Env {
            tls: true,
            ..Env::default()
        });
        let r = Replicas {
            n: 3,
            balance: Balance::L4,
            slow: false,
            rotation: false,
        };
        let h = a.clone().with_env(Env {
            replicas: Some(r),
            ..Env::default()
        });
        let i = a.clone().with_env(Env {
            replicas: Some(Replicas { slow: true, ..r }),
            ..Env::default()
        });
        let ids = [
            a.id(),
            b.id(),
            c.id(),
            d.id(),
            e.id(),
            f.id(),
            g.id(),
            h.id(),
            i.id(),
        ];
        for (i, x) in ids.iter().enumerate() {
            assert!(
                x.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "-+_".contains(ch)),
                "{x}"
            );
            for y in &ids[i + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(a.id(), "grpc-o1000-all-vu8-p8");
        assert!(d.label().contains("x20 users"));
        assert!(g.label().contains("x20 users in one call"));
        assert_eq!(e.id(), "grpc-o1000-all-vu8-p8-rtt5");
        assert!(e.label().ends_with("RTT 5 ms"));
        assert!(f.label().ends_with(", TLS"));
        assert!(a.label().starts_with("grpc 1,000 orders"));
    }

    #[test]
    fn a_cell_environment_keeps_the_round_files_shape() {
        // Round files written before the environment was one value have
        // `rtt_ms` and `tls` at the top of the cell: they still read.
        let old = r#"{"via":"grpc","orders":1,"fields":null,"load":{"mode":"closed","vus":16},
            "pool":4,"lookups":1,"rtt_ms":20}"#;
        let c: Cell = serde_json::from_str(old).expect("an older cell");
        assert_eq!(c.env.rtt_ms, Some(20));
        assert!(!c.env.tls);
        let text = serde_json::to_string(&c).expect("serialises");
        assert!(
            text.contains(r#""rtt_ms":20"#) && !text.contains("env"),
            "{text}"
        );
        let direct = serde_json::to_string(&Cell::closed("grpc", 1, 8, 8)).expect("serialises");
        assert!(
            !direct.contains("rtt_ms") && !direct.contains("tls"),
            "{direct}"
        );
    }
}
