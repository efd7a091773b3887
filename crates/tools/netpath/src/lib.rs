//! A packet-level network path for a kernel without netem: two network
//! namespaces, A and B, joined by a pair of TUN devices, with this process
//! carrying every IP packet between them. Each direction has its own
//! one-way delay, jitter, loss (Bernoulli or Gilbert–Elliott), rate cap
//! with a drop-tail queue, and the path has an MTU and a TCP congestion
//! control; the kernels at both ends run their own TCP over it, so slow
//! start, retransmission and head-of-line blocking happen as on a real
//! network, unlike a proxy that terminates TCP.
//!
//! ```text
//!  host ── npvNa ═veth═ ctl ┐                       ┌ ctl ═veth═ npvNb ── host
//!                          [A] nptNa ⇄ this process ⇄ nptNb [B]
//!                               10.96.x.1            10.96.x.2
//! ```
//!
//! Each namespace also has a control link to the host (a veth pair, no
//! emulation), so a program on the host reaches a service in A or B at its
//! control address without crossing the path; only traffic between A's and
//! B's path addresses is shaped.
//!
//! Names carry a prefix, the owner's PID and a host-wide index
//! (`netpath-{pid}-{index}-a`); the next [`Path::up`] on the host removes
//! what an owner that died left behind. [`Path`] removes its own when
//! dropped.
//!
//! # Layout
//! - this file: [`Path`] (set-up, tear-down, the facts of its TCP).
//! - [`spec`]: the settings and their one-line errors.
//! - [`link`]: one direction as a model (queue, loss, delay).
//! - `forward`: the threads moving packets between the devices.
//! - [`ns`]: namespaces, names, addresses, clean-up, entering a namespace.
//! - `relay`: a TCP port of a namespace relayed to the host.
//! - `rng`: the seeded generator of losses and jitter.
//! - `main.rs`: the `netpath` command.

mod forward;
pub mod link;
pub mod ns;
mod relay;
mod rng;
pub mod spec;

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Serialize;

pub use forward::{DirectionStats, LATE_BUCKETS, lateness_bucket};
pub use relay::Relay;
pub use spec::{BadSetting, CongestionControl, Jitter, Link, Loss, PathConfig, Queue};

/// One end of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Side {
    fn i(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }
}

/// What the kernel's TCP on one side of the path does, read back from the
/// kernel rather than from the settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TcpFacts {
    /// What a socket opened across the path reports (`TCP_CONGESTION`).
    pub congestion_control: String,
    /// `net.ipv4.tcp_slow_start_after_idle` in the namespace.
    pub slow_start_after_idle: bool,
    /// The initial congestion window of the path's route, segments.
    pub initcwnd: u32,
}

/// The initial congestion window set on the path's routes (the kernel's
/// default, written down so it is stated rather than assumed).
pub const INITCWND: u32 = 10;

/// The packets per second, both directions together, one bulk TCP flow got
/// across a path with no cap on the project's 2-core machine
/// (`cargo bench -p netpath`, the lower of no delay and 1 ms each way): the
/// emulator's own ceiling there. A rate cap that needs half of it is close
/// enough to be shaped by the emulator rather than by the cap.
/// Measured 2026-12-07: 198,506 packets/s with 1 ms each way (2,155 Mbit/s
/// of IP packets from A to B), 272,645 with none.
pub const CEILING_PPS: u64 = 198_000;

/// The packets per second a path capped at `rate_mbit` each way carries at
/// full load in one direction: full 1,500-byte packets at the cap, and the
/// other direction's ACKs, one per two packets (delayed ACKs).
pub fn packets_at_cap(rate_mbit: u32) -> u64 {
    let full = u64::from(rate_mbit) * 1_000_000 / (8 * 1500);
    full + full / 2
}

/// The packets each TUN device's queue holds for the emulator to read
/// (txqueuelen; the kernel's own default for a TUN device is 500): set on
/// the path's devices so that it is stated, and its overflows are counted
/// ([`Path::device_drops`]).
pub const TUN_QUEUE: u32 = 1000;

/// A path that is up: namespaces, devices, addresses, routes and the
/// threads carrying packets. Dropping it takes everything down.
pub struct Path {
    config: PathConfig,
    plan: ns::Plan,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    counters: [Arc<forward::Counters>; 2],
    devices: Vec<Arc<tun::Device>>,
    /// How many of the plan's more addresses are taken.
    extra: u32,
}

impl std::fmt::Debug for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Path")
            .field("ns", &self.plan.ns)
            .field("config", &self.config)
            .finish()
    }
}

impl Path {
    /// Makes the path: checks the settings and the machine, removes stale
    /// paths of dead owners, creates both namespaces, their TUN devices,
    /// addresses, routes (with the congestion control) and control links,
    /// starts forwarding, and checks that a TCP socket across the path
    /// runs the congestion control asked for.
    pub fn up(config: &PathConfig) -> anyhow::Result<Path> {
        config.check()?;
        if let Some(why) = ns::unavailable() {
            bail!(why);
        }
        let plan = {
            let _lock = ns::lock()?;
            ns::clean_stale()?;
            let plan = ns::Plan::new(ns::free_index()?);
            for n in &plan.ns {
                ns::ip(&["netns", "add", n])?;
            }
            plan
        };
        let mut path = Path {
            config: *config,
            plan,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            counters: Default::default(),
            devices: Vec::new(),
            extra: 0,
        };
        // From here on, a failure drops `path`, which removes what exists.
        path.wire()?;
        path.start_forwarding()?;
        let want = config.cc.name();
        for side in [Side::A, Side::B] {
            let seen = path.congestion_control(side)?;
            if seen != want {
                bail!(
                    "the path asked for {want} congestion control on side {side:?}, but its sockets run {seen}"
                );
            }
        }
        Ok(path)
    }

    fn wire(&mut self) -> anyhow::Result<()> {
        let p = self.plan.clone();
        let mtu = self.config.mtu.to_string();
        let cc = self.config.cc.name();
        for i in 0..2 {
            let (ns, tun, other) = (&p.ns[i], &p.tun[i], p.path[1 - i]);
            ns::ip(&["-n", ns, "link", "set", "lo", "up"])?;
            let mut cfg = tun::Configuration::default();
            cfg.tun_name(tun).mtu(self.config.mtu).platform_config(|c| {
                c.ensure_root_privileges(false);
            });
            let dev = tun::Device::new(&cfg).with_context(|| format!("creating TUN {tun}"))?;
            self.devices.push(Arc::new(dev));
            ns::ip(&["link", "set", tun, "netns", ns])?;
            ns::ip(&[
                "-n",
                ns,
                "link",
                "set",
                tun,
                "mtu",
                &mtu,
                "txqueuelen",
                &TUN_QUEUE.to_string(),
                "up",
            ])?;
            let (me, peer) = (format!("{}/32", p.path[i]), format!("{other}/32"));
            ns::ip(&["-n", ns, "addr", "add", &me, "peer", &peer, "dev", tun])?;
            ns::ip(&[
                "-n",
                ns,
                "route",
                "replace",
                &peer,
                "dev",
                tun,
                "src",
                &p.path[i].to_string(),
                "congctl",
                cc,
                "initcwnd",
                &INITCWND.to_string(),
            ])?;
            // The control link: host <-> namespace, not shaped.
            let veth = &p.veth[i];
            ns::ip(&[
                "link", "add", veth, "type", "veth", "peer", "name", "ctl", "netns", ns,
            ])?;
            ns::ip(&["addr", "add", &format!("{}/30", p.host[i]), "dev", veth])?;
            ns::ip(&["link", "set", veth, "up"])?;
            let ctl = format!("{}/30", p.control[i]);
            ns::ip(&["-n", ns, "addr", "add", &ctl, "dev", "ctl"])?;
            ns::ip(&["-n", ns, "link", "set", "ctl", "up"])?;
        }
        Ok(())
    }

    fn start_forwarding(&mut self) -> anyhow::Result<()> {
        let (a, b) = (self.devices[0].clone(), self.devices[1].clone());
        let seed = self.config.seed;
        let dirs = [
            ("a-to-b", a.clone(), b.clone(), self.config.a_to_b),
            ("b-to-a", b, a, self.config.b_to_a),
        ];
        for (i, (name, from, to, link)) in dirs.into_iter().enumerate() {
            let model = link::Direction::new(link, seed, i as u64);
            let threads = forward::start(
                name,
                from,
                to,
                model,
                self.stop.clone(),
                self.counters[i].clone(),
            )?;
            self.threads.extend(threads);
        }
        Ok(())
    }

    pub fn config(&self) -> &PathConfig {
        &self.config
    }

    /// The namespace of a side (for `ip netns exec NAME …`).
    pub fn ns(&self, side: Side) -> &str {
        &self.plan.ns[side.i()]
    }

    /// A side's address on the path: what the other side dials.
    pub fn path_addr(&self, side: Side) -> Ipv4Addr {
        self.plan.path[side.i()]
    }

    /// Gives `side` one more address on the path, as a second host behind
    /// the same link (a replica beside a service, a balancer in front of
    /// them): the other side reaches it through the emulator with the
    /// path's congestion control and initial window, and the host reaches
    /// it over `side`'s control link, unshaped. At most [`ns::EXTRA`] per
    /// path.
    pub fn add_addr(&mut self, side: Side) -> anyhow::Result<Ipv4Addr> {
        let p = &self.plan;
        let Some(addr) = p.extra(self.extra) else {
            bail!("a path has at most {} more addresses", ns::EXTRA);
        };
        let (i, o) = (side.i(), 1 - side.i());
        let (me, cc) = (format!("{addr}/32"), self.config.cc.name());
        ns::ip(&["-n", &p.ns[i], "addr", "add", &me, "dev", &p.tun[i]])?;
        ns::ip(&[
            "-n",
            &p.ns[o],
            "route",
            "replace",
            &me,
            "dev",
            &p.tun[o],
            "src",
            &p.path[o].to_string(),
            "congctl",
            cc,
            "initcwnd",
            &INITCWND.to_string(),
        ])?;
        ns::ip(&[
            "route",
            "replace",
            &me,
            "via",
            &p.control[i].to_string(),
            "dev",
            &p.veth[i],
        ])?;
        self.extra += 1;
        Ok(addr)
    }

    /// A side's address on its control link: what the host dials.
    pub fn control_addr(&self, side: Side) -> Ipv4Addr {
        self.plan.control[side.i()]
    }

    /// The packets of A to B and of B to A so far, as the emulator counted.
    pub fn stats(&self) -> [DirectionStats; 2] {
        [self.counters[0].snapshot(), self.counters[1].snapshot()]
    }

    /// The packets each side's kernel dropped at its TUN device's queue so
    /// far, because the emulator had not read the [`TUN_QUEUE`] before
    /// them (the device's TX `dropped` counter): `[A to B, B to A]`. None of
    /// the emulator's own counters sees these.
    pub fn device_drops(&self) -> anyhow::Result<[u64; 2]> {
        let mut out = [0; 2];
        for (i, n) in out.iter_mut().enumerate() {
            let text = ns::ip(&[
                "-n",
                &self.plan.ns[i],
                "-s",
                "link",
                "show",
                "dev",
                &self.plan.tun[i],
            ])?;
            *n = tx_dropped(&text).with_context(|| {
                format!(
                    "`ip -s link show` states no TX dropped count for {}: {text}",
                    self.plan.tun[i]
                )
            })?;
        }
        Ok(out)
    }

    /// Silences the path (`true`: every packet both ways is dropped, with
    /// no RST or ICMP, as a dead host or a partition does) or lets it carry
    /// packets again. The control links are not touched.
    pub fn silence(&self, on: bool) {
        for c in &self.counters {
            c.silent.store(on, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Runs `f` on a thread inside a side's namespace.
    pub fn in_ns<T: Send>(&self, side: Side, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        ns::in_namespace(self.ns(side), f)
    }

    /// The congestion control a TCP connection from `side` across the path
    /// runs, as its socket reports it.
    pub fn congestion_control(&self, side: Side) -> anyhow::Result<String> {
        let other = match side {
            Side::A => Side::B,
            Side::B => Side::A,
        };
        let peer = self.path_addr(other);
        let listener = self.in_ns(other, || TcpListener::bind((peer, 0)))??;
        let to = listener.local_addr()?;
        let stream = self.in_ns(side, || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })??;
        let cc = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::TcpCongestion)
            .context("reading TCP_CONGESTION")?;
        Ok(cc.to_string_lossy().trim_end_matches('\0').to_owned())
    }

    /// The facts of a side's TCP: congestion control seen on a socket,
    /// slow start after idle, the route's initial window.
    pub fn tcp_facts(&self, side: Side) -> anyhow::Result<TcpFacts> {
        let ssai = self.in_ns(side, || {
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_slow_start_after_idle")
        })??;
        let route = ns::ip(&[
            "-n",
            self.ns(side),
            "route",
            "show",
            "dev",
            &self.plan.tun[side.i()],
        ])?;
        let initcwnd = route
            .split_whitespace()
            .skip_while(|w| *w != "initcwnd")
            .nth(1)
            .and_then(|w| w.parse().ok())
            .context("the path's route states no initcwnd")?;
        Ok(TcpFacts {
            congestion_control: self.congestion_control(side)?,
            slow_start_after_idle: ssai.trim() == "1",
            initcwnd,
        })
    }

    /// Relays TCP connections made inside `side` to `listen` (an address of
    /// that namespace, e.g. 127.0.0.1:5432) to `target` on the host: how a
    /// service in a namespace reaches the host's Postgres without crossing
    /// the path.
    pub fn relay_to_host(
        &self,
        side: Side,
        listen: SocketAddr,
        target: SocketAddr,
    ) -> anyhow::Result<Relay> {
        let listener = self.in_ns(side, || TcpListener::bind(listen))??;
        Relay::start(listener, target)
    }
}

/// The TX `dropped` count in `ip -s link show`'s output: the figure under
/// `dropped` on the line after the one that starts with `TX:`.
fn tx_dropped(text: &str) -> Option<u64> {
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut names = line.split_whitespace();
        if names.next() != Some("TX:") {
            continue;
        }
        let at = names.position(|n| n == "dropped")?;
        return lines.next()?.split_whitespace().nth(at)?.parse().ok();
    }
    None
}

impl Drop for Path {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // Closing the devices removes them; then the namespaces go, and
        // with them the veth pairs' both ends.
        self.devices.clear();
        for n in &self.plan.ns {
            let _ = ns::ip(&["netns", "del", n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tx_dropped;

    #[test]
    fn the_tx_dropped_count_is_read_from_ip_s_link_show() {
        // iproute2 6.1's layout, as on this project's machine.
        let text = "7: netpath-a: <POINTOPOINT,MULTICAST,NOARP,UP,LOWER_UP> mtu 1500 qdisc fq_codel state UNKNOWN mode DEFAULT group default qlen 1000
    link/none
    RX:  bytes packets errors dropped  missed   mcast
          9000      12      0       3       0       0
    TX:  bytes packets errors dropped carrier collsns
         52910     697      0      41       0       0
";
        assert_eq!(tx_dropped(text), Some(41));
        // Older iproute2 names the columns differently; `dropped` is found
        // by name.
        let old = "    TX: bytes  packets  errors  dropped carrier collsns
    100 2 0 5 0 0
";
        assert_eq!(tx_dropped(old), Some(5));
        assert_eq!(tx_dropped("no statistics"), None);
    }
}
