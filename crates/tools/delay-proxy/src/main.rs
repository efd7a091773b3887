//! `delay-proxy`: the library's proxy as a command.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use delay_proxy::{Config, Proxy, Route};

/// A TCP proxy that adds a one-way delay, with optional jitter, to each
/// direction, keeping byte order: emulated round-trip time for any protocol.
#[derive(Debug, Parser)]
#[command(
    name = "delay-proxy",
    version,
    about,
    long_about = "A TCP proxy that adds a one-way delay, with optional jitter, to each direction \
of every connection, keeping byte order: bytes read at time t are written at t + delay \
(+ jitter), never before the bytes read before them. It never looks at the bytes, so HTTP/1.1, \
h2, gRPC, raw TCP and TLS pass unchanged; a half-close is passed on after the same delay. \
TCP_NODELAY is set on both sides.\n\n\
Give one --listen and one --upstream per route; they pair up in order, so one process can \
stand between a client and several ports of a server:\n\n  \
delay-proxy --rtt-ms 10 \\\n    \
--listen 127.0.0.1:18082 --upstream 127.0.0.1:8082 \\\n    \
--listen 127.0.0.1:60052 --upstream 127.0.0.1:50052\n\n\
On startup it prints one line per route, `listening on LISTEN -> UPSTREAM`, with the port it \
bound (use port 0 for a free one). Ctrl-C stops it.\n\n\
With --rate-mbit, each direction is one link of that many megabits per second, shared by \
every connection: a chunk leaves once the link has sent what came before it and its own \
bytes, then takes the delay.\n\n\
Not emulated: loss, TCP's congestion window over a long path. The client's connect() returns \
at once, but a new connection's first bytes are held one extra round trip (the TCP \
handshake) unless --no-handshake."
)]
struct Cli {
    /// Address to listen on (repeat for several routes; port 0 picks one).
    #[arg(long, required = true, value_name = "ADDR")]
    listen: Vec<SocketAddr>,
    /// Where the matching --listen's connections go, host:port (repeat).
    #[arg(long, required = true, value_name = "HOST:PORT")]
    upstream: Vec<String>,
    /// One-way delay added to each direction, in milliseconds (fractions
    /// allowed: 0.5).
    #[arg(long, value_name = "MS", conflicts_with = "rtt_ms")]
    delay_ms: Option<f64>,
    /// Round-trip time to emulate, in milliseconds: half of it on each
    /// direction (instead of --delay-ms).
    #[arg(long, value_name = "MS")]
    rtt_ms: Option<f64>,
    /// Extra random delay per chunk, uniform in [0, MS]; bytes are never
    /// reordered by it.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    jitter_ms: f64,
    /// Do not hold a new connection's first bytes for the extra round trip
    /// of the TCP handshake.
    #[arg(long)]
    no_handshake: bool,
    /// KiB read but not yet written, per direction and connection, before
    /// reading pauses.
    #[arg(long, value_name = "KIB", default_value_t = 8192)]
    max_buffered_kib: usize,
    /// Cap each direction at this many megabits (10^6 bits) per second,
    /// every connection together (fractions allowed: 0.5).
    #[arg(long, value_name = "MBIT")]
    rate_mbit: Option<f64>,
    /// Print the counters (connections, bytes, lateness) every S seconds.
    #[arg(long, value_name = "S")]
    stats_every: Option<f64>,
}

fn millis(what: &str, ms: f64) -> anyhow::Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        bail!("{what} must be a number of milliseconds, 0 or more (got {ms})");
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.listen.len() != cli.upstream.len() {
        bail!(
            "{} --listen but {} --upstream: give one upstream per listen address, in the same order",
            cli.listen.len(),
            cli.upstream.len()
        );
    }
    let delay = match (cli.delay_ms, cli.rtt_ms) {
        (Some(d), _) => millis("--delay-ms", d)?,
        (None, Some(r)) => millis("--rtt-ms", r)? / 2,
        (None, None) => bail!("give --delay-ms (one way) or --rtt-ms (round trip)"),
    };
    let mut config = Config::one_way(delay).with_jitter(millis("--jitter-ms", cli.jitter_ms)?);
    config.handshake = !cli.no_handshake;
    config.max_buffered = cli.max_buffered_kib.max(1) * 1024;
    if let Some(mbit) = cli.rate_mbit {
        if !mbit.is_finite() || mbit <= 0.0 {
            bail!("--rate-mbit must be a positive number of megabits per second (got {mbit})");
        }
        config = config.with_rate(Config::mbit(mbit));
    }
    let mut routes = Vec::new();
    for (listen, up) in cli.listen.iter().zip(&cli.upstream) {
        let upstream = up
            .to_socket_addrs()
            .with_context(|| format!("resolving --upstream {up}"))?
            .next()
            .with_context(|| format!("--upstream {up} resolves to no address"))?;
        routes.push(Route {
            listen: *listen,
            upstream,
        });
    }
    let proxy = Proxy::start(config.clone(), &routes).context("binding the listen addresses")?;
    for (addr, r) in proxy.local_addrs().iter().zip(&routes) {
        println!("listening on {addr} -> {}", r.upstream);
    }
    println!(
        "one-way delay {:?} each direction (round trip {:?}), jitter up to {:?}, handshake {}, {}",
        config.delay,
        config.delay * 2,
        config.jitter,
        if config.handshake {
            "emulated"
        } else {
            "not emulated"
        },
        match config.rate {
            Some(r) => format!("each direction capped at {r} bytes/s"),
            None => "no bandwidth cap".to_owned(),
        }
    );
    let every = cli
        .stats_every
        .map(|s| millis("--stats-every", s * 1000.0))
        .transpose()?;
    loop {
        match every {
            Some(d) if !d.is_zero() => {
                std::thread::sleep(d);
                let s = proxy.stats();
                println!(
                    "connections {} (live {}, upstream failures {}), bytes to upstream {}, to clients {}, chunks {}, late mean {:?} max {:?}",
                    s.connections,
                    proxy.live_connections(),
                    s.upstream_failures,
                    s.bytes_to_upstream,
                    s.bytes_to_client,
                    s.chunks,
                    s.mean_late(),
                    Duration::from_nanos(s.late_ns_max)
                );
            }
            _ => std::thread::park(),
        }
    }
}
