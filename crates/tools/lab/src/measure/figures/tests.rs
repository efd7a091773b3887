//! The figures' tests: each derived from a made-up round record, per call,
//! per request and per core, and missing where there was no sample.

use super::*;
use crate::measure::cell::Cell;
use crate::measure::procfs::TcpStates;
use crate::measure::prom::Upstream;

fn record() -> RoundRecord {
    RoundRecord {
        experiment: "payload".into(),
        cell: Cell::closed("grpc", 100, 8, 8),
        round: 1,
        started_at: "now".into(),
        duration_s: 2.0,
        generator: load::Generator::K6,
        load: load::Summary {
            requests: 1000.0,
            iterations: 500.0,
            request_rate: 499.0,
            dropped: 10.0,
            counting: Some("good-answers-1".into()),
            good: 1000.0,
            good_rate: 499.0,
            good_sets: 500.0,
            good_ms: Some(load::Percentiles {
                p50: 1.5,
                ..Default::default()
            }),
            upstream_us: Some(load::Percentiles {
                p50: 300.0,
                ..Default::default()
            }),
            ..Default::default()
        },
        upstream_before: Upstream {
            calls: 100.0,
            bytes_read: 1000.0,
            bytes_written: 100.0,
            connections_opened: 8.0,
            ..Default::default()
        },
        upstream_after: Upstream {
            calls: 1100.0,
            bytes_read: 5_001_000.0,
            bytes_written: 200_100.0,
            connections_opened: 8.0,
            connections_open: 8.0,
            ..Default::default()
        },
        cpu: Cpu {
            order_us: 400_000.0,
            user_us: 600_000.0,
            load_us: 1_900_000.0,
        },
        rss: Rss {
            order_kb: 2048.0,
            user_kb: 1024.0,
            load_kb: 512.0,
        },
        tcp_before: TcpStates {
            established: 8,
            time_wait: 5,
        },
        tcp_after: TcpStates {
            established: 8,
            time_wait: 3,
        },
        cores: 2,
        other_cpu_us: 500_000.0,
        pinning: None,
        flags: vec![],
        proxy: None,
        path: None,
        window_s: None,
        postgres_us: None,
        service_env: Default::default(),
        load_raw: serde_json::Value::Null,
        e2e_hdr: None,
        replicas: None,
        balancer_cpu_us: None,
        no_proc: false,
        upstream_hdr: None,
        stalled_ms: None,
        fault: None,
    }
}

#[test]
fn replica_shares_come_from_the_replicas_counts_and_none_is_not_zero() {
    let mut r = record();
    r.replicas = Some(
        [60.0, 30.0, 10.0]
            .iter()
            .enumerate()
            .map(|(i, calls)| ReplicaRecord {
                addr: format!("127.0.0.{}", i + 1),
                calls: *calls,
                cpu_us: 1e6,
                connections: 1.0,
            })
            .collect(),
    );
    let m = Measures::of(&r);
    assert_eq!(Metric::ReplicaShare(0).of(&m), Some(60.0));
    assert_eq!(Metric::ReplicaShare(2).of(&m), Some(10.0));
    assert_eq!(Metric::ReplicaShare(3).of(&m), None, "no fourth replica");
    let x = Metric::Imbalance.of(&m).unwrap();
    assert!((x - 1.8).abs() < 1e-9, "{x}");
    if let Some(rs) = r.replicas.as_mut() {
        for rep in rs {
            rep.calls = 0.0;
        }
    }
    let m = Measures::of(&r);
    assert_eq!(Metric::ReplicaShare(0).of(&m), None);
    assert_eq!(Metric::Imbalance.of(&m), None);
    assert_eq!(Metric::ReplicaShare(0).of(&Measures::of(&record())), None);
}

#[test]
fn per_call_and_per_request_figures_come_from_deltas() {
    let m = Measures::of(&record());
    assert_eq!(m.upstream_calls, 1000.0);
    assert_eq!(m.bytes_in_per_call, Some(5000.0));
    assert_eq!(m.bytes_out_per_call, Some(200.0));
    assert_eq!(m.connections_opened, 0.0);
    assert_eq!(m.connections_held, 8.0);
    assert_eq!(Metric::CpuServices.of(&m), Some(1000.0));
    assert_eq!(Metric::CpuLoad.of(&m), Some(1900.0));
    assert_eq!(Metric::CpuServicesPerIteration.of(&m), Some(2000.0));
    assert_eq!(Metric::RssOrder.of(&m), Some(2.0));
    assert!((m.load_cores - 0.95).abs() < 1e-12);
    assert!((m.machine_busy - 0.725).abs() < 1e-12);
    assert!((m.other_cores - 0.25).abs() < 1e-12);
    // TIME_WAIT sockets that expired do not make a negative count.
    assert_eq!(m.time_wait_new, 0.0);
    let share = Metric::BehindShare.of(&m).expect("defined");
    assert!((share - 100.0 * 10.0 / 510.0).abs() < 1e-9);
}

#[test]
fn a_round_without_requests_has_no_per_request_cost() {
    let mut r = record();
    r.load.requests = 0.0;
    r.load.good = 0.0;
    r.load.good_sets = 0.0;
    r.load.iterations = 0.0;
    let m = Measures::of(&r);
    assert_eq!(Metric::CpuUser.of(&m), None);
    assert_eq!(Metric::UpstreamCallsPerIteration.of(&m), None);
    assert!(m.failed().is_some());
}

#[test]
fn a_figure_with_no_sample_is_missing_not_zero() {
    let mut r = record();
    r.load.upstream_us = None;
    r.load.good_ms = None;
    r.upstream_after = r.upstream_before;
    let m = Measures::of(&r);
    for metric in [
        Metric::UpP50,
        Metric::E2eP95,
        Metric::BytesIn,
        Metric::TlsFullPer1k,
    ] {
        assert_eq!(metric.of(&m), None, "{metric:?}");
    }
}

#[test]
fn rates_latencies_and_cpu_count_good_answers_only() {
    // 1,000 answers of which 100 were fast failures: the rate and the
    // CPU per request are the 900 good ones'.
    let mut r = record();
    r.load.good = 900.0;
    r.load.good_rate = 449.0;
    r.load.bad_answers = 100.0;
    let m = Measures::of(&r);
    assert_eq!(Metric::Rate.of(&m), Some(449.0));
    let cpu = Metric::CpuServices.of(&m).expect("defined");
    assert!((cpu - 1_000_000.0 / 900.0).abs() < 1e-9, "{cpu}");
    assert_eq!(Metric::E2eP50.of(&m), Some(1.5));
    // 10% bad: the round is failed.
    assert_eq!(Metric::BadShare.of(&m), Some(10.0));
    assert!(
        m.failed()
            .expect("failed")
            .contains("100 bad answers of 1000")
    );
    // 1% is still a round; shed answers are neither good nor bad.
    r.load.good = 990.0;
    r.load.bad_answers = 9.0;
    r.load.shed = 100.0;
    let m = Measures::of(&r);
    assert!(m.failed().is_none(), "{:?}", m.failed());
    assert_eq!(Metric::ShedShare.of(&m), Some(10.0));
}

#[test]
fn a_round_recorded_before_the_counting_rules_still_reads() {
    // An older lab's record: no counting rules, no good answers kept.
    let mut r = record();
    r.load.counting = None;
    r.load.good = 0.0;
    r.load.good_rate = 0.0;
    r.load.good_ms = None;
    r.load.bad_answers = 5.0;
    r.load.duration_ms.p50 = 2.0;
    let m = Measures::of(&r);
    assert!(m.failed().is_none(), "{:?}", m.failed());
    assert_eq!(m.good, 995.0);
    assert!((m.rate - 499.0 * 0.995).abs() < 1e-9);
    assert_eq!(Metric::E2eP50.of(&m), Some(2.0));
}

#[test]
fn cores_are_counted_over_the_window_the_cpu_was() {
    // k6 lived 3.8 s (start-up and summary around 2 s of load): its
    // 1.9 s of CPU is half a core, not 0.95.
    let mut r = record();
    r.window_s = Some(3.8);
    let m = Measures::of(&r);
    assert!((m.load_cores - 0.5).abs() < 1e-12, "{}", m.load_cores);
    assert!((m.other_cores - 0.5 / 3.8).abs() < 1e-12);
}
