//! The Grafana dashboard and the Prometheus configuration against the real
//! binaries and a real Prometheus (Debian's `prometheus` package, which
//! `.ci/run` installs):
//!
//! - every series a dashboard query names is on the services' `/metrics`;
//! - `promtool check config` accepts deploy/prometheus/prometheus.yml;
//! - a real Prometheus scraping both services evaluates every query of the
//!   dashboard to a result, its transport variable lists every transport,
//!   and the figures follow the calls made: each transport's call rate is
//!   above zero, and JSON reads more bytes per call than protobuf for the
//!   same orders.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use user_service::upstream::Transport;

use crate::helpers::{OrderService, fixed_user, spawn_users};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn dashboard() -> Value {
    let path = root().join("deploy/grafana/dashboards/msa-transport-lab.json");
    let text = std::fs::read_to_string(&path).expect("reading the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every query of the dashboard's panels, with its panel's title.
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let title = p["title"].as_str().expect("a panel title").to_owned();
            out.push((title, t["expr"].as_str().expect("an expr").to_owned()));
        }
    }
    out
}

/// A query as Prometheus evaluates it once Grafana has filled in the
/// variables: every transport, and a 20 s rate window (the test scrapes
/// every second).
fn as_sent(expr: &str) -> String {
    expr.replace("$via", ".*")
        .replace("$__rate_interval", "20s")
}

/// The series names a query reads (every name this project exposes starts
/// with `order_`, `user_` or `process_`).
fn series(expr: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\b(?:order|user|process)_[a-z_]+\b").expect("regex");
    re.find_iter(expr).map(|m| m.as_str().to_owned()).collect()
}

/// Whether the exposition has a sample of `name`.
fn exposes(text: &str, name: &str) -> bool {
    text.lines()
        .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
}

#[test]
fn every_panel_reads_the_provisioned_prometheus_and_the_transport_variable() {
    let d = dashboard();
    let provisioned: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(
            root().join("deploy/grafana/provisioning/datasources/prometheus.yml"),
        )
        .expect("reading the data source"),
    )
    .expect("YAML");
    let uid = provisioned["datasources"][0]["uid"]
        .as_str()
        .expect("a data source uid");
    assert_eq!(
        provisioned["datasources"][0]["type"].as_str(),
        Some("prometheus")
    );
    for p in d["panels"].as_array().expect("panels") {
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"].as_str(), Some(uid), "{}", p["title"]);
        assert!(!p["targets"].as_array().expect("targets").is_empty());
    }
    let var = &d["templating"]["list"][0];
    assert_eq!(var["name"], "via");
    assert_eq!(var["datasource"]["uid"].as_str(), Some(uid));
    // Every upstream panel filters on the variable.
    for (title, expr) in queries(&d) {
        if expr.contains("user_upstream_") {
            assert!(expr.contains(r#"via=~"$via""#), "{title}: {expr}");
        }
    }
    // The provider loads the folder compose mounts the dashboards in.
    let provider: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(
            root().join("deploy/grafana/provisioning/dashboards/msa-transport-lab.yml"),
        )
        .expect("reading the provider"),
    )
    .expect("YAML");
    let path = provider["providers"][0]["options"]["path"]
        .as_str()
        .expect("a path");
    let compose = testkit::compose::compose();
    let grafana = testkit::compose::service(&compose, "grafana");
    let mounts: Vec<String> = grafana["volumes"]
        .as_sequence()
        .expect("grafana's volumes")
        .iter()
        .map(|v| v.as_str().expect("a short volume").to_owned())
        .collect();
    assert!(
        mounts.contains(&format!("./deploy/grafana/dashboards:{path}:ro")),
        "{mounts:?}"
    );
    assert!(
        mounts.contains(&"./deploy/grafana/provisioning:/etc/grafana/provisioning:ro".to_owned())
    );
}

#[test]
fn promtool_accepts_the_prometheus_configuration() {
    let promtool = which("promtool");
    let out = std::process::Command::new(promtool)
        .args(["check", "config"])
        .arg(root().join("deploy/prometheus/prometheus.yml"))
        .output()
        .expect("running promtool");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A program on the PATH, or a failure that says how to get it.
fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is not installed: `apt-get install prometheus` (Debian's package)")
        })
}

/// A Prometheus scraping `targets` every second, killed when dropped, its
/// folder removed.
struct Prometheus {
    addr: std::net::SocketAddr,
    _child: tokio::process::Child,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    async fn start(targets: &[(&str, std::net::SocketAddr)]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "msa-lab-prometheus-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let mut config = String::from("global:\n  scrape_interval: 1s\nscrape_configs:\n");
        for (job, addr) in targets {
            config += &format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: [\"{addr}\"]\n"
            );
        }
        std::fs::write(dir.join("prometheus.yml"), config).expect("writing the config");
        // A free port, released for Prometheus to take.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let child = tokio::process::Command::new(which("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting prometheus");
        let p = Prometheus {
            addr,
            _child: child,
            dir,
        };
        let http = reqwest::Client::new();
        let ready = format!("http://{addr}/-/ready");
        for _ in 0..200 {
            if http
                .get(&ready)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("prometheus did not become ready on {addr}");
    }

    /// The result vector of an instant query; a query Prometheus refuses
    /// fails the test with its error.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let url = reqwest::Url::parse_with_params(
            &format!("http://{}/api/v1/query", self.addr),
            [("query", expr)],
        )
        .expect("a URL");
        let res: Value = reqwest::Client::new()
            .get(url)
            .send()
            .await
            .expect("querying prometheus")
            .json()
            .await
            .expect("JSON");
        assert_eq!(res["status"], "success", "{expr}: {res}");
        res["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The value of the sample labelled `via` in a result.
    fn value_of(result: &[Value], via: &str) -> Option<f64> {
        result
            .iter()
            .find(|s| s["metric"]["via"] == via)
            .and_then(|s| s["value"][1].as_str()?.parse().ok())
    }
}

#[tokio::test]
async fn a_real_prometheus_answers_every_dashboard_query_from_the_services() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let d = dashboard();

    let prom =
        Prometheus::start(&[("user-service", users.rest), ("order-service", orders.rest)]).await;
    // Both services scraped.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let up = prom.query("up == 1").await;
        if up.len() == 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "prometheus scraped {up:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Calls over every transport while Prometheus scrapes, for 3 s.
    let user = fixed_user(100);
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        for via in Transport::ALL {
            users.orders_ok(user.id, via, "").await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Every series the dashboard reads is exposed by one of the binaries.
    let text = users.metrics_text().await + &orders.metrics_text().await;
    for (title, expr) in queries(&d) {
        for name in series(&expr) {
            assert!(exposes(&text, &name), "{title}: {name} is on no /metrics");
        }
    }

    for (title, expr) in queries(&d) {
        let result = prom.query(&as_sent(&expr)).await;
        assert!(!result.is_empty(), "{title}: no result for {expr}");
    }
    // The transport variable offers every transport.
    let url = reqwest::Url::parse_with_params(
        &format!("http://{}/api/v1/label/via/values", prom.addr),
        [("match[]", "user_upstream_calls_total")],
    )
    .expect("a URL");
    let values: Value = reqwest::Client::new()
        .get(url)
        .send()
        .await
        .expect("label values")
        .json()
        .await
        .expect("JSON");
    let offered: BTreeSet<&str> = values["data"]
        .as_array()
        .expect("values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for via in Transport::ALL {
        assert!(offered.contains(via.name()), "{via} missing: {offered:?}");
    }
    // The figures follow the calls: every transport called, and JSON reads
    // more bytes per call than protobuf for the same orders.
    let (_, rate) = queries(&d)
        .into_iter()
        .find(|(t, _)| t == "Call rate")
        .expect("the call rate panel");
    let rate = prom.query(&as_sent(&rate)).await;
    for via in Transport::ALL {
        let r = Prometheus::value_of(&rate, via.name()).unwrap_or(0.0);
        assert!(r > 0.0, "{via}: {r} calls/s");
    }
    let (_, per_call) = queries(&d)
        .into_iter()
        .find(|(t, e)| t == "Bytes per call" && e.contains("read_bytes"))
        .expect("the bytes-per-call panel");
    let per_call = prom.query(&as_sent(&per_call)).await;
    let json = Prometheus::value_of(&per_call, "h1-json").expect("h1-json");
    let proto = Prometheus::value_of(&per_call, "h1-proto").expect("h1-proto");
    assert!(
        json > proto * 1.5,
        "bytes per call: h1-json {json}, h1-proto {proto}"
    );

    users.stop().await;
    orders.stop().await;
}
