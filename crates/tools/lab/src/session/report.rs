//! The whole report of a run, built from `run.json` and the raw records
//! alone, so that `lab report DIR` renders an interrupted run, or an older
//! one with newer analysis code, as the run itself would have: the
//! opening and the run's facts, each experiment's section (an experiment
//! that cannot build its own says so in its place), the flagged and failed
//! rounds, and every cell's figures.

use std::path::Path;

use anyhow::Context as _;

use super::info::{RunInfo, Skipped, load};
use crate::analysis::Data;
use crate::experiment::{Context, Knobs};
use crate::experiments::tables::everything;
use crate::measure::cell::{K6_GRPC_DIRECT, Load};
use crate::measure::figures::{Measures, Metric};
use crate::measure::human_duration;
use crate::measure::judge::{BUSY_NEIGHBOUR_CORES, FAILED_BAD_SHARE_PCT, LOAD_SATURATED_CORES};
use crate::measure::load::Generator;
use crate::measure::results::Results;
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Report, Section, Table};
use crate::stats::Spread;

/// Renders a results directory's report again.
pub fn rerender(dir: &Path) -> anyhow::Result<()> {
    let (info, results) = load(dir)?;
    build_report(&info, &results).write(dir)
}

/// The whole report of a run.
pub fn build_report(info: &RunInfo, results: &Results) -> Report {
    let data = Data::new(results);
    let cx = Context {
        timing: &info.timing,
        data: &data,
        results,
        store: &info.store,
    };
    let mut report = Report {
        title: format!("Transport lab: {}", info.experiment),
        intro: intro(info),
        meta: meta(info, results),
        sections: Vec::new(),
        run: serde_json::to_value(info).unwrap_or_default(),
        ..Report::default()
    };
    if let Some(parts) = parts_text(info) {
        report.meta.push(("parts".into(), parts));
    }
    report.intro.extend(taster_note(info));
    report.intro.extend(transport_notes(info));
    if let Some(load) = other_load(info, results) {
        report.meta.push(("other load".into(), load));
    }
    for (name, entry) in info.entries() {
        let section = match entry {
            None => Err(anyhow::anyhow!("this lab has no experiment named {name:?}")),
            Some(e) => info
                .plans
                .get(&name)
                .with_context(|| format!("run.json has no plan for {name}"))
                .and_then(|plan| e.section(plan, &cx)),
        };
        report.sections.push(section.unwrap_or_else(|e| {
            let mut s = Section::new(&name, &name);
            s.para(format!("This section could not be built: {e:#}."));
            s
        }));
    }
    report
        .sections
        .push(flags_section(&data, results, &info.skipped));
    report.sections.push(appendix(&cx));
    report
}

/// For the taster: the transports and each experiment's plan it ran (read
/// from the run's own plans, so `--transports` and `--sizes` show), and
/// every experiment it left out.
fn taster_note(info: &RunInfo) -> Option<String> {
    if !info.knobs.taster {
        return None;
    }
    let ran: Vec<String> = info
        .entries()
        .into_iter()
        .filter_map(|(name, e)| {
            let detail = e?.describe(info.plans.get(&name)?).ok()?;
            Some(format!("{name} ({detail})"))
        })
        .collect();
    let left: Vec<&str> = crate::experiments::all()
        .iter()
        .map(|e| e.name())
        .filter(|n| !info.experiments.iter().any(|e| e == n))
        .collect();
    Some(format!(
        "**This is the taster**, a first answer in a few minutes: {} in {}. \
         It leaves out {} of the lab's {} experiments: {}. \
         `lab run all --quick` measures every one of them, and every transport.",
        info.knobs.transports().join(", "),
        ran.join(" and "),
        left.len(),
        crate::experiments::all().len(),
        left.join(", ")
    ))
}

/// The report's opening: what is measured and how a figure is read.
fn intro(info: &RunInfo) -> Vec<String> {
    let m = &info.machine;
    let t = &info.timing;
    vec![
        format!(
            "user-service fetches a user's orders from order-service over the transport each \
             table names; {} drives user-service's `GET /v1/users/{{id}}/orders` over HTTP/1.1 \
             on the same machine. **Upstream** figures are measured inside user-service around \
             its call (the `x-upstream-micros` header, recorded per request by the load \
             generator), so the load tool's own client is not in them (the Spring Boot post's \
             pitfall); **end-to-end** figures are the load generator's, timed from each \
             request's start in a closed loop and from its intended send in an open one. Only \
             good answers count (a 200 over the transport asked for with the expected body): \
             rates, latencies and CPU per request are theirs, and a round with more than 1% bad \
             answers is left out. CPU per request comes from /proc (utime + stime) over the \
             window from just before the load generator starts to just after it exits, divided \
             by the good answers; bytes and connections from user-service's socket counters.",
            info.knobs.load.describe()
        ),
        format!(
            "Every figure is the median of {} rounds, each round {} \
             after a discarded warm-up. An absolute figure's parentheses hold the lowest and \
             highest round. A ratio (`×1.52 (1.41–1.63)`) is computed round by round and its \
             parentheses hold a 95% rerun interval: where the median of another run of the same \
             plan on this machine should land, from the round-to-round noise of that metric \
             pooled over the experiment's cells (or the pair's own, when larger). The intervals \
             are built from rounds within this run, so they cover another run only as far as \
             runs differ no more than rounds do: quiet back-to-back runs of one plan on the \
             project's machine kept 96–99% of each other's medians inside them, and quiet runs of \
             the Postgres cells 93–100% (the book's Repeatability); a busy machine or another \
             plan fewer. `lab compare` \
             checks two runs against each other's intervals. A round is flagged when the load \
             generator used {LOAD_SATURATED_CORES} core or more (its numbers may then measure it \
             too), when other \
             programs used {} cores or more during it, when its packet path fell behind (the \
             emulator's lateness p99 past 1,024 µs, or packets dropped at a TUN queue), or when \
             it saw errors. \
             On a machine this small the three processes share {} cores: absolute rates are this \
             machine's, the ratios are what travels.",
            t.rounds,
            if t.restarted {
                "on freshly started services"
            } else {
                "on the same running services (a target the lab did not start)"
            },
            BUSY_NEIGHBOUR_CORES,
            m.cores
        ),
    ]
}

/// The run's facts: command, services, outcome, machine, versions,
/// commit, store, settings, compression, environment, start.
fn meta(info: &RunInfo, results: &Results) -> Vec<(String, String)> {
    let m = &info.machine;
    let t = &info.timing;
    vec![
        ("command".into(), format!("`{}`", info.command)),
        (
            "services".into(),
            match &info.target {
                Some(t) => format!(
                    "{}; not started or restarted by the lab. CPU per process, RSS, \
                     TIME_WAIT sockets and other processes' load are n/a: the lab cannot read \
                     the services' processes",
                    t.describe()
                ),
                None => "started by the lab for every round, on free ports".to_owned(),
            },
        ),
        ("outcome".into(), info.outcome.clone()),
        (
            "machine".into(),
            format!(
                "{} cores, {}, {:.1} GiB memory, Linux {}",
                m.cores, m.cpu_model, m.memory_gib, m.kernel
            ),
        ),
        (
            "versions".into(),
            format!("{}; load engine: {}; k6: {}", m.rustc, m.loadgen, m.k6),
        ),
        ("load generator".into(), generators(info, results)),
        (
            "git commit".into(),
            format!(
                "{}{}",
                m.git_commit,
                if m.git_dirty {
                    " (with uncommitted changes)"
                } else {
                    ""
                }
            ),
        ),
        ("run's store".into(), info.store.clone()),
        (
            "settings".into(),
            format!(
                "{} rounds × {} s measured after {} s warm-up; closed loop {} VUs with {} \
                 unless a section states its own load; {}{}",
                t.rounds,
                f::num(t.duration_s),
                f::num(t.warmup_s),
                Knobs::VUS,
                match &info.target {
                    // The lab sets no setting of a stack it did not start.
                    Some(_) =>
                        "the target's own pool (not the plan's, which the sections name)".to_owned(),
                    None => format!("pool {}", Knobs::POOL),
                },
                if info.knobs.quick {
                    "quick plan"
                } else {
                    "full plan"
                },
                info.pinning
                    .as_ref()
                    .map_or("; no CPU pinning".to_owned(), |p| format!("; pinned: {p}")),
            ),
        ),
        (
            "compression between the services".into(),
            compression(info, results),
        ),
        (
            "services' environment".into(),
            if info.service_env.is_empty() {
                "not recorded".to_owned()
            } else {
                format!(
                    "cleared, then only: {} (values in each round's record)",
                    info.service_env
                        .keys()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        ),
        (
            "started".into(),
            format!(
                "{}{}",
                info.started_at,
                info.elapsed_s
                    .map_or(String::new(), |s| format!(", took {}", human_duration(s)))
            ),
        ),
    ]
}

/// Which load generator drove the rounds: the run's, and any other some
/// cells asked for, with how many rounds each drove.
fn generators(info: &RunInfo, results: &Results) -> String {
    let mut rounds: std::collections::BTreeMap<Generator, usize> = Default::default();
    for r in &results.records {
        *rounds.entry(r.generator).or_default() += 1;
    }
    let run = format!(
        "{} (`--load {}`)",
        info.knobs.load.describe(),
        info.knobs.load.name()
    );
    let others: Vec<String> = rounds
        .iter()
        .filter(|(g, _)| **g != info.knobs.load)
        .map(|(g, n)| format!("{} in {n} rounds ({})", g.name(), g.why_in_a_run()))
        .collect();
    if others.is_empty() {
        run
    } else {
        format!("{run}; {}", others.join("; "))
    }
}

/// When each part of a resumed run ran, and what a forced resumption
/// overrode; `None` for a run made in one part.
fn parts_text(info: &RunInfo) -> Option<String> {
    if info.parts.len() < 2 {
        return None;
    }
    let parts: Vec<String> = info
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let forced = if p.forced.is_empty() {
                String::new()
            } else {
                format!(
                    "; resumed with --force although {} differed",
                    p.forced.join("; ")
                )
            };
            format!(
                "part {} from {} for {}, {} measurements ({}){forced}",
                i + 1,
                p.started_at,
                human_duration(p.elapsed_s),
                p.measured,
                p.outcome
            )
        })
        .collect();
    Some(format!(
        "resumed: in {} parts; {}",
        info.parts.len(),
        parts.join("; ")
    ))
}

/// What the run's less common transports change, stated wherever they may
/// sit beside the stock ones: the tuned twins, and Connect's.
fn transport_notes(info: &RunInfo) -> Vec<String> {
    let mut notes = Vec::new();
    let vias = info.knobs.transports();
    if transports::TWINS
        .iter()
        .any(|(_, t)| vias.iter().any(|v| v == t))
    {
        // What differs between a tuned twin and its stock transport, stated
        // wherever both may sit side by side.
        notes.push(
            "`grpc-tuned`, `grpc-stream-tuned` and `h2c-proto-tuned` make the same calls as \
             `grpc`, `grpc-stream` and `h2c-proto`, to the same servers, on connections of the \
             `h2` crate the caller uses directly: no tonic `Channel` (no `Buffer` task) and no \
             hyper client task per call, and they advertise HTTP/2's largest frame size \
             (2^24 − 1 bytes, where the stock clients keep 16 KiB), so a large answer comes in \
             fewer DATA frames. The two gRPC ones also send their request as one DATA frame, \
             decode each answer from one `Bytes` rather than tonic's `BytesMut`, and send no \
             `user-agent` header. `grpc-bidi-tuned` is `grpc-bidi` with only that decoding \
             and the frame size changed: it keeps tonic's `Channel`. Windows are hyper's \
             defaults in all of them. The stock transports are what tonic and hyper give by \
             default."
                .to_owned(),
        );
    }
    if [transports::CONNECT_H1_PROTO, transports::CONNECT_H2C_PROTO]
        .iter()
        .any(|t| vias.iter().any(|v| v == t))
    {
        notes.push(
            "`connect-h1-proto` and `connect-h2c-proto` call `ListOrders` with the Connect \
             protocol: connect-rust's client POSTs a protobuf `ListOrdersRequest` to \
             order-service's REST port, where connect-rust's server answers from the same store. \
             They use the same connection pools as `h1-proto` and `h2c-proto`, and the answer's \
             bytes are the same. What differs is a POST with a body against a GET with a query \
             string, Connect's headers, and the protobuf runtime on both ends (buffa, not \
             prost). Neither end compresses."
                .to_owned(),
        );
    }
    notes
}

/// How busy the rest of the machine was: n/a for a target, else the
/// other processes' cores in the median round and at most.
fn other_load(info: &RunInfo, results: &Results) -> Option<String> {
    let others: Vec<f64> = results
        .records
        .iter()
        .filter_map(|r| Metric::OtherCores.of(&Measures::of(r)))
        .collect();
    if info.target.is_some() {
        Some(
            "n/a: the services of a target are not the lab's processes, so the rest of the \
             machine's load cannot be told from theirs"
                .into(),
        )
    } else {
        Spread::of(&others).map(|o| {
            format!(
                "processes other than the two services and the load generator used {:.2} cores in the median round (at most {:.2}); rounds at {} cores or more are flagged",
                o.median,
                o.max,
                BUSY_NEIGHBOUR_CORES
            )
        })
    }
}

/// What the run's services were told about compression.
fn compression(info: &RunInfo, results: &Results) -> String {
    if results
        .records
        .iter()
        .any(|r| r.cell.env.gzip || r.cell.env.zstd)
    {
        return "gzip in the cells marked \"gzip\" only (ORDER_REST_GZIP, ORDER_GRPC_GZIP and \
                USER_UPSTREAM_GZIP on), zstd in those marked \"zstd\" only (ORDER_REST_ZSTD, \
                ORDER_GRPC_ZSTD and USER_UPSTREAM_ZSTD on), on the REST and gRPC transports; \
                none in every other cell"
            .to_owned();
    }
    if info.service_env.is_empty() {
        return "not recorded (a run from before the services' environment was kept)".to_owned();
    }
    match info
        .service_env
        .get("order-service ORDER_GRPC_GZIP")
        .map(String::as_str)
    {
        Some("true") => "order-service gzip-compressed its gRPC answers for clients that accept \
                         gzip (ORDER_GRPC_GZIP=true)"
            .to_owned(),
        _ => "none on any transport: order-service's gRPC gzip off (ORDER_GRPC_GZIP unset), \
              user-service's clients offer no encoding, order-service's REST compresses nothing"
            .to_owned(),
    }
}

fn flags_section(data: &Data, results: &Results, skipped: &[Skipped]) -> Section {
    let mut s = Section::new("flags", "Flagged rounds and failures");
    let rows: Vec<Vec<Value>> = data
        .flags
        .iter()
        .flat_map(|(c, fl)| {
            fl.iter()
                .map(move |x| vec![Value::text(c.label()), Value::Flag { reason: x.clone() }])
        })
        .collect();
    if rows.is_empty() {
        s.para(format!("No round was flagged: the load generator stayed under {LOAD_SATURATED_CORES} core and every answer was a 200 over the transport asked for."));
    } else {
        let n = rows.len();
        s.table(Table {
            caption: "Flagged rounds".into(),
            headers: vec!["cell".into(), "flag".into()],
            rows,
            reading: format!(
                "{n} round flags. A load-generator flag means it used {LOAD_SATURATED_CORES} core or more, so that cell's rate may be partly its limit; a busy-machine flag means other programs took CPU during the run, so its absolute figures are lower and noisier (ratios between cells of the same round suffer less)."
            ),
        });
    }
    let failed: Vec<Vec<Value>> = data
        .failed
        .iter()
        .flat_map(|(c, rounds)| {
            rounds.iter().map(move |(round, why)| {
                vec![
                    Value::text(c.label()),
                    Value::text(round.to_string()),
                    Value::Flag {
                        reason: why.clone(),
                    },
                ]
            })
        })
        .collect();
    if failed.is_empty() {
        s.para(format!(
            "No round was failed by its answers: in every round at most {FAILED_BAD_SHARE_PCT}% \
             of the answers not shed were bad, and some were good."
        ));
    } else {
        let n = failed.len();
        s.table(Table {
            caption: "Rounds failed by their answers (left out of every figure)".into(),
            headers: vec!["cell".into(), "round".into(), "why".into()],
            rows: failed,
            reading: format!(
                "{n} rounds had more than {FAILED_BAD_SHARE_PCT}% bad answers (or no good one): \
                 their figures are left out of every median and ratio, which then rest on the \
                 other rounds, or show n/a."
            ),
        });
    }
    if !skipped.is_empty() {
        s.table(Table {
            caption: "Planned cells not measured on this machine".into(),
            headers: vec!["experiment".into(), "cell".into(), "why".into()],
            rows: skipped
                .iter()
                .map(|k| {
                    vec![
                        Value::text(k.experiment.clone()),
                        Value::text(k.what.clone()),
                        Value::text(k.why.clone()),
                    ]
                })
                .collect(),
            reading: format!(
                "{} cells were skipped before the run: their figures are n/a.",
                skipped.len()
            ),
        });
    }
    if results.failures.is_empty() {
        s.para("No round failed to run.");
    } else {
        s.table(Table {
            caption: "Failed rounds (no numbers)".into(),
            headers: vec![
                "experiment".into(),
                "what".into(),
                "round".into(),
                "error".into(),
            ],
            rows: results
                .failures
                .iter()
                .map(|f| {
                    vec![
                        Value::text(f.experiment.clone()),
                        Value::text(f.what.clone()),
                        Value::text(f.round.to_string()),
                        Value::Flag {
                            reason: f.error.clone(),
                        },
                    ]
                })
                .collect(),
            reading: "These cells show n/a where the failed rounds left no value; the services' and the load generator's output is in logs/.".into(),
        });
    }
    s
}

fn appendix(cx: &Context) -> Section {
    let mut s = Section::new("cells", "Every cell");
    s.para("Every measured cell with every figure (median ±half the min–max range). Raw rounds: `rounds/*.json`.");
    let mut closed = Vec::new();
    let mut open = Vec::new();
    for c in cx.data.cells.keys() {
        // k6's direct gRPC cells have no user-service figures to show here.
        if c.via == K6_GRPC_DIRECT {
            continue;
        }
        match c.load {
            Load::Closed { .. } => closed.push((c.label(), c.clone())),
            Load::Open { .. } => open.push((c.label(), c.clone())),
        }
    }
    if !closed.is_empty() {
        s.table(everything(cx, "Closed-loop cells", &closed));
    }
    if !open.is_empty() {
        s.table(everything(cx, "Open-loop cells", &open));
    }
    if closed.is_empty() && open.is_empty() {
        s.para("No load cell was measured in this run.");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tasters_report_says_what_it_measured_and_names_every_experiment_it_left_out() {
        let (info, results) = crate::synthetic::run(&[crate::experiments::TASTER], true, 2);
        assert!(info.knobs.taster && info.knobs.quick);
        let md = build_report(&info, &results).markdown();
        assert!(md.contains("**This is the taster**"), "{md}");
        let note = md
            .lines()
            .find(|l| l.contains("**This is the taster**"))
            .expect("the note");
        for e in crate::experiments::all() {
            let tasted = ["payload", "rtt"].contains(&e.name());
            assert!(
                note.contains(&format!(" {}", e.name())),
                "{} not named: {note}",
                e.name()
            );
            if !tasted {
                let left = note.split("It leaves out").nth(1).expect("the list");
                assert!(left.contains(e.name()), "{}: {note}", e.name());
            }
        }
        assert!(note.contains("19 of the lab's 21 experiments"), "{note}");
        // What it ran is read from its plans: the transports, the sizes and
        // the round trips.
        assert!(
            note.contains(
                "h1-json, h1-proto, grpc in payload (sizes [1, 1000]) and rtt (RTT [0, 20] ms"
            ),
            "{note}"
        );
        // Nor does it speak of transports it did not run.
        for other in ["grpc-tuned", "connect-h1-proto"] {
            assert!(!md.contains(other), "{other}");
        }
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        assert!(!build_report(&info, &results).markdown().contains("taster"));
    }

    #[test]
    fn the_report_states_how_the_tuned_twins_differ_only_when_the_run_has_them() {
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        // Each of the differences: the client's tasks, the frame size, the
        // decoding, the header.
        let said = |info: &RunInfo| {
            let md = build_report(info, &results).markdown();
            let every = [
                "no tonic `Channel` (no `Buffer` task)",
                "HTTP/2's largest frame size",
                "rather than tonic's `BytesMut`",
                "no `user-agent` header",
            ];
            let n = every.iter().filter(|d| md.contains(**d)).count();
            assert!(
                n == 0 || n == every.len(),
                "only {n} of the differences stated"
            );
            n > 0
        };
        assert!(said(&info), "every transport, the twins among them");
        let mut stock = info.clone();
        stock.knobs.transports = Some(vec!["grpc".into(), "h2c-proto".into()]);
        assert!(!said(&stock));
        stock.knobs.transports = Some(vec!["grpc".into(), "grpc-tuned".into()]);
        assert!(said(&stock));
        stock.knobs.transports = Some(vec!["grpc-bidi-tuned".into()]);
        assert!(said(&stock));
    }

    #[test]
    fn the_report_states_what_connect_changes_only_when_the_run_has_it() {
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        let said = |info: &RunInfo| {
            build_report(info, &results)
                .markdown()
                .contains("the protobuf runtime on both ends (buffa, not prost)")
        };
        assert!(said(&info), "every transport, Connect's among them");
        let mut some = info.clone();
        some.knobs.transports = Some(vec!["h1-proto".into(), "grpc".into()]);
        assert!(!said(&some));
        some.knobs.transports = Some(vec!["h1-proto".into(), "connect-h1-proto".into()]);
        assert!(said(&some));
    }
}
