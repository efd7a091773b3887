use super::report::{paired, section, targets};
use super::*;
use crate::report::value::Value;

fn rec(callers: u32, via: &str, orders: u32, us: f64, round: u32) -> HopRecord {
    HopRecord {
        callers,
        via: via.into(),
        orders,
        median_ns: us * 1e3 * f64::from(callers),
        lower_ns: 0.0,
        upper_ns: 0.0,
        round,
    }
}

#[test]
fn times_are_per_call_and_ratios_are_to_the_floor() {
    let p = HopPlan {
        vias: vec!["grpc".into(), FLOOR.into()],
        sizes: vec![1],
        callers: vec![1, 8],
        quick: true,
    };
    let mut run = HopRun::default();
    for round in 1..=2 {
        for callers in [1, 8] {
            run.records.push(rec(callers, "grpc", 1, 100.0, round));
            run.records.push(rec(callers, FLOOR, 1, 40.0, round));
        }
    }
    assert_eq!(run.series(8, "grpc", 1), vec![Some(100.0), Some(100.0)]);
    let r = run.ratio(&p, 1, "grpc", 1).unwrap();
    assert!((r.median - 2.5).abs() < 1e-9, "{r:?}");
    let s = section(&p, Some(&run));
    let md = s
        .blocks
        .iter()
        .find_map(|b| match b {
            crate::report::Block::Table(t) => Some(t.reading.clone()),
            _ => None,
        })
        .unwrap();
    assert!(md.contains("grpc (×2.50)"), "{md}");
    assert!(filter(&p).contains("grpc|tcp-proto"));
}

#[test]
fn targets_are_judged_from_the_ratios() {
    let p = HopPlan {
        vias: vec![
            transports::GRPC.into(),
            transports::GRPC_BIDI.into(),
            transports::H1_PROTO.into(),
            FLOOR.into(),
        ],
        sizes: vec![1, 1_000],
        callers: vec![1],
        quick: true,
    };
    let mut run = HopRun {
        pairs_command: Some("cargo bench".into()),
        ..HopRun::default()
    };
    // Blocks whose median is `r`, with an outlier either side that the
    // median ignores.
    let pair = |via: &str, orders: u32, r: f64, round: u32| PairRecord {
        via: via.into(),
        orders,
        calls: 10,
        ratios: vec![r * 0.5, r, r, r * 3.0, r],
        floor_us: vec![40.0; 5],
        via_us: vec![40.0 * r; 5],
        round,
    };
    for round in 1..=3 {
        // ×2.5 and ×1.5 at 1 order: the best gRPC call (bidi) is within ×2.
        run.pairs.push(pair("grpc", 1, 2.5, round));
        run.pairs.push(pair("grpc-bidi", 1, 1.5, round));
        // ×1.5: over h1-proto's ×1.3.
        run.pairs.push(pair("h1-proto", 1, 1.5, round));
        // ×1.1 and ×1.2 at 1,000; in the third round grpc reaches ×1.2.
        let g = if round == 3 { 1.2 } else { 1.1 };
        run.pairs.push(pair("grpc", 1_000, g, round));
        run.pairs.push(pair("grpc-bidi", 1_000, 1.2, round));
        // criterion's figures say otherwise: they are not what is judged.
        run.records.push(rec(1, "h1-proto", 1, 40.0, round));
        run.records.push(rec(1, FLOOR, 1, 40.0, round));
    }
    let t = targets(&p, &run);
    let row = |name: &str| {
        t.rows
            .iter()
            .find(|r| matches!(&r[0], Value::Text { text } if text.starts_with(name)))
            .unwrap_or_else(|| panic!("no row {name}"))
            .clone()
    };
    let best = row("best of grpc,");
    assert!(matches!(&best[1], Value::Text { text } if text == "grpc-bidi"));
    assert!(matches!(&best[3], Value::Text { text } if text.starts_with("yes")));
    assert!(
        matches!(&row("h1-proto at 1 order")[3], Value::Text { text } if text == "no: ×1.500 over ×1.30")
    );
    assert!(
        matches!(&row("grpc at 1,000")[3], Value::Text { text } if text.starts_with("yes by the median"))
    );
    assert!(matches!(&best[3], Value::Text { text } if text == "yes, every round"));
    assert!(
        matches!(&row("grpc-bidi at 1,000")[3], Value::Text { text } if text.starts_with("no: ×1.200"))
    );
    // Not in the plan: no figure, and said so.
    assert!(
        matches!(&row("best of h2c-proto,")[1], Value::Missing { reason } if reason == "not in this run")
    );
    // In the run but without blocks: the reason says so.
    assert!(
        matches!(&row("h1-proto at 1,000")[1], Value::Missing { reason } if reason == "no blocks for it")
    );
    assert!(t.reading.starts_with("2 of 12 "), "{}", t.reading);
    assert!(t.reading.contains("8 not measured"), "{}", t.reading);
    // The paired table reads the same blocks: grpc at 1,000 spans 1.1–1.2
    // over the rounds, median 1.1, stated with a rerun interval: symmetric
    // about the median on a log scale, and wider than the rounds' range.
    let pt = paired(&p, &run);
    let grpc = pt
        .rows
        .iter()
        .find(|r| matches!(&r[0], Value::Text { text } if text == "grpc"))
        .unwrap();
    let [(median, low, high)] = grpc[2].ratios()[..] else {
        panic!("one ratio")
    };
    assert_eq!(median, 1.1);
    assert!(low < 1.1 && high > 1.2, "{low}–{high}");
    assert!(
        ((high / median).ln() - (median / low).ln()).abs() < 1e-9,
        "{low}–{high}"
    );
    assert!(matches!(&grpc[3], Value::Text { text } if text == "15 × 10"));
    assert!(t.reading.contains("2 missed"), "{}", t.reading);
    // The floor's µs, from its blocks: 40 µs in every block above.
    assert!(
        t.reading
            .contains("took 40.0 µs at 1 order and 40.0 µs at 1,000 orders"),
        "{}",
        t.reading
    );
    // grpc-bidi missed at 1,000, but no twin of it ran: nothing said of one.
    assert!(!t.reading.contains("twin"), "{}", t.reading);
}

#[test]
fn a_stock_miss_is_set_beside_its_twin_when_the_twin_met_it() {
    let vias = [
        transports::GRPC,
        transports::GRPC_TUNED,
        transports::GRPC_STREAM,
        transports::GRPC_STREAM_TUNED,
        FLOOR,
    ];
    let p = HopPlan {
        vias: vias.iter().map(|v| (*v).to_owned()).collect(),
        sizes: vec![1_000],
        callers: vec![1],
        quick: true,
    };
    let mut run = HopRun {
        pairs_command: Some("cargo bench".into()),
        ..HopRun::default()
    };
    let pair = |via: &str, r: f64, round: u32| PairRecord {
        via: via.into(),
        orders: 1_000,
        calls: 10,
        ratios: vec![r; 3],
        floor_us: vec![2_000.0; 3],
        via_us: vec![2_000.0 * r; 3],
        round,
    };
    for round in 1..=2 {
        // grpc misses and its twin meets; both stream transports miss.
        run.pairs.push(pair("grpc", 1.2, round));
        run.pairs.push(pair("grpc-tuned", 1.05, round));
        run.pairs.push(pair("grpc-stream", 1.3, round));
        run.pairs.push(pair("grpc-stream-tuned", 1.16, round));
    }
    let t = targets(&p, &run);
    // The other typed-protobuf transports' targets were not in this run.
    assert!(
        t.reading
            .starts_with("1 of 9 targets met by the median, 3 missed"),
        "{}",
        t.reading
    );
    assert!(
        t.reading.contains(
            "met by its tuned twin (grpc ×1.20 against grpc-tuned ×1.05 at 1,000 orders)"
        ),
        "{}",
        t.reading
    );
    assert!(!t.reading.contains("grpc-stream ×"), "{}", t.reading);
}
