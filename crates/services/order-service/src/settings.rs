//! Typed settings, from flags or environment variables (`ORDER_…`), each with
//! a default that needs no set-up: in-memory store, REST on 8082, gRPC on
//! 50052, raw TCP on 50062.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};
use service_kit::db::DatabaseUrl;
use service_kit::settings::Renamed;

/// Settings renamed to match user-service's, which still work for one
/// release, with a warning in the log.
pub const RENAMED: &[Renamed] = &[
    Renamed {
        old_env: "ORDER_DB_MAX_CONNECTIONS",
        old_flag: Some("db-max-connections"),
        new_env: "ORDER_DATABASE_MAX_CONNECTIONS",
    },
    Renamed {
        old_env: "ORDER_DB_ACQUIRE_TIMEOUT_MS",
        old_flag: Some("db-acquire-timeout-ms"),
        new_env: "ORDER_DATABASE_ACQUIRE_TIMEOUT_MS",
    },
    Renamed {
        old_env: "LOG_FORMAT",
        old_flag: None,
        new_env: "ORDER_LOG_FORMAT",
    },
];

/// order-service: serves users' orders over REST, gRPC and raw TCP.
#[derive(Debug, Parser)]
#[command(name = "order-service", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
}

/// What to do; the default is `serve`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve REST, gRPC and raw TCP until SIGTERM or ctrl-c (the default).
    Serve,
    /// Load the deterministic data set into Postgres (needs --database-url),
    /// then exit. Running it twice changes nothing.
    Seed,
}

/// The HTTP/3 listener's UDP address, or none (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H3Addr(pub Option<SocketAddr>);

fn parse_h3_addr(s: &str) -> Result<H3Addr, String> {
    if s == "off" {
        return Ok(H3Addr(None));
    }
    s.parse()
        .map(|a| H3Addr(Some(a)))
        .map_err(|e| format!("{e}: an address such as 0.0.0.0:8443, or off"))
}

/// Everything the service can be told.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// REST listener: HTTP/1.1 and h2c (HTTP/2 prior knowledge) on one port.
    #[arg(long, env = "ORDER_REST_ADDR", default_value = "0.0.0.0:8082")]
    pub rest_addr: SocketAddr,

    /// gRPC listener: order.v2 and order.v1, health, reflection and gRPC-web.
    #[arg(long, env = "ORDER_GRPC_ADDR", default_value = "0.0.0.0:50052")]
    pub grpc_addr: SocketAddr,

    /// Raw-TCP listener: length-prefixed protobuf lookups (the tcp-proto floor).
    #[arg(long, env = "ORDER_TCP_ADDR", default_value = "0.0.0.0:50062")]
    pub tcp_addr: SocketAddr,

    /// HTTP/3 (QUIC) listener, a UDP port: the REST routes and Connect,
    /// and gRPC (told apart by `content-type: application/grpc…`), under
    /// the TCP listeners' caps and timeouts. QUIC is always encrypted: with
    /// TLS set it uses the same certificate; without, a self-signed one
    /// made at start, which clients cannot verify. `off`: no listener.
    #[arg(long, env = "ORDER_H3_ADDR", default_value = "0.0.0.0:8443", value_parser = parse_h3_addr)]
    pub h3_addr: H3Addr,

    /// Validate a new QUIC client's address with a Retry before its
    /// handshake: the first answer to an address is a packet of about a
    /// hundred bytes, so the listener cannot be used to reflect traffic at
    /// a forged address (RFC 9000's bound is three times what came from
    /// it, which a handshake with its resends can pass by a datagram). It
    /// costs a client's first connection one round trip; a later one that
    /// presents a token from an earlier connection (NEW_TOKEN) skips it.
    /// `false`: the handshake at once, for a network where addresses
    /// cannot be forged.
    #[arg(long, env = "ORDER_QUIC_RETRY", default_value_t = true, action = clap::ArgAction::Set)]
    pub quic_retry: bool,

    /// Admin listener: /healthz, /readyz and /metrics only, plain HTTP,
    /// never shed, with a cap of its own (64 connections). A flood of the
    /// REST listener fills that listener's cap, not this one, so liveness
    /// and readiness probes still answer. Unset: no admin listener (the
    /// same routes are on the REST listener either way).
    #[arg(long, env = "ORDER_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,

    /// Postgres URL. Unset: the in-memory store, loaded with the data set.
    /// Set: migrations/orders is applied at start.
    #[arg(long, env = "ORDER_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<DatabaseUrl>,

    /// With Postgres, load the data set at start (as `seed` does) before serving.
    #[arg(long, env = "ORDER_SEED", default_value_t = false)]
    pub seed: bool,

    /// Postgres connections in the pool.
    #[arg(long, env = "ORDER_DATABASE_MAX_CONNECTIONS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub database_max_connections: u32,

    /// How long a query waits for a Postgres connection before answering 503.
    #[arg(
        long,
        env = "ORDER_DATABASE_ACQUIRE_TIMEOUT_MS",
        default_value_t = 2_000
    )]
    pub database_acquire_timeout_ms: u64,

    /// Log format: `json`, `pretty`, or `auto` (JSON unless stdout is a terminal).
    #[arg(long, env = "ORDER_LOG_FORMAT", default_value = "auto")]
    pub log_format: String,

    /// The largest page (`limit`, `page_size`) a caller may ask for.
    #[arg(long, env = "ORDER_MAX_PAGE_SIZE", default_value_t = 10_000)]
    pub max_page_size: u32,

    /// The largest request, in bytes, on every surface: a REST body (413
    /// past it), a gRPC message, bidi ones included (RESOURCE_EXHAUSTED), a
    /// raw-TCP frame (a RESOURCE_EXHAUSTED frame, then the close). Each is
    /// refused on its announced length, before it is read whole. A batch
    /// of a thousand queries is under 256 KiB.
    #[arg(long, env = "ORDER_MAX_REQUEST_BYTES", default_value_t = 1 << 20, value_parser = clap::value_parser!(u32).range(64..))]
    pub max_request_bytes: u32,

    /// The largest gRPC answer message, in bytes: 10,000 orders are about
    /// 3 MB.
    #[arg(long, env = "ORDER_MAX_RESPONSE_BYTES", default_value_t = 64 << 20)]
    pub max_response_bytes: usize,

    /// Lookups in flight per bidi stream or raw-TCP connection; more wait.
    #[arg(long, env = "ORDER_MAX_LOOKUPS_IN_FLIGHT", default_value_t = 256)]
    pub max_lookups_in_flight: usize,

    /// Work in service at once, one limit for the whole service: REST requests, gRPC calls, and
    /// each lookup on a bidi stream or raw-TCP connection, all count
    /// against it. Past it the work is refused at once with 503 /
    /// RESOURCE_EXHAUSTED instead of queueing. Health, metrics and
    /// reflection are never refused.
    #[arg(long, env = "ORDER_MAX_CONCURRENT_REQUESTS", default_value_t = 512)]
    pub max_concurrent_requests: usize,

    /// Streams one HTTP/2 connection may have open at once, on REST (h2c)
    /// and gRPC: the SETTINGS_MAX_CONCURRENT_STREAMS the server announces.
    /// A client past it waits for a stream to end; one connection cannot
    /// take the whole --max-concurrent-requests.
    #[arg(long, env = "ORDER_MAX_CONCURRENT_STREAMS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,

    /// Compress gRPC answers (order.v2) with gzip for clients that accept
    /// it. Off by default: compression is a variable to choose, not one a
    /// client's `grpc-accept-encoding` should turn on unnoticed (k6's gRPC
    /// client accepts gzip). Compressed requests are accepted either way.
    #[arg(long, env = "ORDER_GRPC_GZIP", default_value_t = false, action = clap::ArgAction::Set)]
    pub grpc_gzip: bool,

    /// Compress the REST API's answers (`/v1/orders`, `/v2/orders…`) with
    /// gzip for clients that send `Accept-Encoding: gzip`. Off by default,
    /// for the same reason as `ORDER_GRPC_GZIP`; Connect, health and
    /// /metrics are never compressed.
    #[arg(long, env = "ORDER_REST_GZIP", default_value_t = false, action = clap::ArgAction::Set)]
    pub rest_gzip: bool,

    /// Compress gRPC answers (order.v2) with zstd for clients that accept
    /// it (preferred over gzip when both are on and accepted). Off by
    /// default, as `ORDER_GRPC_GZIP`.
    #[arg(long, env = "ORDER_GRPC_ZSTD", default_value_t = false, action = clap::ArgAction::Set)]
    pub grpc_zstd: bool,

    /// Compress the REST API's answers with zstd for clients that send
    /// `Accept-Encoding: zstd`. Off by default, as `ORDER_REST_GZIP`.
    #[arg(long, env = "ORDER_REST_ZSTD", default_value_t = false, action = clap::ArgAction::Set)]
    pub rest_zstd: bool,

    /// Give each answer's own account of its time: the store, the encoding
    /// and the total (from the request read to the encoded answer handed
    /// over), in a `Server-Timing` header over HTTP, a `server-timing`
    /// trailer over gRPC, and a `timing` field in a bidi or raw-TCP answer.
    /// Off by default: it adds bytes to every answer and a little CPU.
    #[arg(long, env = "ORDER_SERVER_TIMING", default_value_t = false, action = clap::ArgAction::Set)]
    pub server_timing: bool,

    /// Connections open at once on each HTTP listener (REST; gRPC; HTTP/3).
    /// Past it a new TCP connection is accepted and closed at once, and a
    /// new QUIC one (its address validated first) is refused before its
    /// handshake with QUIC's CONNECTION_REFUSED; each counted on /metrics
    /// (`order_connections_refused_total{listener}`) and logged at most
    /// once a second.
    #[arg(long, env = "ORDER_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Raw-TCP connections open at once; one more gets a RESOURCE_EXHAUSTED
    /// error frame (request id 0) and is closed.
    #[arg(long, env = "ORDER_MAX_TCP_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tcp_connections: u32,

    /// Bytes of raw-TCP frames being received at once, over every
    /// connection (never less than one frame of the largest request): a
    /// frame over 8 KiB takes its announced length from it until it is
    /// read and decoded. A frame that finds it spent gets a
    /// RESOURCE_EXHAUSTED frame and the connection is closed, so clients
    /// that send frames almost whole and stop cannot hold memory past it.
    #[arg(long, env = "ORDER_TCP_FRAME_BUDGET_BYTES", default_value_t = 32 << 20, value_parser = clap::value_parser!(u32).range(64..))]
    pub tcp_frame_budget_bytes: u32,

    /// At shutdown, how long an idle HTTP/1.1 keep-alive connection is given
    /// to send one more request (answered with `Connection: close`) before it
    /// is closed: closing it at once could lose a request already on the wire.
    /// Every listener's drain ends this plus 1 s after the signal, whatever
    /// clients do.
    #[arg(long, env = "ORDER_SHUTDOWN_GRACE_MS", default_value_t = 1_000)]
    pub shutdown_grace_ms: u64,

    /// How long a client has, from opening a connection (or from the first
    /// byte after its previous answer), to send a request's head, on every
    /// protocol: an HTTP/1.1 head, each HTTP/2 head (its HEADERS frame and
    /// CONTINUATIONs; the first within this of the preface), gRPC-web's
    /// first head. Past it the connection is closed: a client that connects
    /// and sends nothing, or trickles its head, holds nothing long.
    #[arg(long, env = "ORDER_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_ms: u64,

    /// How long a REST request's body may take to arrive, from its head;
    /// past it 408. On gRPC, how long a call may take in all.
    #[arg(long, env = "ORDER_BODY_READ_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_ms: u64,

    /// How long an answer may wait with no byte taken by its client: a
    /// socket that accepts no write, an HTTP/2 flow-control window left
    /// shut with a stream open, a raw-TCP answer unread. Past it the
    /// connection is closed and what it held (slots of the limit, answers
    /// in memory) is freed: clients that never read cannot starve the rest.
    #[arg(long, env = "ORDER_WRITE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub write_timeout_ms: u64,

    /// How long a connection with no request or call in flight stays open,
    /// whatever it sends meanwhile (pings included): HTTP/1.1 keep-alive,
    /// h2c or gRPC with no stream. Also the interval of the gRPC keep-alive
    /// pings that close a connection whose peer stopped answering.
    #[arg(long, env = "ORDER_IDLE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,

    /// Connection rotation, the standard remedy for L4 balancers pinning
    /// long-lived connections: past this age (±10%) a REST or gRPC
    /// connection is closed gracefully (HTTP/2 GOAWAY; HTTP/1.1 after the
    /// answer in service), so that its client reconnects, perhaps to
    /// another replica. 0: never. Raw TCP is not rotated.
    #[arg(long, env = "ORDER_MAX_CONNECTION_AGE_MS", default_value_t = 0)]
    pub max_connection_age_ms: u64,

    /// How long a rotated connection may take to finish the calls it
    /// serves before it is dropped.
    #[arg(
        long,
        env = "ORDER_MAX_CONNECTION_AGE_GRACE_MS",
        default_value_t = 5_000
    )]
    pub max_connection_age_grace_ms: u64,

    /// PEM certificate chain (leaf first). With --tls-key, every listener
    /// (REST, gRPC, raw TCP) serves TLS only: HTTPS/1.1 and h2 by ALPN on
    /// REST, gRPC over TLS, TLS on the raw-TCP floor.
    #[arg(long, env = "ORDER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "ORDER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// Mutual TLS: PEM CA that every client's certificate must be signed by;
    /// a client without one is refused at the handshake. Needs --tls-cert.
    #[arg(long, env = "ORDER_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<std::path::PathBuf>,
}

impl Settings {
    /// The time bounds of every connection.
    pub fn conn_limits(&self) -> service_kit::serve::ConnLimits {
        service_kit::serve::ConnLimits::from_millis(
            self.shutdown_grace_ms,
            self.max_concurrent_streams,
            self.header_read_timeout_ms,
            self.body_read_timeout_ms,
            self.idle_timeout_ms,
        )
        .with_write_timeout(self.write_timeout_ms)
        .with_max_age(self.max_connection_age_ms, self.max_connection_age_grace_ms)
    }

    /// The TLS files, when TLS is on (certificate and key both set).
    pub fn tls_files(&self) -> Option<tls::ServerFiles> {
        Some(tls::ServerFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }

    /// How to reach Postgres, when the settings name it.
    pub fn pool(&self) -> Option<service_kit::db::PoolSettings> {
        service_kit::db::PoolSettings::of(
            self.database_url.as_ref(),
            self.database_max_connections,
            self.database_acquire_timeout_ms,
        )
    }

    /// Settings for a test: every listener on 127.0.0.1 port 0, the given store.
    pub fn for_tests(database_url: Option<String>) -> Self {
        let mut s = service_kit::settings::defaults::<Cli>().settings;
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        s.rest_addr = any;
        s.grpc_addr = any;
        s.tcp_addr = any;
        s.h3_addr = H3Addr(Some(any));
        s.database_url = database_url.map(DatabaseUrl);
        s
    }
}
