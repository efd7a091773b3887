//! What one measurement is: a [`Cell`] (transport, payload, load, pool,
//! users per request) and the [`Env`] around the two services (delay proxy,
//! TLS, replicas, compression, store). A cell's id names its round files;
//! its label names it in progress lines and tables.

use serde::{Deserialize, Serialize};

use crate::measure::load::Generator;

mod fault;
pub use fault::{Fault, RECOMMENDED};

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

/// How the load generator drives load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Load {
    /// `vus` callers (k6's virtual users), each sending its next request
    /// when answered.
    Closed { vus: u32 },
    /// `rate` requests started per second, whatever the answers do, on at
    /// most `max_vus` connections (k6: VUs).
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
    /// Users per request: 1 asks one user's orders
    /// (`/v1/users/{id}/orders`); N > 1 asks the first orders of the data
    /// set's other users 1..N in one request (`/v1/orders?users=…`), which
    /// user-service fetches as N calls, or as one when `batch`. Round files
    /// written before it call it `lookups`: N requests sent at once.
    #[serde(alias = "lookups")]
    pub users: u32,
    /// With several users, user-service makes one call that answers them all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch: bool,
    /// Closed loop: each caller waits this long after an answer before its
    /// next request (`THINK_MS`), so that pooled connections sit idle; 0:
    /// at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub think_ms: u32,
    /// The load generator of this cell, when it is not the run's (the
    /// generator experiment measures them side by side); `None`: the run's
    /// (`--load`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<Generator>,
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
    /// The services on either side of a packet-level path ([`netpath`]):
    /// user-service in one network namespace, order-service in the other,
    /// the kernels' own TCP between them. `None`: no such path (loopback,
    /// or the delay proxy when `rtt_ms` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PacketPath>,
    /// order-service stopped (SIGSTOP) for this many ms once, halfway
    /// through the measured run, then continued (SIGCONT): a stall of the
    /// callee, as a long pause or a stuck host makes one. `None`: no stall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_ms: Option<u32>,
    /// Something that breaks once during the measured run ([`Fault`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// user-service runs with the settings the book recommends for when the
    /// other side fails ([`RECOMMENDED`]) instead of its defaults.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recommended: bool,
}

/// A packet-level path between the services: the same on both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PacketPath {
    /// Round-trip time, ms (half each way).
    pub rtt_ms: u32,
    /// Jitter of each packet's one-way delay, µs (uniform, no reordering).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jitter_us: u32,
    /// Packets lost in each direction, per 100,000 (0.1% is 100).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loss_pcm: u32,
    /// Losses come in bursts (Gilbert–Elliott, mean burst [`BURST_PACKETS`]
    /// packets) at the same mean rate, rather than one by one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bursty: bool,
    /// A rate cap each way, Mbit/s, with a drop-tail queue of `queue_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<u32>,
    /// TCP's congestion control at both ends.
    #[serde(default)]
    pub cc: netpath::CongestionControl,
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

/// The mean length of a burst of losses on a bursty path, packets.
pub const BURST_PACKETS: u32 = 4;

impl PacketPath {
    /// A path of this round trip and nothing else (cubic).
    pub fn rtt(rtt_ms: u32) -> PacketPath {
        PacketPath {
            rtt_ms,
            jitter_us: 0,
            loss_pcm: 0,
            bursty: false,
            rate_mbit: None,
            queue_ms: None,
            cc: netpath::CongestionControl::Cubic,
        }
    }

    /// The loss as a percentage.
    pub fn loss_pct(&self) -> f64 {
        f64::from(self.loss_pcm) / 1000.0
    }

    /// The emulator's settings for one direction.
    pub fn link(&self) -> netpath::Link {
        use std::time::Duration;
        let p = f64::from(self.loss_pcm) / 100_000.0;
        let loss = match (self.loss_pcm, self.bursty) {
            (0, _) => netpath::Loss::None,
            (_, false) => netpath::Loss::Random(p),
            (_, true) => {
                // Mean loss p/(p+r) with r = 1/burst: p = loss r / (1 - loss).
                let r = 1.0 / f64::from(BURST_PACKETS);
                netpath::Loss::GilbertElliott {
                    p: p * r / (1.0 - p),
                    r,
                }
            }
        };
        netpath::Link {
            delay: Duration::from_micros(u64::from(self.rtt_ms) * 500),
            jitter: match self.jitter_us {
                0 => netpath::Jitter::None,
                j => netpath::Jitter::Uniform(Duration::from_micros(u64::from(j))),
            },
            reorder: false,
            loss,
            rate_bps: self.rate_mbit.map(|m| u64::from(m) * 1_000_000),
            queue: netpath::Queue::Time(Duration::from_millis(u64::from(
                self.queue_ms.unwrap_or(50),
            ))),
        }
    }

    fn id(&self) -> String {
        let mut s = format!("-net{}", self.rtt_ms);
        if self.jitter_us > 0 {
            s.push_str(&format!("j{}", self.jitter_us));
        }
        if self.loss_pcm > 0 {
            s.push_str(&format!("l{}", self.loss_pcm));
        }
        if self.bursty {
            s.push('b');
        }
        if let Some(r) = self.rate_mbit {
            s.push_str(&format!("r{r}"));
        }
        if let Some(q) = self.queue_ms {
            s.push_str(&format!("q{q}"));
        }
        s.push('-');
        s.push_str(self.cc.name());
        s
    }

    fn label(&self) -> String {
        let mut s = format!(", packet path RTT {} ms", self.rtt_ms);
        if self.jitter_us > 0 {
            s.push_str(&format!(" ±{} µs", self.jitter_us));
        }
        if self.loss_pcm > 0 {
            s.push_str(&format!(
                " loss {}%{}",
                self.loss_pct(),
                if self.bursty { " bursty" } else { "" }
            ));
        }
        if let Some(r) = self.rate_mbit {
            s.push_str(&format!(" {r} Mbit/s"));
        }
        s.push_str(&format!(" {}", self.cc.name()));
        s
    }
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
    /// order-service on a Postgres server of the lab's own, which the cell
    /// may restart ([`crate::measure::services::OwnPostgres`]); user-service
    /// in memory, so that only order-service meets what its database does.
    OwnPostgres,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Postgres => "postgres",
            Store::OwnPostgres => "own-postgres",
        }
    }

    /// Whether user-service keeps its data in memory on this store.
    pub fn user_service_in_memory(store: Option<Store>) -> bool {
        matches!(store, Some(Store::Memory | Store::OwnPostgres))
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
            Some(Store::OwnPostgres) => "-ownpg",
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
        let path = self.path.map_or(String::new(), |p| p.id());
        let stall = self
            .stall_ms
            .map_or(String::new(), |ms| format!("-stall{ms}"));
        let fault = self
            .fault
            .map_or(String::new(), |f| format!("-fault-{}", f.id()));
        let fault = if self.recommended {
            format!("{fault}-rec")
        } else {
            fault
        };
        format!("{rtt}{path}{rate}{tls}{replicas}{store}{gzip}{parts}{stall}{fault}")
    }

    /// The part of a progress label that says the environment.
    fn label(&self) -> String {
        let mut s = String::new();
        if let Some(r) = self.rtt_ms {
            s.push_str(&format!(", RTT {r} ms"));
        }
        if let Some(p) = self.path {
            s.push_str(&p.label());
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
        if let Some(ms) = self.stall_ms {
            s.push_str(&format!(", order-service stalled {ms} ms mid-run"));
        }
        if let Some(f) = self.fault {
            s.push_str(&format!(", {}", f.describe()));
        }
        if self.recommended {
            s.push_str(", recommended settings");
        }
        match self.store {
            None => {}
            Some(Store::Memory) => s.push_str(", in memory"),
            Some(Store::Postgres) => s.push_str(", on Postgres"),
            Some(Store::OwnPostgres) => {
                s.push_str(", order-service on the lab's own Postgres, user-service in memory");
            }
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
            think_ms: 0,
            generator: None,
            env: Env::default(),
        }
    }

    /// The load generator of this cell in a run whose own is `run`: k6
    /// where k6's own gRPC client is the subject, else the cell's own,
    /// else the run's.
    pub fn generator_under(&self, run: Generator) -> Generator {
        if self.via == K6_GRPC_DIRECT {
            return Generator::K6;
        }
        self.generator.unwrap_or(run)
    }

    /// Whether the load generator is what this cell measures (its own
    /// choice of generator, or k6's own gRPC client), rather than an
    /// instrument.
    pub fn generator_is_subject(&self) -> bool {
        self.generator.is_some() || self.via == K6_GRPC_DIRECT
    }

    /// The same cell driven by `generator` whatever the run's.
    pub fn driven_by(mut self, generator: Generator) -> Cell {
        self.generator = Some(generator);
        self
    }

    /// The same cell asking for the first `orders` of `users` users in one
    /// request, fetched as one call per user or one `batch` call.
    pub fn many_users(mut self, users: u32, batch: bool) -> Cell {
        self.users = users;
        self.batch = batch;
        self
    }

    /// The same cell with each caller idle `ms` between calls.
    pub fn thinking(mut self, ms: u32) -> Cell {
        self.think_ms = ms;
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
        let think = match self.think_ms {
            0 => String::new(),
            ms => format!("-think{ms}"),
        };
        let generator = match self.generator {
            None => String::new(),
            Some(g) => format!("-by-{}", g.name()),
        };
        format!(
            "{}-o{}-{fields}-{load}{think}-p{}{users}{}{generator}",
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
            Load::Closed { vus } if self.think_ms > 0 => s.push_str(&format!(
                ", {vus} VUs idle {} ms between calls",
                self.think_ms
            )),
            Load::Closed { vus } => s.push_str(&format!(", {vus} VUs")),
            Load::Open { rate, .. } => s.push_str(&format!(", open loop {rate}/s")),
        }
        s.push_str(&format!(", pool {}", self.pool));
        s.push_str(&self.env.label());
        if let Some(g) = self.generator {
            s.push_str(&format!(", by {}", g.name()));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_users_spell_their_order_counts() {
        assert_eq!(fixed_user(100), "00000000-0000-0000-0000-000000000100");
        assert_eq!(fixed_user(10000), "00000000-0000-0000-0000-000000010000");
        assert_eq!(fixed_user(50), "00000000-0000-0000-0000-000000010000");
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
