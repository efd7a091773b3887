//! Faults end to end, for real: both services, the lab's load engine, a
//! fault injected halfway, and the counts of both sides set against each
//! other (the engine's requests, user-service's calls and errors, order-service's own count of
//! the lookups it answered), with what the kernel and /proc say about what
//! the fault did. Needs root for `ss -K`, as CI has.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use lab::measure::Timing;
use lab::measure::cell::{Cell, Env, Fault, Store};
use lab::measure::record::RoundRecord;
use lab::measure::runner::Lab;

fn lab(name: &str) -> Lab {
    let out = common::temp_dir(name);
    lab_with(common::service_config(&out), out)
}

fn lab_with(cfg: lab::measure::services::ServiceConfig, out: std::path::PathBuf) -> Lab {
    Lab::new(
        common::root(),
        common::engine_only(),
        cfg,
        Timing {
            rounds: 1,
            duration_s: 1.0,
            warmup_s: 1.0,
            restarted: true,
        },
        out,
        Arc::new(AtomicBool::new(false)),
    )
}

fn faulty(via: &str, fault: Fault) -> Cell {
    Cell::closed(via, 1, 16, 16).with_env(Env {
        fault: Some(fault),
        ..Env::default()
    })
}

/// The load engine's count against user-service's: every request made one
/// call, and the calls that were not good are the ones the engine was
/// told failed.
fn both_sides_agree(r: &RoundRecord) -> (f64, f64) {
    let calls = r.upstream_after.calls - r.upstream_before.calls;
    let errors = r.upstream_after.errors - r.upstream_before.errors;
    assert_eq!(
        r.load.requests, calls,
        "the engine's requests, user-service's calls"
    );
    assert_eq!(
        r.load.bad_answers + r.load.shed,
        errors,
        "the engine's failed answers, user-service's failed calls"
    );
    let by_status: f64 = r
        .endings()
        .expect("the engine counts endings")
        .not_good
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert_eq!(by_status, errors, "every failed answer has its status");
    (calls, errors)
}

#[test]
fn a_reset_under_load_is_counted_alike_by_the_engine_user_service_and_order_service() {
    let mut lab = lab("fault-reset");
    for via in ["tcp-proto", "grpc"] {
        let r = lab
            .measure("faults", &faulty(via, Fault::Reset), 1)
            .unwrap();
        let f = r.fault.clone().expect("the fault's record");
        // The load ran on both sides of the fault, which came on time.
        assert!(
            (f.at_ms - Fault::ONSET_S * 1e3).abs() < 500.0,
            "{via}: {}",
            f.at_ms
        );
        assert!(f.timeline.last().unwrap()[0] > f.at_ms + 5_000.0, "{via}");
        // The kernel aborted user-service's connections, and it made new
        // ones (its own count of connections opened).
        let reset = f64::from(f.reset_sockets.unwrap());
        assert!(reset >= 1.0, "{via}: nothing reset");
        let opened = r.upstream_after.connections_opened - r.upstream_before.connections_opened;
        assert!(
            opened >= reset,
            "{via}: {opened} opened after {reset} reset"
        );
        let (calls, errors) = both_sides_agree(&r);
        // order-service answered every call user-service got, and at most
        // the calls in flight at the reset besides (16 callers): answers
        // sent into a connection already gone.
        let got = calls - errors;
        let unused = f.order_answered.expect("order-service lived through it") - got;
        assert!((0.0..=16.0).contains(&unused), "{via}: {unused} unused");
        // order-service answered with an error at most the calls in flight
        // (a call whose connection went is recorded as cancelled).
        let refused = f
            .order_refused
            .expect("order-service's count of error answers");
        assert!(refused <= 16.0, "{via}: {refused} error answers");
        match via {
            // Nothing sends a raw-TCP lookup again: those in flight fail
            // (a few, since a caller in flight holds one connection each).
            "tcp-proto" => assert!(errors <= 16.0, "{via}: {errors} failed"),
            // A gRPC read whose connection failed is sent again.
            _ => assert_eq!(errors, 0.0, "{via}: {errors} failed"),
        }
    }
}

#[test]
fn a_restart_under_load_gets_a_new_process_on_the_same_ports_and_the_load_comes_back() {
    let mut lab = lab("fault-restart");
    let r = lab
        .measure("faults", &faulty("h2c-proto", Fault::Restart), 1)
        .unwrap();
    let f = r.fault.clone().expect("the fault's record");
    // It drained and exited by itself, well within the limit.
    let drain = f.drain_ms.expect("the drain's length");
    assert!(!f.killed_after_drain && drain < 10_000.0, "{drain} ms");
    assert!(f.end_ms > f.at_ms, "{f:?}");
    both_sides_agree(&r);
    // The same calls went on after it: user-service's good calls grew in
    // the last second of the run as in the second before the fault.
    let (last, before) = good_last_second_and_before(&f);
    assert!(
        last > before * 0.5,
        "{last} good calls in the last second, {before} before"
    );
    // Its counts went with the old process: none is claimed.
    assert_eq!(f.order_answered, None);
    assert!(common::children_of_this_process().is_empty());
}

/// The good calls in the last second of the run, and in the second before
/// the fault began.
fn good_last_second_and_before(f: &lab::measure::record::FaultRecord) -> (f64, f64) {
    let good = |i: usize| f.timeline[i][1] - f.timeline[i][2];
    let at = |ms: f64| f.timeline.iter().position(|s| s[0] >= ms).unwrap();
    let before = good(at(f.at_ms - 100.0)) - good(at(f.at_ms - 1_100.0));
    let n = f.timeline.len() - 1;
    (good(n) - good(at(f.timeline[n][0] - 1_000.0)), before)
}

#[test]
fn a_postgres_restart_under_load_ends_order_services_sessions_and_it_serves_again() {
    let out = common::temp_dir("fault-pgrestart");
    let mut cfg = common::service_config(&out);
    let pg = lab::measure::services::OwnPostgres::start().expect("the lab's own Postgres");
    let db = lab::measure::services::Databases::from_server_url(&pg.url()).unwrap();
    lab::measure::services::seed_into(&cfg.bins, &db).unwrap();
    cfg.own_postgres = Some((Arc::new(pg), db));
    let mut lab = lab_with(cfg, out);
    let cell = Cell::closed("grpc", 1, 16, 16).with_env(Env {
        fault: Some(Fault::PostgresRestart),
        store: Some(Store::OwnPostgres),
        ..Env::default()
    });
    let r = lab.measure("faults", &cell, 1).unwrap();
    // order-service ran on the lab's Postgres, user-service in memory.
    assert!(
        r.service_env
            .get("order-service ORDER_DATABASE_URL")
            .is_some_and(|u| u.contains("127.0.0.1:")),
        "{:?}",
        r.service_env
    );
    assert!(!r.service_env.contains_key("user-service USER_DATABASE_URL"));
    let f = r.fault.clone().expect("the fault's record");
    assert!(f.end_ms > f.at_ms, "{f:?}");
    let (calls, errors) = both_sides_agree(&r);
    // order-service lived through it: its own count is there, and it
    // answered what user-service got, and at most the calls in flight
    // besides.
    let unused = f.order_answered.expect("order-service lived through it") - (calls - errors);
    assert!((0.0..=16.0).contains(&unused), "{unused} unused");
    // Its sessions ended under it: order-service answered lookups with an
    // error while Postgres was down (its own count), which user-service
    // sent again (gRPC resends UNAVAILABLE) or passed on as failed calls.
    let refused = f
        .order_refused
        .expect("order-service's count of error answers");
    assert!(refused >= 1.0, "order-service met no error: {f:?}");
    // It serves again: in the run's last second, more good calls than
    // there are callers (a rate, not only the calls in flight at the end).
    let (last, _) = good_last_second_and_before(&f);
    assert!(last > 16.0, "{last} good calls in the last second");
}

#[test]
fn a_silence_of_the_delay_proxy_holds_the_calls_and_they_are_answered_after_it() {
    let mut lab = lab("fault-hold");
    let cell = Cell::closed("h2c-proto", 1, 16, 16).with_env(Env {
        fault: Some(Fault::Silence { ms: 2_000 }),
        rtt_ms: Some(2),
        ..Env::default()
    });
    let r = lab.measure("faults", &cell, 1).unwrap();
    let f = r.fault.clone().expect("the fault's record");
    assert!(f.end_ms - f.at_ms >= 2_000.0, "{f:?}");
    // The proxy held what was sent during the silence.
    let proxy = r.proxy.expect("the delay proxy's record");
    assert!(proxy.held >= 1.0, "{proxy:?}");
    // Under the 5 s timeout, every held call was answered late, none
    // failed: the engine saw calls over a second, and no failed one.
    let (_, errors) = both_sides_agree(&r);
    assert_eq!(errors, 0.0);
    let slow = r.endings().expect("the engine counts endings").slow;
    assert!(slow >= 1.0, "{slow} calls over 1 s");
    // No good call came back during the silence (the timeline's good
    // count stands still between two samples well inside it).
    let good_at = |ms: f64| {
        let s = f.timeline.iter().find(|s| s[0] >= ms).unwrap();
        s[1] - s[2]
    };
    assert_eq!(good_at(f.at_ms + 300.0), good_at(f.end_ms - 300.0));
    // And the load went on after it: more good calls in the last second
    // than the callers whose calls were held.
    let (last, _) = good_last_second_and_before(&f);
    assert!(last > 16.0, "{last} good calls in the last second");
}
