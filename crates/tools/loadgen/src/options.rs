//! The command line: what to ask, how hard, and what a good answer is,
//! checked into a [`Plan`] before anything is sent.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;

use crate::check::Expect;
use crate::http1::Request;
use crate::run::{self, Plan};

/// HTTP/1.1 load that costs little: a closed loop of N callers, or an open
/// loop on a fixed schedule whose latencies run from each request's
/// intended send time. Every answer is checked (status, headers, body
/// length) and only good ones are timed as good; the summary holds HDR
/// histograms of every latency.
#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    version,
    about,
    after_help = "Examples:\n  \
loadgen --url 'http://127.0.0.1:8081/v1/users/00000000-0000-0000-0000-000000000001/orders?limit=1&via=grpc' \\\n    \
--connections 8 --duration 10 --header x-via=grpc\n  \
loadgen --url http://127.0.0.1:8081/healthz --rate 2000 --connections 64 --duration 5 --summary out.json\n\n\
The JSON summary (--summary) is what the lab reads: counts, failures by kind, not-good answers by \
status, and HDR histograms (base64 V2) of good latencies, every latency, user-service's \
x-upstream-micros and, in an open loop, how late each request was written."
)]
pub struct Options {
    /// What to GET: http://HOST[:PORT]/PATH[?QUERY] (HTTP/1.1, cleartext).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Closed loop: callers, each with its own connection. Open loop: the
    /// most connections open at once.
    #[arg(long, short = 'c', default_value_t = 8, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// Open loop at this many requests per second (fractions allowed);
    /// without it, a closed loop.
    #[arg(long, value_name = "PER_S")]
    pub rate: Option<f64>,
    /// How long requests are started, seconds.
    #[arg(long, short = 'd', default_value_t = 10.0, value_name = "S")]
    pub duration: f64,
    /// How long requests in flight at the end may take to finish, seconds.
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub grace: f64,
    /// Closed loop: each caller waits this long after an answer, ms.
    #[arg(long, default_value_t = 0, value_name = "MS", conflicts_with = "rate")]
    pub think_ms: u64,
    /// A request with no whole answer after this long fails, seconds.
    #[arg(long, default_value_t = 60.0, value_name = "S")]
    pub timeout: f64,
    /// The status of a good answer.
    #[arg(long, default_value_t = 200, value_name = "CODE",
          value_parser = clap::value_parser!(u16).range(100..=599))]
    pub status: u16,
    /// A header a good answer has with exactly this value (repeatable, at
    /// most 32), e.g. x-via=grpc.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,
    /// The body length of a good answer, bytes (its Content-Length).
    #[arg(long, value_name = "BYTES")]
    pub length: Option<u64>,
    /// Answers slower than this are counted slow, ms.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub slow_ms: u64,
    /// Write the JSON summary here ("-": standard output, instead of the
    /// short text).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

/// A finite, positive number of seconds.
fn seconds(what: &str, s: f64) -> anyhow::Result<Duration> {
    if !s.is_finite() || s <= 0.0 || s > 86_400.0 {
        bail!("{what} must be a number of seconds above 0 and at most a day, got {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

/// `http://HOST[:PORT]/PATH` split into its address, Host header and path.
pub fn parse_url(url: &str) -> anyhow::Result<(SocketAddr, String, String)> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("the URL must start with http:// (HTTP/1.1 in cleartext), got {url:?}");
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_owned()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_owned()),
    };
    if authority.is_empty() {
        bail!("the URL {url:?} names no host");
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        bail!("the URL's path holds a space or a control character: encode it");
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.contains(']'))
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .with_context(|| format!("resolving {authority}"))?
        .next()
        .with_context(|| format!("{authority} resolves to no address"))?;
    Ok((addr, authority.to_owned(), path))
}

impl Options {
    /// The run these options ask for, checked.
    pub fn plan(&self) -> anyhow::Result<Plan> {
        let (addr, host, path) = parse_url(&self.url)?;
        if let Some(r) = self.rate
            && (!r.is_finite() || r <= 0.0 || r > 10_000_000.0)
        {
            bail!("--rate must be above 0 and at most 10,000,000 requests/s, got {r}");
        }
        if self.headers.len() > 32 {
            bail!("at most 32 --header checks, got {}", self.headers.len());
        }
        let headers = self
            .headers
            .iter()
            .map(|h| {
                let (n, v) = h
                    .split_once('=')
                    .with_context(|| format!("--header {h:?}: NAME=VALUE expected"))?;
                let n = n.trim();
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                    bail!("--header {h:?}: {n:?} is not a header name");
                }
                Ok((n.to_owned(), v.trim().to_owned()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Plan {
            request: Request::get(addr, &host, &path),
            expect: Expect {
                status: self.status,
                headers,
                length: self.length,
            },
            connections: self.connections,
            rate: self.rate,
            duration: seconds("--duration", self.duration)?,
            grace: seconds("--grace", self.grace)?,
            think: Duration::from_millis(self.think_ms),
            timeout: seconds("--timeout", self.timeout)?,
            slow_ms: self.slow_ms,
        })
    }

    /// Runs and reports.
    pub fn run(&self) -> anyhow::Result<()> {
        let plan = self.plan()?;
        let s = run::run(plan)?;
        let json = serde_json::to_string(&s)?;
        match self.summary.as_deref() {
            Some(p) if p.as_os_str() == "-" => {
                println!("{json}");
                return Ok(());
            }
            Some(p) => std::fs::write(p, &json)
                .with_context(|| format!("writing the summary to {}", p.display()))?,
            None => {}
        }
        let rate = s.good as f64 / s.run_seconds.max(1e-9);
        println!(
            "{} {} loop, {} connections: {} requests in {:.2} s, {} good ({rate:.0}/s), {} bad, {} shed, {} unfinished",
            s.engine,
            s.mode,
            s.connections,
            s.requests,
            s.run_seconds,
            s.good,
            s.bad,
            s.shed,
            s.unfinished
        );
        if let Some(h) = s.good_hdr.as_deref() {
            let h = telemetry::hdr::decode(h)?;
            println!(
                "good answers, µs: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.9),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max()
            );
        }
        if let Some(k) = &s.schedule {
            let lag = telemetry::hdr::decode(&k.lag_hdr)?;
            println!(
                "schedule: {} due, {} sent, {} unsent, {} waited for a connection; written late by p50 {} µs, p99 {} µs, max {} µs",
                k.due,
                k.sent,
                k.unsent,
                k.waited,
                lag.value_at_quantile(0.5),
                lag.value_at_quantile(0.99),
                lag.max()
            );
        }
        if !s.failures.is_empty() {
            println!("failures: {:?}", s.failures);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_address_host_and_path() {
        let (a, h, p) = parse_url("http://127.0.0.1:8081/v1/users/x/orders?limit=1").unwrap();
        assert_eq!(a.to_string(), "127.0.0.1:8081");
        assert_eq!(h, "127.0.0.1:8081");
        assert_eq!(p, "/v1/users/x/orders?limit=1");
        let (a, _, p) = parse_url("http://127.0.0.1").unwrap();
        assert_eq!((a.port(), p.as_str()), (80, "/"));
        let (_, _, p) = parse_url("http://127.0.0.1:9?x=1").unwrap();
        assert_eq!(p, "/?x=1");
        let (a, _, _) = parse_url("http://[::1]:8081/").unwrap();
        assert_eq!(a.to_string(), "[::1]:8081");
    }

    #[test]
    fn what_it_cannot_send_is_refused_with_the_reason() {
        let err = |u: &str| format!("{:#}", parse_url(u).unwrap_err());
        assert!(err("https://x/").contains("http://"));
        assert!(err("http:///x").contains("no host"));
        assert!(err("http://127.0.0.1:1/a b").contains("space"));
        let opts = |extra: &[&str]| {
            let mut args = vec!["loadgen", "--url", "http://127.0.0.1:1/"];
            args.extend_from_slice(extra);
            Options::try_parse_from(args)
        };
        let plan_err = |extra: &[&str]| format!("{:#}", opts(extra).unwrap().plan().unwrap_err());
        assert!(plan_err(&["--rate", "0"]).contains("--rate"));
        assert!(plan_err(&["--duration", "0"]).contains("--duration"));
        assert!(plan_err(&["--header", "x-via"]).contains("NAME=VALUE"));
        assert!(plan_err(&["--header", "a b=c"]).contains("not a header name"));
        assert!(opts(&["--connections", "0"]).is_err());
        assert!(opts(&["--rate", "10", "--think-ms", "5"]).is_err());
        let plan = opts(&["--header", "X-Via = grpc", "--length", "12"])
            .unwrap()
            .plan()
            .unwrap();
        assert_eq!(plan.expect.headers, vec![("X-Via".into(), "grpc".into())]);
        assert_eq!(plan.expect.length, Some(12));
    }
}
