//! The proxy on real sockets: it delays as asked (asserted on lower bounds,
//! never on tight upper limits: this machine is shared; a bandwidth cap is
//! held to N/B below and a loose 1.5 × N/B + 50 ms above), keeps byte order
//! under jitter, passes large transfers through intact, propagates a
//! half-close, holds every byte and FIN while told to (checked on the
//! upstream's side), closes cleanly when the upstream is down, and the command
//! prints the address it bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use delay_proxy::{Config, Proxy, Route};

const TIMEOUT: Duration = Duration::from_secs(30);

/// An upstream that echoes every connection back until EOF, then closes.
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            s.set_nodelay(true).unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = s.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s
}

fn proxy(config: Config, upstream: SocketAddr) -> Proxy {
    Proxy::start(config, &[Route::any_port(upstream)]).unwrap()
}

fn ping(s: &mut TcpStream, byte: u8) -> Duration {
    let t0 = Instant::now();
    s.write_all(&[byte]).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0], byte);
    t0.elapsed()
}

/// A small checksum that notices reordered, lost or duplicated bytes.
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[test]
fn a_round_trip_takes_at_least_twice_the_one_way_delay() {
    let delay = Duration::from_millis(25);
    let p = proxy(Config::one_way(delay), echo_server());
    let mut s = connect(p.local_addr(0));
    // The first round trip of a new connection also pays the handshake's.
    let first = ping(&mut s, 1);
    assert!(first >= delay * 4, "first round trip {first:?}");
    for i in 2..6 {
        let rtt = ping(&mut s, i);
        assert!(rtt >= delay * 2, "round trip {rtt:?} < 2 × {delay:?}");
    }
    let st = p.stats();
    assert_eq!(st.connections, 1);
    assert_eq!(st.bytes_to_upstream, 5);
    assert_eq!(st.bytes_to_client, 5);
    assert_eq!(st.chunks, 10);
}

#[test]
fn without_the_handshake_the_first_round_trip_costs_one_rtt() {
    let delay = Duration::from_millis(25);
    let mut c = Config::one_way(delay);
    c.handshake = false;
    let p = proxy(c, echo_server());
    let mut s = connect(p.local_addr(0));
    let first = ping(&mut s, 7);
    assert!(first >= delay * 2, "{first:?}");
}

#[test]
fn each_direction_is_delayed_on_its_own() {
    // An upstream that notes when bytes arrive and answers at once.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        tx.send(Instant::now()).unwrap();
        s.write_all(&b).unwrap();
    });
    let delay = Duration::from_millis(30);
    let mut c = Config::one_way(delay);
    c.handshake = false;
    let p = proxy(c, up);
    let mut s = connect(p.local_addr(0));
    let sent = Instant::now();
    s.write_all(b"x").unwrap();
    let arrived = rx.recv_timeout(TIMEOUT).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    let back = Instant::now();
    assert!(arrived - sent >= delay, "to upstream {:?}", arrived - sent);
    assert!(back - arrived >= delay, "to client {:?}", back - arrived);
}

#[test]
fn jitter_never_reorders_bytes() {
    let p = proxy(
        Config::one_way(Duration::from_millis(2)).with_jitter(Duration::from_millis(15)),
        echo_server(),
    );
    let s = connect(p.local_addr(0));
    let mut w = s.try_clone().unwrap();
    let n: u32 = 3000;
    let writer = std::thread::spawn(move || {
        for i in 0..n {
            // Many small writes, each likely its own chunk with its own jitter.
            w.write_all(&i.to_be_bytes()).unwrap();
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut all = Vec::new();
    (&s).read_to_end(&mut all).unwrap();
    writer.join().unwrap();
    assert_eq!(all.len(), n as usize * 4);
    for (i, c) in all.chunks_exact(4).enumerate() {
        let got = u32::from_be_bytes(c.try_into().unwrap());
        assert_eq!(got, i as u32, "byte order broken at message {i}");
    }
    assert!(p.stats().chunks > 2, "the writes went as several chunks");
}

#[test]
fn a_large_transfer_passes_through_intact_both_ways() {
    let p = proxy(Config::one_way(Duration::from_millis(1)), echo_server());
    let s = connect(p.local_addr(0));
    let mut w = s.try_clone().unwrap();
    let total = 24 << 20;
    let writer = std::thread::spawn(move || {
        let mut x = 0x1234_5678_u64;
        let mut h = 0xcbf2_9ce4_8422_2325_u64;
        let mut sent = 0;
        let mut block = vec![0u8; 100_003];
        while sent < total {
            for b in block.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let n = block.len().min(total - sent);
            w.write_all(&block[..n]).unwrap();
            h = fnv(h, &block[..n]);
            sent += n;
        }
        w.shutdown(Shutdown::Write).unwrap();
        h
    });
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    let mut got = 0;
    let mut buf = vec![0u8; 65536];
    let mut r = &s;
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h = fnv(h, &buf[..n]);
        got += n;
    }
    let sent_hash = writer.join().unwrap();
    assert_eq!(got, total);
    assert_eq!(h, sent_hash, "the echoed bytes differ from those sent");
    let st = p.stats();
    assert_eq!(st.bytes_to_upstream, total as u64);
    assert_eq!(st.bytes_to_client, total as u64);
}

#[test]
fn a_half_close_reaches_the_upstream_and_the_answer_still_comes_back() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut got = Vec::new();
        // Returns only once the client's FIN has come through.
        s.read_to_end(&mut got).unwrap();
        s.write_all(b"bye").unwrap();
        got
    });
    let p = proxy(Config::one_way(Duration::from_millis(5)), up);
    let mut s = connect(p.local_addr(0));
    s.write_all(b"hello").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    assert_eq!(server.join().unwrap(), b"hello");
    assert_eq!(answer, b"bye", "the answer, then EOF");
}

#[test]
fn an_upstream_that_is_down_gets_the_client_a_clean_close() {
    let down = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let p = proxy(Config::one_way(Duration::from_millis(5)), down);
    let mut s = connect(p.local_addr(0));
    s.write_all(b"anyone there?").unwrap();
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).expect("EOF, not a reset or a hang");
    assert_eq!(n, 0);
    let deadline = Instant::now() + TIMEOUT;
    while p.stats().upstream_failures == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn dropping_the_proxy_closes_its_connections() {
    let p = proxy(Config::one_way(Duration::from_millis(1)), echo_server());
    let mut s = connect(p.local_addr(0));
    ping(&mut s, 3);
    assert_eq!(p.live_connections(), 1);
    drop(p);
    let mut buf = [0u8; 4];
    match s.read(&mut buf) {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("read {n} bytes from a closed proxy"),
    }
}

#[test]
fn one_proxy_serves_several_routes() {
    let (a, b) = (echo_server(), echo_server());
    let p = Proxy::start(
        Config::one_way(Duration::from_millis(2)),
        &[Route::any_port(a), Route::any_port(b)],
    )
    .unwrap();
    assert_ne!(p.local_addr(0), p.local_addr(1));
    for addr in p.local_addrs() {
        let mut s = connect(*addr);
        ping(&mut s, 9);
    }
    assert_eq!(p.stats().connections, 2);
}

#[test]
fn the_command_prints_the_address_it_bound_and_proxies() {
    let up = echo_server();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_delay-proxy"))
        .args(["--listen", "127.0.0.1:0", "--upstream"])
        .arg(up.to_string())
        .args(["--delay-ms", "5", "--jitter-ms", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .strip_prefix("listening on ")
        .and_then(|r| r.split(" -> ").next())
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .parse()
        .unwrap();
    assert!(line.trim_end().ends_with(&up.to_string()), "{line:?}");
    let mut s = connect(addr);
    let rtt = ping(&mut s, 42);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(rtt >= Duration::from_millis(10), "{rtt:?}");
}

#[test]
fn the_command_refuses_unpaired_routes_with_a_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delay-proxy"))
        .args(["--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
        .args(["--upstream", "127.0.0.1:1", "--delay-ms", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("one upstream per listen address"), "{err}");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_delay-proxy"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--listen",
        "--upstream",
        "--delay-ms",
        "--rtt-ms",
        "--jitter-ms",
    ] {
        assert!(text.contains(flag), "--help lacks {flag}");
    }
}

/// Sends `n` bytes on `s` while reading `n` from it, and says when the last
/// byte it read arrived, counted from `t0`.
fn both_ways(mut s: TcpStream, n: usize, t0: Instant) -> Duration {
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![7u8; 16 * 1024];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            w.write_all(&chunk[..k]).unwrap();
            left -= k;
        }
    });
    let mut got = 0;
    let mut buf = vec![0u8; 64 * 1024];
    while got < n {
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0, "the stream ended after {got} of {n} bytes");
        got += k;
    }
    let took = t0.elapsed();
    writer.join().unwrap();
    took
}

/// N bytes through a cap of B bytes/s take at least N/B, and, with no
/// delay, at most 1.5 × N/B + 50 ms; each direction is a link of its own,
/// so N bytes each way at once take no longer than N one way.
#[test]
fn a_bandwidth_cap_bounds_each_direction_on_both_sides() {
    const RATE: u64 = 1 << 20;
    const N: usize = 512 * 1024;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = l.local_addr().unwrap();
    let mut config = Config::one_way(Duration::ZERO).with_rate(RATE);
    config.handshake = false;
    let p = proxy(config, upstream);
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let t0 = rx.recv().unwrap();
        both_ways(s, N, t0)
    });
    let client = connect(p.local_addr(0));
    // Let the proxy connect upstream before the clock starts.
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    tx.send(t0).unwrap();
    let to_client = both_ways(client, N, t0);
    let to_upstream = server.join().unwrap();

    let least = Duration::from_secs_f64(N as f64 / RATE as f64);
    let most = least.mul_f64(1.5) + Duration::from_millis(50);
    for (way, took) in [("to the client", to_client), ("to upstream", to_upstream)] {
        assert!(
            took >= least,
            "{N} B {way} took {took:?}, under N/B = {least:?}"
        );
        assert!(took <= most, "{N} B {way} took {took:?}, over {most:?}");
    }
    let s = p.stats();
    assert_eq!(s.bytes_to_upstream, N as u64);
    assert_eq!(s.bytes_to_client, N as u64);
}

#[test]
fn the_command_refuses_a_rate_that_is_not_positive() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delay-proxy"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--rtt-ms",
            "1",
            "--rate-mbit",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--rate-mbit must be a positive"), "{err}");
}

/// What an upstream that records saw on one of its connections.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Bytes(Vec<u8>),
    Eof,
}

/// An upstream that echoes like [`echo_server`] and also reports every
/// read on `tx`: the oracle on the far side of the proxy.
fn recording_server(tx: mpsc::Sender<Seen>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            let _ = tx.send(Seen::Eof);
                            break;
                        }
                        Ok(n) => {
                            let _ = tx.send(Seen::Bytes(buf[..n].to_vec()));
                            if s.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_hold_stops_every_byte_and_fin_both_ways_until_let_go() {
    let (tx, rx) = mpsc::channel();
    let p = proxy(
        Config::one_way(Duration::from_millis(1)),
        recording_server(tx),
    );
    let mut a = connect(p.local_addr(0));
    ping(&mut a, 1);
    assert_eq!(rx.recv_timeout(TIMEOUT).unwrap(), Seen::Bytes(vec![1]));

    p.hold(true);
    // An open connection's bytes, and a new connection's bytes and FIN.
    a.write_all(&[2]).unwrap();
    let mut b = connect(p.local_addr(0));
    b.write_all(b"new").unwrap();
    b.shutdown(Shutdown::Write).unwrap();
    a.set_read_timeout(Some(Duration::from_millis(400)))
        .unwrap();
    let mut one = [0u8; 1];
    let err = a.read(&mut one).expect_err("nothing comes back while held");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    assert!(
        rx.try_recv().is_err(),
        "the upstream was sent something during the hold"
    );

    p.hold(false);
    a.set_read_timeout(Some(TIMEOUT)).unwrap();
    a.read_exact(&mut one).unwrap();
    assert_eq!(one, [2]);
    let mut back = Vec::new();
    b.read_to_end(&mut back).unwrap();
    assert_eq!(back, b"new");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(rx.recv_timeout(TIMEOUT).unwrap());
    }
    assert!(seen.contains(&Seen::Bytes(vec![2])), "{seen:?}");
    assert!(seen.contains(&Seen::Bytes(b"new".to_vec())), "{seen:?}");
    assert!(seen.contains(&Seen::Eof), "{seen:?}");
    assert!(p.stats().held >= 2, "{:?}", p.stats());
    ping(&mut a, 3);
}

#[test]
fn a_proxy_dropped_while_holding_closes_its_connections() {
    let p = proxy(Config::one_way(Duration::from_millis(1)), echo_server());
    let mut s = connect(p.local_addr(0));
    ping(&mut s, 4);
    p.hold(true);
    s.write_all(&[5]).unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(p);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("dropping a holding proxy returns");
    let mut buf = [0u8; 4];
    match s.read(&mut buf) {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("read {n} bytes from a closed proxy"),
    }
}
