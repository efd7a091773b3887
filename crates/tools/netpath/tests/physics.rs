//! The path against physics: what the kernels at both ends observe (round
//! trips, datagrams that arrive, bytes per second, round trips a transfer
//! takes), never the emulator's own counters. Needs root and /dev/net/tun,
//! as CI has; without them every test fails with the one-line reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use netpath::{CongestionControl, Link, Path, PathConfig, Side};

fn up(link: &str, cc: CongestionControl) -> Path {
    let mut config = PathConfig::symmetric(link.parse::<Link>().expect("link"));
    config.cc = cc;
    Path::up(&config).unwrap_or_else(|e| panic!("the path did not come up: {e:#}"))
}

/// A listener on B's path address.
fn listen_b(path: &Path) -> TcpListener {
    let at = path.path_addr(Side::B);
    path.in_ns(Side::B, || TcpListener::bind((at, 0)))
        .unwrap()
        .unwrap()
}

/// A TCP connection from A to `to`.
fn connect_a(path: &Path, to: SocketAddr) -> TcpStream {
    let s = path
        .in_ns(Side::A, || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })
        .unwrap()
        .unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn an_idle_round_trip_is_the_configured_one() {
    let path = up("delay=10ms", CongestionControl::Cubic);
    let listener = listen_b(&path);
    let to = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s)
        }
    });
    // A TCP connect is one round trip: SYN out, SYN-ACK back; timed on
    // one thread inside A, so only the connect is in the time.
    let rtts: Vec<f64> = path
        .in_ns(Side::A, || {
            (0..200)
                .map(|_| {
                    let t = Instant::now();
                    let s = TcpStream::connect(to).unwrap();
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    drop(s);
                    ms
                })
                .collect()
        })
        .unwrap();
    let m = median(rtts);
    eprintln!("median connect {m:.3} ms (configured 20 ms)");
    assert!(
        (m - 20.0).abs() <= 0.3,
        "median connect {m:.3} ms, configured 20 ms"
    );
}

#[test]
fn random_loss_is_within_the_binomial_interval() {
    let p = 0.05;
    let path = up(&format!("loss={}%", p * 100.0), CongestionControl::Cubic);
    let at = path.path_addr(Side::B);
    let rx = path
        .in_ns(Side::B, || UdpSocket::bind((at, 0)))
        .unwrap()
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let to = rx.local_addr().unwrap();
    let tx = path
        .in_ns(Side::A, || UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    let n = 20_000u32;
    let counter = std::thread::spawn(move || {
        let mut seen = std::collections::HashSet::new();
        let mut buf = [0u8; 64];
        while let Ok(len) = rx.recv(&mut buf) {
            seen.insert(u32::from_be_bytes(buf[..4].try_into().unwrap()));
            assert_eq!(len, 64);
        }
        seen.len() as u32
    });
    for i in 0..n {
        let mut d = [0u8; 64];
        d[..4].copy_from_slice(&i.to_be_bytes());
        tx.send_to(&d, to).unwrap();
        // Paced, so no socket buffer on the way overflows.
        if i % 100 == 99 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let received = counter.join().unwrap();
    let lost = f64::from(n - received);
    let mean = f64::from(n) * p;
    let half = 2.576 * (f64::from(n) * p * (1.0 - p)).sqrt();
    eprintln!("{lost} of {n} lost (99% interval {mean} ± {half:.0})");
    assert!(
        (lost - mean).abs() <= half,
        "{lost} of {n} lost; the 99% interval is {mean} ± {half:.0}"
    );
}

/// Bytes from A to B over `secs`, counted by B after the first `warm`.
fn bulk(path: &Path, secs: f64, warm: f64) -> f64 {
    let listener = listen_b(path);
    let to = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let start = Instant::now();
        let mut counted = 0u64;
        let mut from = None;
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            let t = start.elapsed().as_secs_f64();
            if t >= warm {
                from.get_or_insert(t);
                counted += n as u64;
            }
        }
        counted as f64 * 8.0 / (start.elapsed().as_secs_f64() - from.unwrap_or(warm))
    });
    let mut s = connect_a(path, to);
    let chunk = vec![7u8; 1 << 16];
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        s.write_all(&chunk).unwrap();
    }
    drop(s);
    reader.join().unwrap()
}

#[test]
fn bulk_tcp_fills_the_rate_cap_and_never_exceeds_it() {
    let cap = 20e6;
    let path = up("rate=20mbit queue=50ms", CongestionControl::Cubic);
    let goodput = bulk(&path, 4.0, 1.0);
    eprintln!(
        "goodput {:.2} Mbit/s through a 20 Mbit/s cap",
        goodput / 1e6
    );
    // Goodput is TCP payload; the cap counts IP packets (1,500 bytes carry
    // 1,448 of payload with timestamps), so 96.5% is the most it can be.
    assert!(
        goodput >= 0.90 * cap && goodput <= 1.01 * cap,
        "goodput {:.2} Mbit/s through a 20 Mbit/s cap",
        goodput / 1e6
    );
}

/// Seconds from connecting to the last byte of a `size`-byte answer to a
/// one-byte request, from A to a server at `to` (running `serve`).
fn fetch(s: &mut TcpStream, size: usize) -> Duration {
    let t = Instant::now();
    s.write_all(&[1]).unwrap();
    let mut left = size;
    let mut buf = vec![0u8; 1 << 16];
    while left > 0 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the answer ended early");
        left -= n.min(left);
    }
    t.elapsed()
}

/// Answers every one-byte request with `size` bytes, on every connection.
fn serve(listener: TcpListener, size: usize) {
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let answer = vec![9u8; size];
                let mut req = [0u8; 1];
                while s.read_exact(&mut req).is_ok() {
                    if s.write_all(&answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

const MB2: usize = 2_000_000;

#[test]
fn a_cold_transfer_pays_slow_start_that_the_delay_proxy_hides() {
    let rtt = 0.020;
    let path = up("delay=10ms", CongestionControl::Cubic);
    let listener = listen_b(&path);
    let to = listener.local_addr().unwrap();
    serve(listener, MB2);
    let packets: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let mut s = connect_a(&path, to);
            fetch(&mut s, MB2);
            t.elapsed().as_secs_f64() / rtt
        })
        .collect();
    // The same, through the delay proxy on loopback.
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = host.local_addr().unwrap();
    serve(host, MB2);
    let proxy = delay_proxy::Proxy::start(
        delay_proxy::Config::rtt(Duration::from_millis(20)),
        &[delay_proxy::Route::any_port(upstream)],
    )
    .unwrap();
    let proxied: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let mut s = TcpStream::connect(proxy.local_addr(0)).unwrap();
            fetch(&mut s, MB2);
            t.elapsed().as_secs_f64() / rtt
        })
        .collect();
    let (p, q) = (median(packets), median(proxied));
    eprintln!("cold 2 MB: {p:.1} round trips on the packet path, {q:.1} through the proxy");
    // Handshake and request are two round trips; slow start from 10
    // segments needs several more for 2 MB (about 1,380 segments).
    assert!(
        p >= 4.0,
        "a cold 2 MB answer took {p:.1} round trips on the packet path"
    );
    assert!(
        q < p - 2.0,
        "through the delay proxy {q:.1} round trips, on the packet path {p:.1}"
    );
}

/// Round trips of a 2 MB answer on one warm connection: the median of three
/// sent straight after another, and the median of three each sent after
/// `idle`. Medians, because a busy machine can starve the emulator for a
/// moment and one slow answer is not the algorithm's doing.
fn warm_and_after(path: &Path, to: SocketAddr, idle: Duration) -> (f64, f64) {
    let mut s = connect_a(path, to);
    for _ in 0..3 {
        fetch(&mut s, MB2);
    }
    let mut rtts = |pause: Duration| -> f64 {
        median(
            (0..3)
                .map(|_| {
                    std::thread::sleep(pause);
                    fetch(&mut s, MB2).as_secs_f64() / 0.020
                })
                .collect(),
        )
    };
    let warm = rtts(Duration::ZERO);
    (warm, rtts(idle))
}

#[test]
fn after_idle_cubic_restarts_slow_start_and_bbr_does_not() {
    let mut seen = Vec::new();
    for cc in [CongestionControl::Cubic, CongestionControl::Bbr] {
        let path = up("delay=10ms", cc);
        assert_eq!(
            path.tcp_facts(Side::B).unwrap().congestion_control,
            cc.name()
        );
        assert!(path.tcp_facts(Side::B).unwrap().slow_start_after_idle);
        let listener = listen_b(&path);
        let to = listener.local_addr().unwrap();
        serve(listener, MB2);
        // Idle past the retransmission timeout (at least 200 ms + RTT).
        let (warm, idle) = warm_and_after(&path, to, Duration::from_millis(1500));
        seen.push((cc, warm, idle));
    }
    eprintln!("(algorithm, warm, after idle) in round trips: {seen:?}");
    let (_, cubic_warm, cubic_idle) = seen[0];
    let (_, bbr_warm, bbr_idle) = seen[1];
    assert!(
        cubic_idle >= cubic_warm + 2.0,
        "cubic: {cubic_warm:.1} round trips warm, {cubic_idle:.1} after idle"
    );
    assert!(
        bbr_idle <= bbr_warm + 1.0,
        "bbr: {bbr_warm:.1} round trips warm, {bbr_idle:.1} after idle"
    );
}

#[test]
fn cubic_at_one_percent_loss_is_near_mathis() {
    // Loss on the data direction only (A to B): the formula's p.
    let mut config = PathConfig::symmetric("delay=10ms rate=50mbit".parse().unwrap());
    config.a_to_b = "delay=10ms rate=50mbit loss=1%".parse().unwrap();
    let path = Path::up(&config).unwrap_or_else(|e| panic!("{e:#}"));
    let goodput = bulk(&path, 6.0, 1.0);
    // Mathis et al.: MSS/RTT * sqrt(3/2)/sqrt(p).
    let mathis = 1448.0 * 8.0 / 0.020 * (1.5f64).sqrt() / 0.01f64.sqrt();
    eprintln!(
        "cubic at 1% loss: {:.2} Mbit/s, Mathis {:.2}",
        goodput / 1e6,
        mathis / 1e6
    );
    assert!(
        goodput >= mathis / 2.0 && goodput <= mathis * 2.0,
        "cubic at 1% loss: {:.2} Mbit/s, Mathis {:.2}",
        goodput / 1e6,
        mathis / 1e6
    );
}

#[test]
fn a_dropped_path_leaves_nothing_behind() {
    let path = up("", CongestionControl::Cubic);
    let names = [path.ns(Side::A).to_owned(), path.ns(Side::B).to_owned()];
    let listed = netpath::ns::ip(&["netns", "list"]).unwrap();
    assert!(names.iter().all(|n| listed.contains(n.as_str())));
    drop(path);
    let listed = netpath::ns::ip(&["netns", "list"]).unwrap();
    assert!(
        names.iter().all(|n| !listed.contains(n.as_str())),
        "{listed}"
    );
}

/// Median connect time, ms, of 50 connects to `to` made on the calling
/// thread's namespace.
fn connect_ms(to: SocketAddr) -> f64 {
    median(
        (0..50)
            .map(|_| {
                let t = Instant::now();
                let s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                drop(s);
                ms
            })
            .collect(),
    )
}

#[test]
fn an_added_address_is_across_the_path_from_a_and_beside_it_from_the_host() {
    let mut path = up("delay=10ms", CongestionControl::Bbr);
    let extra = [
        path.add_addr(Side::B).unwrap(),
        path.add_addr(Side::B).unwrap(),
    ];
    assert_ne!(extra[0], extra[1]);
    for at in extra {
        let listener = path
            .in_ns(Side::B, || TcpListener::bind((at, 0)))
            .unwrap()
            .unwrap();
        let to = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                drop(s)
            }
        });
        let across = path.in_ns(Side::A, || connect_ms(to)).unwrap();
        let beside = connect_ms(to);
        eprintln!("{at}: from A {across:.3} ms, from the host {beside:.3} ms");
        // Which way the packets go, not the emulator's precision (the idle
        // round-trip test holds that to ±0.3 ms on a quiet machine): one
        // crossing is 20 ms, and nothing but the path adds that much.
        assert!(
            (across - 20.0).abs() <= 1.0,
            "from A {across:.3} ms, configured 20 ms"
        );
        assert!(
            beside < 2.0,
            "from the host {beside:.3} ms: it crossed the path"
        );
        // The path's congestion control reaches the added address too.
        let s = path
            .in_ns(Side::A, || {
                TcpStream::connect_timeout(&to, Duration::from_secs(5))
            })
            .unwrap()
            .unwrap();
        let cc =
            nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::TcpCongestion).unwrap();
        assert_eq!(cc.to_string_lossy().trim_end_matches('\0'), "bbr");
    }
}

/// The namespaces of ours whose names start with `prefix`.
fn namespaces(prefix: &str) -> Vec<String> {
    netpath::ns::ip(&["netns", "list"])
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_killed_owners_namespaces_are_removed_by_the_next_start() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["up", "--link", "delay=1ms"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut said = String::new();
    while !said.contains("carrying packets") {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("`netpath up` ended before carrying packets: {said}");
        }
        said.push_str(&line);
    }
    let prefix = format!("netpath-{}-", child.id());
    assert_eq!(namespaces(&prefix).len(), 2, "{said}");
    // SIGKILL: nothing of the owner runs to take its path down.
    child.kill().unwrap();
    child.wait().unwrap();
    let left = namespaces(&prefix);
    assert_eq!(left.len(), 2, "a killed owner leaves its namespaces");
    // The next path to come up removes them, and its own stay.
    let next = up("", CongestionControl::Cubic);
    assert_eq!(namespaces(&prefix), Vec::<String>::new(), "{left:?}");
    for side in [Side::A, Side::B] {
        assert_eq!(namespaces(next.ns(side)).len(), 1);
    }
}

#[test]
fn a_silent_path_answers_nothing_refuses_nothing_and_carries_again_after() {
    let path = up("delay=1ms", CongestionControl::Cubic);
    let listener = listen_b(&path);
    let to = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let mut s = connect_a(&path, to);
    let echo = |s: &mut TcpStream, byte: u8| -> std::io::Result<u8> {
        s.write_all(&[byte])?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b)?;
        Ok(b[0])
    };
    assert_eq!(echo(&mut s, 1).unwrap(), 1);
    path.silence(true);
    // Nothing comes back, and nothing says why: the read times out.
    s.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let silent = echo(&mut s, 2).unwrap_err();
    assert!(
        matches!(
            silent.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{silent:?}"
    );
    // A new connection is not refused either: its SYN is never answered.
    assert!(
        path.in_ns(Side::A, || TcpStream::connect_timeout(
            &to,
            Duration::from_millis(500)
        ))
        .unwrap()
        .unwrap_err()
        .kind()
            == std::io::ErrorKind::TimedOut
    );
    path.silence(false);
    // The byte sent into the silence is retransmitted and echoed.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 2);
    let [up, _] = path.stats();
    assert!(up.silenced >= 2, "{up:?}");
    // Every packet B sent was silenced or delivered, once the last one read
    // has left the emulator's queue (a packet in flight is neither yet).
    let deadline = Instant::now() + Duration::from_secs(5);
    let down = loop {
        let [_, down] = path.stats();
        if down.silenced + down.delivered == down.packets || Instant::now() > deadline {
            break down;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(down.silenced + down.delivered, down.packets, "{down:?}");
}
