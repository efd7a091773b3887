//! deploy/k8s against what the two binaries really read, as rendered by
//! `kubectl kustomize` (every overlay, and the k6 load):
//!
//! - every `ORDER_*` / `USER_*` variable a container sets is a setting of
//!   its service's clap command, and the values parse (secrets resolved
//!   from the rendered Secrets);
//! - container ports are the ports the settings listen on, on all
//!   interfaces; every Service's target ports name a container port, and
//!   its selector matches the pods;
//! - readiness is `/readyz` and liveness `/healthz`, on each service's
//!   admin listener (which a flood of the other listeners cannot fill),
//!   and Prometheus scrapes that port;
//! - user-service's order-service addresses name the order-service Service
//!   and its ports; in the `client` overlay its replicas are the headless
//!   Service; the OTLP endpoint is Jaeger's Service on 4317;
//! - every container runs as the Dockerfile's non-root user, on a
//!   read-only root filesystem, with requests and limits;
//! - the copies kustomize needs (k6 scripts, init.sql) match their sources;
//! - the TestRun reaches user-service's REST port under the name the k6
//!   script reads, and every variable it sets is one the script reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_norway::Value;
use testkit::compose::{parse, root, settings_by_env};

const OVERLAYS: &[&str] = &["l4", "client", "rotation"];

/// The objects `kubectl kustomize DIR` renders (the k6 scripts' copies
/// written first, as `scripts/k8s-sync` does for a user).
fn render(dir: &str) -> Vec<Value> {
    let sync = std::process::Command::new(root().join("scripts/k8s-sync"))
        .arg("--quiet")
        .status()
        .expect("running scripts/k8s-sync");
    assert!(sync.success(), "scripts/k8s-sync failed");
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(root().join(dir))
        .output()
        .unwrap_or_else(|e| {
            panic!("running kubectl ({e}): install it (Debian: apt-get install kubernetes-client)")
        });
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
        .collect()
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[*k])
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("expected a scalar, found {other:?}"),
    }
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map_or(&[], Vec::as_slice)
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| text(&o["kind"]) == kind && text(&o["metadata"]["name"]) == name)
        .unwrap_or_else(|| panic!("no {kind}/{name}"))
}

/// A Secret's key, decoded.
fn secret(objs: &[Value], name: &str, key: &str) -> String {
    let o = objs
        .iter()
        .find(|o| text(&o["kind"]) == "Secret" && text(&o["metadata"]["name"]) == name)
        .unwrap_or_else(|| panic!("no Secret {name}"));
    let b64 = text(&o["data"][key]);
    let bytes = base64_decode(&b64);
    String::from_utf8(bytes).expect("UTF-8")
}

fn base64_decode(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut buf, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = A.iter().position(|a| *a == c).expect("base64") as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
        }
    }
    out
}

/// A container's environment, secrets resolved.
fn env_of(objs: &[Value], container: &Value) -> BTreeMap<String, String> {
    seq(&container["env"])
        .iter()
        .map(|e| {
            let name = text(&e["name"]);
            let value = match e.get("value") {
                Some(v) => text(v),
                None => {
                    let r = s(e, &["valueFrom", "secretKeyRef"]);
                    secret(objs, &text(&r["name"]), &text(&r["key"]))
                }
            };
            (name, value)
        })
        .collect()
}

/// The one container of a Deployment, and the Deployment.
fn container<'a>(objs: &'a [Value], deployment: &str) -> &'a Value {
    let d = find(objs, "Deployment", deployment);
    let cs = seq(s(d, &["spec", "template", "spec", "containers"]));
    assert_eq!(cs.len(), 1, "{deployment} has one container");
    &cs[0]
}

/// `c` listens for its admin listener's `admin` address on all interfaces,
/// under the port name `admin`, and both its probes (readiness `/readyz`,
/// liveness `/healthz`) ask that port, which a flood of the others cannot
/// fill.
fn probes_on_admin(overlay: &str, c: &Value, admin: std::net::SocketAddr) {
    assert!(admin.ip().is_unspecified(), "{overlay}: admin on {admin}");
    assert_eq!(
        ports(c).get("admin"),
        Some(&admin.port()),
        "{overlay}: port admin"
    );
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(text(s(c, &[probe, "httpGet", "path"])), path);
        assert_eq!(
            text(s(c, &[probe, "httpGet", "port"])),
            "admin",
            "{overlay}: {probe}"
        );
    }
}

/// Container port name -> number.
fn ports(c: &Value) -> BTreeMap<String, u16> {
    seq(&c["ports"])
        .iter()
        .map(|p| {
            (
                text(&p["name"]),
                text(&p["containerPort"]).parse().expect("a port"),
            )
        })
        .collect()
}

fn known_or_telemetry(known: &BTreeMap<String, clap::Arg>, name: &str) -> bool {
    known.contains_key(name) || name.starts_with("OTEL_") || name == "RUST_LOG"
}

#[test]
fn every_variable_is_a_setting_and_every_port_and_probe_is_the_binary_s() {
    for overlay in OVERLAYS {
        let objs = render(&format!("deploy/k8s/overlays/{overlay}"));

        // order-service.
        let c = container(&objs, "order-service");
        let env = env_of(&objs, c);
        let known = settings_by_env::<order_service::settings::Cli>();
        for k in env.keys() {
            assert!(
                known_or_telemetry(&known, k),
                "{overlay}: order-service reads no {k}"
            );
        }
        let o = parse::<order_service::settings::Cli>("order-service", &env).settings;
        assert!(
            o.database_url.is_some(),
            "{overlay}: order-service on Postgres"
        );
        let p = ports(c);
        for (name, addr) in [
            ("rest", o.rest_addr),
            ("grpc", o.grpc_addr),
            ("tcp", o.tcp_addr),
        ] {
            assert!(addr.ip().is_unspecified(), "{overlay}: {name} on {addr}");
            assert_eq!(p.get(name), Some(&addr.port()), "{overlay}: port {name}");
        }
        let admin = o.admin_addr.expect("order-service has an admin listener");
        probes_on_admin(overlay, c, admin);
        if *overlay == "rotation" {
            assert!(o.max_connection_age_ms > 0, "rotation: an age is set");
        } else {
            assert_eq!(o.max_connection_age_ms, 0, "{overlay}: no rotation");
        }

        // user-service.
        let c = container(&objs, "user-service");
        let env = env_of(&objs, c);
        let known = settings_by_env::<user_service::settings::Cli>();
        for k in env.keys() {
            assert!(
                known_or_telemetry(&known, k),
                "{overlay}: user-service reads no {k}"
            );
        }
        let u = parse::<user_service::settings::Cli>("user-service", &env).settings;
        let p = ports(c);
        for (name, addr) in [("rest", u.rest_addr), ("grpc", u.grpc_addr)] {
            assert!(addr.ip().is_unspecified(), "{overlay}: {name} on {addr}");
            assert_eq!(p.get(name), Some(&addr.port()), "{overlay}: port {name}");
        }
        let admin = u.admin_addr.expect("user-service has an admin listener");
        probes_on_admin(overlay, c, admin);

        // user-service reaches order-service's Service on its ports.
        let svc = find(&objs, "Service", "order-service");
        let svc_ports: BTreeMap<String, u16> = seq(s(svc, &["spec", "ports"]))
            .iter()
            .map(|p| (text(&p["name"]), text(&p["port"]).parse().expect("a port")))
            .collect();
        assert_eq!(u.order_rest_url.host(), Some("order-service"));
        assert_eq!(u.order_rest_url.port_u16(), svc_ports.get("rest").copied());
        assert_eq!(u.order_grpc_url.host(), Some("order-service"));
        assert_eq!(u.order_grpc_url.port_u16(), svc_ports.get("grpc").copied());
        assert_eq!(
            u.order_tcp_addr,
            format!("order-service:{}", svc_ports["tcp"]),
            "{overlay}"
        );
        if *overlay == "client" {
            assert_eq!(u.order_replicas, ["order-service-headless"]);
            let headless = find(&objs, "Service", "order-service-headless");
            assert_eq!(text(s(headless, &["spec", "clusterIP"])), "None");
            assert_eq!(
                s(headless, &["spec", "selector"]),
                s(svc, &["spec", "selector"])
            );
        } else {
            assert!(
                u.order_replicas.is_empty(),
                "{overlay}: no client balancing"
            );
        }

        // Jaeger.
        for name in ["order-service", "user-service"] {
            let env = env_of(&objs, container(&objs, name));
            let endpoint = testkit::compose::url(&env["OTEL_EXPORTER_OTLP_ENDPOINT"]);
            let jaeger = find(&objs, "Service", &endpoint.host);
            assert!(
                seq(s(jaeger, &["spec", "ports"]))
                    .iter()
                    .any(|p| text(&p["port"]) == endpoint.port.expect("a port").to_string()),
                "{overlay}: {name} exports to a port Jaeger's Service has"
            );
            assert_eq!(endpoint.port, Some(testkit::compose::JAEGER_OTLP_GRPC_PORT));
        }
        jaeger_v2_runs_the_composes_configuration(overlay, &objs);
        grafana_and_prometheus_find_the_dashboard_and_the_pods(overlay, &objs);

        services_select_pods_and_name_their_ports(overlay, &objs);
        every_container_is_locked_down(overlay, &objs);
    }
}

/// Every Service selects some pods, and targets ports they name.
fn services_select_pods_and_name_their_ports(overlay: &str, objs: &[Value]) {
    let pods: Vec<(&Value, &Value)> = objs
        .iter()
        .filter(|o| matches!(text(&o["kind"]).as_str(), "Deployment" | "StatefulSet"))
        .map(|o| {
            let t = s(o, &["spec", "template"]);
            (s(t, &["metadata", "labels"]), s(t, &["spec", "containers"]))
        })
        .collect();
    for svc in objs.iter().filter(|o| text(&o["kind"]) == "Service") {
        let name = text(s(svc, &["metadata", "name"]));
        let selector = s(svc, &["spec", "selector"])
            .as_mapping()
            .unwrap_or_else(|| panic!("{name} has a selector"));
        let (_, containers) = pods
            .iter()
            .find(|(labels, _)| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .unwrap_or_else(|| panic!("{overlay}: Service {name} selects no pod"));
        let named: BTreeSet<String> = seq(containers)
            .iter()
            .flat_map(|c| ports(c).into_keys())
            .collect();
        for p in seq(s(svc, &["spec", "ports"])) {
            let target = text(&p["targetPort"]);
            assert!(
                named.contains(&target),
                "{overlay}: Service {name} targets {target}, which its pods do not name"
            );
        }
    }
    for pdb in objs
        .iter()
        .filter(|o| text(&o["kind"]) == "PodDisruptionBudget")
    {
        let sel = s(pdb, &["spec", "selector", "matchLabels"])
            .as_mapping()
            .expect("matchLabels");
        assert!(
            pods.iter()
                .any(|(labels, _)| sel.iter().all(|(k, v)| labels.get(k) == Some(v))),
            "{overlay}: a PodDisruptionBudget selects no pod"
        );
    }
}

/// The Dockerfile's user.
fn image_user() -> String {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let line = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the Dockerfile sets USER");
    line.split(':').next().unwrap_or(line).to_owned()
}

/// Non-root (the services as the Dockerfile's user), read-only root
/// filesystem, no privilege escalation, requests and limits: every
/// container.
fn every_container_is_locked_down(overlay: &str, objs: &[Value]) {
    let user = image_user();
    for o in objs.iter().filter(|o| {
        matches!(
            text(&o["kind"]).as_str(),
            "Deployment" | "StatefulSet" | "Job"
        )
    }) {
        let name = text(s(o, &["metadata", "name"]));
        let pod = s(o, &["spec", "template", "spec"]);
        assert_eq!(
            s(pod, &["securityContext", "runAsNonRoot"]).as_bool(),
            Some(true),
            "{overlay}: {name}"
        );
        for c in seq(&pod["containers"]) {
            let image = text(&c["image"]);
            if image.starts_with("msa-lab/") {
                assert_eq!(
                    text(s(pod, &["securityContext", "runAsUser"])),
                    user,
                    "{overlay}: {name} runs as the image's user"
                );
            }
            let sc = &c["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{name}");
            assert_eq!(
                sc["allowPrivilegeEscalation"].as_bool(),
                Some(false),
                "{name}"
            );
            for k in ["requests", "limits"] {
                for r in ["cpu", "memory"] {
                    assert!(
                        c["resources"][k].get(r).is_some(),
                        "{overlay}: {name} has no {k}.{r}"
                    );
                }
            }
        }
    }
}

fn file(p: impl AsRef<Path>) -> String {
    let p: PathBuf = root().join(p);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

#[test]
fn the_copies_kustomize_needs_are_their_sources() {
    // The k6 scripts in the ConfigMap are k6/'s, the one import rewritten.
    let objs = render("deploy/k8s/k6");
    let cm = find(&objs, "ConfigMap", "k6-scripts");
    assert_eq!(
        text(&cm["data"]["closed-loop.js"]),
        file("k6/closed-loop.js").replace("from './lib/user-orders.js'", "from './user-orders.js'")
    );
    assert_eq!(
        text(&cm["data"]["user-orders.js"]),
        file("k6/lib/user-orders.js")
    );
    // init.sql, committed (two lines), is deploy/postgres/init.sql; the
    // Jaeger configuration is compose's.
    assert_eq!(
        file("deploy/k8s/base/init.sql"),
        file("deploy/postgres/init.sql"),
        "run scripts/k8s-sync"
    );
    assert_eq!(
        file("deploy/k8s/base/jaeger-config.yaml"),
        file("deploy/jaeger/config.yaml"),
        "run scripts/k8s-sync"
    );
    assert_eq!(
        file("deploy/k8s/base/grafana-dashboard.json"),
        file("deploy/grafana/dashboards/msa-transport-lab.json"),
        "run scripts/k8s-sync"
    );
}

/// The dashboard of compose's Grafana is in a ConfigMap a Grafana sidecar
/// picks up, and both services' pods ask to be scraped on their REST port
/// (the port their container names `rest`), at /metrics.
fn grafana_and_prometheus_find_the_dashboard_and_the_pods(overlay: &str, objs: &[Value]) {
    let cm = objs
        .iter()
        .find(|o| {
            text(&o["kind"]) == "ConfigMap"
                && text(&o["metadata"]["name"]).starts_with("grafana-dashboard-msa-transport-lab")
        })
        .unwrap_or_else(|| panic!("{overlay}: no dashboard ConfigMap"));
    assert_eq!(text(&cm["metadata"]["labels"]["grafana_dashboard"]), "1");
    assert_eq!(
        text(&cm["data"]["msa-transport-lab.json"]),
        file("deploy/grafana/dashboards/msa-transport-lab.json"),
        "{overlay}"
    );
    for name in ["order-service", "user-service"] {
        let meta = s(
            find(objs, "Deployment", name),
            &["spec", "template", "metadata", "annotations"],
        );
        assert_eq!(
            text(&meta["prometheus.io/scrape"]),
            "true",
            "{overlay}: {name}"
        );
        assert_eq!(
            text(&meta["prometheus.io/path"]),
            "/metrics",
            "{overlay}: {name}"
        );
        let port: u16 = text(&meta["prometheus.io/port"]).parse().expect("a port");
        assert_eq!(
            ports(container(objs, name)).get("admin"),
            Some(&port),
            "{overlay}: {name} is scraped on another port than its admin listener"
        );
    }
}

#[test]
fn the_k6_test_run_reaches_user_service_under_the_names_the_script_reads() {
    let objs = render("deploy/k8s/k6");
    let run = find(&objs, "TestRun", "user-orders");
    let cm_name = text(s(run, &["spec", "script", "configMap", "name"]));
    let file_name = text(s(run, &["spec", "script", "configMap", "file"]));
    let cm = find(&objs, "ConfigMap", &cm_name);
    assert!(
        cm["data"].get(file_name.as_str()).is_some(),
        "{file_name} in {cm_name}"
    );
    let script = file("k6/lib/user-orders.js") + &file("k6/closed-loop.js");
    let env: BTreeMap<String, String> = seq(s(run, &["spec", "runner", "env"]))
        .iter()
        .map(|e| (text(&e["name"]), text(&e["value"])))
        .collect();
    for name in env.keys() {
        assert!(
            script.contains(&format!("env('{name}'")) || script.contains(&format!("int('{name}'")),
            "the TestRun sets {name}, which the k6 script does not read"
        );
    }
    assert!(
        script.contains("[params.summaryJson]") && env["SUMMARY_JSON"] == "stdout",
        "each runner prints its JSON summary to its log, for `lab merge`"
    );
    // BASE_URL is user-service's Service, REST port, in the stack.
    let stack = render("deploy/k8s/overlays/l4");
    let base = testkit::compose::url(&env["BASE_URL"]);
    let svc = find(&stack, "Service", &base.host);
    let rest = seq(s(svc, &["spec", "ports"]))
        .iter()
        .find(|p| text(&p["name"]) == "rest")
        .map(|p| text(&p["port"]));
    assert_eq!(rest, base.port.map(|p| p.to_string()));
    assert!(
        env["VIA"]
            .parse::<user_service::upstream::Transport>()
            .is_ok()
    );
}

/// Jaeger is the v2 image, started with `--config` on the file its
/// ConfigMap mounts, which holds deploy/jaeger/config.yaml (the file compose
/// mounts and `testkit::compose` checks receives OTLP and stores in memory).
fn jaeger_v2_runs_the_composes_configuration(overlay: &str, objs: &[Value]) {
    let c = container(objs, "jaeger");
    let image = text(&c["image"]);
    assert!(
        image.starts_with("jaegertracing/jaeger:2."),
        "{overlay}: Jaeger runs {image}, not v2"
    );
    let args: Vec<String> = seq(&c["args"]).iter().map(text).collect();
    let at = args.iter().position(|a| a == "--config");
    let path = at
        .and_then(|i| args.get(i + 1))
        .unwrap_or_else(|| panic!("{overlay}: Jaeger is not given --config FILE: {args:?}"));
    let (dir, name) = path.rsplit_once('/').expect("an absolute path");
    let mount = seq(&c["volumeMounts"])
        .iter()
        .find(|m| text(&m["mountPath"]) == dir)
        .unwrap_or_else(|| panic!("{overlay}: nothing is mounted at {dir}"));
    let pod = s(
        find(objs, "Deployment", "jaeger"),
        &["spec", "template", "spec"],
    );
    let volume = seq(&pod["volumes"])
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    // kustomize suffixes a generated ConfigMap's name with its hash.
    let cm_name = text(&volume["configMap"]["name"]);
    let cm = objs
        .iter()
        .find(|o| text(&o["kind"]) == "ConfigMap" && text(&o["metadata"]["name"]) == cm_name)
        .unwrap_or_else(|| panic!("{overlay}: no ConfigMap {cm_name}"));
    assert_eq!(
        text(&cm["data"][name]),
        file("deploy/jaeger/config.yaml"),
        "{overlay}: Jaeger's ConfigMap is not deploy/jaeger/config.yaml"
    );
}
