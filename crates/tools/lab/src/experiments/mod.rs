//! The experiments, one file each, each an [`Experiment`](crate::experiment::Experiment)
//! listed once in the `registry!` below: that line declares its module and
//! puts it in [`all`], in report order. `lab list`, `lab run`'s experiment
//! names and `all` come from this list.
//!
//! Cells are shared: a cell two experiments need is measured once (the
//! payload grid also feeds the factorial, the floor, the schema and the tls
//! tables), which keeps `all --quick` to about an hour and a quarter (the plan
//! prints its own estimate before it starts).
//! [`tables`] holds what several sections build their tables with, and
//! [`spectrum`] the percentile spectrum of user-service's HDR histograms.

use crate::experiment::{Entry, Knobs, entry};

pub mod spectrum;
pub mod tables;

/// Declares each experiment's module and lists it in [`all`].
macro_rules! registry {
    ($($module:ident :: $experiment:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every experiment, in report order.
        pub fn all() -> Vec<&'static dyn Entry> {
            vec![$(entry::<$module::$experiment>()),*]
        }
    };
}

registry! {
    payload::Payload,
    store::StoreExperiment,
    factorial::Factorial,
    floor::Floor,
    wire_size::WireSize,
    schema::Schema,
    streaming::Streaming,
    naive::Naive,
    pool::Pool,
    open_loop::OpenLoop,
    rtt::Rtt,
    loss::Loss,
    pitfall::Pitfall,
    tls::Tls,
    compression::Compression,
    codec::Codec,
    hop::Hop,
    breakdown::Breakdown,
    replicas::Replicas,
    faults::Faults,
    generator::GeneratorExperiment,
}

/// The name that stands for every experiment.
pub const ALL: &str = "all";

/// The name of the taster: the headline question answered in a few
/// minutes, from a few cells of [`TASTED`] (each experiment's plan reads
/// [`Knobs::taster`](crate::experiment::Knobs::taster)).
pub const TASTER: &str = "taster";

/// The knobs of `lab run NAME [--quick]` without other options: the
/// taster is itself quick.
pub fn knobs(name: &str, quick: bool) -> Knobs {
    let taster = name == TASTER;
    Knobs {
        quick: quick || taster,
        taster,
        ..Knobs::default()
    }
}

/// The experiments the taster runs.
pub const TASTED: [&str; 2] = ["payload", "rtt"];

/// What the taster says when it is asked about itself.
pub const TASTER_ABOUT: &str = "The headline question in a few minutes: REST JSON, REST protobuf and gRPC at 1 and 1,000 orders, and at a 20 ms round trip (a few cells of payload and rtt, quick timing)";

/// The experiment of this name.
pub fn find(name: &str) -> Option<&'static dyn Entry> {
    all().into_iter().find(|e| e.name() == name)
}

/// The experiments a `lab run` name stands for, in report order: one, or
/// every one for `all`.
pub fn expand(name: &str) -> anyhow::Result<Vec<&'static dyn Entry>> {
    if name == ALL {
        return Ok(all());
    }
    if name == TASTER {
        return Ok(all()
            .into_iter()
            .filter(|e| TASTED.contains(&e.name()))
            .collect());
    }
    find(name).map(|e| vec![e]).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown experiment {name:?}; the experiments are: {}, {ALL}, {TASTER}",
            all()
                .iter()
                .map(|e| e.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_is_listed_once_under_its_own_name() {
        let names: Vec<&str> = all().iter().map(|e| e.name()).collect();
        let once: std::collections::BTreeSet<&&str> = names.iter().collect();
        assert_eq!(once.len(), names.len(), "{names:?}");
        assert!(!names.contains(&ALL));
        for e in all() {
            assert!(!e.about().is_empty(), "{}", e.name());
            assert_eq!(find(e.name()).map(|f| f.name()), Some(e.name()));
        }
        assert_eq!(expand(ALL).expect("all").len(), names.len());
        let err = expand("vibes").unwrap_err().to_string();
        assert!(err.contains("payload") && err.contains(ALL), "{err}");
    }

    #[test]
    fn the_taster_measures_three_transports_at_two_sizes_and_one_round_trip() {
        use crate::experiment::Knobs;
        use crate::measure::schedule::Schedule;
        let names: Vec<&str> = expand(TASTER)
            .expect("taster")
            .iter()
            .map(|e| e.name())
            .collect();
        assert_eq!(names, ["payload", "rtt"]);
        assert_eq!(TASTED, ["payload", "rtt"]);
        let knobs = knobs(TASTER, false);
        assert!(knobs.quick && knobs.taster, "the taster is quick");
        let mut cells = Vec::new();
        for e in expand(TASTER).expect("taster") {
            let plan = e.plan(&knobs).expect("a plan");
            match e.schedule(&plan).expect("a schedule") {
                Schedule::Grid(g) => cells.extend(g),
                other => panic!("{}: {}", e.name(), other.describe()),
            }
        }
        let seen: std::collections::BTreeSet<(String, u32, Option<u32>)> = cells
            .iter()
            .map(|c| (c.via.clone(), c.orders, c.env.path.map(|p| p.rtt_ms)))
            .collect();
        let mut want = std::collections::BTreeSet::new();
        for via in ["h1-json", "h1-proto", "grpc"] {
            for orders in [1, 1000] {
                want.insert((via.to_owned(), orders, None));
            }
            for rtt in [0, 20] {
                want.insert((via.to_owned(), 1, Some(rtt)));
            }
        }
        assert_eq!(seen, want);
        assert_eq!(cells.len(), 12);
        // Without the taster's knob the same experiments plan their own grids.
        let quick = Knobs {
            quick: true,
            ..Knobs::default()
        };
        let payload = find("payload").expect("payload");
        let plan = payload.plan(&quick).expect("a plan");
        // Every transport at two sizes.
        let described = payload.schedule(&plan).expect("a schedule").describe();
        assert!(
            described.starts_with(&format!("{} cells", 2 * transports::COUNT)),
            "{described}"
        );
    }

    #[test]
    fn every_plan_reads_back_and_schedules() {
        use crate::experiment::Knobs;
        for quick in [true, false] {
            let knobs = Knobs {
                quick,
                ..Knobs::default()
            };
            for e in all() {
                let plan = e.plan(&knobs).expect("a plan");
                let text = serde_json::to_string(&plan).expect("serialises");
                let back: serde_json::Value = serde_json::from_str(&text).expect("parses");
                let s = e.schedule(&back).expect("a schedule");
                assert!(
                    !s.describe().is_empty() && e.describe(&back).is_ok(),
                    "{}",
                    e.name()
                );
            }
        }
    }
}
