//! docker-compose.yml against what order-service really reads.
//!
//! - every `ORDER_*` variable the file sets is a setting of the clap command,
//!   and the values parse (the settings are built from them, as the service
//!   would);
//! - the published ports are exactly the ports the listeners are configured
//!   on, the listeners are on all interfaces (a container listening on
//!   127.0.0.1 cannot be reached), and the Dockerfile exposes the defaults;
//! - the health check asks `/readyz` on the REST port, and that exact command
//!   passes against a running order-service and fails on a closed port;
//! - the database URL names the postgres service, its credentials and a
//!   database that deploy/postgres/init.sql creates;
//! - the other variables are read by the binary: OpenTelemetry ones are
//!   proven by running order-service with a bad value and seeing it refuse
//!   that very variable; the OTLP endpoint is Jaeger's 4317;
//! - the k6 service reaches order-service's gRPC port under the name
//!   grpc-direct.js reads.
//!
//! Renaming a variable or moving a port in the code or in the file without the
//! other makes one of these fail.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use order_service::settings::{Cli, Settings};
use pgtest::compose::*;
use serde_norway::Value;

/// This service's name in docker-compose.yml and its Dockerfile target.
const SERVICE: &str = "order-service";
/// Jaeger all-in-one's OTLP/gRPC port.
const JAEGER_OTLP_GRPC_PORT: u16 = 4317;

/// Variables order-service reads outside its clap settings (the telemetry
/// crate), each with a value the binary must refuse, naming what it refuses.
/// RUST_LOG is checked apart: a bad filter is not an error.
const TELEMETRY_PROBES: &[(&str, &str, &str)] = &[
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "http://[not-a-uri",
        "OTLP exporter",
    ),
    ("OTEL_TRACES_SAMPLER_ARG", "2.5", "OTEL_TRACES_SAMPLER_ARG"),
];

/// Runs the order-service binary with only `env` (listeners on free ports, in
/// memory) and returns its stderr, or fails if it is still running after a
/// while: then it did not refuse what it was given.
fn run_refused(env: &[(&str, &str)]) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_order-service"))
        .env_clear()
        .env("RUST_BACKTRACE", "0")
        .env("ORDER_REST_ADDR", "127.0.0.1:0")
        .env("ORDER_GRPC_ADDR", "127.0.0.1:0")
        .env("ORDER_TCP_ADDR", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting order-service");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("waiting for order-service") {
            let out = child.wait_with_output().expect("order-service's stderr");
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(
                !status.success(),
                "order-service accepted {env:?} and exited successfully:\n{stderr}"
            );
            return stderr;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("order-service started with {env:?}: it does not read that variable");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The settings order-service builds from `env`, through its own clap
/// command, with the test process's own environment ignored.
fn settings_from(env: &BTreeMap<String, String>) -> Settings {
    parse::<Cli>(SERVICE, env).settings
}

#[test]
fn every_order_variable_in_the_compose_file_is_a_setting_and_parses() {
    let compose = compose();
    let env = environment(&compose, SERVICE);
    let known = settings_by_env::<Cli>();
    for name in env.keys() {
        if known.contains_key(name) {
            continue;
        }
        let telemetry = TELEMETRY_PROBES.iter().any(|(n, ..)| n == name)
            || name == tracing_subscriber::EnvFilter::DEFAULT_ENV;
        assert!(
            telemetry,
            "{SERVICE} reads no variable {name} (its settings: {:?})",
            known.keys().collect::<Vec<_>>()
        );
    }
    // The values parse as the service parses them.
    let s = settings_from(&env);
    assert!(
        s.database_url.is_some(),
        "the stack runs order-service on Postgres"
    );
}

#[test]
fn published_ports_are_the_listeners_on_all_interfaces() {
    let compose = compose();
    let s = settings_from(&environment(&compose, SERVICE));
    let listeners = [
        ("REST", s.rest_addr),
        ("gRPC", s.grpc_addr),
        ("raw TCP", s.tcp_addr),
    ];
    for (what, addr) in listeners {
        assert!(
            addr.ip().is_unspecified(),
            "{SERVICE}'s {what} listener is on {addr}: unreachable from outside its container"
        );
    }
    let listening: BTreeSet<u16> = listeners.iter().map(|(_, a)| a.port()).collect();
    assert_eq!(
        published_ports(&compose, SERVICE),
        listening,
        "{SERVICE} publishes other ports than it listens on"
    );
}

#[test]
fn the_dockerfile_exposes_the_default_ports() {
    let d = settings_from(&BTreeMap::new());
    let dockerfile =
        std::fs::read_to_string(root().join("Dockerfile")).expect("reading Dockerfile");
    let stage = dockerfile
        .split("\nFROM ")
        .find(|s| {
            s.lines()
                .next()
                .is_some_and(|l| l.ends_with(&format!(" AS {SERVICE}")))
        })
        .unwrap_or_else(|| panic!("the Dockerfile has no stage {SERVICE}"));
    let exposed: BTreeSet<u16> = stage
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|l| {
            l.split_whitespace()
                .map(|p| p.parse::<u16>().expect("a port"))
        })
        .collect();
    assert_eq!(
        exposed,
        BTreeSet::from([d.rest_addr.port(), d.grpc_addr.port(), d.tcp_addr.port()])
    );
}

#[test]
fn the_health_check_asks_readyz_on_the_rest_port() {
    let compose = compose();
    let s = settings_from(&environment(&compose, SERVICE));
    let cmd = healthcheck_command(&compose, SERVICE);
    assert_eq!(healthcheck_port(&cmd), s.rest_addr.port(), "{cmd}");
    assert!(cmd.contains("GET /readyz "), "{cmd}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_command_passes_on_a_ready_service_and_fails_on_a_closed_port() {
    let compose = compose();
    let cmd = healthcheck_command(&compose, SERVICE);
    let in_file = format!("/dev/tcp/127.0.0.1/{}", healthcheck_port(&cmd));
    let run = |port: u16| {
        let cmd = cmd.replace(&in_file, &format!("/dev/tcp/127.0.0.1/{port}"));
        async move {
            tokio::process::Command::new("bash")
                .arg("-c")
                .arg(&cmd)
                .stdin(Stdio::null())
                .output()
                .await
                .expect("running bash")
        }
    };

    let app = order_service::startup::Application::build(Settings::for_tests(None))
        .await
        .expect("building order-service");
    let port = app.rest_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        stopped.await.ok();
    }));
    let out = run(port).await;
    assert!(
        out.status.success(),
        "the health check failed against a ready order-service: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop.send(()).ok();
    server.await.expect("server task").expect("server");

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    assert!(
        !run(closed).await.status.success(),
        "the health check passed with nothing listening"
    );
}

#[test]
fn it_waits_for_a_healthy_postgres_and_uses_a_database_the_init_script_creates() {
    let compose = compose();
    let env = environment(&compose, SERVICE);
    let s = settings_from(&env);
    let db = url(s.database_url.as_deref().expect("a database URL"));
    assert_eq!(db.scheme, "postgres");
    let pg = service(&compose, &db.host);
    assert!(
        pg.get("healthcheck").is_some(),
        "{} has no health check",
        db.host
    );
    let pg_env = environment(&compose, &db.host);
    assert_eq!(
        db.user.as_deref(),
        pg_env.get("POSTGRES_USER").map(String::as_str)
    );
    assert_eq!(
        db.password.as_deref(),
        pg_env.get("POSTGRES_PASSWORD").map(String::as_str)
    );
    assert_eq!(db.port.unwrap_or(5432), 5432, "Postgres listens on 5432");

    let condition = service(&compose, SERVICE)
        .get("depends_on")
        .and_then(|d| d.get(db.host.as_str()))
        .and_then(|d| d.get("condition"))
        .and_then(Value::as_str);
    assert_eq!(condition, Some("service_healthy"));

    // The database is created by an init script the postgres service mounts.
    let name = db.path.trim_start_matches('/');
    let scripts: Vec<String> = pg
        .get("volumes")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|v| {
            let (host, container) = v.split_once(':')?;
            container
                .starts_with("/docker-entrypoint-initdb.d/")
                .then(|| {
                    std::fs::read_to_string(root().join(host)).expect("reading an init script")
                })
        })
        .collect();
    assert!(
        scripts
            .iter()
            .any(|s| s.contains(&format!("CREATE DATABASE {name};"))),
        "no init script of {} creates the database {name}",
        db.host
    );
}

#[test]
fn telemetry_variables_are_read_by_the_binary_and_point_at_jaeger() {
    let compose = compose();
    let env = environment(&compose, SERVICE);

    // The binary reads these names: a bad value makes it refuse to start,
    // naming what it refused.
    for (name, bad, named) in TELEMETRY_PROBES {
        let stderr = run_refused(&[(name, bad)]);
        assert!(
            stderr.contains(named),
            "{name}={bad}: order-service failed, but not over {named}:\n{stderr}"
        );
    }

    let endpoint = url(env
        .get("OTEL_EXPORTER_OTLP_ENDPOINT")
        .expect("the stack exports traces"));
    assert_eq!(endpoint.scheme, "http", "Jaeger's OTLP port is plain gRPC");
    assert_eq!(endpoint.port, Some(JAEGER_OTLP_GRPC_PORT), "{endpoint:?}");
    let jaeger = environment(&compose, &endpoint.host);
    assert_eq!(
        jaeger.get("COLLECTOR_OTLP_ENABLED").map(String::as_str),
        Some("true")
    );
    assert!(
        service(&compose, &endpoint.host)
            .get("image")
            .and_then(Value::as_str)
            .is_some_and(|i| i.starts_with("jaegertracing/")),
        "{} is not Jaeger",
        endpoint.host
    );

    let ratio: f64 = env
        .get("OTEL_TRACES_SAMPLER_ARG")
        .map_or(Ok(1.0), |r| r.parse())
        .expect("a ratio");
    assert!(
        (0.0..=1.0).contains(&ratio),
        "OTEL_TRACES_SAMPLER_ARG={ratio} is not a ratio from 0 to 1"
    );
}

#[test]
fn k6_reaches_the_grpc_port_under_the_name_its_script_reads() {
    let compose = compose();
    let s = settings_from(&environment(&compose, SERVICE));
    let k6 = environment(&compose, "k6");
    let addr = k6.get("GRPC_ADDR").expect("k6 sets GRPC_ADDR");
    assert_eq!(
        host_port(addr),
        (SERVICE.to_owned(), Some(s.grpc_addr.port()))
    );
    let script = std::fs::read_to_string(root().join("k6/grpc-direct.js"))
        .expect("reading k6/grpc-direct.js");
    assert!(
        script.contains("env('GRPC_ADDR'"),
        "k6/grpc-direct.js does not read GRPC_ADDR"
    );
    // grpc-direct.js loads ../proto from its own folder.
    let volumes: Vec<&str> = service(&compose, "k6")
        .get("volumes")
        .and_then(Value::as_sequence)
        .expect("k6 mounts volumes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(volumes.contains(&"./k6:/k6:ro"), "{volumes:?}");
    assert!(volumes.contains(&"./proto:/proto:ro"), "{volumes:?}");
    assert!(
        script.contains("client.load(['../proto']"),
        "the script loads the contract from elsewhere now"
    );
}
