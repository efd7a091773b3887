//! Prometheus text exposition: parsing it, and reading user-service's
//! per-transport upstream counters out of it.
//!
//! Only counters and gauges are taken from `/metrics`: they can be
//! subtracted (after minus before) to isolate one round. The latency
//! quantiles there cover the whole life of the process, warm-up included, so
//! the lab takes upstream percentiles from k6's `upstream_micros` Trend (the
//! `x-upstream-micros` header of each measured request) instead.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// The routes on which an order-service replica answers a fetch of a
/// user's orders, over every transport (REST, gRPC unary and stream, bidi
/// and raw-TCP lookups).
const ORDER_ROUTES: &[&str] = &[
    "/v2/orders",
    "/order.v2.OrderService/ListOrders",
    "/order.v2.OrderService/StreamOrders",
    "/order.v2.OrderService/BatchListOrders",
    "/order.v2.OrderService/BatchStreamOrders",
    "/order.v1.OrderService/ListOrders",
    "LookupOrders",
];

/// What one order-service replica's `/metrics` says of its work: the calls
/// for orders it answered well and those it answered otherwise (an error
/// status), and the connections open on its listeners.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplicaCounters {
    pub answered: f64,
    pub refused: f64,
    pub connections: f64,
}

impl ReplicaCounters {
    pub fn of(samples: &[Sample]) -> ReplicaCounters {
        let lookups = || {
            samples
                .iter()
                .filter(|s| s.name == "order_requests_total")
                .filter(|s| {
                    s.labels
                        .get("route")
                        .is_some_and(|r| ORDER_ROUTES.contains(&r.as_str()))
                })
        };
        let answered = lookups()
            .filter(|s| answered_well(&s.labels))
            .map(|s| s.value)
            .sum();
        let refused = lookups()
            .filter(|s| !answered_well(&s.labels))
            .map(|s| s.value)
            .sum();
        // The scrape's own connection is open on the REST listener while
        // the gauge is read: it is not a client's.
        let connections = samples
            .iter()
            .filter(|s| s.name == "order_connections_open")
            .map(|s| s.value)
            .sum::<f64>()
            - 1.0;
        let connections = connections.max(0.0);
        ReplicaCounters {
            answered,
            refused,
            connections,
        }
    }
}

/// Whether a request's labels say it was answered well: an HTTP 200 with
/// no gRPC code (REST, Connect), an HTTP 200 with gRPC `OK`, or a gRPC `OK`
/// with no HTTP status (raw-TCP and multiplexed lookups).
fn answered_well(labels: &BTreeMap<String, String>) -> bool {
    let label = |k: &str| labels.get(k).map_or("", String::as_str);
    matches!(
        (label("code"), label("grpc_code")),
        ("200", "" | "OK") | ("", "OK")
    )
}

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of a text exposition; comments and blank lines are skipped.
pub fn parse(text: &str) -> anyhow::Result<Vec<Sample>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        })
        .map(|(i, l)| parse_line(l.trim()).with_context(|| format!("line {}: {l:?}", i + 1)))
        .collect()
}

fn parse_line(line: &str) -> anyhow::Result<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .context("a sample needs a value after its name")?;
    let name = line[..name_end].to_owned();
    if name.is_empty() {
        bail!("a sample has no metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after_brace)?;
        labels = parsed;
        rest = after;
    }
    let value_text = rest
        .split_whitespace()
        .next()
        .context("a sample needs a value")?;
    let value = parse_value(value_text)?;
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// Labels up to and including the closing brace; returns what follows it.
fn parse_labels(mut s: &str) -> anyhow::Result<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s.find('=').context("a label needs `=`")?;
        let key = s[..eq].trim().to_owned();
        let after_eq = s[eq + 1..]
            .strip_prefix('"')
            .context("a label value must be quoted")?;
        let mut value = String::new();
        let mut chars = after_eq.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("a label value ends in a lone backslash"),
                },
                Some((_, c)) => value.push(c),
                None => bail!("a label value is not closed"),
            }
        };
        labels.insert(key, value);
        s = &after_eq[end + 1..];
    }
}

fn parse_value(s: &str) -> anyhow::Result<f64> {
    match s {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s
            .parse()
            .with_context(|| format!("{s:?} is not a sample value")),
    }
}

/// user-service's counters for its calls to order-service over one transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Upstream {
    pub calls: f64,
    pub errors: f64,
    pub connections_opened: f64,
    /// A gauge: connections held at the moment of the scrape.
    pub connections_open: f64,
    pub bytes_read: f64,
    pub bytes_written: f64,
    /// TLS handshakes to order-service, full and resumed (0 in cleartext,
    /// and for a user-service that predates TLS).
    #[serde(default)]
    pub tls_full: f64,
    #[serde(default)]
    pub tls_resumed: f64,
}

impl Upstream {
    /// The counters labelled `via="<via>"`. A transport with no series at
    /// all is an error: it means the wrong service or a renamed metric, and a
    /// silent zero would make every per-call figure wrong.
    pub fn of(samples: &[Sample], via: &str) -> anyhow::Result<Upstream> {
        let get = |name: &str| -> anyhow::Result<f64> {
            samples
                .iter()
                .find(|s| s.name == name && s.labels.get("via").map(String::as_str) == Some(via))
                .map(|s| s.value)
                .with_context(|| format!("/metrics has no {name}{{via=\"{via}\"}}"))
        };
        Ok(Upstream {
            calls: get("user_upstream_calls_total")?,
            errors: get("user_upstream_errors_total")?,
            connections_opened: get("user_upstream_connections_opened_total")?,
            connections_open: get("user_upstream_connections_open")?,
            bytes_read: get("user_upstream_read_bytes_total")?,
            bytes_written: get("user_upstream_written_bytes_total")?,
            tls_full: handshakes(samples, via, "full"),
            tls_resumed: handshakes(samples, via, "resumed"),
        })
    }

    /// What happened between two scrapes: counters subtracted, the gauge
    /// taken from the later one.
    pub fn since(&self, before: &Upstream) -> Upstream {
        Upstream {
            calls: self.calls - before.calls,
            errors: self.errors - before.errors,
            connections_opened: self.connections_opened - before.connections_opened,
            connections_open: self.connections_open,
            bytes_read: self.bytes_read - before.bytes_read,
            bytes_written: self.bytes_written - before.bytes_written,
            tls_full: self.tls_full - before.tls_full,
            tls_resumed: self.tls_resumed - before.tls_resumed,
        }
    }
}

/// `user_upstream_tls_handshakes_total{via,kind}`, 0 when absent.
fn handshakes(samples: &[Sample], via: &str, kind: &str) -> f64 {
    samples
        .iter()
        .find(|s| {
            s.name == "user_upstream_tls_handshakes_total"
                && s.labels.get("via").map(String::as_str) == Some(via)
                && s.labels.get("kind").map(String::as_str) == Some(kind)
        })
        .map_or(0.0, |s| s.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_labelled_samples_parse() {
        let text = "# HELP x y\n# TYPE x counter\nx 3\n\
                    user_upstream_calls_total{via=\"grpc\",store=\"memory\"} 42\n\
                    lat{q=\"0.5\"} 1.5e3 1700000000\n";
        let s = parse(text).expect("parses");
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "x");
        assert_eq!(s[1].labels["via"], "grpc");
        assert_eq!(s[1].value, 42.0);
        assert_eq!(s[2].value, 1500.0);
    }

    #[test]
    fn escaped_label_values_are_unescaped() {
        let s = parse(r#"m{a="x\"y\\z\n",b=",}"} 1"#).expect("parses");
        assert_eq!(s[0].labels["a"], "x\"y\\z\n");
        assert_eq!(s[0].labels["b"], ",}");
    }

    #[test]
    fn special_values_parse() {
        let s = parse("a +Inf\nb NaN\nc -Inf\n").expect("parses");
        assert!(s[0].value.is_infinite() && s[1].value.is_nan() && s[2].value < 0.0);
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_it() {
        let err = parse("ok 1\nbroken{via=\"x} 1\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
        assert!(parse("novalue\n").is_err());
    }

    #[test]
    fn upstream_counters_are_read_per_transport_and_subtracted() {
        let mk = |calls: u32, opened: u32, open: u32| {
            let mut t = String::new();
            for via in ["grpc", "h1-json"] {
                t += &format!(
                    "user_upstream_calls_total{{via=\"{via}\",store=\"memory\"}} {calls}\n\
                     user_upstream_errors_total{{via=\"{via}\",store=\"memory\"}} 0\n\
                     user_upstream_connections_opened_total{{via=\"{via}\",store=\"memory\"}} {opened}\n\
                     user_upstream_connections_open{{via=\"{via}\",store=\"memory\"}} {open}\n\
                     user_upstream_read_bytes_total{{via=\"{via}\",store=\"memory\"}} {}\n\
                     user_upstream_written_bytes_total{{via=\"{via}\",store=\"memory\"}} {}\n",
                    calls * 100,
                    calls * 10
                );
            }
            parse(&t).expect("parses")
        };
        let before = Upstream::of(&mk(10, 4, 4), "grpc").expect("present");
        let after = Upstream::of(&mk(110, 5, 3), "grpc").expect("present");
        let d = after.since(&before);
        assert_eq!(d.calls, 100.0);
        assert_eq!(d.connections_opened, 1.0);
        assert_eq!(d.connections_open, 3.0);
        assert_eq!(d.bytes_read, 10_000.0);
        assert_eq!(d.bytes_written, 1_000.0);
        let err = Upstream::of(&mk(1, 1, 1), "tcp-proto").unwrap_err();
        assert!(err.to_string().contains("tcp-proto"));
    }

    #[test]
    fn a_replica_counts_only_the_lookups_it_answered_well() {
        let text = r#"
order_requests_total{protocol="http1",route="/v2/orders",code="200",grpc_code=""} 3
order_requests_total{protocol="http1",route="/v2/orders",code="503",grpc_code=""} 100
order_requests_total{protocol="grpc",route="/order.v2.OrderService/ListOrders",code="200",grpc_code="OK"} 5
order_requests_total{protocol="grpc",route="/order.v2.OrderService/ListOrders",code="200",grpc_code="UNAVAILABLE"} 100
order_requests_total{protocol="tcp",route="LookupOrders",code="",grpc_code="OK"} 7
order_requests_total{protocol="tcp",route="LookupOrders",code="",grpc_code="RESOURCE_EXHAUSTED"} 100
order_requests_total{protocol="tcp",route="connect",code="",grpc_code="OK"} 100
order_requests_total{protocol="http1",route="/metrics",code="200",grpc_code=""} 100
order_connections_open{listener="rest"} 2
order_connections_open{listener="grpc"} 4
"#;
        let c = ReplicaCounters::of(&parse(text).expect("parses"));
        assert_eq!(c.answered, 15.0);
        assert_eq!(
            c.refused, 300.0,
            "the lookups' error answers, not /metrics'"
        );
        assert_eq!(
            c.connections, 5.0,
            "the scrape's own connection is not counted"
        );
    }
}
