//! The two services as child processes: building them, starting them on
//! free ports, waiting for readiness, and stopping them.
//!
//! Every round gets fresh processes (the Spring Boot post: a reused process measured 12%
//! differently), on fresh ports, so that sockets left in TIME_WAIT by one
//! round are never counted in the next. Each child runs in its own process
//! group: a Ctrl-C in the terminal reaches the lab only, and the lab decides
//! how the children stop. [`ChildGuard`] kills its child when dropped, so an
//! error or an interruption anywhere leaves no service running.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::measure::Interrupted;
use crate::measure::cell::{Balance, Env, ROTATION_AGE_MS, Replicas, SLOW_RTT_MS, Store};
use crate::measure::http;

/// The release binaries of both services.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub order: PathBuf,
    pub user: PathBuf,
}

/// Builds both services in release mode, cargo's progress shown as it goes.
pub fn build(root: &Path) -> anyhow::Result<Binaries> {
    println!("building order-service and user-service (release)…");
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "order-service",
            "-p",
            "user-service",
        ])
        .status()
        .context("running cargo build (is cargo on PATH?)")?;
    if !status.success() {
        bail!("cargo build --release -p order-service -p user-service failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bins = Binaries {
        order: target.join("release").join("order-service"),
        user: target.join("release").join("user-service"),
    };
    for b in [&bins.order, &bins.user] {
        if !b.is_file() {
            bail!("the build succeeded but {} is missing", b.display());
        }
    }
    Ok(bins)
}

/// A child process that is killed and reaped when dropped.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    name: &'static str,
}

impl ChildGuard {
    /// Starts `cmd` in a process group of its own.
    pub fn spawn(mut cmd: Command, name: &'static str) -> anyhow::Result<ChildGuard> {
        cmd.process_group(0);
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        Ok(ChildGuard {
            child: Some(child),
            name,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The exit status if it has exited (reaping it).
    pub fn try_wait(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => c
                .try_wait()
                .with_context(|| format!("waiting for {}", self.name)),
            None => Ok(None),
        }
    }

    /// Kills and reaps the child now.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Already exited is fine: kill then fails and wait reaps it.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The ports of one pair of services.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub order_rest: u16,
    pub order_grpc: u16,
    pub order_tcp: u16,
    pub user_rest: u16,
    pub user_grpc: u16,
}

impl Ports {
    /// Five ports free right now. Held together while picking so that none
    /// comes out twice; the small race with other programs between here and
    /// the services binding them is reported as a start failure.
    pub fn pick() -> anyhow::Result<Ports> {
        let listeners = (0..5)
            .map(|_| TcpListener::bind("127.0.0.1:0").context("finding a free port"))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let p = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Ports {
            order_rest: p[0],
            order_grpc: p[1],
            order_tcp: p[2],
            user_rest: p[3],
            user_grpc: p[4],
        })
    }

    pub fn order_rest_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.order_rest))
    }

    /// The five ports.
    pub fn all(&self) -> [u16; 5] {
        [
            self.order_rest,
            self.order_grpc,
            self.order_tcp,
            self.user_rest,
            self.user_grpc,
        ]
    }

    pub fn user_rest_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.user_rest))
    }

    pub fn order_grpc_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.order_grpc))
    }
}

/// Postgres URLs of each service's own database.
#[derive(Debug, Clone)]
pub struct Databases {
    pub orders: String,
    pub users: String,
}

impl Databases {
    /// From a server URL: its database name, if any, is replaced by
    /// `orders` and `users` (one server, a database per service, as in the
    /// design). Query parameters are kept.
    pub fn from_server_url(url: &str) -> anyhow::Result<Databases> {
        let (scheme, rest) = url
            .split_once("://")
            .context("the database URL needs a scheme, e.g. postgres://postgres@127.0.0.1:5432")?;
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, format!("?{q}")),
            None => (rest, String::new()),
        };
        let authority = before_query.split('/').next().unwrap_or(before_query);
        if authority.is_empty() {
            bail!("the database URL has no host");
        }
        let db = |name: &str| format!("{scheme}://{authority}/{name}{query}");
        Ok(Databases {
            orders: db("orders"),
            users: db("users"),
        })
    }
}

impl Databases {
    /// Whether the server runs on this machine (its processes are then
    /// counted), from the host of the URL.
    pub fn is_local(&self) -> bool {
        let host = authority(&self.orders);
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.split_once(']').map(|(h, _)| h))
            .unwrap_or_else(|| host.rsplit_once(':').map_or(host, |(h, _)| h));
        matches!(host, "127.0.0.1" | "localhost" | "::1" | "") || host.starts_with("127.")
    }
}

/// The `host[:port]` of a database URL: no user or password, no database,
/// no query. What a report may name, and what says where the server runs.
pub fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['/', '?']).next().unwrap_or(rest);
    rest.rsplit_once('@').map_or(rest, |(_, h)| h)
}

/// Where cells that ask for Postgres go when the run has no
/// `--database-url`: the local server a developer's machine (and CI) runs.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432";

/// How the services of every round are started.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub bins: Binaries,
    /// The run's store: `--database-url`'s databases, or memory.
    pub databases: Option<Databases>,
    /// The databases of cells that ask for Postgres ([`Store::Postgres`])
    /// whatever the run's store: `--database-url`'s, or the local
    /// default's; `None` when no cell asks or the server is unreachable.
    pub store_databases: Option<Databases>,
    /// A stack the lab measures without starting it (`--target`).
    pub target: Option<Target>,
    /// `--pin`: order-service on CPU 0, user-service on CPU 1 (k6 unpinned).
    pub pin: bool,
    /// Where the services' output goes (appended, one header per round).
    pub log_dir: PathBuf,
    /// The run's throwaway CA and certificates, made when an experiment
    /// has TLS cells.
    pub certs: Option<tls::generate::LabCerts>,
}

impl ServiceConfig {
    /// The databases a cell's services use: the run's, or those its
    /// environment asks for; `None` is memory.
    pub fn databases_for(&self, env: &Env) -> anyhow::Result<Option<&Databases>> {
        match env.store {
            None => Ok(self.databases.as_ref()),
            Some(Store::Memory) => Ok(None),
            Some(Store::Postgres) => match &self.store_databases {
                Some(d) => Ok(Some(d)),
                None => bail!("a cell on Postgres, but the run has no Postgres server"),
            },
        }
    }

    /// What `--pin` does, for the report.
    pub fn pinning(&self) -> Option<String> {
        self.pin.then(|| {
            "order-service on CPU 0, user-service on CPU 1 (taskset); k6 not pinned".to_owned()
        })
    }
}

/// An already-running stack, measured without starting, restarting or
/// stopping anything (`lab run … --target`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// user-service's base URL, `http://host:port`.
    pub user_url: String,
    /// user-service's metrics, `http://host:port/metrics`.
    pub user_metrics: String,
    /// Each order-service replica's metrics URL.
    #[serde(default)]
    pub order_metrics: Vec<String>,
    /// order-service's REST and gRPC addresses, for what calls it directly.
    #[serde(default)]
    pub order_rest: Option<String>,
    #[serde(default)]
    pub order_grpc: Option<String>,
}

/// `http://host:port[/path]` as an address and a path.
pub fn http_endpoint(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let rest = url.strip_prefix("http://").with_context(|| {
        format!("{url}: only http:// URLs (the lab speaks plain HTTP/1.1 to a target)")
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .with_context(|| format!("{url}: resolving {authority} (host:port)"))?
        .next()
        .with_context(|| format!("{url}: {authority} resolves to no address"))?;
    Ok((addr, path.to_owned()))
}

impl Target {
    /// Every URL parsed, so that a typo fails before the first round.
    pub fn check(&self) -> anyhow::Result<()> {
        http_endpoint(&self.user_url)?;
        http_endpoint(&self.user_metrics)?;
        for m in &self.order_metrics {
            http_endpoint(m)?;
        }
        for a in self.order_rest.iter().chain(&self.order_grpc) {
            std::net::ToSocketAddrs::to_socket_addrs(a.as_str())
                .with_context(|| format!("resolving {a} (host:port)"))?;
        }
        Ok(())
    }

    /// What the report says of it.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "an already-running stack: user-service at {} (metrics {})",
            self.user_url, self.user_metrics
        );
        if !self.order_metrics.is_empty() {
            s.push_str(&format!(
                ", {} order-service replicas' metrics ({})",
                self.order_metrics.len(),
                self.order_metrics.join(", ")
            ));
        }
        s
    }
}

/// One order-service replica of a cell with several.
#[derive(Debug, Clone)]
pub struct ReplicaInfo {
    /// Where its clients reach it (the delay proxy's address, for the slow
    /// one).
    pub public: IpAddr,
    /// Where its own REST listener is, for its /metrics.
    pub rest: SocketAddr,
    /// The path of its metrics there.
    pub metrics_path: String,
    /// Its process, when the lab started it (0 for a target's).
    pub pid: u32,
}

/// A running pair (or order-service alone).
#[derive(Debug)]
pub struct Running {
    pub ports: Ports,
    /// order-service; with several replicas, the first.
    pub order: ChildGuard,
    /// With several replicas: the others, then every replica's addresses.
    pub more_orders: Vec<ChildGuard>,
    pub replicas: Vec<ReplicaInfo>,
    /// The delay proxy in front of the slow replica, in this process.
    pub slow_proxy: Option<delay_proxy::Proxy>,
    /// HAProxy, when it balances the replicas.
    pub balancer: Option<haproxy::Haproxy>,
    pub user: Option<ChildGuard>,
    /// Set when the stack is a target the lab did not start: no process
    /// of its is the lab's, and nothing is stopped.
    pub target: Option<Target>,
    /// The delay proxy between them, in this process, when a round trip is
    /// emulated: one route per order-service port user-service dials.
    pub proxy: Option<delay_proxy::Proxy>,
    /// Every variable each service was started with (`service NAME`).
    pub env: std::collections::BTreeMap<String, String>,
}

impl Running {
    /// A target stack, as the rounds see it.
    pub fn of_target(t: &Target) -> anyhow::Result<Running> {
        let replicas = t
            .order_metrics
            .iter()
            .map(|m| {
                let (addr, path) = http_endpoint(m)?;
                Ok(ReplicaInfo {
                    public: addr.ip(),
                    rest: addr,
                    metrics_path: path,
                    pid: 0,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Running {
            ports: Ports {
                order_rest: 0,
                order_grpc: 0,
                order_tcp: 0,
                user_rest: 0,
                user_grpc: 0,
            },
            order: ChildGuard {
                child: None,
                name: "order-service",
            },
            more_orders: Vec::new(),
            replicas,
            slow_proxy: None,
            balancer: None,
            user: None,
            target: Some(t.clone()),
            proxy: None,
            env: std::collections::BTreeMap::new(),
        })
    }

    /// user-service's REST address.
    pub fn user_rest_addr(&self) -> anyhow::Result<SocketAddr> {
        match &self.target {
            Some(t) => Ok(http_endpoint(&t.user_url)?.0),
            None => Ok(self.ports.user_rest_addr()),
        }
    }

    /// user-service's base URL, for k6.
    pub fn user_base_url(&self) -> String {
        match &self.target {
            Some(t) => t.user_url.trim_end_matches('/').to_owned(),
            None => format!("http://127.0.0.1:{}", self.ports.user_rest),
        }
    }

    /// Where user-service's metrics are: address and path.
    pub fn user_metrics(&self) -> anyhow::Result<(SocketAddr, String)> {
        match &self.target {
            Some(t) => http_endpoint(&t.user_metrics),
            None => Ok((self.ports.user_rest_addr(), "/metrics".to_owned())),
        }
    }

    /// order-service's REST and gRPC addresses, for what calls it
    /// directly; a target without them cannot serve such a call.
    pub fn order_addrs(&self) -> anyhow::Result<(SocketAddr, SocketAddr)> {
        let Some(t) = &self.target else {
            return Ok((self.ports.order_rest_addr(), self.ports.order_grpc_addr()));
        };
        let resolve = |a: &Option<String>, flag: &str| -> anyhow::Result<SocketAddr> {
            let a = a.as_deref().with_context(|| {
                format!("this calls order-service directly: give its address with {flag}")
            })?;
            std::net::ToSocketAddrs::to_socket_addrs(a)?
                .next()
                .with_context(|| format!("{a} resolves to no address"))
        };
        Ok((
            resolve(&t.order_rest, "--target-order-rest")?,
            resolve(&t.order_grpc, "--target-order-grpc")?,
        ))
    }

    /// Whether /proc shows the services (the lab started them).
    pub fn on_proc(&self) -> bool {
        self.target.is_none()
    }

    pub fn order_pid(&self) -> u32 {
        self.order.pid()
    }

    pub fn user_pid(&self) -> u32 {
        self.user.as_ref().map_or(0, ChildGuard::pid)
    }

    /// Stops both now (and the proxy between them).
    pub fn stop(mut self) {
        if let Some(u) = self.user.as_mut() {
            u.kill();
        }
        self.proxy = None;
        self.balancer = None;
        self.slow_proxy = None;
        self.order.kill();
        for o in &mut self.more_orders {
            o.kill();
        }
    }
}

fn log_file(dir: &Path, name: &str, header: &str) -> anyhow::Result<File> {
    let path = dir.join(format!("{name}.log"));
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "===== {header} =====")?;
    Ok(f)
}

/// A service's command with a cleared environment: the service sees only
/// what the lab sets (an `ORDER_*`, `USER_*` or `OTEL_*` variable in the
/// caller's shell would otherwise change a run without a trace), plus
/// `PATH` for `taskset`.
fn command(cfg: &ServiceConfig, bin: &Path, cpu: u32, log: &File) -> anyhow::Result<Command> {
    let mut cmd = if cfg.pin {
        let mut c = Command::new("taskset");
        c.arg("-c").arg(cpu.to_string()).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    // Warnings only: per-request logging would be measured as protocol cost.
    cmd.env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log.try_clone()?));
    Ok(cmd)
}

/// The variables a command sets, as `service NAME` → value.
fn env_of(service: &str, cmd: &Command) -> Vec<(String, String)> {
    cmd.get_envs()
        .filter_map(|(k, v)| {
            Some((
                format!("{service} {}", k.to_string_lossy()),
                v?.to_string_lossy().into_owned(),
            ))
        })
        .collect()
}

/// Starts order-service, and user-service pointed at it unless
/// `user_pool` is `None`, in the environment `env`, then waits until both
/// answer `/readyz`.
///
/// With an RTT, user-service dials order-service's three ports through one
/// in-process [`delay_proxy::Proxy`] (three routes) that holds every byte
/// RTT/2 in each direction; RTT 0 still goes through the proxy, so that a
/// baseline at 0 pays the proxy's own cost too. With TLS, every listener of
/// order-service serves TLS with the run's certificates and user-service
/// dials it over TLS trusting the run's CA.
pub fn start(
    cfg: &ServiceConfig,
    user_pool: Option<u16>,
    env: &Env,
    header: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Running> {
    // An emulated round trip is split evenly between the two directions;
    // a bandwidth cap alone goes through the proxy too, with no delay.
    let one_way = match (env.rtt_ms, env.rate_mbit) {
        (None, None) => None,
        (rtt, _) => Some(Duration::from_micros(u64::from(rtt.unwrap_or(0)) * 500)),
    };
    let tls = env.tls;
    let certs = match (tls, &cfg.certs) {
        (false, _) => None,
        (true, Some(c)) => Some(c),
        (true, None) => bail!("a TLS cell, but the run made no certificates"),
    };
    let ports = Ports::pick()?;
    if let Some(r) = env.replicas {
        if env.tls
            || env.rtt_ms.is_some()
            || env.rate_mbit.is_some()
            || env.gzip
            || env.zstd
            || env.breakdown
        {
            bail!(
                "a cell with replicas runs in cleartext with no emulated RTT, bandwidth cap, compression or timed parts"
            );
        }
        return start_replicas(cfg, user_pool, &r, ports, header, stop);
    }
    let databases = cfg.databases_for(env)?;
    let order_log = log_file(&cfg.log_dir, "order-service", header)?;
    let mut cmd = command(cfg, &cfg.bins.order, 0, &order_log)?;
    cmd.env("ORDER_REST_ADDR", format!("127.0.0.1:{}", ports.order_rest))
        .env("ORDER_GRPC_ADDR", format!("127.0.0.1:{}", ports.order_grpc))
        .env("ORDER_TCP_ADDR", format!("127.0.0.1:{}", ports.order_tcp));
    match certs {
        Some(c) => cmd
            .env("ORDER_TLS_CERT", &c.server_cert)
            .env("ORDER_TLS_KEY", &c.server_key),
        None => &mut cmd,
    };
    match databases {
        Some(db) => cmd.env("ORDER_DATABASE_URL", &db.orders),
        None => &mut cmd,
    };
    if env.gzip {
        cmd.env("ORDER_REST_GZIP", "true")
            .env("ORDER_GRPC_GZIP", "true");
    }
    if env.zstd {
        cmd.env("ORDER_REST_ZSTD", "true")
            .env("ORDER_GRPC_ZSTD", "true");
    }
    if env.breakdown {
        cmd.env("ORDER_SERVER_TIMING", "true");
    }
    let mut service_env = env_of("order-service", &cmd);
    let mut order = ChildGuard::spawn(cmd, "order-service")?;
    wait_ready(
        &mut order,
        ports.order_rest_addr(),
        certs.map(|c| c.ca.as_path()),
        &cfg.log_dir,
        stop,
    )?;
    // After readiness: until taskset has exec'd the service, the pid is taskset's.
    check_pinned(cfg, &order, 0)?;
    let order_tcp = SocketAddr::from(([127, 0, 0, 1], ports.order_tcp));
    let proxy = one_way
        .map(|d| {
            let config = match env.rate_mbit {
                Some(m) => delay_proxy::Config::one_way(d)
                    .with_rate(delay_proxy::Config::mbit(f64::from(m))),
                None => delay_proxy::Config::one_way(d),
            };
            delay_proxy::Proxy::start(
                config,
                &[
                    delay_proxy::Route::any_port(ports.order_rest_addr()),
                    delay_proxy::Route::any_port(ports.order_grpc_addr()),
                    delay_proxy::Route::any_port(order_tcp),
                ],
            )
            .context("starting the delay proxy")
        })
        .transpose()?;
    // Where user-service dials order-service: its ports, or the proxy's.
    let (order_rest, order_grpc, order_tcp) = match &proxy {
        Some(p) => (p.local_addr(0), p.local_addr(1), p.local_addr(2)),
        None => (ports.order_rest_addr(), ports.order_grpc_addr(), order_tcp),
    };

    let user = match user_pool {
        None => None,
        Some(pool) => {
            let user_log = log_file(&cfg.log_dir, "user-service", header)?;
            let mut cmd = command(cfg, &cfg.bins.user, 1, &user_log)?;
            let scheme = if certs.is_some() { "https" } else { "http" };
            cmd.env("USER_REST_ADDR", format!("127.0.0.1:{}", ports.user_rest))
                .env("USER_GRPC_ADDR", format!("127.0.0.1:{}", ports.user_grpc))
                .env("USER_ORDER_REST_URL", format!("{scheme}://{order_rest}"))
                .env("USER_ORDER_GRPC_URL", format!("{scheme}://{order_grpc}"))
                .env("USER_ORDER_TCP_ADDR", order_tcp.to_string())
                .env("USER_POOL_SIZE", pool.to_string())
                .env("USER_LOG_FORMAT", "json");
            match certs {
                Some(c) => cmd.env("USER_ORDER_TLS_CA", &c.ca),
                None => &mut cmd,
            };
            match databases {
                Some(db) => cmd.env("USER_DATABASE_URL", &db.users),
                None => &mut cmd,
            };
            if env.gzip {
                cmd.env("USER_UPSTREAM_GZIP", "true");
            }
            if env.zstd {
                cmd.env("USER_UPSTREAM_ZSTD", "true");
            }
            if env.breakdown {
                cmd.env("USER_UPSTREAM_BREAKDOWN", "true");
            }
            service_env.extend(env_of("user-service", &cmd));
            let mut user = ChildGuard::spawn(cmd, "user-service")?;
            wait_ready(&mut user, ports.user_rest_addr(), None, &cfg.log_dir, stop)?;
            check_pinned(cfg, &user, 1)?;
            Some(user)
        }
    };
    Ok(Running {
        ports,
        order,
        more_orders: Vec::new(),
        replicas: Vec::new(),
        slow_proxy: None,
        balancer: None,
        user,
        target: None,
        proxy,
        env: service_env.into_iter().collect(),
    })
}

/// The address of replica `i` (1-based): 127.0.0.i.
pub fn replica_ip(i: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, i])
}

/// Starts `r.n` order-service replicas on the same ports at 127.0.0.1, .2,
/// …; the slow one (the last) really listens at 127.0.0.(100 + i), behind a
/// delay proxy at its public address adding [`SLOW_RTT_MS`] per round trip.
/// Then HAProxy in front of them for `l4` and `l7`, and user-service
/// pointed at the first replica (`direct`), at HAProxy, or at all of them
/// (`client`).
fn start_replicas(
    cfg: &ServiceConfig,
    user_pool: Option<u16>,
    r: &Replicas,
    ports: Ports,
    header: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Running> {
    anyhow::ensure!(
        (2..=crate::measure::cell::MAX_REPLICAS as u8).contains(&r.n),
        "{} replicas: a cell has 2 to {}",
        r.n,
        crate::measure::cell::MAX_REPLICAS
    );
    if matches!(r.balance, Balance::L4 | Balance::L7) && haproxy::binary().is_none() {
        bail!("{}", haproxy::INSTALL_HINT);
    }
    let at = |ip: IpAddr, port: u16| SocketAddr::new(ip, port);
    let mut children = Vec::new();
    let mut replicas = Vec::new();
    let mut service_env = Vec::new();
    for i in 1..=r.n {
        let public = replica_ip(i);
        let slow = r.slow && i == r.n;
        let own = if slow { replica_ip(100 + i) } else { public };
        let log = log_file(
            &cfg.log_dir,
            "order-service",
            &format!("{header}, replica {i}"),
        )?;
        let mut cmd = command(cfg, &cfg.bins.order, 0, &log)?;
        cmd.env("ORDER_REST_ADDR", at(own, ports.order_rest).to_string())
            .env("ORDER_GRPC_ADDR", at(own, ports.order_grpc).to_string())
            .env("ORDER_TCP_ADDR", at(own, ports.order_tcp).to_string());
        if r.rotation {
            cmd.env("ORDER_MAX_CONNECTION_AGE_MS", ROTATION_AGE_MS.to_string());
        }
        if let Some(db) = &cfg.databases {
            cmd.env("ORDER_DATABASE_URL", &db.orders);
        }
        if i == 1 {
            service_env.extend(env_of("order-service", &cmd));
        }
        let mut child = ChildGuard::spawn(cmd, "order-service")?;
        wait_ready(
            &mut child,
            at(own, ports.order_rest),
            None,
            &cfg.log_dir,
            stop,
        )?;
        check_pinned(cfg, &child, 0)?;
        replicas.push(ReplicaInfo {
            public,
            rest: at(own, ports.order_rest),
            metrics_path: "/metrics".to_owned(),
            pid: child.pid(),
        });
        children.push(child);
    }
    let slow_proxy = if r.slow {
        let (public, own) = (replica_ip(r.n), replica_ip(100 + r.n));
        let routes: Vec<delay_proxy::Route> = [ports.order_rest, ports.order_grpc, ports.order_tcp]
            .into_iter()
            .map(|p| delay_proxy::Route {
                listen: at(public, p),
                upstream: at(own, p),
            })
            .collect();
        Some(
            delay_proxy::Proxy::start(
                delay_proxy::Config::one_way(Duration::from_micros(u64::from(SLOW_RTT_MS) * 500)),
                &routes,
            )
            .context("starting the delay proxy in front of the slow replica")?,
        )
    } else {
        None
    };
    let publics: Vec<IpAddr> = replicas.iter().map(|r| r.public).collect();
    let backends = |port: u16| publics.iter().map(|ip| at(*ip, port)).collect::<Vec<_>>();
    let balancer = match r.balance {
        Balance::Direct | Balance::Client | Balance::ClientP2c => None,
        Balance::L4 | Balance::L7 => {
            let (rest_mode, grpc_mode) = match r.balance {
                Balance::L4 => (haproxy::Mode::Tcp, haproxy::Mode::Tcp),
                _ => (
                    haproxy::Mode::Http { h2_only: false },
                    haproxy::Mode::Http { h2_only: true },
                ),
            };
            let frontends = [
                haproxy::Frontend {
                    name: "rest".into(),
                    mode: rest_mode,
                    backends: backends(ports.order_rest),
                },
                haproxy::Frontend {
                    name: "grpc".into(),
                    mode: grpc_mode,
                    backends: backends(ports.order_grpc),
                },
                // Raw TCP has no L7 form: it is balanced at L4 in both.
                haproxy::Frontend {
                    name: "tcp".into(),
                    mode: haproxy::Mode::Tcp,
                    backends: backends(ports.order_tcp),
                },
            ];
            Some(
                haproxy::Haproxy::start_avoiding(
                    &frontends,
                    &cfg.log_dir.join("haproxy"),
                    &ports.all(),
                )
                .context("starting HAProxy")?,
            )
        }
    };
    let first = replica_ip(1);
    let (order_rest, order_grpc, order_tcp) = match &balancer {
        Some(h) => (h.addr(0), h.addr(1), h.addr(2)),
        None => (
            at(first, ports.order_rest),
            at(first, ports.order_grpc),
            at(first, ports.order_tcp),
        ),
    };
    let user = match user_pool {
        None => None,
        Some(pool) => {
            let user_log = log_file(&cfg.log_dir, "user-service", header)?;
            let mut cmd = command(cfg, &cfg.bins.user, 1, &user_log)?;
            cmd.env("USER_REST_ADDR", format!("127.0.0.1:{}", ports.user_rest))
                .env("USER_GRPC_ADDR", format!("127.0.0.1:{}", ports.user_grpc))
                .env("USER_ORDER_REST_URL", format!("http://{order_rest}"))
                .env("USER_ORDER_GRPC_URL", format!("http://{order_grpc}"))
                .env("USER_ORDER_TCP_ADDR", order_tcp.to_string())
                .env("USER_POOL_SIZE", pool.to_string())
                .env("USER_LOG_FORMAT", "json");
            if r.balance.by_client() {
                let list: Vec<String> = publics.iter().map(IpAddr::to_string).collect();
                cmd.env("USER_ORDER_REPLICAS", list.join(","));
                let pick = match r.balance {
                    Balance::ClientP2c => "p2c",
                    _ => "round-robin",
                };
                cmd.env("USER_ORDER_PICK", pick);
            }
            if let Some(db) = &cfg.databases {
                cmd.env("USER_DATABASE_URL", &db.users);
            }
            service_env.extend(env_of("user-service", &cmd));
            let mut user = ChildGuard::spawn(cmd, "user-service")?;
            wait_ready(&mut user, ports.user_rest_addr(), None, &cfg.log_dir, stop)?;
            check_pinned(cfg, &user, 1)?;
            Some(user)
        }
    };
    let mut children = children.into_iter();
    let order = children.next().context("no replica started")?;
    Ok(Running {
        ports,
        order,
        more_orders: children.collect(),
        replicas,
        slow_proxy,
        balancer,
        user,
        target: None,
        proxy: None,
        env: service_env.into_iter().collect(),
    })
}

/// Polls `GET /readyz` until it answers 200.
fn wait_ready(
    child: &mut ChildGuard,
    addr: SocketAddr,
    tls_ca: Option<&Path>,
    log_dir: &Path,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let tls = tls_ca.map(tls_client).transpose()?;
    loop {
        if stop.load(Ordering::SeqCst) {
            bail!(Interrupted);
        }
        if let Some(status) = child.try_wait()? {
            let log = log_dir.join(format!("{}.log", child.name));
            // Its last words, so that the reason is in the error itself.
            let last = std::fs::read_to_string(&log)
                .ok()
                .and_then(|t| {
                    t.lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            bail!(
                "{} exited before it was ready ({status}): {}; its output is in {}",
                child.name,
                last.trim(),
                log.display()
            );
        }
        let ready = match &tls {
            None => http::get(addr, "/readyz", Duration::from_secs(2)).map(|r| r.status == 200),
            Some(config) => ready_over_tls(addr, config),
        };
        if ready.unwrap_or(false) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not become ready on {addr} within 60 s; its output is in {}",
                child.name,
                log_dir.join(format!("{}.log", child.name)).display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// With `--pin`, the kernel's own word that the service may run on `cpu`
/// alone (`Cpus_allowed_list` in /proc), so a report never claims a pinning
/// that did not happen.
fn check_pinned(cfg: &ServiceConfig, child: &ChildGuard, cpu: u32) -> anyhow::Result<()> {
    if !cfg.pin {
        return Ok(());
    }
    let path = format!("/proc/{}/status", child.pid());
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
        .with_context(|| format!("{path} has no Cpus_allowed_list"))?;
    if allowed != cpu.to_string() {
        bail!(
            "--pin asked for {} on CPU {cpu}, but the kernel allows it CPUs {allowed}",
            child.name
        );
    }
    Ok(())
}

/// A blocking TLS client trusting the run's CA, for readiness checks.
fn tls_client(ca: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let roots = tls::load_roots("CA", ca)?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("choosing TLS versions")?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `GET /readyz` over HTTPS/1.1: does it answer 200?
fn ready_over_tls(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> anyhow::Result<bool> {
    use std::io::{Read as _, Write as _};
    let name = rustls_pki_types::ServerName::from(addr.ip());
    let conn = rustls::ClientConnection::new(config.clone(), name)?;
    let tcp = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    tcp.set_read_timeout(Some(Duration::from_secs(2)))?;
    tcp.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    s.write_all(b"GET /readyz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    Ok(head.starts_with(b"HTTP/1.1 200"))
}

/// Loads the data set into both Postgres databases once, before the first
/// round (each service's `seed` command; idempotent).
pub fn seed(cfg: &ServiceConfig) -> anyhow::Result<()> {
    match &cfg.databases {
        Some(db) => seed_into(&cfg.bins, db),
        None => Ok(()),
    }
}

/// Whether a TCP connection to the server of `url` opens within 2 s: a
/// Postgres that is down or absent is found before a round is planned on it.
pub fn reachable(url: &str) -> anyhow::Result<()> {
    let at = authority(url);
    let at = if at.contains(':') && !at.ends_with(']') {
        at.to_owned()
    } else {
        format!("{at}:5432")
    };
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(at.as_str())
        .with_context(|| format!("resolving {at}"))?
        .collect();
    let mut last = None;
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => bail!("nothing answers at {at}: {e}"),
        None => bail!("{at} resolves to no address"),
    }
}

/// Each service's `seed` command into `db`: it creates a missing database
/// (and says so) and loads the data set, idempotently.
pub fn seed_into(bins: &Binaries, db: &Databases) -> anyhow::Result<()> {
    for (bin, var, url, name) in [
        (
            &bins.order,
            "ORDER_DATABASE_URL",
            &db.orders,
            "order-service",
        ),
        (&bins.user, "USER_DATABASE_URL", &db.users, "user-service"),
    ] {
        println!("seeding {name}'s database (once; idempotent)…");
        let out = Command::new(bin)
            .arg("seed")
            .env_clear()
            .env(var, url)
            .env("RUST_LOG", "warn")
            .output()
            .with_context(|| format!("running {name} seed"))?;
        if !out.status.success() {
            bail!(
                "{name} seed failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
            );
        }
        // The seed command creates a missing database and says so.
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            println!("{name}: {line}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_get_one_database_per_service() {
        let d = Databases::from_server_url("postgres://postgres@127.0.0.1:5432").expect("valid");
        assert_eq!(d.orders, "postgres://postgres@127.0.0.1:5432/orders");
        assert_eq!(d.users, "postgres://postgres@127.0.0.1:5432/users");
        let d = Databases::from_server_url("postgres://u:p@db:5432/whatever?sslmode=disable")
            .expect("valid");
        assert_eq!(d.orders, "postgres://u:p@db:5432/orders?sslmode=disable");
        assert!(Databases::from_server_url("127.0.0.1:5432").is_err());
        let local = |u: &str| Databases::from_server_url(u).expect("valid").is_local();
        assert!(local("postgres://postgres@127.0.0.1:5432"));
        assert!(local("postgres://u:p@localhost/x"));
        assert!(local("postgres://u@[::1]:5432"));
        assert!(!local("postgres://u:p@db.example:5432"));
    }

    #[test]
    fn picked_ports_are_distinct() {
        let p = Ports::pick().expect("ports");
        let mut all = vec![
            p.order_rest,
            p.order_grpc,
            p.order_tcp,
            p.user_rest,
            p.user_grpc,
        ];
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5);
    }

    #[test]
    fn a_service_sees_only_the_variables_the_lab_sets() {
        let dir = std::env::temp_dir().join(format!("lab-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = ServiceConfig {
            bins: Binaries {
                order: "/usr/bin/env".into(),
                user: "/usr/bin/env".into(),
            },
            databases: None,
            store_databases: None,
            target: None,
            pin: false,
            log_dir: dir.clone(),
            certs: None,
        };
        let log = log_file(&dir, "env", "test").unwrap();
        let mut cmd = command(&cfg, Path::new("/usr/bin/env"), 0, &log).unwrap();
        cmd.env("ORDER_REST_ADDR", "127.0.0.1:1");
        let set = env_of("order-service", &cmd);
        assert!(set.contains(&("order-service RUST_LOG".into(), "warn".into())));
        assert!(cmd.status().unwrap().success());
        let seen = std::fs::read_to_string(dir.join("env.log")).unwrap();
        let names: Vec<&str> = seen
            .lines()
            .filter(|l| !l.starts_with("====="))
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        assert!(names.contains(&"ORDER_REST_ADDR"), "{seen}");
        // Whatever this test process has (HOME, CARGO_*, ...), the service
        // sees only the lab's variables.
        assert!(std::env::vars().count() > 3);
        for n in &names {
            assert!(
                ["PATH", "RUST_LOG", "ORDER_REST_ADDR"].contains(n),
                "the service saw {n}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dropped_guard_kills_its_child() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let g = ChildGuard::spawn(cmd, "sleep").expect("spawn");
        let pid = g.pid();
        assert!(crate::measure::procfs::is_running(pid));
        drop(g);
        assert!(!crate::measure::procfs::is_running(pid));
    }
}
