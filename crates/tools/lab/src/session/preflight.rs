//! Everything checked and prepared before the first round, so that a run
//! fails early or not at all: the options ([`validate`]), a target and the
//! experiments that cannot run against one, the project's root, the
//! services' binaries, Postgres for the cells that ask for it, HAProxy for
//! the balanced cells, `taskset` for `--pin`. Cells this machine cannot
//! measure (no HAProxy, no Postgres) are taken out and listed as skipped.

use std::path::Path;

use anyhow::{Context as _, bail};

use super::info::{RunOptions, Skipped};
use crate::experiment::Entry;
use crate::experiments;
use crate::measure::cell::{Balance, Cell, Store};
use crate::measure::load::Generator;
use crate::measure::schedule::Needs;
use crate::measure::services::{self, Binaries, Databases, Target};

/// Refuses options that contradict each other or that no run can use.
pub fn validate(opts: &RunOptions) -> anyhow::Result<()> {
    if opts.resume.is_some() {
        for (given, flag) in [
            (opts.experiment.is_some(), "an experiment"),
            (opts.quick, "--quick"),
            (opts.rounds.is_some(), "--rounds"),
            (opts.duration_s.is_some(), "--duration"),
            (opts.warmup_s.is_some(), "--warmup"),
            (opts.transports.is_some(), "--transports"),
            (opts.sizes.is_some(), "--sizes"),
            (opts.target.is_some(), "--target"),
            (opts.out.is_some(), "--out"),
        ] {
            if given {
                bail!("--resume continues a run with its own plan: {flag} cannot be given with it");
            }
        }
    } else if opts.force {
        bail!("--force only applies to --resume");
    }
    if let Some(ts) = &opts.transports {
        for t in ts {
            if !transports::is_known(t) {
                bail!(
                    "unknown transport {t:?}; valid transports are: {}",
                    transports::ALL.join(", ")
                );
            }
        }
        if ts.is_empty() {
            bail!("--transports needs at least one transport");
        }
    }
    if let Some(sizes) = &opts.sizes
        && (sizes.is_empty() || sizes.iter().any(|&s| s > 10_000))
    {
        bail!("--sizes takes orders per call from 0 to 10000");
    }
    if opts.rounds == Some(0) {
        bail!("--rounds must be at least 1");
    }
    // k6 refuses scenarios shorter than a second.
    if opts.duration_s.is_some_and(|d| d < 1.0) {
        bail!("--duration must be at least 1 s (k6's shortest scenario)");
    }
    if opts.warmup_s.is_some_and(|w| w != 0.0 && w < 1.0) {
        bail!("--warmup must be 0 (none) or at least 1 s (k6's shortest scenario)");
    }
    // With a target, --bin-dir still gives the load engine.
    if opts.target.is_some() {
        for (given, flag) in [
            (opts.database_url.is_some(), "--database-url"),
            (opts.pin, "--pin"),
        ] {
            if given {
                bail!(
                    "--target measures a stack the lab does not start: {flag} has nothing to act on"
                );
            }
        }
    }
    Ok(())
}

/// Checks a target (`--target`) answers, and that every experiment of the
/// run can be measured against a stack the lab did not start.
pub fn check_target(t: &Target, entries: &[&'static dyn Entry]) -> anyhow::Result<()> {
    t.check().context("--target")?;
    for e in entries {
        if let Err(why) = e.target() {
            bail!(
                "{} cannot run against a stack it did not start (--target): {why}; the experiments that can are {}",
                e.name(),
                experiments::all()
                    .iter()
                    .filter(|e| e.target().is_ok())
                    .map(|e| e.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    for e in entries {
        if e.calls_order_service() && (t.order_rest.is_none() || t.order_grpc.is_none()) {
            bail!(
                "{} calls order-service directly: give its addresses with --target-order-rest and --target-order-grpc",
                e.name()
            );
        }
    }
    Ok(())
}

/// Checks `root` is the project's root, where the k6 scripts are.
pub fn check_root(root: &Path) -> anyhow::Result<()> {
    if !root.join("k6").join("closed-loop.js").is_file() {
        bail!(
            "{} is not the project's root (no k6/closed-loop.js); run the lab from the workspace or pass --root",
            root.display()
        );
    }
    Ok(())
}

/// The services' binaries: none for a target, those of `--bin-dir`, or a
/// release build; each must exist.
pub fn binaries(opts: &RunOptions, root: &Path) -> anyhow::Result<Binaries> {
    let bins = match (&opts.target, &opts.bin_dir) {
        (_, Some(d)) => Binaries::in_dir(d),
        // The target's services are not started: only the engine is built
        // (when the run uses it).
        (Some(_), None) if opts.load != Generator::Loadgen => Binaries::in_dir(Path::new("")),
        (Some(_), None) => services::build(root, true)?,
        (None, None) => services::build(root, false)?,
    };
    if opts.target.is_none() {
        for b in [&bins.order, &bins.user] {
            if !b.is_file() {
                bail!("{} is missing", b.display());
            }
        }
    }
    Ok(bins)
}

/// The databases of cells that ask for Postgres whatever the run's store:
/// on the run's server, or the local default, if it answers (seeded once).
/// When it does not, `None` and why, and those cells are skipped.
pub fn store_databases(
    opts: &RunOptions,
    bins: &Binaries,
    needs: Needs,
) -> (Option<Databases>, Option<String>) {
    if !needs.postgres || opts.target.is_some() {
        return (None, None);
    }
    let url = opts
        .database_url
        .clone()
        .unwrap_or_else(|| services::DEFAULT_DATABASE_URL.to_owned());
    let found = services::reachable(&url)
        .and_then(|()| Databases::from_server_url(&url))
        .and_then(|db| services::seed_into(bins, &db).map(|()| db));
    match found {
        Ok(db) => {
            println!(
                "postgres: cells on Postgres use {}",
                services::authority(&url)
            );
            (Some(db), None)
        }
        Err(e) => {
            let why = format!(
                "Postgres at {} cannot be used ({e:#}); start it, or pass --database-url",
                services::authority(&url)
            );
            println!(
                "postgres: {why}; the cells on Postgres are skipped, and listed in the report"
            );
            (None, Some(why))
        }
    }
}

/// Whether the run needs HAProxy and this machine has none (said, with how
/// to install it: the balanced cells are then skipped).
pub fn haproxy_missing(needs: Needs) -> bool {
    needs.haproxy
        && match haproxy::binary() {
            Some(h) => {
                println!("haproxy: {}", h.display());
                false
            }
            None => {
                println!(
                    "haproxy: {}; the cells behind an L4 or L7 balancer are skipped, and listed in the report",
                    haproxy::INSTALL_HINT
                );
                true
            }
        }
}

/// `--pin` needs `taskset`.
pub fn check_taskset(pin: bool) -> anyhow::Result<()> {
    if pin
        && std::process::Command::new("taskset")
            .arg("-V")
            .output()
            .is_err()
    {
        bail!("--pin needs taskset (util-linux)");
    }
    Ok(())
}

/// The store as the report names it, with no password.
pub fn store_label(url: Option<&str>) -> String {
    match url {
        None => "in memory (no database: the protocol-overhead upper bound)".to_owned(),
        Some(u) => format!("Postgres at {}", services::authority(u)),
    }
}

/// The cells that need HAProxy taken out of `cells`, each as skipped with
/// the way to install it.
pub fn without_haproxy(cells: Vec<(String, Cell)>) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    let behind = |c: &Cell| {
        c.env
            .replicas
            .is_some_and(|r| matches!(r.balance, Balance::L4 | Balance::L7))
    };
    skip_where(cells, behind, haproxy::INSTALL_HINT)
}

/// Why a QUIC cell off the packet path cannot run.
pub const QUIC_NEEDS_UDP: &str = "QUIC (HTTP/3) travels over UDP, which neither the delay proxy nor HAProxy 2.6 here carries (nor the slow replica's proxy); on the packet path, or with the services side by side, it runs";

/// The cells of a QUIC transport that would go through a TCP-only middle
/// (the delay proxy, for a round trip or a rate cap; HAProxy or the slow
/// replica's proxy, with replicas) taken out of `cells`, each as skipped
/// with [`QUIC_NEEDS_UDP`]. Run through a TCP proxy, such a cell would not
/// be what its name says.
pub fn without_quic_through_tcp(cells: Vec<(String, Cell)>) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    let through_tcp = |c: &Cell| {
        transports::is_quic(&c.via)
            && (c.env.rtt_ms.is_some() || c.env.rate_mbit.is_some() || c.env.replicas.is_some())
    };
    skip_where(cells, through_tcp, QUIC_NEEDS_UDP)
}

/// The cells `skip` picks taken out of `cells`, each as skipped with `why`.
pub(super) fn skip_where(
    cells: Vec<(String, Cell)>,
    skip: impl Fn(&Cell) -> bool,
    why: &str,
) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    let (skip, keep): (Vec<_>, Vec<_>) = cells.into_iter().partition(|(_, c)| skip(c));
    let skipped = skip
        .into_iter()
        .map(|(experiment, c)| Skipped {
            experiment,
            what: c.label(),
            why: why.to_owned(),
        })
        .collect();
    (keep, skipped)
}

/// Why a reset cannot be made here, or `None` when it can: `ss -K`
/// (iproute2) aborts sockets only for root (CAP_NET_ADMIN).
pub fn reset_unavailable(is_root: bool, has_ss: bool) -> Option<&'static str> {
    match (is_root, has_ss) {
        (true, true) => None,
        (false, _) => Some(
            "resetting the connections (ss -K) needs root (CAP_NET_ADMIN); run the lab as root, as CI does",
        ),
        (true, false) => Some("resetting the connections needs ss -K: apt-get install iproute2"),
    }
}

/// The cells whose fault is a reset, taken out of `cells` and skipped
/// with the reason when this machine cannot make one (said once).
pub fn without_reset(cells: Vec<(String, Cell)>) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    let is_reset = |c: &Cell| c.env.fault == Some(crate::measure::cell::Fault::Reset);
    if !cells.iter().any(|(_, c)| is_reset(c)) {
        return (cells, Vec::new());
    }
    let has_ss = std::process::Command::new("ss")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    match reset_unavailable(nix::unistd::geteuid().is_root(), has_ss) {
        None => (cells, Vec::new()),
        Some(why) => {
            println!(
                "reset: {why}; the cells that reset connections are skipped, and listed in the report"
            );
            skip_where(cells, is_reset, why)
        }
    }
}

/// Why the cells on a packet path cannot run here (said once, with what
/// to do), or `None` when they can or none is planned.
pub fn packet_path_missing(cells: &[(String, Cell)]) -> Option<String> {
    if !cells.iter().any(|(_, c)| c.env.path.is_some()) {
        return None;
    }
    match crate::measure::services::path::unavailable() {
        None => {
            println!("packet path: network namespaces joined by TUN devices (netpath)");
            None
        }
        Some(why) => {
            println!(
                "packet path: {why}; its cells are skipped and listed in the report (run as root, or `--path proxy` for rtt, compression, tls and the silences of faults)"
            );
            Some(why)
        }
    }
}

/// Refuses a plan whose packet path caps a rate the emulator may not carry
/// ([`netpath::packets_at_cap`] past half of [`netpath::CEILING_PPS`]):
/// such a cap would measure the emulator, not the cap.
pub fn check_rate_caps<'a>(cells: impl IntoIterator<Item = (&'a str, Cell)>) -> anyhow::Result<()> {
    let half = netpath::CEILING_PPS / 2;
    for (exp, c) in cells {
        let Some(rate) = c.env.path.and_then(|p| p.rate_mbit) else {
            continue;
        };
        let pps = netpath::packets_at_cap(rate);
        if pps > half {
            anyhow::bail!(
                "{exp}: a packet path capped at {rate} Mbit/s carries about {pps} packets/s at full load, \
                 past half of the {} the emulator carried on the machine it was measured on \
                 (cargo bench -p netpath): the emulator, not the cap, would shape it",
                netpath::CEILING_PPS
            );
        }
    }
    Ok(())
}

/// The congestion controls the planned packet cells ask for that a path on
/// this machine cannot run (it comes up only when a socket across it reports
/// the algorithm asked for), each with the one line saying why.
pub fn unusable_algorithms(cells: &[(String, Cell)]) -> Vec<(netpath::CongestionControl, String)> {
    let wanted: std::collections::BTreeSet<netpath::CongestionControl> = cells
        .iter()
        .filter_map(|(_, c)| c.env.path.map(|p| p.cc))
        .collect();
    wanted
        .into_iter()
        .filter_map(|cc| {
            let config = netpath::PathConfig {
                cc,
                ..netpath::PathConfig::default()
            };
            match netpath::Path::up(&config) {
                Ok(_) => None,
                Err(e) => {
                    let why = format!("congestion control {cc} cannot be used here: {e:#}");
                    println!("packet path: {why}; its cells are skipped and listed in the report");
                    Some((cc, why))
                }
            }
        })
        .collect()
}

/// The cells on a packet path under `cc` taken out of `cells`, each as
/// skipped with `why`.
pub fn without_algorithm(
    cells: Vec<(String, Cell)>,
    cc: netpath::CongestionControl,
    why: &str,
) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    skip_where(cells, |c| c.env.path.is_some_and(|p| p.cc == cc), why)
}

/// The cells on a packet path taken out of `cells`, each as skipped with
/// `why`.
pub fn without_packet_path(
    cells: Vec<(String, Cell)>,
    why: &str,
) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    skip_where(cells, |c| c.env.path.is_some(), why)
}

/// The cells that ask for Postgres taken out of `cells`, each as skipped
/// with `why`.
pub fn without_postgres(
    cells: Vec<(String, Cell)>,
    why: &str,
) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    skip_where(cells, |c| c.env.store == Some(Store::Postgres), why)
}

/// The lab's own Postgres server, started and seeded, when a cell asks for
/// it ([`Store::OwnPostgres`]); when it cannot be made, `None` and why
/// (said once), and those cells are skipped.
pub fn own_postgres(
    opts: &RunOptions,
    bins: &Binaries,
    needs: Needs,
) -> (
    Option<(std::sync::Arc<services::OwnPostgres>, Databases)>,
    Option<String>,
) {
    if !needs.own_postgres || opts.target.is_some() {
        return (None, None);
    }
    let made = services::OwnPostgres::start().and_then(|pg| {
        let db = Databases::from_server_url(&pg.url())?;
        services::seed_into(bins, &db)?;
        Ok((std::sync::Arc::new(pg), db))
    });
    match made {
        Ok((pg, db)) => {
            println!(
                "postgres: the cells that restart Postgres use the lab's own server, at {}",
                services::authority(&pg.url())
            );
            (Some((pg, db)), None)
        }
        Err(e) => {
            let why = format!("the lab's own Postgres server cannot be made ({e:#})");
            println!(
                "postgres: {why}; the cells that restart it are skipped, and listed in the report"
            );
            (None, Some(why))
        }
    }
}

/// The cells on the lab's own Postgres taken out of `cells`, each as
/// skipped with `why`.
pub fn without_own_postgres(
    cells: Vec<(String, Cell)>,
    why: &str,
) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    skip_where(cells, |c| c.env.store == Some(Store::OwnPostgres), why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Knobs;
    use crate::session::info::RunInfo;
    use crate::session::report::build_report;

    #[test]
    fn every_planned_rate_cap_is_within_the_emulators_ceiling_and_a_higher_one_is_refused() {
        for quick in [true, false] {
            let knobs = Knobs {
                quick,
                ..Knobs::default()
            };
            let planned = crate::session::plan::plan(&crate::experiments::all(), &knobs).unwrap();
            let work = crate::session::plan::Work::of(planned.schedules);
            let capped = work
                .cells
                .iter()
                .filter(|(_, c)| c.env.path.is_some_and(|p| p.rate_mbit.is_some()))
                .count();
            assert!(capped > 0, "the plan caps no path");
            check_rate_caps(work.cells.iter().map(|(e, c)| (e.as_str(), c.clone()))).unwrap();
        }
        let mut fast = Knobs::closed("h1-json", 1);
        let mut p = crate::measure::cell::PacketPath::rtt(20);
        p.rate_mbit = Some(10_000);
        fast.env.path = Some(p);
        let e = check_rate_caps([("compression", fast)])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("compression: a packet path capped at 10000 Mbit/s"),
            "{e}"
        );
    }

    #[test]
    fn the_store_label_never_shows_a_password() {
        assert!(store_label(None).starts_with("in memory"));
        assert_eq!(
            store_label(Some("postgres://u:secret@db:5432")),
            "Postgres at db:5432"
        );
    }

    #[test]
    fn bad_options_are_refused_before_anything_runs() {
        let mut o = RunOptions {
            path: Default::default(),
            cc: Default::default(),
            seed: None,
            transports: Some(vec!["carrier-pigeon".into()]),
            ..Default::default()
        };
        let e = validate(&o).unwrap_err().to_string();
        assert!(e.contains("grpc-bidi"), "{e}");
        o.transports = None;
        o.sizes = Some(vec![20000]);
        assert!(validate(&o).is_err());
        o.sizes = None;
        o.rounds = Some(0);
        assert!(validate(&o).is_err());
        o.rounds = None;
        o.warmup_s = Some(0.5);
        assert!(validate(&o).is_err());
        o.warmup_s = Some(0.0);
        assert!(validate(&o).is_ok());
        o.duration_s = Some(0.5);
        assert!(validate(&o).is_err());
    }

    #[test]
    fn a_quic_cell_through_the_delay_proxy_or_with_replicas_is_skipped_and_said_why() {
        use crate::experiment::Experiment as _;
        // rtt on the delay proxy, every transport asked for: h3 there is
        // skipped, h3 on loopback and on the packet path kept.
        let knobs = Knobs {
            quick: true,
            transports: Some(vec!["h1-json".into(), "h3-proto".into(), "grpc-h3".into()]),
            ..Knobs::default()
        };
        let proxied = crate::experiments::rtt::Rtt::plan(&Knobs {
            path: crate::experiment::PathChoice::Proxy,
            ..knobs.clone()
        });
        let mut cells: Vec<(String, Cell)> = crate::experiments::rtt::cells(&proxied)
            .into_iter()
            .map(|c| ("rtt".to_owned(), c))
            .collect();
        let through_proxy = cells
            .iter()
            .filter(|(_, c)| c.via != "h1-json" && c.env.rtt_ms.is_some())
            .count();
        assert!(through_proxy > 0);
        cells.push(("payload".to_owned(), Knobs::closed("h3-proto", 1)));
        let mut on_path = Knobs::closed("grpc-h3", 1);
        on_path.env.path = Some(crate::measure::cell::PacketPath::rtt(20));
        cells.push(("loss".to_owned(), on_path));
        let n = cells.len();
        let (keep, skipped) = without_quic_through_tcp(cells);
        assert_eq!(keep.len() + skipped.len(), n);
        assert_eq!(skipped.len(), through_proxy);
        assert!(skipped.iter().all(|s| s.why == QUIC_NEEDS_UDP));
        assert!(
            keep.iter()
                .any(|(e, c)| e == "payload" && c.via == "h3-proto")
        );
        assert!(keep.iter().any(|(e, c)| e == "loss" && c.via == "grpc-h3"));
        assert!(
            keep.iter()
                .all(|(_, c)| c.via == "h1-json" || c.env.rtt_ms.is_none())
        );
    }

    #[test]
    fn without_haproxy_only_the_balanced_cells_are_skipped_and_said_why() {
        use crate::experiment::Experiment as _;
        let knobs = Knobs {
            quick: true,
            ..Knobs::default()
        };
        let p = crate::experiments::replicas::Replicas::plan(&knobs);
        let cells: Vec<(String, Cell)> = crate::experiments::replicas::cells(&p)
            .into_iter()
            .map(|c| ("replicas".to_owned(), c))
            .chain(std::iter::once((
                "payload".to_owned(),
                Knobs::closed("grpc", 1),
            )))
            .collect();
        let n = cells.len();
        let (keep, skipped) = without_haproxy(cells);
        assert_eq!(keep.len() + skipped.len(), n);
        assert!(keep.iter().any(|(e, _)| e == "payload"));
        assert!(
            keep.iter()
                .all(|(_, c)| c.env.replicas.is_none_or(|r| r.balance.by_client()))
        );
        assert_eq!(
            skipped.len(),
            3 * 2 * 2,
            "l4 and l7, healthy and slow, 3 transports"
        );
        assert!(
            skipped
                .iter()
                .all(|k| k.why.contains("apt-get install haproxy"))
        );
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        let info = RunInfo { skipped, ..info };
        let md = build_report(&info, &results).markdown();
        assert!(
            md.contains("Planned cells not measured on this machine"),
            "{md}"
        );
    }

    #[test]
    fn without_the_packet_path_only_its_cells_are_skipped_and_said_why() {
        use crate::experiment::Experiment as _;
        let knobs = Knobs {
            quick: true,
            ..Knobs::default()
        };
        let p = crate::experiments::rtt::Rtt::plan(&knobs);
        let rtt: Vec<Cell> = crate::experiments::rtt::cells(&p);
        let on_path = rtt.iter().filter(|c| c.env.path.is_some()).count();
        assert!(on_path > 0, "rtt's quick plan runs on the packet path");
        let cells: Vec<(String, Cell)> = rtt
            .into_iter()
            .map(|c| ("rtt".to_owned(), c))
            .chain(std::iter::once((
                "payload".to_owned(),
                Knobs::closed("grpc", 1),
            )))
            .collect();
        let n = cells.len();
        let why = "the packet path needs root (network namespaces and TUN devices)";
        let (keep, skipped) = without_packet_path(cells, why);
        assert_eq!(keep.len() + skipped.len(), n);
        assert_eq!(skipped.len(), on_path);
        assert!(keep.iter().all(|(_, c)| c.env.path.is_none()));
        assert!(keep.iter().any(|(e, _)| e == "payload"));
        assert!(
            skipped
                .iter()
                .all(|k| k.experiment == "rtt" && k.why == why)
        );
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        let first = skipped[0].what.clone();
        let info = RunInfo { skipped, ..info };
        let md = build_report(&info, &results).markdown();
        assert!(
            md.contains("Planned cells not measured on this machine") && md.contains(why),
            "{md}"
        );
        assert!(md.contains(&first), "{md}");
    }

    fn on_path(cc: netpath::CongestionControl) -> (String, Cell) {
        let env = crate::measure::cell::Env {
            path: Some(crate::measure::cell::PacketPath {
                cc,
                ..crate::measure::cell::PacketPath::rtt(20)
            }),
            ..Default::default()
        };
        (
            "loss".to_owned(),
            Cell::closed("grpc", 1, 16, 1).with_env(env),
        )
    }

    #[test]
    fn cells_of_an_algorithm_that_cannot_run_are_skipped_and_said_why() {
        use netpath::CongestionControl::{Bbr, Cubic};
        let cells = vec![
            on_path(Cubic),
            on_path(Bbr),
            ("payload".to_owned(), Cell::closed("grpc", 1, 8, 8)),
        ];
        let (keep, skipped) = without_algorithm(cells, Bbr, "bbr: not here");
        assert_eq!(keep.len(), 2);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].what.contains("bbr") && skipped[0].why == "bbr: not here");
    }

    #[test]
    fn the_algorithms_the_plans_ask_for_come_up_on_this_machine() {
        // Root and /dev/net/tun, as CI has: a path comes up under each and
        // a socket across it reports the algorithm.
        use netpath::CongestionControl::{Bbr, Cubic, Reno};
        let cells = vec![on_path(Cubic), on_path(Bbr), on_path(Reno)];
        assert!(unusable_algorithms(&cells).is_empty());
    }

    #[test]
    fn a_reset_is_made_by_root_with_ss_and_otherwise_skipped_with_how_to() {
        assert_eq!(reset_unavailable(true, true), None);
        assert!(reset_unavailable(false, true).is_some_and(|w| w.contains("root")));
        assert!(reset_unavailable(true, false).is_some_and(|w| w.contains("iproute2")));
        // Cells without a reset are never looked at.
        let cells = vec![("payload".to_owned(), Knobs::closed("grpc", 1))];
        let (keep, skipped) = without_reset(cells);
        assert_eq!((keep.len(), skipped.len()), (1, 0));
    }
}
