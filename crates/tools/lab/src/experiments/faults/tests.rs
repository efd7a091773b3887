use super::figures::{self, recovery};
use super::*;
use crate::experiment::PathChoice;
use crate::measure::cell::{Cell, Store};
use crate::measure::record::FaultRecord;

/// A timeline at 100 good calls a second, sampled every 100 ms, with no
/// good call from `stop` to `resume` and half the rate for `slow_ms` after.
fn timeline(stop: f64, resume: f64, slow_ms: f64, last: f64) -> Vec<[f64; 3]> {
    let mut out = Vec::new();
    let (mut good, mut t) = (0.0, 0.0);
    while t <= last {
        out.push([t, good, 0.0]);
        if t < stop || t >= resume + slow_ms {
            good += 10.0;
        } else if t >= resume {
            good += 5.0;
        }
        t += 100.0;
    }
    out
}

#[test]
fn recovery_is_read_from_the_timeline_after_the_faults_end() {
    let f = FaultRecord {
        at_ms: 4000.0,
        end_ms: 6000.0,
        timeline: timeline(4000.0, 6500.0, 1000.0, 14_000.0),
        ..FaultRecord::default()
    };
    let (before, first, back) = recovery(&f);
    assert_eq!(before, Some(100.0));
    // The first sample with more good calls than at the end: 6600 ms.
    assert_eq!(first, Some(600.0));
    // Half the rate from 6500 to 7500 ms: the first second with 90 good
    // calls (within 10% of 100) starts at 7300 ms (5 + 5 + 8 × 10).
    assert_eq!(back, Some(1300.0));
}

#[test]
fn a_service_that_never_comes_back_has_no_recovery_time() {
    let f = FaultRecord {
        at_ms: 4000.0,
        end_ms: 5000.0,
        timeline: timeline(4000.0, 1e9, 0.0, 12_000.0),
        ..FaultRecord::default()
    };
    let (before, first, back) = recovery(&f);
    assert_eq!(before, Some(100.0));
    assert_eq!((first, back), (None, None));
}

#[test]
fn a_fault_that_stops_nothing_is_back_at_once() {
    let f = FaultRecord {
        at_ms: 4000.0,
        end_ms: 4000.0,
        timeline: timeline(1e9, 1e9, 0.0, 12_000.0),
        ..FaultRecord::default()
    };
    assert_eq!(recovery(&f), (Some(100.0), Some(100.0), Some(0.0)));
}

#[test]
fn every_family_meets_every_fault_but_where_it_cannot() {
    let p = Faults::plan(&Knobs {
        quick: true,
        ..Knobs::default()
    });
    assert_eq!(p.vias.len(), FAMILIES.len());
    for case in &p.cases {
        let measured: Vec<&String> = p
            .vias
            .iter()
            .filter(|v| not_measured(v, case, p.path).is_none())
            .collect();
        assert!(measured.len() >= 5, "{case:?}: {measured:?}");
    }
    let cells = p.cells();
    // HTTP/3 meets a restart, the silent path (with the defaults and the
    // recommended settings) and Postgres's restart, never HAProxy or a
    // reset.
    let h3: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.via == transports::H3_PROTO)
        .collect();
    assert_eq!(h3.len(), 4, "{h3:?}");
    assert!(
        h3.iter()
            .all(|c| c.env.replicas.is_none() && c.env.fault != Some(Fault::Reset))
    );
    // A silent path is a packet path; a killed replica has two others; the
    // recommended settings meet only the faults they act on.
    for c in &cells {
        let fault = c.env.fault.expect("every cell has its fault");
        assert_eq!(c.env.path.is_some(), matches!(fault, Fault::Silence { .. }));
        assert_eq!(c.env.rtt_ms, None);
        // Only Postgres's restart runs on a Postgres, the lab's own.
        assert_eq!(
            c.env.store == Some(Store::OwnPostgres),
            fault == Fault::PostgresRestart
        );
        assert!(matches!(c.env.store, None | Some(Store::OwnPostgres)));
        assert_eq!(
            c.env.replicas.is_some(),
            matches!(fault, Fault::Kill { .. }),
            "{}",
            c.label()
        );
        if c.env.recommended {
            assert!(matches!(fault, Fault::Kill { .. } | Fault::Silence { .. }));
        }
    }
    // Quick: the recommended settings where they act most, a replica
    // killed under client-side balancing and the 10 s silence.
    let twice = cells.iter().filter(|c| c.env.recommended).count();
    assert_eq!(twice, 6 + 7, "{twice}");
    let full = Faults::plan(&Knobs::default());
    let twice = full.cells().iter().filter(|c| c.env.recommended).count();
    assert_eq!(
        twice,
        2 * (3 * 6 - 1 + 2 * 7),
        "1 and 100 orders: kills (no raw TCP at L7), both silences"
    );
}

#[test]
fn with_path_proxy_the_silence_is_the_delay_proxy_holding_bytes() {
    let p = Faults::plan(&Knobs {
        quick: true,
        path: PathChoice::Proxy,
        ..Knobs::default()
    });
    let silent: Vec<Cell> = p
        .cells()
        .into_iter()
        .filter(|c| matches!(c.env.fault, Some(Fault::Silence { .. })))
        .collect();
    assert!(!silent.is_empty());
    // HTTP/3 is not carried by the proxy: it meets no silence there.
    assert!(silent.iter().all(|c| !transports::is_quic(&c.via)));
    for c in &silent {
        assert_eq!(c.env.path, None, "{}", c.label());
        assert_eq!(c.env.rtt_ms, Some(p.path_rtt_ms), "{}", c.label());
    }
    let case = p
        .cases
        .iter()
        .find(|c| matches!(c.fault, Fault::Silence { .. }))
        .unwrap();
    assert!(
        case.title(p.path)
            .starts_with("the delay proxy holding every byte")
    );
    assert!(
        case.title(PathChoice::Packets)
            .starts_with("the path silent")
    );
}

#[test]
fn the_section_reads_its_tables_from_the_numbers() {
    let (info, results) = crate::synthetic::run(&["faults"], true, 2);
    let report = crate::session::build_report(&info, &results);
    let empty = report.empty_cells();
    assert!(empty.is_empty(), "{empty:?}");
    let md = report.markdown();
    assert!(md.contains("When the other side fails"), "{md}");
    // Each case's reading names the transports its medians put first and
    // last, which the synthetic recoveries order by the name's length.
    let reset: Vec<(String, figures::Figures)> = results
        .records
        .iter()
        .filter(|r| r.cell.env.fault == Some(Fault::Reset) && r.round == 1)
        .map(|r| (r.cell.via.clone(), figures::of(r).unwrap()))
        .collect();
    assert_eq!(reset.len(), 6, "every family but HTTP/3");
    for (via, f) in &reset {
        assert_eq!(f.unmatched, 0.0, "{via}");
        assert_eq!(f.unused, Some(4.0), "{via}");
        assert_eq!(f.failed, 15.0, "{via}");
    }
    let soonest = reset
        .iter()
        .min_by(|a, b| a.1.back_ms.unwrap().total_cmp(&b.1.back_ms.unwrap()))
        .unwrap();
    assert!(
        md.contains(&format!(
            "{} was back within 10% of its rate soonest",
            soonest.0
        )),
        "{md}"
    );
    assert!(md.contains("every connection reset (RST)"), "{md}");
    // Where both settings ran, the reading says what the recommended ones
    // changed, from the numbers (15 failed calls by default, 5 with them).
    assert!(md.contains("'s failed calls most (15 to 5)"), "{md}");
    assert!(md.contains("The recommended settings cut "), "{md}");
    assert!(!md.contains("added most to"), "{md}");
    assert!(
        md.contains("| `USER_UPSTREAM_RETRY_BUDGET_PCT` | 0 (off) | 20 |"),
        "{md}"
    );
}
