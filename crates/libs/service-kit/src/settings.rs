//! Reading settings alike in both services: renamed settings kept working
//! for one release, and the defaults with nothing from the environment.
//!
//! A service lists its renames ([`Renamed`]); [`args`] turns the old names
//! it finds (an environment variable or a `--flag`) into the new setting's
//! flag, and returns one warning per old name, for the log once logging is
//! up. The new name always wins: an old variable next to its new one is
//! ignored, and said so. clap then parses as usual, so an old value goes
//! through the same checks as a new one.

use std::ffi::OsString;

/// One renamed setting: its old variable and flag, and its new variable
/// (the new flag is the one the command gives that variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    pub old_env: &'static str,
    /// The old `--flag`, without its dashes, when there was one.
    pub old_flag: Option<&'static str>,
    pub new_env: &'static str,
}

/// The arguments clap should parse for command `C`, given the process's
/// `argv` and a way to read its environment, with every old name in
/// `renames` applied; and the warnings to log.
///
/// # Panics
/// When a rename's new variable is not a setting of `C` with a long flag:
/// the list is wrong, which a test of each service's list catches.
pub fn args<C: clap::CommandFactory>(
    argv: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
    renames: &[Renamed],
) -> (Vec<OsString>, Vec<String>) {
    let cmd = C::command();
    let mut argv: Vec<OsString> = argv.into_iter().collect();
    let mut warnings = Vec::new();
    for r in renames {
        let new_flag = cmd
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == r.new_env))
            .and_then(|a| a.get_long())
            .unwrap_or_else(|| panic!("{} is not a setting with a --flag", r.new_env));
        let given = |argv: &[OsString], flag: &str| {
            argv.iter().skip(1).any(|a| {
                a.to_str().is_some_and(|a| {
                    a.strip_prefix("--")
                        .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
                })
            })
        };
        // The old flag becomes the new one where it stands.
        if let Some(old) = r.old_flag {
            for a in argv.iter_mut().skip(1) {
                let Some(text) = a.to_str() else { continue };
                let Some(rest) = text.strip_prefix("--").and_then(|t| t.strip_prefix(old)) else {
                    continue;
                };
                if rest.is_empty() || rest.starts_with('=') {
                    warnings.push(format!(
                        "--{old} is renamed --{new_flag} and will stop working in the next release"
                    ));
                    *a = OsString::from(format!("--{new_flag}{rest}"));
                }
            }
        }
        let Some(value) = env(r.old_env) else {
            continue;
        };
        if env(r.new_env).is_some() || given(&argv, new_flag) {
            warnings.push(format!(
                "{} is ignored: it is renamed {}, which is set",
                r.old_env, r.new_env
            ));
            continue;
        }
        warnings.push(format!(
            "{} is renamed {} and will stop working in the next release",
            r.old_env, r.new_env
        ));
        // Right after the program name, so that it is a setting of the
        // command and not of a subcommand.
        let mut flag = OsString::from(format!("--{new_flag}="));
        flag.push(&value);
        argv.insert(1.min(argv.len()), flag);
    }
    (argv, warnings)
}

/// Command `C` parsed from this process's arguments and environment, with
/// the old names in `renames` applied; and the warnings to log once logging
/// is up. Exits with clap's message on bad input, as `C::parse` does.
pub fn parse<C: clap::Parser>(renames: &[Renamed]) -> (C, Vec<String>) {
    let (argv, warnings) = args::<C>(std::env::args_os(), |name| std::env::var_os(name), renames);
    (C::parse_from(argv), warnings)
}

/// Command `C` as it is with no argument and no environment: the documented
/// defaults, which a test can start from without a stray variable in its
/// own environment changing what it runs.
pub fn defaults<C: clap::Parser>() -> C {
    let cmd = C::command().mut_args(|a| a.env(Option::<&'static str>::None));
    let name = cmd.get_name().to_owned();
    let matches = cmd
        .try_get_matches_from([name])
        .unwrap_or_else(|e| panic!("the defaults do not parse: {e}"));
    C::from_arg_matches(&matches).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[arg(long, env = "T_DATABASE_MAX_CONNECTIONS", default_value_t = 10)]
        database_max_connections: u32,
        #[command(subcommand)]
        command: Option<Sub>,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Sub {
        Seed,
    }

    const RENAMES: &[Renamed] = &[Renamed {
        old_env: "T_DB_MAX_CONNECTIONS",
        old_flag: Some("db-max-connections"),
        new_env: "T_DATABASE_MAX_CONNECTIONS",
    }];

    fn parse(argv: &[&str], env: &[(&str, &str)]) -> (u32, Vec<String>) {
        let env: Vec<(String, OsString)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        let (argv, warnings) = args::<Cli>(
            argv.iter().map(OsString::from),
            |name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            RENAMES,
        );
        // The test process's own environment must not leak in.
        let cmd = <Cli as clap::CommandFactory>::command()
            .mut_args(|a| a.env(Option::<&'static str>::None));
        let m = cmd.try_get_matches_from(argv).expect("parses");
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&m).unwrap();
        (cli.database_max_connections, warnings)
    }

    #[test]
    fn an_old_variable_still_sets_the_setting_and_warns() {
        let (n, w) = parse(&["svc"], &[("T_DB_MAX_CONNECTIONS", "3")]);
        assert_eq!(n, 3);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("T_DB_MAX_CONNECTIONS is renamed T_DATABASE_MAX_CONNECTIONS"));
        // Before a subcommand, where the command reads it.
        let (n, _) = parse(&["svc", "seed"], &[("T_DB_MAX_CONNECTIONS", "4")]);
        assert_eq!(n, 4);
    }

    #[test]
    fn the_new_name_wins_and_the_old_one_is_said_to_be_ignored() {
        let (n, w) = parse(
            &["svc"],
            &[
                ("T_DB_MAX_CONNECTIONS", "3"),
                ("T_DATABASE_MAX_CONNECTIONS", "5"),
            ],
        );
        // The environment is not read by `parse`; the flag is what counts.
        assert_eq!(n, 10, "the old value must not be applied");
        assert!(w[0].contains("T_DB_MAX_CONNECTIONS is ignored"), "{w:?}");
        let (n, w) = parse(
            &["svc", "--database-max-connections=7"],
            &[("T_DB_MAX_CONNECTIONS", "3")],
        );
        assert_eq!(n, 7);
        assert!(w[0].contains("is ignored"), "{w:?}");
    }

    #[test]
    fn an_old_flag_becomes_the_new_one() {
        let (n, w) = parse(&["svc", "--db-max-connections", "6"], &[]);
        assert_eq!(n, 6);
        assert!(w[0].contains("--db-max-connections is renamed --database-max-connections"));
        let (n, _) = parse(&["svc", "--db-max-connections=8"], &[]);
        assert_eq!(n, 8);
        // A flag that only starts alike is left alone (and refused by clap).
        let (argv, w) = args::<Cli>(
            ["svc", "--db-max-connectionsx=1"].map(OsString::from),
            |_| None,
            RENAMES,
        );
        assert_eq!(argv[1], "--db-max-connectionsx=1");
        assert!(w.is_empty());
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let cli: Cli = defaults();
        assert_eq!(cli.database_max_connections, 10);
        assert!(cli.command.is_none());
    }

    #[test]
    fn nothing_old_changes_nothing() {
        let (n, w) = parse(&["svc", "--database-max-connections=2"], &[]);
        assert_eq!(n, 2);
        assert!(w.is_empty());
    }
}
