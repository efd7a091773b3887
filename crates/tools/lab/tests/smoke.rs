//! The lab end to end, for real: both services, the load generator (the
//! lab's engine; k6 where a test says so), a couple of seconds of load, and
//! a report in which every cell is filled. Nothing is skipped: a missing k6
//! fails with the command that installs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use lab::experiments::wire_size::WireRecord;
use lab::measure::figures::Measures;
use lab::measure::load::Generator;
use lab::session::{self, RunOptions, build_report, load};

fn tiny(experiment: &str, out: &std::path::Path, bins: &std::path::Path) -> RunOptions {
    RunOptions {
        bin_dir: Some(bins.to_path_buf()),
        ..common::tiny_run(experiment, out)
    }
}

#[test]
fn a_tiny_real_experiment_runs_end_to_end_and_fills_every_cell() {
    let bins = common::service_binaries();
    let out = common::temp_dir("smoke");
    let root = common::root();

    let run = session::run(
        tiny("payload", &out, &bins),
        &root,
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the payload run");
    assert!(!run.interrupted);
    assert_eq!(run.failures, 0, "see {}", run.dir.display());
    let (info, results) = load(&run.dir).unwrap();
    assert_eq!(results.records.len(), 3 * 2, "3 transports × 2 rounds");
    for r in &results.records {
        let m = Measures::of(r);
        let what = format!("{} round {}", r.cell.label(), r.round);
        assert!(m.requests > 10.0, "{what}: {} requests", m.requests);
        assert_eq!(m.bad_answers, 0.0, "{what}");
        // The counting rules held: every answer was judged good against the
        // length the lab checked before the round (no body parsed).
        assert_eq!(r.generator, Generator::Loadgen, "{what}: the default");
        assert_eq!(r.load.counting.as_deref(), Some("good-answers-1"), "{what}");
        assert_eq!(m.good, m.requests, "{what}");
        assert_eq!(r.load.parsed_bodies, 0.0, "{what}");
        assert!(
            m.upstream_us.is_some_and(|u| u.p50 > 0.0),
            "{what}: no upstream time"
        );
        // CPU is counted over the window k6 lived, longer than its load.
        assert!(
            r.window_s.is_some_and(|w| w >= r.duration_s),
            "{what}: {:?}",
            r.window_s
        );
        assert!(
            r.service_env.keys().all(|k| k.contains(" ORDER_")
                || k.contains(" USER_")
                || k.ends_with(" PATH")
                || k.ends_with(" RUST_LOG")),
            "{what}: {:?}",
            r.service_env
        );
        assert!(
            (m.upstream_calls - m.requests).abs() < 1.0,
            "{what}: {} upstream calls for {} requests",
            m.upstream_calls,
            m.requests
        );
        assert!(
            m.bytes_in_per_call.is_some_and(|b| b > 1000.0),
            "{what}: 10 orders in {:?} B",
            m.bytes_in_per_call
        );
        assert!(m.bytes_out_per_call.is_some_and(|b| b > 10.0), "{what}");
        assert!(
            m.cpu.order_us > 0.0 && m.cpu.user_us > 0.0 && m.cpu.load_us > 0.0,
            "{what}: {:?}",
            m.cpu
        );
        assert!(
            m.rss.order_kb > 0.0 && m.rss.user_kb > 0.0 && m.rss.load_kb > 0.0,
            "{what}: {:?}",
            m.rss
        );
        assert!(
            m.connections_held >= 1.0,
            "{what}: pooled connections stay open"
        );
        assert!(
            r.load_raw.get("engine").is_some(),
            "{what}: the engine's own summary kept"
        );
        // Its histogram of good answers is exact and whole: one value per
        // good answer.
        let h = r.e2e_histogram().expect("the engine's histogram");
        assert_eq!(h.len() as f64, m.good, "{what}");
    }
    let report = build_report(&info, &results);
    let empty = report.empty_cells();
    assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
    // report.json is written with the run, and a run compared with itself
    // agrees everywhere, with nothing to warn of but uncommitted changes.
    let (same, tally) = lab::compare::run(&run.dir, &run.dir, 5, false, &[]).unwrap();
    assert!(tally.outside.is_empty() && tally.paired > 0, "{same}");
    assert!(!same.contains("different"), "{same}");
    assert!(
        same.contains("inside A's stated spread:") && same.contains("(100%)"),
        "{same}"
    );
    let md = std::fs::read_to_string(run.dir.join("report.md")).unwrap();
    assert!(md.contains("| tcp-proto |"));
    assert!(run.dir.join("report.html").is_file());
    assert!(run.dir.join("logs").join("loadgen.log").is_file());

    let wire = session::run(
        tiny("wire-size", &out, &bins),
        &root,
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the wire-size run");
    assert_eq!(wire.failures, 0, "see {}", wire.dir.display());
    let (info, results) = load(&wire.dir).unwrap();
    let probes = results.probes_of("wire-size");
    assert_eq!(probes.len(), 2, "a probe record per round");
    let first: WireRecord = serde_json::from_value(probes[0].data.clone()).unwrap();
    let rows = &first.rows;
    let get = |t: &str| rows.iter().find(|r| r.transport == t).expect(t);
    // The lab's client and user-service count REST JSON bytes the same way:
    // the answers are the same bytes (user-service's request headers differ
    // a little, so the requests are compared loosely).
    let (us, lab) = (get("h1-json"), get("rest-json"));
    assert!(
        (us.in_per_call - lab.in_per_call).abs() / lab.in_per_call < 0.05,
        "user-service {} B vs lab client {} B",
        us.in_per_call,
        lab.in_per_call
    );
    assert!(
        get("grpc-web").in_per_call < lab.in_per_call,
        "protobuf is smaller than JSON"
    );
    let empty = build_report(&info, &results).empty_cells();
    assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
    assert!(common::children_of_this_process().is_empty());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_streaming_variants_each_make_the_calls_they_name_behind_one_request() {
    let bins = common::service_binaries();
    let out = common::temp_dir("streaming");
    let mut opts = tiny("streaming", &out, &bins);
    opts.rounds = Some(1);
    let run = session::run(opts, &common::root(), Arc::new(AtomicBool::new(false)))
        .expect("the streaming run");
    assert_eq!(run.failures, 0, "see {}", run.dir.display());
    let (info, results) = load(&run.dir).unwrap();
    assert_eq!(results.records.len(), 5, "five variants, one round");
    let n = 20.0;
    for r in &results.records {
        let m = Measures::of(r);
        let what = r.cell.label();
        assert_eq!(r.cell.users, 20, "{what}");
        assert!(m.requests > 3.0, "{what}: {} requests", m.requests);
        // One request per set, every one good, held to the length the lab
        // counted against the data set before the round.
        assert_eq!(m.good, m.requests, "{what}");
        assert_eq!(m.bad_answers, 0.0, "{what}");
        assert_eq!(r.load.parsed_bodies, 0.0, "{what}");
        assert_eq!(r.load.good_sets, m.good, "{what}: a set is one answer");
        // user-service's own count of calls to order-service: N per
        // request, or one for a batch.
        let per = if r.cell.batch { 1.0 } else { n };
        assert!(
            (m.upstream_calls - per * m.requests).abs() < 1.0,
            "{what}: {} calls for {} requests",
            m.upstream_calls,
            m.requests
        );
    }
    let report = build_report(&info, &results);
    let empty = report.empty_cells();
    assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
    let md = std::fs::read_to_string(run.dir.join("report.md")).unwrap();
    assert!(
        md.contains("`BatchStreamOrders`"),
        "the method names the calls"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `k6 run` in `k6/`, quiet, at user-service on `port` for 1 s, its
/// summary written to `summary`; the caller adds its variables and the
/// script.
fn k6_run(k6: &std::path::Path, port: u16, summary: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(k6);
    cmd.current_dir(common::root().join("k6"))
        .args([
            "run",
            "--quiet",
            "--no-usage-report",
            "--address",
            "127.0.0.1:0",
        ])
        .arg("-e")
        .arg(format!("BASE_URL=http://127.0.0.1:{port}"))
        .args(["-e", "DURATION=1s"])
        .arg("-e")
        .arg(format!("SUMMARY_JSON={}", summary.display()));
    cmd
}

fn k6_summary(
    k6: &std::path::Path,
    running: &lab::measure::services::Running,
    extra: &[(&str, &str)],
    out: &std::path::Path,
) -> lab::measure::load::Summary {
    let summary = out.join(format!(
        "summary-{}.json",
        extra
            .iter()
            .map(|(k, v)| format!("{k}{v}"))
            .collect::<String>()
            .len()
    ));
    let mut cmd = k6_run(k6, running.ports.user_rest, &summary);
    cmd.args(["-e", "VIA=h2c-json", "-e", "ORDERS=100", "-e", "VUS=2"])
        // As the lab runs k6: its thresholds would fail the wrong-length
        // run below, which is wrong on purpose.
        .args(["-e", "THRESHOLDS=off"]);
    for (k, v) in extra {
        cmd.arg("-e").arg(format!("{k}={v}"));
    }
    let st = cmd.arg("closed-loop.js").output().expect("k6 runs");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    lab::measure::k6::parse_summary(&std::fs::read_to_string(&summary).unwrap()).unwrap()
}

#[test]
fn k6_checks_every_answer_by_its_length_under_load() {
    let k6 = common::require_k6();
    let out = common::temp_dir("lengths");
    let cfg = common::service_config(&out);
    let stop = Arc::new(AtomicBool::new(false));
    let running = lab::measure::services::start(
        &cfg,
        Some(2),
        &lab::measure::cell::Env::default(),
        "lengths",
        &stop,
    )
    .unwrap();
    // Without a length given, each VU parses its first answer, counts its
    // 100 orders, and holds the others to its length: all good.
    let parsed = k6_summary(&k6, &running, &[], &out);
    assert!(parsed.good > 10.0, "{parsed:?}");
    assert_eq!(parsed.bad_answers, 0.0);
    assert_eq!(parsed.parsed_bodies, 2.0, "one body per VU");
    // Told a length the answers do not have, k6 counts none of them good:
    // the same 200s over the same transport are not the expected body.
    let wrong = k6_summary(&k6, &running, &[("EXPECTED_LENGTH", "17")], &out);
    assert_eq!(wrong.good, 0.0, "{wrong:?}");
    assert!(wrong.bad_answers > 10.0);
    assert!(wrong.good_ms.is_none(), "no good answer, no latency");
    // The right length, as the lab passes it: all good, no body parsed.
    let answer = lab::measure::http::get(
        running.ports.user_rest_addr(),
        &format!(
            "/v1/users/{}/orders?limit=100&via=h2c-json",
            lab::measure::cell::fixed_user(100)
        ),
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    let len = answer
        .header("content-length")
        .expect("a length")
        .to_owned();
    let right = k6_summary(&k6, &running, &[("EXPECTED_LENGTH", &len)], &out);
    assert!(right.good > 10.0 && right.bad_answers == 0.0, "{right:?}");
    assert_eq!(right.parsed_bodies, 0.0);
    // Another user's orders (ten, not a hundred) held to that length: bad.
    let other = k6_summary(
        &k6,
        &running,
        &[
            ("EXPECTED_LENGTH", &len),
            ("USER_ID", "00000000-0000-0000-0000-000000000010"),
        ],
        &out,
    );
    assert_eq!(other.good, 0.0, "{other:?}");

    // Many users in one request: each VU parses its first answer (eight
    // users, one order each, in order) and holds the rest to its length.
    for (via, batch) in [
        ("grpc", "true"),
        ("grpc-stream", "true"),
        ("grpc-bidi", "false"),
    ] {
        let many = k6_summary(
            &k6,
            &running,
            &[
                ("VIA", via),
                ("ORDERS", "1"),
                ("USERS", "8"),
                ("BATCH", batch),
            ],
            &out,
        );
        assert!(
            many.good > 10.0 && many.bad_answers == 0.0,
            "{via}: {many:?}"
        );
        assert_eq!(many.parsed_bodies, 2.0, "{via}: one body per VU");
    }
    // A batch asked of a transport without one is refused: every answer bad.
    let refused = k6_summary(
        &k6,
        &running,
        &[
            ("VIA", "h1-json"),
            ("ORDERS", "1"),
            ("USERS", "8"),
            ("BATCH", "true"),
        ],
        &out,
    );
    assert_eq!(refused.good, 0.0, "{refused:?}");
    assert!(refused.bad_answers > 10.0, "{refused:?}");
    running.stop();
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn k6_fails_a_bad_run_on_its_thresholds_unless_they_are_off() {
    let k6 = common::require_k6();
    let out = common::temp_dir("thresholds");
    // Nothing listens on this port: every request fails.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let run = |extra: &[&str]| {
        k6_run(&k6, dead, &out.join("summary.json"))
            .args(["-e", "VUS=1"])
            .args(extra)
            .arg("closed-loop.js")
            .output()
            .expect("k6 runs")
    };
    let on = run(&[]);
    // k6's exit code for thresholds crossed.
    assert_eq!(
        on.status.code(),
        Some(99),
        "{}",
        String::from_utf8_lossy(&on.stderr)
    );
    let off = run(&["-e", "THRESHOLDS=off"]);
    assert!(
        off.status.success(),
        "{}",
        String::from_utf8_lossy(&off.stderr)
    );
    let bad = run(&["-e", "THRESHOLDS=maybe"]);
    assert!(!bad.status.success());
    let text = String::from_utf8_lossy(&bad.stderr) + String::from_utf8_lossy(&bad.stdout);
    assert!(text.contains("THRESHOLDS must be on or off"), "{text}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The loss experiment for real, on a packet path the lab makes for every
/// round (root and /dev/net/tun, as CI has): what the kernels and the calls
/// show, not what the lab asked for.
#[test]
fn loss_runs_on_a_real_packet_path_whose_kernels_report_what_the_cells_asked() {
    let bins = common::service_binaries();
    let out = common::temp_dir("loss");
    let root = common::root();
    let opts = RunOptions {
        transports: Some(vec!["grpc".into()]),
        sizes: Some(vec![100]),
        rounds: Some(1),
        ..tiny("loss", &out, &bins)
    };
    let run = session::run(opts, &root, Arc::new(AtomicBool::new(false))).expect("the loss run");
    assert_eq!(run.failures, 0, "see {}", run.dir.display());
    let (info, results) = load(&run.dir).unwrap();
    assert!(info.skipped.is_empty(), "{:?}", info.skipped);
    // grpc on 1 and on 4 connections × 0%, 1%, 1% bursty (cubic), 1% bbr;
    // then grpc to 4 replicas, balanced by user-service and by HAProxy L7,
    // at 0% and 1%.
    assert_eq!(results.records.len(), 2 * 4 + 2 * 2);
    // Each round drew its own seed, so rounds sample the losses apart.
    let seeds: std::collections::BTreeSet<u64> = results
        .records
        .iter()
        .map(|r| r.path.and_then(|p| p.seed).expect("a round's seed"))
        .collect();
    assert_eq!(seeds.len(), results.records.len(), "{seeds:?}");
    for r in &results.records {
        let what = r.cell.label();
        let path = r.cell.env.path.expect("every loss cell is on the path");
        let m = Measures::of(r);
        assert!(m.requests > 5.0 && m.bad_answers == 0.0, "{what}: {m:?}");
        // A call crosses the path at least once each way: never under its
        // round trip.
        let p50 = m.upstream_us.expect("upstream time").p50;
        assert!(
            p50 >= 19_500.0,
            "{what}: upstream p50 {p50} µs across 20 ms"
        );
        // Both kernels' word on the algorithm, read from a socket.
        for side in ["user-service side", "order-service side"] {
            assert_eq!(
                r.service_env
                    .get(&format!("path {side} tcp_congestion_control"))
                    .map(String::as_str),
                Some(path.cc.name()),
                "{what}"
            );
        }
        let rec = r.path.expect("the path's record");
        let retrans = rec.retrans_user + rec.retrans_order;
        // The emulator's own account: nothing silenced or unwritten, its
        // TUN queues counted, its lateness stated.
        assert_eq!(
            (rec.silenced, rec.write_errors),
            (0.0, 0.0),
            "{what}: {rec:?}"
        );
        assert!(
            rec.device_drops.is_some() && rec.late_p99_us.is_some(),
            "{what}: {rec:?}"
        );
        if let Some(setup) = r.cell.env.replicas {
            // Each replica, at its own address on the path, answered its
            // share of the calls, by its own count; and the calls crossed
            // the path (the emulator carried them) whoever balanced them.
            let reps = r.replicas.as_ref().expect("the replicas' records");
            assert_eq!(reps.len(), usize::from(setup.n), "{what}");
            let calls: f64 = reps.iter().map(|x| x.calls).sum();
            for x in reps {
                assert!(x.addr.starts_with("10.9"), "{what}: {x:?}");
                assert!(x.calls > calls / 8.0, "{what}: uneven {reps:?}");
            }
            assert!(rec.packets_up >= m.requests, "{what}: {rec:?}");
            // What user-service holds: a connection to each replica, or
            // one to HAProxy.
            let held = m.connections_held;
            let want = if setup.balance.by_client() { 4.0 } else { 1.0 };
            assert_eq!(held, want, "{what}");
            assert!(
                r.balancer_cpu_us.is_some() != setup.balance.by_client(),
                "{what}"
            );
        }
        if path.loss_pcm == 0 {
            assert_eq!(rec.lost, 0.0, "{what}");
        } else {
            // The kernels retransmitted what the path lost.
            assert!(rec.lost > 0.0 && retrans > 0.0, "{what}: {rec:?}");
        }
    }
    let report = build_report(&info, &results).markdown();
    assert!(
        report.contains("was the one its column names on both sides in 12 of 12 rounds"),
        "{report}"
    );
    // The lab's namespaces are gone with the rounds.
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let mine = format!("netpath-{}-", std::process::id());
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains(&mine),
        "{}",
        String::from_utf8_lossy(&ns.stdout)
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A slow replica on the packet path (root and /dev/net/tun, as CI has):
/// every replica listens at an address of its own in namespace B and the
/// slow one's delay proxy runs beside it there, so a call to it pays the
/// path's round trip and the proxy's, and a call to another the path's
/// alone. Balanced round robin by user-service, a third of the calls do.
#[test]
fn a_slow_replica_on_the_packet_path_pays_the_path_and_its_own_delay() {
    use lab::measure::cell::{Balance, Env, PacketPath, Replicas, SLOW_RTT_MS, fixed_user};
    use std::time::{Duration, Instant};
    let out = common::temp_dir("slow-on-path");
    let mut cfg = common::service_config(&out);
    // `lab run --seed 7`: the path draws from it, not from a fresh seed.
    cfg.path_seed = Some(7);
    let env = Env {
        path: Some(PacketPath::rtt(20)),
        replicas: Some(Replicas {
            n: 3,
            balance: Balance::Client,
            slow: true,
            rotation: false,
        }),
        ..Env::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let running =
        lab::measure::services::start(&cfg, Some(3), &env, "slow-on-path", &stop).unwrap();
    assert!(running.slow_proxy.is_some(), "the slow replica's proxy");
    assert_eq!(running.path.as_ref().map(|p| p.path.config().seed), Some(7));
    assert_eq!(running.replicas.len(), 3);
    for r in &running.replicas {
        assert!(
            r.public.to_string().starts_with("10.9"),
            "{r:?}: not on the path"
        );
    }
    let user = running.user_rest_addr().unwrap();
    let path = format!("/v1/users/{}/orders?limit=1&via=grpc", fixed_user(1));
    let call = || {
        let t = Instant::now();
        let a = lab::measure::http::get(user, &path, Duration::from_secs(10)).unwrap();
        assert_eq!(a.status, 200);
        t.elapsed().as_secs_f64() * 1e3
    };
    // Each replica's connection made first (its handshakes cross the path).
    for _ in 0..6 {
        call();
    }
    let mut ms: Vec<f64> = (0..30).map(|_| call()).collect();
    running.stop();
    ms.sort_by(f64::total_cmp);
    // Every call crossed the path at least once each way.
    assert!(ms[0] >= 19.5, "{ms:?}");
    // Round robin over three: the fastest 20 reached the two quick
    // replicas, the slowest 10 the slow one (medians: robust to a stray
    // late call on a shared machine).
    let (quick, slow) = ms.split_at(20);
    let (q, s) = (quick[10], slow[5]);
    let slow_min = 20.0 + f64::from(SLOW_RTT_MS) - 1.0;
    assert!(
        q < slow_min - 5.0,
        "quick replicas' median {q:.2} ms: {ms:?}"
    );
    assert!(s >= slow_min, "the slow replica's median {s:.2} ms: {ms:?}");
}

/// A new connection's first call across a 20 ms packet path (root and
/// /dev/net/tun, as CI has), both encrypted with the run's certificates:
/// gRPC over HTTP/3 is first sent a Retry (order-service validates a new
/// client's address), then opens QUIC in one round trip, TLS included,
/// then asks; gRPC over TLS on TCP pays TCP's round trip, then TLS 1.3's,
/// then the call's. Measured from user-service's own upstream time
/// (`x-upstream-micros`) of its first call on a pool of one connection.
#[test]
fn a_first_call_on_the_packet_path_costs_three_round_trips_over_quic_with_its_retry_and_over_tls_on_tcp()
 {
    use lab::measure::cell::{Env, PacketPath, fixed_user};
    use std::time::Duration;
    let out = common::temp_dir("quic-handshake");
    let mut cfg = common::service_config(&out);
    cfg.certs = Some(tls::generate::write_lab_certs(&out.join("tls")).unwrap());
    let env = Env {
        path: Some(PacketPath::rtt(20)),
        tls: true,
        ..Env::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let running =
        lab::measure::services::start(&cfg, Some(1), &env, "quic-handshake", &stop).unwrap();
    let user = running.user_rest_addr().unwrap();
    let upstream_ms = |via: &str| {
        let path = format!("/v1/users/{}/orders?limit=1&via={via}", fixed_user(1));
        let a = lab::measure::http::get(user, &path, Duration::from_secs(10)).unwrap();
        assert_eq!(a.status, 200, "{via}");
        let us: f64 = a
            .header("x-upstream-micros")
            .expect("x-upstream-micros")
            .parse()
            .unwrap();
        us / 1e3
    };
    let (quic_cold, quic_warm) = (upstream_ms("grpc-h3"), upstream_ms("grpc-h3"));
    let (tcp_cold, tcp_warm) = (upstream_ms("grpc"), upstream_ms("grpc"));
    running.stop();
    eprintln!(
        "grpc-h3 {quic_cold:.1} ms then {quic_warm:.1} ms; grpc over TLS {tcp_cold:.1} ms then {tcp_warm:.1} ms"
    );
    // Warm: one round trip each.
    for (via, ms) in [("grpc-h3", quic_warm), ("grpc", tcp_warm)] {
        assert!((19.5..39.0).contains(&ms), "{via} warm: {ms:.1} ms");
    }
    // Cold: three round trips each (over QUIC: the Retry, the handshake,
    // the call).
    assert!(
        (59.0..79.0).contains(&quic_cold),
        "grpc-h3 cold: {quic_cold:.1} ms"
    );
    assert!(tcp_cold >= 59.0, "grpc over TLS cold: {tcp_cold:.1} ms");
}
