//! Typed settings, from flags or `USER_…` environment variables.
//!
//! `main` parses them once and passes them in; nothing reads the environment
//! anywhere else. Tests build [`Settings`] directly (see
//! [`Settings::default`]) so that a stray variable in the environment cannot
//! change what they run.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};
pub use service_kit::db::DatabaseUrl;
use service_kit::settings::Renamed;

use transports::{Transport, UnknownTransport};

/// Settings renamed to match order-service's, which still work for one
/// release, with a warning in the log.
pub const RENAMED: &[Renamed] = &[Renamed {
    old_env: "USER_DATABASE_POOL_SIZE",
    old_flag: Some("database-pool-size"),
    new_env: "USER_DATABASE_MAX_CONNECTIONS",
}];

/// user-service: users over REST and gRPC, with their orders fetched from
/// order-service over a transport chosen per request.
#[derive(Debug, Parser)]
#[command(
    name = "user-service",
    version,
    about,
    long_about = long_about()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
}

/// `--help`'s description. A function rather than a literal so that the
/// transports it lists are [`transports::ALL`] and cannot fall behind.
fn long_about() -> String {
    format!(
        "user-service: users over REST (HTTP/1.1 + h2c, JSON or protobuf) and gRPC, \
with each user's orders fetched from order-service over a transport chosen per request \
(`?via=`, the `x-via` header or the gRPC `via` field).\n\n\
Transports: {}. Each gets its own budget of --pool-size TCP connections, and \
its round trips, connections and wire bytes are served at /metrics.\n\n\
Without --database-url the users live in memory, seeded from the deterministic data set. \
Every flag can also be set by the environment variable shown.",
        transports::joined(", ")
    )
}

/// What to do; serving is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve REST and gRPC until SIGTERM or ctrl-c (the default).
    Serve,
    /// Apply the migrations and load the data set's users into Postgres,
    /// skipping those already there, then exit. Needs --database-url.
    Seed,
}

/// Everything the service needs to run.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Where REST listens (HTTP/1.1 and h2c on the same port).
    #[arg(long, env = "USER_REST_ADDR", default_value = "0.0.0.0:8081")]
    pub rest_addr: SocketAddr,

    /// Admin listener: /healthz, /readyz and /metrics only, plain HTTP,
    /// never shed, with a cap of its own (64 connections). A flood of the
    /// REST listener fills that listener's cap, not this one, so liveness
    /// and readiness probes still answer. Unset: no admin listener (the
    /// same routes are on the REST listener either way).
    #[arg(long, env = "USER_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,

    /// Where gRPC listens (user.v1.UserService, health, reflection).
    #[arg(long, env = "USER_GRPC_ADDR", default_value = "0.0.0.0:50051")]
    pub grpc_addr: SocketAddr,

    /// Postgres URL of the users database. Unset: users live in memory,
    /// seeded from the data set (as the Spring Boot post measured: no
    /// database behind the hop).
    #[arg(long, env = "USER_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<DatabaseUrl>,

    /// Postgres connections in the pool.
    #[arg(long, env = "USER_DATABASE_MAX_CONNECTIONS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub database_max_connections: u32,

    /// How long a query waits for a Postgres connection before answering 503.
    #[arg(
        long,
        env = "USER_DATABASE_ACQUIRE_TIMEOUT_MS",
        default_value_t = 2_000
    )]
    pub database_acquire_timeout_ms: u64,

    /// Load the data set's users into Postgres at start (idempotent), as the
    /// `seed` command does.
    #[arg(long, env = "USER_SEED", default_value_t = false)]
    pub seed: bool,

    /// order-service's REST port (h1-* and h2c-* transports).
    #[arg(
        long,
        env = "USER_ORDER_REST_URL",
        default_value = "http://127.0.0.1:8082"
    )]
    pub order_rest_url: http::Uri,

    /// order-service's gRPC port (grpc, grpc-tuned, grpc-stream,
    /// grpc-stream-tuned, grpc-bidi, grpc-bidi-tuned, grpc-v1).
    #[arg(
        long,
        env = "USER_ORDER_GRPC_URL",
        default_value = "http://127.0.0.1:50052"
    )]
    pub order_grpc_url: http::Uri,

    /// order-service's raw-TCP port, host:port (tcp-proto).
    #[arg(long, env = "USER_ORDER_TCP_ADDR", default_value = "127.0.0.1:50062")]
    pub order_tcp_addr: String,

    /// order-service's HTTP/3 (QUIC) port, host:port on UDP (h3-json,
    /// h3-proto, grpc-h3).
    #[arg(long, env = "USER_ORDER_H3_ADDR", default_value = "127.0.0.1:8443")]
    pub order_h3_addr: String,

    /// order-service's replicas, for client-side balancing: addresses or
    /// names (a Kubernetes headless Service's name gives every ready pod),
    /// comma-separated. Each serves on the ports of the four settings
    /// above, whose hosts then only name the TLS certificate. Unset: every
    /// call goes to those four addresses (directly, or to a balancer there).
    #[arg(long, env = "USER_ORDER_REPLICAS", value_delimiter = ',')]
    pub order_replicas: Vec<String>,

    /// How often the names in --order-replicas are resolved again, in
    /// milliseconds. A failed or empty answer keeps the last set.
    #[arg(long, env = "USER_ORDER_RESOLVE_INTERVAL_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub order_resolve_interval_ms: u64,

    /// How a call picks its replica: each in turn (round-robin), or the less
    /// busy of two (p2c, power of two choices, by calls in flight).
    #[arg(long, env = "USER_ORDER_PICK", value_enum, default_value_t = crate::upstream::balance::Pick::RoundRobin)]
    pub order_pick: crate::upstream::balance::Pick,

    /// With --order-replicas: a call that failed with no answer (the
    /// replica refused or reset the connection) is sent once more, to
    /// another replica, while such second tries stay within this percentage
    /// of the calls made (a budget: each call earns a hundredth of this in
    /// tokens, up to 10; a second try spends one): a dead replica costs
    /// fewer failed calls (none while its share of the calls is within the
    /// budget), and a dead service no storm of retries. Only reads are
    /// sent, so a second try changes nothing. 0: never (the default).
    #[arg(long, env = "USER_UPSTREAM_RETRY_BUDGET_PCT", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub upstream_retry_budget_pct: u32,

    /// The transport used when a request names none.
    #[arg(long, env = "USER_DEFAULT_VIA", default_value = "grpc", value_parser = parse_transport)]
    pub default_via: Transport,

    /// TCP connections to order-service per transport: HTTP/1.1 carries at
    /// most this many calls at once (others wait, and the wait counts as
    /// upstream time); HTTP/2, gRPC and raw TCP multiplex over this many.
    #[arg(long, env = "USER_POOL_SIZE", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub pool_size: u16,

    /// Ask order-service for gzip on the REST and gRPC transports: REST
    /// sends `Accept-Encoding: gzip` and inflates a gzip answer; gRPC accepts
    /// gzip answers and sends its requests gzipped. order-service compresses
    /// only when its own `ORDER_REST_GZIP` / `ORDER_GRPC_GZIP` is on. Off by
    /// default: the lab's byte counts assume no compression. The tuned
    /// twins, Connect, grpc-v1, bidi and raw TCP never compress.
    #[arg(long, env = "USER_UPSTREAM_GZIP", default_value_t = false, action = clap::ArgAction::Set)]
    pub upstream_gzip: bool,

    /// Ask order-service for zstd, as `USER_UPSTREAM_GZIP` asks for gzip (on
    /// the same transports; order-service compresses only with its
    /// `ORDER_REST_ZSTD` / `ORDER_GRPC_ZSTD`). With both on, REST prefers
    /// zstd (`Accept-Encoding: zstd, gzip;q=0.5`) and gRPC offers zstd only
    /// (tonic would list gzip first, and a server takes the first it can
    /// send).
    #[arg(long, env = "USER_UPSTREAM_ZSTD", default_value_t = false, action = clap::ArgAction::Set)]
    pub upstream_zstd: bool,

    /// Record where each call to order-service spent its time: order-service's
    /// own account (its store, encoding and total, which it gives when
    /// `ORDER_SERVER_TIMING` is on) and this side's decoding, in an
    /// `x-upstream-parts` header on the answer (µs: `store=…,encode=…,
    /// total=…,decode=…,upstream=…`). Off by default: the timing costs a
    /// little CPU per call.
    #[arg(long, env = "USER_UPSTREAM_BREAKDOWN", default_value_t = false, action = clap::ArgAction::Set)]
    pub upstream_breakdown: bool,

    /// Upstream timeout in milliseconds: the gRPC deadline sent, and the most
    /// a call to order-service may take before the answer is 504.
    #[arg(long, env = "USER_UPSTREAM_TIMEOUT_MS", default_value_t = 5000)]
    pub upstream_timeout_ms: u64,

    /// A TCP connect to order-service that takes longer fails at once
    /// (every transport on TCP), rather than waiting through the kernel's
    /// SYN retries (1, 3, 7 s…) until the call's own timeout. 0: no timeout
    /// of its own (the default; gRPC channels then take the upstream
    /// timeout as their connect timeout, as before).
    #[arg(long, env = "USER_UPSTREAM_CONNECT_TIMEOUT_MS", default_value_t = 0)]
    pub upstream_connect_timeout_ms: u64,

    /// Notice a dead order-service or a silent path on connections that
    /// are open: TCP keep-alive probes after this much idle time on every
    /// upstream TCP connection, `TCP_USER_TIMEOUT` of twice it (sent bytes
    /// unacknowledged that long close the connection, rather than about 15
    /// minutes of retransmissions), and HTTP/2 PINGs this often on the gRPC
    /// channels, each to be answered as soon. 0: none of it (the default,
    /// as the kernel's and the libraries' own). HTTP/3 has its own (QUIC
    /// pings every 2 s, closed after 6 s idle).
    #[arg(long, env = "USER_UPSTREAM_KEEPALIVE_MS", default_value_t = 0)]
    pub upstream_keepalive_ms: u64,

    /// Work in service at once, one limit for the whole service: REST requests and gRPC calls
    /// count
    /// against it. Past it the work is refused at once with 503 /
    /// RESOURCE_EXHAUSTED instead of queueing. Health, metrics and
    /// reflection are never refused.
    #[arg(long, env = "USER_MAX_CONCURRENT_REQUESTS", default_value_t = 512)]
    pub max_concurrent_requests: usize,

    /// Streams one HTTP/2 connection may have open at once, on REST (h2c)
    /// and gRPC: the SETTINGS_MAX_CONCURRENT_STREAMS the server announces.
    /// A client past it waits for a stream to end; one connection cannot
    /// take the whole --max-concurrent-requests.
    #[arg(long, env = "USER_MAX_CONCURRENT_STREAMS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,

    /// At shutdown, how long an idle HTTP/1.1 keep-alive connection is given
    /// to send one more request (answered with `Connection: close`) before it
    /// is closed: closing it at once could lose a request already on the wire.
    /// Every listener's drain ends this plus 1 s after the signal, whatever
    /// clients do.
    #[arg(long, env = "USER_SHUTDOWN_GRACE_MS", default_value_t = 1_000)]
    pub shutdown_grace_ms: u64,

    /// How long a client has, from opening a connection (or from the first
    /// byte after its previous answer), to send a request's head, on every
    /// protocol: an HTTP/1.1 head, each HTTP/2 head (its HEADERS frame and
    /// CONTINUATIONs; the first within this of the preface), gRPC-web's
    /// first head. Past it the connection is closed: a client that connects
    /// and sends nothing, or trickles its head, holds nothing long.
    #[arg(long, env = "USER_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_ms: u64,

    /// How long a REST request's body may take to arrive, from its head;
    /// past it 408. On gRPC, how long a call may take in all.
    #[arg(long, env = "USER_BODY_READ_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_ms: u64,

    /// How long an answer may wait with no byte taken by its client: a
    /// socket that accepts no write, an HTTP/2 flow-control window left
    /// shut with a stream open, a raw-TCP answer unread. Past it the
    /// connection is closed and what it held (slots of the limit, answers
    /// in memory) is freed: clients that never read cannot starve the rest.
    #[arg(long, env = "USER_WRITE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub write_timeout_ms: u64,

    /// How long a connection with no request or call in flight stays open,
    /// whatever it sends meanwhile (pings included): HTTP/1.1 keep-alive,
    /// h2c or gRPC with no stream. Also the interval of the gRPC keep-alive
    /// pings that close a connection whose peer stopped answering.
    #[arg(long, env = "USER_IDLE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,

    /// The largest request, in bytes, on every surface: a REST body (413
    /// past it) and a gRPC message (RESOURCE_EXHAUSTED), refused on its
    /// announced length before it is read whole.
    #[arg(long, env = "USER_MAX_REQUEST_BYTES", default_value_t = 64 * 1024, value_parser = clap::value_parser!(u32).range(64..))]
    pub max_request_bytes: u32,

    /// Connections open at once on each HTTP listener (REST; gRPC). Past it
    /// a new connection is accepted and closed at once, counted on /metrics
    /// (`*_connections_refused_total`) and logged at most once a second.
    #[arg(long, env = "USER_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Log format: `json`, `pretty`, or `auto` (JSON unless stdout is a terminal).
    #[arg(long, env = "USER_LOG_FORMAT", default_value = "auto")]
    pub log_format: String,

    /// TLS to order-service: the PEM CA its certificates must chain to. Set,
    /// every transport dials over TLS (h2 ones negotiate h2 by ALPN, h1 ones
    /// http/1.1); unset, every transport is cleartext.
    #[arg(long, env = "USER_ORDER_TLS_CA")]
    pub order_tls_ca: Option<std::path::PathBuf>,

    /// The name order-service's certificate must carry. Default: the host
    /// of each URL / address (set it when dialing through a proxy or by an
    /// address the certificate does not name).
    #[arg(long, env = "USER_ORDER_TLS_SERVER_NAME", requires = "order_tls_ca")]
    pub order_tls_server_name: Option<String>,

    /// Mutual TLS: the PEM client certificate presented to order-service.
    #[arg(long, env = "USER_ORDER_TLS_CERT", requires_all = ["order_tls_ca", "order_tls_key"])]
    pub order_tls_cert: Option<std::path::PathBuf>,

    /// The PEM private key of --order-tls-cert.
    #[arg(long, env = "USER_ORDER_TLS_KEY", requires = "order_tls_cert")]
    pub order_tls_key: Option<std::path::PathBuf>,

    /// PEM certificate chain for user-service's own listeners. With
    /// --tls-key, REST (HTTPS/1.1 and h2 by ALPN) and gRPC serve TLS only.
    #[arg(long, env = "USER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "USER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// Mutual TLS on user-service's listeners: the PEM CA client
    /// certificates must be signed by.
    #[arg(long, env = "USER_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<std::path::PathBuf>,
}

impl Settings {
    /// How upstream connections notice a dead peer or path: the connect
    /// timeout and keep-alive, each off at 0.
    pub fn liveness(&self) -> crate::upstream::wire::Liveness {
        let ms = |v: u64| (v > 0).then(|| std::time::Duration::from_millis(v));
        crate::upstream::wire::Liveness {
            connect_timeout: ms(self.upstream_connect_timeout_ms),
            keepalive: ms(self.upstream_keepalive_ms),
        }
    }

    /// The files for TLS to order-service, when it is on.
    pub fn order_tls_files(&self) -> Option<tls::ClientFiles> {
        Some(tls::ClientFiles {
            ca: self.order_tls_ca.clone()?,
            cert: self.order_tls_cert.clone(),
            key: self.order_tls_key.clone(),
        })
    }

    /// The files for TLS on user-service's own listeners, when it is on.
    pub fn tls_files(&self) -> Option<tls::ServerFiles> {
        Some(tls::ServerFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }
}

fn parse_transport(s: &str) -> Result<Transport, String> {
    s.parse().map_err(|e: UnknownTransport| e.to_string())
}

impl Settings {
    /// How to reach Postgres, when the settings name it.
    pub fn pool(&self) -> Option<service_kit::db::PoolSettings> {
        service_kit::db::PoolSettings::of(
            self.database_url.as_ref(),
            self.database_max_connections,
            self.database_acquire_timeout_ms,
        )
    }

    /// The time bounds of every connection to user-service.
    pub fn conn_limits(&self) -> service_kit::serve::ConnLimits {
        service_kit::serve::ConnLimits::from_millis(
            self.shutdown_grace_ms,
            self.max_concurrent_streams,
            self.header_read_timeout_ms,
            self.body_read_timeout_ms,
            self.idle_timeout_ms,
        )
        .with_write_timeout(self.write_timeout_ms)
    }
}

impl Default for Settings {
    /// The documented defaults, but on port 0 of 127.0.0.1 for both
    /// listeners, in memory, as tests want them.
    fn default() -> Self {
        let mut s = service_kit::settings::defaults::<Cli>().settings;
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        s.rest_addr = any;
        s.grpc_addr = any;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_into_typed_settings() {
        let cli = Cli::try_parse_from([
            "user-service",
            "--default-via",
            "tcp-proto",
            "--pool-size",
            "1",
            "--database-url",
            "postgres://u:secret@db/users",
            "seed",
        ])
        .unwrap();
        assert_eq!(cli.command, Some(Command::Seed));
        assert_eq!(cli.settings.default_via, Transport::TcpProto);
        assert_eq!(cli.settings.pool_size, 1);
        let url = cli.settings.database_url.unwrap();
        assert_eq!(format!("{url:?}"), "postgres://u:***@db/users");
    }

    #[test]
    fn an_unknown_default_transport_is_refused_with_the_valid_names() {
        let err =
            Cli::try_parse_from(["user-service", "--default-via", "smoke-signals"]).unwrap_err();
        assert!(err.to_string().contains("grpc-bidi"), "{err}");
    }

    #[test]
    fn the_long_help_lists_exactly_the_transports_of_the_transports_crate() {
        let cmd = <Cli as clap::CommandFactory>::command();
        let about = cmd.get_long_about().expect("a long about").to_string();
        let listed = about
            .split_once("Transports: ")
            .and_then(|(_, rest)| rest.split_once(". "))
            .map(|(names, _)| names.split(", ").collect::<Vec<_>>())
            .expect("a \"Transports: a, b, c. \" sentence");
        assert_eq!(listed, transports::ALL, "{about}");
    }

    #[test]
    fn a_pool_of_zero_connections_is_refused() {
        assert!(Cli::try_parse_from(["user-service", "--pool-size", "0"]).is_err());
    }
}
