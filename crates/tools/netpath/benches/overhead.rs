//! What the emulator itself costs, since it shares the machine's cores with
//! what it carries: `cargo bench -p netpath` (root). It prints
//! - the round trip it adds at 0 ms configured delay: the median TCP connect
//!   from A to B across the path, beside the median connect from the host
//!   to A over A's control link (a veth pair, no emulator);
//! - its CPU time per packet and the cores it uses carrying a 100 Mbit/s
//!   cap at full load (its threads' own run time, from
//!   /proc/self/task/*/schedstat);
//! - its ceiling: the packets per second (both directions) and the Mbit/s
//!   of IP packets from A to B one bulk TCP flow gets across a path with
//!   no rate cap, with no delay and with 1 ms each way (every packet then
//!   waits in the writer's heap), and the packets the kernels dropped at a
//!   TUN queue meanwhile.
//!   A rate cap whose packets come near this is the emulator's limit, not
//!   the cap's: the lab's preflight holds a plan's caps to half of
//!   `netpath::CEILING_PPS`, this figure as measured on the project's
//!   machine.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use netpath::{Path, PathConfig, Side};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn connects(to: std::net::SocketAddr, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            let s = TcpStream::connect(to).unwrap();
            let us = t.elapsed().as_secs_f64() * 1e6;
            drop(s);
            us
        })
        .collect()
}

/// Nanoseconds on CPU of this process's threads whose name starts with
/// "a-to-b" or "b-to-a" (the forwarder's).
fn forwarder_ns() -> u64 {
    let mut total = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with("a-to-b") || comm.starts_with("b-to-a") {
            let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            total += s
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let path = Path::up(&PathConfig::default()).unwrap_or_else(|e| panic!("{e:#}"));
    // 1. Round trip at 0 ms.
    let b = path.path_addr(Side::B);
    let over_path = path
        .in_ns(Side::B, || TcpListener::bind((b, 0)))
        .unwrap()
        .unwrap();
    let to = over_path.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in over_path.incoming() {
            drop(s)
        }
    });
    let ctl = path.control_addr(Side::A);
    let over_veth = path
        .in_ns(Side::A, || TcpListener::bind((ctl, 0)))
        .unwrap()
        .unwrap();
    let veth_to = over_veth.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in over_veth.incoming() {
            drop(s)
        }
    });
    let path_us = median(path.in_ns(Side::A, || connects(to, 1000)).unwrap());
    let veth_us = median(connects(veth_to, 1000));
    println!(
        "round trip at 0 ms: {path_us:.0} µs across the path, {veth_us:.0} µs over a veth pair: the emulator adds {:.0} µs (median of 1,000 TCP connects)",
        path_us - veth_us
    );
    drop(path);

    // 2. CPU at a 100 Mbit/s cap, full load from A to B.
    let path = Path::up(&PathConfig::symmetric("rate=100mbit".parse().unwrap())).unwrap();
    let (mut s, reader) = bulk_flow(&path);
    let (cpu0, t0, st0) = (forwarder_ns(), Instant::now(), path.stats());
    send_for(&mut s, Duration::from_secs(5));
    let (cpu1, wall, st1) = (forwarder_ns(), t0.elapsed().as_secs_f64(), path.stats());
    drop(s);
    reader.join().unwrap();
    let packets = (st1[0].packets + st1[1].packets) - (st0[0].packets + st0[1].packets);
    let bits = (st1[0].bytes_delivered - st0[0].bytes_delivered) as f64 * 8.0;
    let cpu = (cpu1 - cpu0) as f64 / 1e9;
    println!(
        "at a 100 Mbit/s cap: {:.1} Mbit/s delivered, {packets} packets both ways, {:.2} µs of CPU per packet, {:.3} of a core",
        bits / wall / 1e6,
        cpu * 1e6 / packets as f64,
        cpu / wall
    );
    drop(path);

    // 3. The ceiling: no cap, as fast as one flow goes.
    for link in ["delay=0ms", "delay=1ms"] {
        let (pps, mbit, drops) = ceiling(link, Duration::from_secs(5));
        println!(
            "ceiling with {link}: {pps:.0} packets/s both ways, {mbit:.0} Mbit/s of IP packets from A to B, {drops} dropped at a TUN queue"
        );
    }
}

/// One bulk TCP flow from A to B over `secs` after a second's warm-up:
/// packets per second both ways, Mbit/s of IP packets delivered from A to B, TUN queue drops.
fn ceiling(link: &str, secs: Duration) -> (f64, f64, u64) {
    let path = Path::up(&PathConfig::symmetric(link.parse().unwrap())).unwrap();
    let (mut s, reader) = bulk_flow(&path);
    let (t0, st0, d0) = (Instant::now(), path.stats(), path.device_drops().unwrap());
    send_for(&mut s, secs);
    let (wall, st1, d1) = (
        t0.elapsed().as_secs_f64(),
        path.stats(),
        path.device_drops().unwrap(),
    );
    drop(s);
    reader.join().unwrap();
    let packets = (st1[0].delivered + st1[1].delivered) - (st0[0].delivered + st0[1].delivered);
    let bits = (st1[0].bytes_delivered - st0[0].bytes_delivered) as f64 * 8.0;
    let drops = (d1[0] - d0[0]) + (d1[1] - d0[1]);
    (packets as f64 / wall, bits / wall / 1e6, drops)
}

/// One TCP flow from A to B, read to its end by a thread in B, after a
/// second of sending to warm it.
fn bulk_flow(path: &Path) -> (TcpStream, std::thread::JoinHandle<()>) {
    let listener = path
        .in_ns(Side::B, || TcpListener::bind((b_of(path), 0)))
        .unwrap()
        .unwrap();
    let to = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut s = path
        .in_ns(Side::A, || TcpStream::connect(to))
        .unwrap()
        .unwrap();
    send_for(&mut s, Duration::from_secs(1));
    (s, reader)
}

/// Writes as fast as the flow takes it for `secs`.
fn send_for(s: &mut TcpStream, secs: Duration) {
    let chunk = vec![1u8; 1 << 16];
    let end = Instant::now() + secs;
    while Instant::now() < end {
        s.write_all(&chunk).unwrap();
    }
}

fn b_of(path: &Path) -> std::net::Ipv4Addr {
    path.path_addr(Side::B)
}
