//! Which new traces are recorded: `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG`, read together as the OpenTelemetry
//! specification defines them (its "General SDK Configuration").
//!
//! | `OTEL_TRACES_SAMPLER` | records |
//! |---|---|
//! | `always_on` | every trace |
//! | `always_off` | none |
//! | `traceidratio` | the ratio `OTEL_TRACES_SAMPLER_ARG` of trace ids (default 1.0) |
//! | `parentbased_always_on` (the default) | as the caller decided; a new trace always |
//! | `parentbased_always_off` | as the caller decided; a new trace never |
//! | `parentbased_traceidratio` | as the caller decided; a new trace by the ratio |
//!
//! Where the specification says to warn and fall back to the default, a
//! service here refuses to start instead, naming the variable: a typo that
//! silently records every trace (or none) is the worse outcome. So an
//! unknown sampler, a sampler this build does not have (`jaeger_remote`,
//! `xray`), a ratio outside 0 to 1, and an argument given to a sampler that
//! takes none are errors.

use opentelemetry_sdk::trace::Sampler;

/// What decides a trace with no sampled parent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    /// Trace ids below this share of the id space are recorded.
    Ratio(f64),
}

/// A sampler, as the two variables choose it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Follow the caller's decision when a call carries a parent.
    pub parent_based: bool,
    pub root: Root,
}

impl Default for Sampling {
    /// The specification's default: `parentbased_always_on`.
    fn default() -> Self {
        Sampling {
            parent_based: true,
            root: Root::AlwaysOn,
        }
    }
}

/// The samplers a service accepts, for error messages and `--help`.
pub const NAMES: &str = "always_on, always_off, traceidratio, parentbased_always_on, \
                         parentbased_always_off, parentbased_traceidratio";

impl Sampling {
    /// From the two variables' values (`None`: unset). An empty value counts
    /// as unset, as the specification says.
    pub fn parse(sampler: Option<&str>, arg: Option<&str>) -> anyhow::Result<Sampling> {
        let sampler = sampler.map(str::trim).filter(|s| !s.is_empty());
        let arg = arg.map(str::trim).filter(|s| !s.is_empty());
        let name = sampler.unwrap_or("parentbased_always_on");
        let (parent_based, root) = match name {
            "always_on" => (false, "always_on"),
            "always_off" => (false, "always_off"),
            "traceidratio" => (false, "traceidratio"),
            "parentbased_always_on" => (true, "always_on"),
            "parentbased_always_off" => (true, "always_off"),
            "parentbased_traceidratio" => (true, "traceidratio"),
            "jaeger_remote" | "parentbased_jaeger_remote" | "xray" => anyhow::bail!(
                "OTEL_TRACES_SAMPLER={name} is not available in this build; use one of: {NAMES}"
            ),
            other => {
                anyhow::bail!("OTEL_TRACES_SAMPLER={other:?} is not a sampler; use one of: {NAMES}")
            }
        };
        let root = match (root, arg) {
            ("traceidratio", None) => Root::Ratio(1.0),
            ("traceidratio", Some(a)) => Root::Ratio(
                a.parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "OTEL_TRACES_SAMPLER_ARG={a:?} is not a ratio from 0.0 to 1.0"
                        )
                    })?,
            ),
            (_, Some(a)) => anyhow::bail!(
                "OTEL_TRACES_SAMPLER_ARG={a:?} is set, but OTEL_TRACES_SAMPLER={name} takes no \
                 argument: for a ratio of new traces, set OTEL_TRACES_SAMPLER=parentbased_traceidratio"
            ),
            ("always_on", None) => Root::AlwaysOn,
            (_, None) => Root::AlwaysOff,
        };
        Ok(Sampling { parent_based, root })
    }

    /// From the process's environment.
    pub fn from_env() -> anyhow::Result<Sampling> {
        let var = |n: &str| std::env::var(n).ok();
        Sampling::parse(
            var("OTEL_TRACES_SAMPLER").as_deref(),
            var("OTEL_TRACES_SAMPLER_ARG").as_deref(),
        )
    }

    /// The SDK's sampler.
    pub fn sampler(&self) -> Sampler {
        let root = match self.root {
            Root::AlwaysOn => Sampler::AlwaysOn,
            Root::AlwaysOff => Sampler::AlwaysOff,
            Root::Ratio(r) => Sampler::TraceIdRatioBased(r),
        };
        if self.parent_based {
            Sampler::ParentBased(Box::new(root))
        } else {
            root
        }
    }

    /// As the variables would name it, for the start-up log line.
    pub fn describe(&self) -> String {
        let root = match self.root {
            Root::AlwaysOn => "always_on".to_owned(),
            Root::AlwaysOff => "always_off".to_owned(),
            Root::Ratio(r) => format!("traceidratio {r}"),
        };
        if self.parent_based {
            format!("parentbased_{root}")
        } else {
            root
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: Option<&str>, a: Option<&str>) -> anyhow::Result<Sampling> {
        Sampling::parse(s, a)
    }

    #[test]
    fn unset_or_empty_is_the_specifications_default() {
        assert_eq!(p(None, None).unwrap(), Sampling::default());
        assert_eq!(p(Some(""), Some(" ")).unwrap(), Sampling::default());
        assert_eq!(Sampling::default().describe(), "parentbased_always_on");
    }

    #[test]
    fn every_sampler_of_the_specification_parses_with_its_argument() {
        let cases = [
            ("always_on", None, false, Root::AlwaysOn),
            ("always_off", None, false, Root::AlwaysOff),
            ("traceidratio", None, false, Root::Ratio(1.0)),
            ("traceidratio", Some("0.25"), false, Root::Ratio(0.25)),
            ("parentbased_always_on", None, true, Root::AlwaysOn),
            ("parentbased_always_off", None, true, Root::AlwaysOff),
            (
                "parentbased_traceidratio",
                Some("0"),
                true,
                Root::Ratio(0.0),
            ),
            ("parentbased_traceidratio", None, true, Root::Ratio(1.0)),
        ];
        for (s, a, parent_based, root) in cases {
            assert_eq!(
                p(Some(s), a).unwrap(),
                Sampling { parent_based, root },
                "{s} {a:?}"
            );
        }
        assert_eq!(
            p(Some("parentbased_traceidratio"), Some("0.5"))
                .unwrap()
                .describe(),
            "parentbased_traceidratio 0.5"
        );
    }

    #[test]
    fn a_bad_sampler_or_argument_is_refused_with_the_variable_named() {
        for (s, a, says) in [
            (
                Some("sometimes"),
                None,
                "is not a sampler; use one of: always_on",
            ),
            (Some("xray"), None, "not available in this build"),
            (
                Some("traceidratio"),
                Some("1.5"),
                "is not a ratio from 0.0 to 1.0",
            ),
            (
                Some("traceidratio"),
                Some("half"),
                "OTEL_TRACES_SAMPLER_ARG=\"half\"",
            ),
            (None, Some("0.5"), "takes no argument"),
            (
                Some("always_on"),
                Some("0.5"),
                "OTEL_TRACES_SAMPLER=always_on takes no",
            ),
        ] {
            let e = p(s, a).unwrap_err().to_string();
            assert!(e.contains(says), "{s:?} {a:?}: {e}");
        }
    }

    #[test]
    fn the_sdk_sampler_follows_the_choice() {
        let s = p(Some("parentbased_traceidratio"), Some("0.1")).unwrap();
        assert!(format!("{:?}", s.sampler()).starts_with("ParentBased(TraceIdRatioBased(0.1"));
        let s = p(Some("always_off"), None).unwrap();
        assert!(matches!(s.sampler(), Sampler::AlwaysOff));
    }
}
