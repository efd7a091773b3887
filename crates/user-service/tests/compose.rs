//! docker-compose.yml against what user-service really reads.
//!
//! - every `USER_*` variable the file sets is a setting of the clap command,
//!   and the values parse (the settings are built from them, as the service
//!   would);
//! - the published ports are exactly the ports the listeners are configured
//!   on, on all interfaces, and the Dockerfile exposes the defaults;
//! - the health check asks `/readyz` on the REST port, and that exact command
//!   passes against a running user-service and fails on a closed port;
//! - the three order-service addresses name the order-service service and
//!   the ports order-service is configured on in the same file (its settings
//!   parsed by order-service's own clap command), and user-service waits for
//!   it to be healthy;
//! - the database URL names the postgres service, its credentials and a
//!   database that deploy/postgres/init.sql creates;
//! - the OpenTelemetry variables are read by the binary (it refuses a bad
//!   value of each, naming it) and the endpoint is Jaeger's 4317;
//! - k6's BASE_URL is user-service's REST port, under the name the k6
//!   scripts read.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use pgtest::compose::*;
use serde_norway::Value;

/// This service's name in docker-compose.yml and its Dockerfile target.
const SERVICE: &str = "user-service";
/// The service user-service calls, in docker-compose.yml.
const ORDER_SERVICE: &str = "order-service";
/// Jaeger all-in-one's OTLP/gRPC port.
const JAEGER_OTLP_GRPC_PORT: u16 = 4317;

/// Variables user-service reads outside its clap settings (the telemetry
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

fn user_settings(env: &BTreeMap<String, String>) -> user_service::settings::Settings {
    parse::<user_service::settings::Cli>(SERVICE, env).settings
}

fn order_settings(env: &BTreeMap<String, String>) -> order_service::settings::Settings {
    parse::<order_service::settings::Cli>(ORDER_SERVICE, env).settings
}

/// The `condition` of `name`'s `depends_on` entry for `on`.
fn depends_on<'a>(compose: &'a Value, name: &str, on: &str) -> Option<&'a str> {
    service(compose, name)
        .get("depends_on")
        .and_then(|d| d.get(on))
        .and_then(|d| d.get("condition"))
        .and_then(Value::as_str)
}

/// Runs the user-service binary with only `env` (listeners on free ports, in
/// memory) and returns its stderr, or fails if it is still running after a
/// while: then it did not refuse what it was given.
fn run_refused(env: &[(&str, &str)]) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_user-service"))
        .env_clear()
        .env("RUST_BACKTRACE", "0")
        .env("USER_REST_ADDR", "127.0.0.1:0")
        .env("USER_GRPC_ADDR", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting user-service");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("waiting for user-service") {
            let out = child.wait_with_output().expect("user-service's stderr");
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(
                !status.success(),
                "user-service accepted {env:?} and exited successfully:\n{stderr}"
            );
            return stderr;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("user-service started with {env:?}: it does not read that variable");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_user_variable_in_the_compose_file_is_a_setting_and_parses() {
    let compose = compose();
    let env = environment(&compose, SERVICE);
    let known = settings_by_env::<user_service::settings::Cli>();
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
    let s = user_settings(&env);
    assert!(
        s.database_url.is_some(),
        "the stack runs user-service on Postgres"
    );
}

#[test]
fn published_ports_are_the_listeners_on_all_interfaces() {
    let compose = compose();
    let s = user_settings(&environment(&compose, SERVICE));
    let listeners = [("REST", s.rest_addr), ("gRPC", s.grpc_addr)];
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
    let d = user_settings(&BTreeMap::new());
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
        BTreeSet::from([d.rest_addr.port(), d.grpc_addr.port()])
    );
}

#[test]
fn the_health_check_asks_readyz_on_the_rest_port() {
    let compose = compose();
    let s = user_settings(&environment(&compose, SERVICE));
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

    // In memory, on port 0; /readyz does not call order-service.
    let app =
        user_service::startup::Application::build(user_service::settings::Settings::default())
            .await
            .expect("building user-service");
    let port = app.rest_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        stopped.await.ok();
    }));
    let out = run(port).await;
    assert!(
        out.status.success(),
        "the health check failed against a ready user-service: {}",
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
fn the_order_service_addresses_are_its_ports_in_the_same_file() {
    let compose = compose();
    let s = user_settings(&environment(&compose, SERVICE));
    let order = order_settings(&environment(&compose, ORDER_SERVICE));

    let rest = &s.order_rest_url;
    assert_eq!(rest.scheme_str(), Some("http"), "{rest}");
    assert_eq!(rest.host(), Some(ORDER_SERVICE), "{rest}");
    assert_eq!(rest.port_u16(), Some(order.rest_addr.port()), "{rest}");

    let grpc = &s.order_grpc_url;
    assert_eq!(grpc.scheme_str(), Some("http"), "{grpc}");
    assert_eq!(grpc.host(), Some(ORDER_SERVICE), "{grpc}");
    assert_eq!(grpc.port_u16(), Some(order.grpc_addr.port()), "{grpc}");

    assert_eq!(
        host_port(&s.order_tcp_addr),
        (ORDER_SERVICE.to_owned(), Some(order.tcp_addr.port()))
    );

    assert_eq!(
        depends_on(&compose, SERVICE, ORDER_SERVICE),
        Some("service_healthy"),
        "user-service must start after order-service is ready"
    );
}

#[test]
fn it_waits_for_a_healthy_postgres_and_uses_a_database_the_init_script_creates() {
    let compose = compose();
    let s = user_settings(&environment(&compose, SERVICE));
    let db = url(&s.database_url.expect("a database URL").0);
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
    assert_eq!(
        depends_on(&compose, SERVICE, &db.host),
        Some("service_healthy")
    );

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

    for (name, bad, named) in TELEMETRY_PROBES {
        let stderr = run_refused(&[(name, bad)]);
        assert!(
            stderr.contains(named),
            "{name}={bad}: user-service failed, but not over {named}:\n{stderr}"
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
fn k6_calls_the_rest_port_under_the_name_its_scripts_read() {
    let compose = compose();
    let s = user_settings(&environment(&compose, SERVICE));
    let k6 = environment(&compose, "k6");
    let base = url(k6.get("BASE_URL").expect("k6 sets BASE_URL"));
    assert_eq!(base.scheme, "http");
    assert_eq!(base.host, SERVICE);
    assert_eq!(base.port, Some(s.rest_addr.port()));
    let lib = std::fs::read_to_string(root().join("k6/lib/user-orders.js"))
        .expect("reading k6/lib/user-orders.js");
    assert!(
        lib.contains("env('BASE_URL'"),
        "k6/lib/user-orders.js does not read BASE_URL"
    );
    assert_eq!(depends_on(&compose, "k6", SERVICE), Some("service_healthy"));
}
