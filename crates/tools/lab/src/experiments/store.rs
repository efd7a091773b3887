//! `store`: the payload grid at 1, 100 and 1,000 orders, with both services
//! in memory and on Postgres in the same run. Does the transport still
//! matter once a database is behind the hop, and what share of the hop does
//! the database take?

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::method;
use crate::measure::cell::{Cell, Env, Store};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f, MISSING};
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct StoreExperiment;

/// The transports of the quick plan: REST with JSON and protobuf on
/// HTTP/1.1, protobuf on h2c, gRPC, and the raw-TCP floor.
const QUICK: [&str; 5] = [
    transports::H1_JSON,
    transports::H1_PROTO,
    transports::H2C_PROTO,
    transports::GRPC,
    transports::TCP_PROTO,
];

/// The two stores, in table order.
const STORES: [Store; 2] = [Store::Memory, Store::Postgres];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorePlan {
    pub transports: Vec<String>,
    pub sizes: Vec<u32>,
    /// The run's own store is Postgres (`--database-url`).
    #[serde(default)]
    pub run_on_postgres: bool,
}

impl StorePlan {
    /// A transport at a size on a store. The cell on the run's own store
    /// asks for none, so that it is the payload grid's cell, measured once
    /// for both experiments; the other asks for its store.
    pub fn cell(&self, via: &str, orders: u32, store: Store) -> Cell {
        let run = if self.run_on_postgres {
            Store::Postgres
        } else {
            Store::Memory
        };
        Knobs::closed(via, orders).with_env(Env {
            store: (store != run).then_some(store),
            ..Env::default()
        })
    }

    pub fn cells(&self) -> Vec<Cell> {
        let mut v = Vec::new();
        for &orders in &self.sizes {
            for via in &self.transports {
                for store in STORES {
                    v.push(self.cell(via, orders, store));
                }
            }
        }
        v
    }
}

impl Experiment for StoreExperiment {
    type Plan = StorePlan;
    const NAME: &'static str = "store";
    const ABOUT: &'static str = "The database as an axis: transports × 1/100/1,000 orders, in memory and on Postgres in the same run";

    fn target() -> Result<(), &'static str> {
        Err(
            "it switches both services between memory and Postgres, which only the lab's own services can do",
        )
    }

    fn plan(knobs: &Knobs) -> StorePlan {
        let transports = match (&knobs.transports, knobs.quick) {
            (Some(t), _) => t.clone(),
            (None, true) => QUICK.iter().map(|s| (*s).to_owned()).collect(),
            (None, false) => knobs.transports(),
        };
        StorePlan {
            transports,
            sizes: knobs.sizes(&[1, 100, 1000], &[1, 100, 1000]),
            run_on_postgres: knobs.on_postgres,
        }
    }

    fn schedule(p: &StorePlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &StorePlan) -> String {
        format!(
            "{} transports, sizes {:?}, in memory and on Postgres",
            p.transports.len(),
            p.sizes
        )
    }

    fn section(p: &StorePlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &StorePlan, cx: &Context) -> Section {
    let mut s = Section::new(
        StoreExperiment::NAME,
        "The database as an axis: in memory and on Postgres",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs, user-service's pool {} connections per transport. Each \
             transport and size runs twice: with both services' data in memory, and on Postgres \
             (the run's `--database-url`, or without it the local server at 127.0.0.1:5432; the \
             databases `orders` and `users`, created when missing and seeded once). Nothing else \
             differs between the two cells of a pair. `×` is Postgres over memory",
            Knobs::VUS,
            Knobs::POOL
        ),
    ));
    for (m, caption) in [
        (Metric::Rate, "Throughput, req/s (higher is better)"),
        (
            Metric::UpP50,
            "Upstream p50, µs: user-service's round trip to order-service",
        ),
        (
            Metric::CpuServices,
            "CPU per request, µs: user-service + order-service (Postgres's own not included)",
        ),
    ] {
        let mut headers = vec!["transport".to_owned()];
        for &n in &p.sizes {
            headers.push(format!("{}, memory", f::orders(n)));
            headers.push(format!("{}, Postgres", f::orders(n)));
        }
        let rows = p
            .transports
            .iter()
            .map(|via| {
                let mut r = vec![Value::text(via.clone())];
                for &n in &p.sizes {
                    let mem = p.cell(via, n, Store::Memory);
                    r.push(cx.fig(&mem, m));
                    r.push(cx.fig_vs(&p.cell(via, n, Store::Postgres), &mem, m));
                }
                r
            })
            .collect();
        let reading = if m == Metric::Rate {
            ranking_reading(p, cx)
        } else {
            ratio_reading(p, cx, m)
        };
        s.table(Table {
            caption: caption.to_owned(),
            headers,
            rows,
            reading,
        });
    }
    s.table(postgres_cpu(p, cx));
    s.table(share_table(p, cx));
    s
}

/// On Postgres, the services' CPU per request beside the database server's
/// own (its processes on this machine).
fn postgres_cpu(p: &StorePlan, cx: &Context) -> Table {
    let mut headers = vec!["transport".to_owned()];
    for &n in &p.sizes {
        headers.push(format!("{}, services", f::orders(n)));
        headers.push(format!("{}, Postgres", f::orders(n)));
    }
    Table {
        caption: "CPU per request on Postgres, µs: both services, and the Postgres server's own processes (a local server only)".into(),
        headers,
        rows: p
            .transports
            .iter()
            .map(|via| {
                let mut r = vec![Value::text(via.clone())];
                for &n in &p.sizes {
                    let c = p.cell(via, n, Store::Postgres);
                    r.push(cx.fig(&c, Metric::CpuServices));
                    r.push(match cx.data.spread(&c, Metric::CpuPostgres) {
                        Some(s) => Value::range(Some(s), Metric::CpuPostgres.unit()),
                        None => Value::missing(
                            "not measured: Postgres is not on this machine, or the cell did not run",
                        ),
                    });
                }
                r
            })
            .collect(),
        reading: postgres_cpu_reading(p, cx),
    }
}

/// Per size, the transports with the lowest and highest `value`, put in
/// words by `say(size, lowest, highest)`; n/a at a size where no transport
/// has one. The sentence every range reading of this section is.
fn range_reading(
    p: &StorePlan,
    value: impl Fn(&str, u32) -> Option<f64>,
    say: impl Fn(u32, (&str, f64), (&str, f64)) -> String,
) -> String {
    let parts: Vec<String> = p
        .sizes
        .iter()
        .map(|&n| {
            let mut v: Vec<(&str, f64)> = p
                .transports
                .iter()
                .filter_map(|t| Some((t.as_str(), value(t, n)?)))
                .collect();
            v.sort_by(|a, b| a.1.total_cmp(&b.1));
            match (v.first(), v.last()) {
                (Some(&lo), Some(&hi)) => say(n, lo, hi),
                _ => format!("at {}: {MISSING} (no pair measured)", f::orders(n)),
            }
        })
        .collect();
    format!(
        "{}.",
        crate::experiments::tables::capitalise(&parts.join("; "))
    )
}

/// Per size, the range over the transports of Postgres's figure over
/// memory's (medians of the round-by-round ratios).
fn ratio_reading(p: &StorePlan, cx: &Context, m: Metric) -> String {
    range_reading(
        p,
        |t, n| {
            let r = cx.data.ratio(
                &p.cell(t, n, Store::Postgres),
                &p.cell(t, n, Store::Memory),
                m,
            )?;
            Some(r.median)
        },
        |n, lo, hi| {
            format!(
                "at {} on Postgres ×{} ({}) to ×{} ({}) of memory's",
                f::orders(n),
                f::num(lo.1),
                lo.0,
                f::num(hi.1),
                hi.0
            )
        },
    )
}

/// Per size, the Postgres server's CPU as a share of all the CPU a
/// request cost (services and server), over the transports.
fn postgres_cpu_reading(p: &StorePlan, cx: &Context) -> String {
    let parts: Vec<String> = p
        .sizes
        .iter()
        .filter_map(|&n| {
            let mut v: Vec<f64> = p
                .transports
                .iter()
                .filter_map(|t| {
                    let c = p.cell(t, n, Store::Postgres);
                    let db = cx.data.median(&c, Metric::CpuPostgres)?;
                    let svc = cx.data.median(&c, Metric::CpuServices)?;
                    (db + svc > 0.0).then(|| db / (db + svc) * 100.0)
                })
                .collect();
            v.sort_by(f64::total_cmp);
            Some(format!(
                "at {} the server's own CPU is {}–{}% of a request's",
                f::orders(n),
                f::num(*v.first()?),
                f::num(*v.last()?)
            ))
        })
        .collect();
    if parts.is_empty() {
        return format!(
            "{MISSING}: no cell on Postgres has the server's CPU (it is counted only for a server on this machine, and only in cells that ran)."
        );
    }
    format!(
        "{}.",
        crate::experiments::tables::capitalise(&parts.join("; "))
    )
}

/// The database's share of the hop: what Postgres adds to the upstream
/// median, as a share of the upstream median on Postgres.
fn share(p: &StorePlan, cx: &Context, via: &str, orders: u32) -> Option<f64> {
    let mem = cx
        .data
        .median(&p.cell(via, orders, Store::Memory), Metric::UpP50)?;
    let pg = cx
        .data
        .median(&p.cell(via, orders, Store::Postgres), Metric::UpP50)?;
    (pg > 0.0).then(|| (pg - mem) / pg * 100.0)
}

fn share_table(p: &StorePlan, cx: &Context) -> Table {
    let mut headers = vec!["transport".to_owned()];
    headers.extend(p.sizes.iter().map(|&n| f::orders(n)));
    Table {
        caption: "The database's share of the hop, %: (upstream p50 on Postgres − in memory) / on Postgres".into(),
        headers,
        rows: p
            .transports
            .iter()
            .map(|via| {
                let mut r = vec![Value::text(via.clone())];
                for &n in &p.sizes {
                    r.push(match share(p, cx, via, n) {
                        Some(x) => Value::text(format!("{}%", f::num(x))),
                        None => Value::missing("no upstream p50 in one of the two cells"),
                    });
                }
                r
            })
            .collect(),
        reading: share_reading(p, cx),
    }
}

/// Per size, the range of the database's share over the transports.
fn share_reading(p: &StorePlan, cx: &Context) -> String {
    range_reading(
        p,
        |t, n| share(p, cx, t, n),
        |n, lo, hi| {
            format!(
                "at {} the database is {}% ({}) to {}% ({}) of the upstream median",
                f::orders(n),
                f::num(lo.1),
                lo.0,
                f::num(hi.1),
                hi.0
            )
        },
    )
}

/// The transports by throughput, best first, at one size on one store.
fn ranking(p: &StorePlan, cx: &Context, orders: u32, store: Store) -> Vec<String> {
    let mut v: Vec<(&String, f64)> = p
        .transports
        .iter()
        .filter_map(|t| Some((t, cx.data.median(&p.cell(t, orders, store), Metric::Rate)?)))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.into_iter().map(|(t, _)| t.clone()).collect()
}

/// Per size, whether the ranking by throughput is the same on both stores,
/// and how far apart the best and worst transport are on each. A pair that
/// swaps places is named with its ratio on Postgres; when that ratio's
/// rerun interval holds 1, the swap is a tie within this run's noise.
fn ranking_reading(p: &StorePlan, cx: &Context) -> String {
    let parts: Vec<String> = p
        .sizes
        .iter()
        .map(|&n| {
            let mem = ranking(p, cx, n, Store::Memory);
            let pg = ranking(p, cx, n, Store::Postgres);
            if mem.len() < 2 || pg.len() < 2 {
                return format!("at {}: {MISSING} (too few cells to rank)", f::orders(n));
            }
            let rate = |t: &String, store: Store| {
                cx.data
                    .median(&p.cell(t, n, store), Metric::Rate)
                    .unwrap_or(f64::NAN)
            };
            let spread = |order: &[String], store: Store| {
                rate(&order[0], store) / rate(&order[order.len() - 1], store)
            };
            let place = |order: &[String], t: &String| order.iter().position(|x| x == t);
            let mut swaps = Vec::new();
            let (mut real, mut ties) = (0, 0);
            for (i, a) in mem.iter().enumerate() {
                for b in &mem[i + 1..] {
                    // a ahead of b in memory; behind it on Postgres?
                    let (Some(pa), Some(pb)) = (place(&pg, a), place(&pg, b)) else {
                        continue;
                    };
                    if pb > pa {
                        continue;
                    }
                    let r = cx.data.ratio(
                        &p.cell(b, n, Store::Postgres),
                        &p.cell(a, n, Store::Postgres),
                        Metric::Rate,
                    );
                    let tie = r.is_none_or(|r| r.min <= 1.0);
                    if tie {
                        ties += 1;
                    } else {
                        real += 1;
                    }
                    swaps.push(format!(
                        "{b} passes {a} (×{}{})",
                        r.map_or(MISSING.to_owned(), |r| format!(
                            "{}, interval {}–{}",
                            f::num(r.median),
                            f::num(r.min),
                            f::num(r.max)
                        )),
                        if tie { ", a tie within noise" } else { "" }
                    ));
                }
            }
            let order = if swaps.is_empty() {
                format!("the same ranking on both stores ({})", mem.join(" > "))
            } else {
                format!(
                    "on Postgres {} of the pairs swap places, {real} beyond this run's noise and \
                     {ties} within it: {}",
                    swaps.len(),
                    swaps.join(", ")
                )
            };
            format!(
                "at {}: {order}; best over worst ×{} in memory, ×{} on Postgres",
                f::orders(n),
                f::num(spread(&mem, Store::Memory)),
                f::num(spread(&pg, Store::Postgres))
            )
        })
        .collect();
    format!(
        "{}.",
        crate::experiments::tables::capitalise(&parts.join("; "))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_plan_pairs_every_cell_across_the_two_stores() {
        let p = StoreExperiment::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        });
        assert_eq!(p.sizes, vec![1, 100, 1000]);
        assert_eq!(p.transports.len(), QUICK.len());
        let cells = p.cells();
        assert_eq!(cells.len(), QUICK.len() * 3 * 2);
        let pg = cells
            .iter()
            .filter(|c| c.env.store == Some(Store::Postgres))
            .count();
        assert_eq!(pg * 2, cells.len());
        // The memory cells are the payload grid's, measured once for both.
        let payload = crate::experiments::payload::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        })
        .cells();
        let shared = cells.iter().filter(|c| payload.contains(c)).count();
        assert_eq!(shared, QUICK.len() * 2, "1 and 1,000 orders in memory");
        // On a run whose store is Postgres, the Postgres cells are the
        // shared ones and memory is asked for.
        let on_pg = StoreExperiment::plan(&Knobs {
            quick: true,
            on_postgres: true,
            ..Knobs::default()
        });
        let c = on_pg.cell("grpc", 1, Store::Postgres);
        assert_eq!(c, Knobs::closed("grpc", 1));
        assert_eq!(
            on_pg.cell("grpc", 1, Store::Memory).env.store,
            Some(Store::Memory)
        );
        // --transports replaces the quick subset.
        let named = StoreExperiment::plan(&Knobs {
            quick: true,
            transports: Some(vec!["grpc-bidi".into()]),
            ..Knobs::default()
        });
        assert_eq!(named.transports, vec!["grpc-bidi".to_owned()]);
    }

    #[test]
    fn without_postgres_its_cells_are_skipped_and_the_memory_ones_kept() {
        let p = StoreExperiment::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        });
        let cells: Vec<(String, Cell)> = p
            .cells()
            .into_iter()
            .map(|c| (StoreExperiment::NAME.to_owned(), c))
            .chain(std::iter::once((
                "payload".to_owned(),
                Knobs::closed("grpc", 1),
            )))
            .collect();
        let n = cells.len();
        let why = "Postgres at 127.0.0.1:5432 cannot be used (nothing answers)";
        let (keep, skipped) = crate::session::without_postgres(cells, why);
        // The memory cells stay: they are the payload grid's too.
        assert_eq!(keep.len() + skipped.len(), n);
        assert!(keep.iter().all(|(_, c)| c.env.store.is_none()));
        assert!(keep.iter().any(|(e, _)| e == "payload"));
        assert_eq!(skipped.len(), p.cells().len() / 2);
        for k in &skipped {
            assert!(k.what.contains("on Postgres"), "{}", k.what);
            assert_eq!(k.why, why);
        }
    }

    #[test]
    fn the_database_share_and_the_ranking_are_read_from_the_figures() {
        let (info, results) = crate::synthetic::run(&[StoreExperiment::NAME], true, 2);
        let report = crate::session::build_report(&info, &results);
        let empty = report.empty_cells();
        assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
        let s = report
            .sections
            .iter()
            .find(|s| s.id == StoreExperiment::NAME)
            .expect("a store section");
        let p = StoreExperiment::plan(&info.knobs);
        let t: Vec<&Table> = s.tables().collect();
        let share = t
            .iter()
            .find(|t| t.caption.starts_with("The database's share"))
            .expect("the share table");
        // The oracle: the upstream medians of the synthetic rounds.
        let data = crate::analysis::Data::new(&results);
        for (row, via) in share.rows.iter().zip(&p.transports) {
            for (k, &n) in p.sizes.iter().enumerate() {
                let m = data
                    .median(&p.cell(via, n, Store::Memory), Metric::UpP50)
                    .unwrap();
                let g = data
                    .median(&p.cell(via, n, Store::Postgres), Metric::UpP50)
                    .unwrap();
                let want = format!("{}%", f::num((g - m) / g * 100.0));
                assert_eq!(row[k + 1].label(), want, "{via} at {n}");
            }
        }
        assert!(
            share.reading.starts_with("At 1 order the database is "),
            "{}",
            share.reading
        );
        let up = t
            .iter()
            .find(|t| t.caption.starts_with("Upstream p50"))
            .unwrap();
        assert!(
            up.reading.starts_with("At 1 order on Postgres ×"),
            "{}",
            up.reading
        );
        let rate = t
            .iter()
            .find(|t| t.caption.starts_with("Throughput"))
            .unwrap();
        // The synthetic database adds the same time to every transport, so
        // no transport passes another.
        assert!(
            rate.reading.contains("the same ranking on both stores"),
            "{}",
            rate.reading
        );
        let cpu = t
            .iter()
            .find(|t| t.caption.starts_with("CPU per request on Postgres"))
            .unwrap();
        assert_eq!(cpu.headers.len(), 1 + 2 * p.sizes.len());
    }
}
