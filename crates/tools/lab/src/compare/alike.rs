//! Whether two runs measured alike: what differs in the runs' descriptions
//! (warned about), what differs for every cell (the timing, the store: the
//! runs are not like with like), and which experiments were planned with
//! different settings (left out) or only with different cells (compared on
//! the cells both measured).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize as _;

use crate::session::RunInfo;

/// Where two runs differ in what a comparison assumes is the same but does
/// not change how a cell is measured: the machine, the versions, the
/// commit, the environment; and the experiments one run has and the other
/// lacks. (The timing, the store and the plans are [`Alike`]'s.)
fn warnings(a: &RunInfo, b: &RunInfo) -> Vec<String> {
    let mut out = Vec::new();
    let (ma, mb) = (&a.machine, &b.machine);
    let machine = |m: &crate::measure::machine::Machine| {
        format!(
            "{} cores, {}, {:.1} GiB, Linux {}",
            m.cores, m.cpu_model, m.memory_gib, m.kernel
        )
    };
    if machine(ma) != machine(mb) {
        out.push(format!(
            "different machines: A {}; B {}",
            machine(ma),
            machine(mb)
        ));
    }
    if (&ma.rustc, &ma.k6) != (&mb.rustc, &mb.k6) {
        out.push(format!(
            "different versions: A {}, {}; B {}, {}",
            ma.rustc, ma.k6, mb.rustc, mb.k6
        ));
    }
    if ma.git_commit != mb.git_commit {
        out.push(format!(
            "different commits: A {}, B {}",
            ma.git_commit, mb.git_commit
        ));
    }
    for (name, m) in [("A", ma), ("B", mb)] {
        if m.git_dirty {
            out.push(format!("{name} ran with uncommitted changes"));
        }
    }
    if a.pinning != b.pinning {
        out.push("different CPU pinning".to_owned());
    }
    if a.knobs.path != b.knobs.path {
        out.push(format!(
            "different network emulation: A {}, B {} (a different environment for rtt, compression and tls)",
            a.knobs.path.name(),
            b.knobs.path.name()
        ));
    }
    // The congestion control each kernel reported on the packet path, else
    // the one the run asked for.
    let cc = |i: &RunInfo| {
        let seen: std::collections::BTreeSet<&String> = i
            .service_env
            .iter()
            .filter(|(k, _)| k.starts_with("path ") && k.ends_with(" tcp_congestion_control"))
            .map(|(_, v)| v)
            .collect();
        if seen.is_empty() {
            i.knobs.cc.name().to_owned()
        } else {
            seen.into_iter().cloned().collect::<Vec<_>>().join("+")
        }
    };
    if cc(a) != cc(b) {
        out.push(format!(
            "different TCP congestion control on the packet path: A {}, B {} (a different environment: its cells compare only under the same algorithm)",
            cc(a),
            cc(b)
        ));
    }
    for name in a.plans.keys().filter(|n| !b.plans.contains_key(*n)) {
        out.push(format!("{name} is in A only"));
    }
    for name in b.plans.keys().filter(|n| !a.plans.contains_key(*n)) {
        out.push(format!("{name} is in B only"));
    }
    out
}

/// How two runs' measurements line up, from their descriptions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Alike {
    /// Where the runs differ without changing how a cell is measured (the
    /// machine, the commit, the environment, experiments in one run only):
    /// warned about.
    pub warnings: Vec<String>,
    /// What differs for every cell (the timing, the store): no interval of
    /// one run describes the other's medians.
    pub run_wide: Vec<String>,
    /// Sections whose experiments were planned with a different setting
    /// (callers, pool, quick, path...), each with the settings: their cells
    /// were measured another way, so they are left out.
    pub apart: BTreeMap<String, String>,
    /// Sections whose plans differ only in which cells they hold (which
    /// transports, sizes, rates...), each with the lists: compared on the
    /// cells both runs measured.
    pub narrowed: BTreeMap<String, String>,
}

/// [`Alike`] for two `run.json` values (as `report.json` holds them).
/// Without both descriptions nothing can be checked: a warning says so, and
/// everything is compared.
pub fn alike(a: &serde_json::Value, b: &serde_json::Value) -> Alike {
    let (Ok(a), Ok(b)) = (RunInfo::deserialize(a), RunInfo::deserialize(b)) else {
        return Alike {
            warnings: vec![
                "a report.json lacks its run's description: machines, commits and plans unchecked"
                    .into(),
            ],
            ..Alike::default()
        };
    };
    let mut out = Alike {
        warnings: warnings(&a, &b),
        ..Alike::default()
    };
    if a.timing != b.timing {
        out.run_wide.push(format!(
            "the runs were timed differently: A {}, B {}",
            timing(&a),
            timing(&b)
        ));
    }
    if a.store != b.store {
        out.run_wide.push(format!(
            "the runs used different stores: A {}, B {}",
            a.store, b.store
        ));
    }
    for (name, pa) in &a.plans {
        let Some(pb) = b.plans.get(name) else {
            continue;
        };
        if pa == pb {
            continue;
        }
        let (settings, lists) = plan_differences(pa, pb);
        if !settings.is_empty() {
            out.apart.insert(name.clone(), settings.join("; "));
        } else if !lists.is_empty() {
            out.narrowed.insert(name.clone(), lists.join(", "));
        }
    }
    out
}

fn timing(i: &RunInfo) -> String {
    let t = &i.timing;
    format!(
        "{} rounds × {} s after {} s of warm-up{}",
        t.rounds,
        t.duration_s,
        t.warmup_s,
        if t.restarted {
            ""
        } else {
            ", services not restarted"
        }
    )
}

/// Where two plans of one experiment differ: the settings (any value that
/// is not a list of cells), each as `name: A …, B …`, and the names of the
/// lists of cells (transports, sizes…) that differ.
fn plan_differences(a: &serde_json::Value, b: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    use serde_json::Value as J;
    let (J::Object(a), J::Object(b)) = (a, b) else {
        return (vec![format!("the plan: A {a}, B {b}")], Vec::new());
    };
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let (mut settings, mut lists) = (Vec::new(), Vec::new());
    let absent = J::Null;
    for k in keys {
        let (x, y) = (a.get(k).unwrap_or(&absent), b.get(k).unwrap_or(&absent));
        if x == y {
            continue;
        }
        let cells = |v: &J| match v {
            J::Array(items) => items.iter().all(|i| !i.is_object() && !i.is_array()),
            _ => false,
        };
        if cells(x) && cells(y) {
            lists.push(k.clone());
        } else {
            settings.push(format!("{k}: A {x}, B {y}"));
        }
    }
    (settings, lists)
}
