//! `lab run … --target`: a stack the lab did not start, measured as it
//! runs. The services here are started by the test, as a user would start
//! them by hand; the lab must not restart or stop them, must record what it
//! can (rates, latencies, upstream counters, each replica's share) and say
//! n/a, with the reason, for what /proc would have given.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use lab::experiment::NOT_SEEN;
use lab::measure::figures::{Measures, Metric};
use lab::measure::services::Target;
use lab::session::{self, RunOptions, build_report, load};

fn by_hand(out: &std::path::Path) -> lab::measure::services::Running {
    let cfg = common::service_config(out);
    lab::measure::services::start(
        &cfg,
        Some(8),
        &lab::measure::cell::Env::default(),
        "started by hand",
        &Arc::new(AtomicBool::new(false)),
    )
    .expect("the services start")
}

fn options(experiment: &str, out: &std::path::Path, target: Target) -> RunOptions {
    RunOptions {
        path: Default::default(),
        cc: Default::default(),
        seed: None,
        target: Some(target),
        // The load engine, already built with the services (a target's
        // run would otherwise build it in release).
        bin_dir: Some(common::service_binaries()),
        ..common::tiny_run(experiment, out)
    }
}

#[test]
fn a_running_stack_is_measured_without_restarting_it_and_proc_figures_are_na() {
    let out = common::temp_dir("target");
    let mut running = by_hand(&out);
    let p = running.ports;
    let target = Target {
        user_url: format!("http://127.0.0.1:{}", p.user_rest),
        user_metrics: format!("http://127.0.0.1:{}/metrics", p.user_rest),
        order_metrics: vec![format!("http://127.0.0.1:{}/metrics", p.order_rest)],
        order_rest: None,
        order_grpc: None,
    };
    let (order_pid, user_pid) = (running.order_pid(), running.user_pid());

    let run = session::run(
        options("payload", &out, target.clone()),
        &common::root(),
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the payload run against the target");
    assert_eq!(run.failures, 0, "see {}", run.dir.display());

    // Not restarted, not stopped: the same processes still serve.
    assert!(
        running.order.try_wait().unwrap().is_none(),
        "order-service was stopped"
    );
    assert!(running.user.as_mut().unwrap().try_wait().unwrap().is_none());
    assert_eq!(
        (running.order_pid(), running.user_pid()),
        (order_pid, user_pid)
    );

    let (info, results) = load(&run.dir).unwrap();
    assert_eq!(info.target.as_ref(), Some(&target));
    assert!(!info.timing.restarted);
    assert_eq!(results.records.len(), 3 * 2, "3 transports × 2 rounds");
    let mut served = 0.0;
    for r in &results.records {
        let m = Measures::of(r);
        assert!(r.no_proc);
        assert!(m.good > 10.0, "{}: {} good", r.cell.label(), m.good);
        assert!(
            Metric::UpP50.of(&m).is_some(),
            "upstream from the target's own metrics"
        );
        assert_eq!(
            Metric::CpuServices.of(&m),
            None,
            "no /proc for a target: missing, not 0"
        );
        assert_eq!(Metric::RssOrder.of(&m), None);
        // The one replica's own counter saw the round's calls.
        let rep = r
            .replicas
            .as_ref()
            .expect("the replica's metrics were read");
        assert_eq!(rep.len(), 1);
        assert!(
            rep[0].calls >= m.good,
            "{} calls for {} good answers",
            rep[0].calls,
            m.good
        );
        served += rep[0].calls;
    }
    assert!(served > 0.0);
    let md = build_report(&info, &results).markdown();
    assert!(md.contains("| services | an already-running stack"), "{md}");
    assert!(md.contains("never restarted between rounds"));
    assert!(
        md.contains("the target's own pool"),
        "a pool the lab did not set is not claimed"
    );
    assert!(md.contains(NOT_SEEN), "the n/a figures say why");
    running.stop();
}

#[test]
fn experiments_that_start_what_they_measure_refuse_a_target_and_say_why() {
    let out = common::temp_dir("target-refused");
    let target = Target {
        user_url: "http://127.0.0.1:9".into(),
        user_metrics: "http://127.0.0.1:9/metrics".into(),
        order_metrics: Vec::new(),
        order_rest: None,
        order_grpc: None,
    };
    for (experiment, needs) in [
        ("rtt", "a path it makes"),
        ("loss", "packet path"),
        ("tls", "certificates"),
        ("pool", "USER_POOL_SIZE"),
        ("replicas", "HAProxy"),
        ("all", "cannot run against a stack"),
    ] {
        let e = session::run(
            options(experiment, &out, target.clone()),
            &common::root(),
            Arc::new(AtomicBool::new(false)),
        )
        .expect_err(experiment);
        let msg = format!("{e:#}");
        assert!(
            msg.contains(needs) && msg.contains("payload"),
            "{experiment}: {msg}"
        );
    }
    let e = session::run(
        options("wire-size", &out, target.clone()),
        &common::root(),
        Arc::new(AtomicBool::new(false)),
    )
    .expect_err("wire-size without order-service's addresses");
    assert!(format!("{e:#}").contains("--target-order-grpc"), "{e:#}");
    let mut bad = options("payload", &out, target);
    bad.target.as_mut().unwrap().user_url = "https://127.0.0.1:9".into();
    let e = format!(
        "{:#}",
        session::run(bad, &common::root(), Arc::new(AtomicBool::new(false))).unwrap_err()
    );
    assert!(e.contains("only http://"), "{e}");
}
