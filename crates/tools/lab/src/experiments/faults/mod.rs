//! The `faults` experiment: what each transport does when the other side
//! fails, under steady load. One fault per cell, [`Fault::ONSET_S`] into
//! the measured run: a replica killed among three (balanced by
//! user-service, or behind HAProxy L4 or L7) and started again 5 s later;
//! order-service restarted gracefully; the path between the services
//! silent for 2 s and 10 s (a packet path, or with `--path proxy` the delay
//! proxy holding every byte); every connection reset at once; Postgres
//! restarted under order-service (a server of the lab's own).
//!
//! Each cell is read from both sides: the load generator counts how every
//! call ended (by the status user-service gave, and the calls slower than
//! 1 s); user-service's counters, sampled every 100 ms through the run
//! ([`crate::measure::runner::fault`]), give the timeline the recovery is
//! read from; order-service's own count of lookups it answered is set
//! against what user-service got, when the process that counted them
//! lived through the fault. [`figures`] holds what each round yields.

pub mod figures;
mod plan;
mod section;

pub use plan::{Case, DOWN_MS, FAMILIES, FaultsPlan, not_measured};

use crate::experiment::{Context, Experiment, Knobs};
use crate::measure::cell::{Balance, Fault};
use crate::measure::schedule::Schedule;
use crate::report::Section;

pub struct Faults;

impl Experiment for Faults {
    type Plan = FaultsPlan;
    const NAME: &'static str = "faults";
    const ABOUT: &'static str = "What each transport does when the other side fails under load: a replica killed, a restart, a silent path, every connection reset, Postgres restarted; failed calls, slow calls, recovery, counted on both sides";

    fn target() -> Result<(), &'static str> {
        Err("it kills, restarts and cuts off the services it started")
    }

    fn plan(knobs: &Knobs) -> FaultsPlan {
        let vias = knobs
            .transports
            .clone()
            .unwrap_or_else(|| FAMILIES.iter().map(|s| (*s).to_owned()).collect());
        let mut cases: Vec<Case> = [Balance::Client, Balance::L4, Balance::L7]
            .into_iter()
            .map(|b| Case {
                fault: Fault::Kill { down_ms: DOWN_MS },
                balance: Some(b),
            })
            .collect();
        // The 10 s silence outlasts the calls' 5 s timeout; the 2 s one
        // (full plan) does not.
        let silences: &[u32] = if knobs.quick {
            &[10_000]
        } else {
            &[2_000, 10_000]
        };
        let singles = [Fault::Restart]
            .into_iter()
            .chain(silences.iter().map(|&ms| Fault::Silence { ms }))
            .chain([Fault::Reset, Fault::PostgresRestart]);
        for fault in singles {
            cases.push(Case {
                fault,
                balance: None,
            });
        }
        let recommended = cases
            .iter()
            .filter(|c| c.recommended_acts())
            .filter(|c| {
                !knobs.quick
                    || matches!(c.fault, Fault::Silence { .. })
                    || c.balance == Some(Balance::Client)
            })
            .copied()
            .collect();
        FaultsPlan {
            vias,
            orders: knobs.sizes(&[1], &[1, 100]),
            cases,
            vus: 16,
            pool: 16,
            think_ms: 1,
            path_rtt_ms: 2,
            cc: knobs.cc,
            path: knobs.path,
            recommended,
        }
    }

    fn schedule(p: &FaultsPlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &FaultsPlan) -> String {
        format!(
            "{} faults; {} callers {} ms apart; orders {:?}; defaults, and the recommended settings in {} of them",
            p.cases.len(),
            p.vus,
            p.think_ms,
            p.orders,
            p.recommended.len()
        )
    }

    fn section(p: &FaultsPlan, cx: &Context) -> Section {
        section::section(p, cx)
    }
}

#[cfg(test)]
mod tests;
