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
//!
//! The checks both services make are `testkit::compose`'s; what is
//! user-service's own is here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use testkit::compose::*;
use user_service::settings::{Cli, Settings};

/// This service's name in docker-compose.yml and its Dockerfile target.
const SERVICE: &str = "user-service";

/// Every listener on a free port of 127.0.0.1.
const FREE_PORTS: &[(&str, &str)] = &[
    ("USER_REST_ADDR", "127.0.0.1:0"),
    ("USER_GRPC_ADDR", "127.0.0.1:0"),
];

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_user-service"))
}
/// The service user-service calls, in docker-compose.yml.
const ORDER_SERVICE: &str = "order-service";

fn user_settings(env: &BTreeMap<String, String>) -> Settings {
    parse::<Cli>(SERVICE, env).settings
}

fn order_settings(env: &BTreeMap<String, String>) -> order_service::settings::Settings {
    parse::<order_service::settings::Cli>(ORDER_SERVICE, env).settings
}

/// The settings user-service builds from the compose file.
fn in_compose() -> Settings {
    user_settings(&environment(&compose(), SERVICE))
}

#[test]
fn every_user_variable_in_the_compose_file_is_a_setting_and_parses() {
    let s = every_variable_is_a_setting::<Cli>(SERVICE).settings;
    assert!(
        s.database_url.is_some(),
        "the stack runs user-service on Postgres"
    );
}

#[test]
fn published_ports_are_the_listeners_on_all_interfaces() {
    let s = in_compose();
    publishes_its_listeners(SERVICE, &[("REST", s.rest_addr), ("gRPC", s.grpc_addr)]);
}

#[test]
fn the_dockerfile_exposes_the_default_ports() {
    let d = user_settings(&BTreeMap::new());
    assert_eq!(
        dockerfile_exposes(SERVICE),
        BTreeSet::from([d.rest_addr.port(), d.grpc_addr.port()])
    );
}

#[test]
fn the_health_check_asks_readyz_on_the_rest_port() {
    health_check_asks_readyz(SERVICE, in_compose().rest_addr.port());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_command_passes_on_a_ready_service_and_fails_on_a_closed_port() {
    // In memory; /readyz asks nothing of another service.
    health_check_of_binary(SERVICE, binary(), FREE_PORTS, "user-service listening").await;
}

#[test]
fn the_order_service_addresses_are_its_ports_in_the_same_file() {
    let compose = compose();
    let s = in_compose();
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
    let s = in_compose();
    waits_for_postgres_and_its_database(SERVICE, &s.database_url.expect("a database URL").0);
}

#[test]
fn telemetry_variables_are_read_by_the_binary_and_point_at_jaeger() {
    telemetry_goes_to_jaeger(SERVICE, binary(), FREE_PORTS);
}

#[test]
fn k6_calls_the_rest_port_under_the_name_its_scripts_read() {
    let compose = compose();
    let s = in_compose();
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

#[test]
fn prometheus_scrapes_both_services_on_their_rest_ports() {
    let compose = compose();
    let config: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(root().join("deploy/prometheus/prometheus.yml"))
            .expect("reading deploy/prometheus/prometheus.yml"),
    )
    .expect("YAML");
    let users = in_compose();
    let orders = order_settings(&environment(&compose, ORDER_SERVICE));
    for (job, port) in [
        (SERVICE, users.rest_addr.port()),
        (ORDER_SERVICE, orders.rest_addr.port()),
    ] {
        let scrape = config["scrape_configs"]
            .as_sequence()
            .expect("scrape_configs")
            .iter()
            .find(|c| c["job_name"].as_str() == Some(job))
            .unwrap_or_else(|| panic!("no job {job}"));
        assert_eq!(scrape["metrics_path"].as_str(), Some("/metrics"));
        let target = scrape["static_configs"][0]["targets"][0]
            .as_str()
            .expect("a target");
        assert_eq!(host_port(target), (job.to_owned(), Some(port)), "{job}");
    }
    let prometheus = service(&compose, "prometheus");
    let volumes = format!("{:?}", prometheus["volumes"]);
    assert!(
        volumes.contains("./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro"),
        "{volumes}"
    );
    assert!(
        format!("{:?}", prometheus["command"])
            .contains("--config.file=/etc/prometheus/prometheus.yml")
    );
    // Grafana reads the Prometheus of the same file.
    let ds: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(
            root().join("deploy/grafana/provisioning/datasources/prometheus.yml"),
        )
        .expect("reading the Grafana data source"),
    )
    .expect("YAML");
    let url = url(ds["datasources"][0]["url"].as_str().expect("a url"));
    assert_eq!((url.host.as_str(), url.port), ("prometheus", Some(9090)));
    assert_eq!(
        published_ports(&compose, "prometheus"),
        BTreeSet::from([9090])
    );
}

#[test]
fn k6_writes_its_summary_into_the_results_folder_as_the_host_user() {
    let compose = compose();
    let k6 = environment(&compose, "k6");
    let summary = k6.get("SUMMARY_JSON").expect("k6 sets SUMMARY_JSON");
    assert!(summary.starts_with("/results/"), "{summary}");
    let volumes: Vec<String> = service(&compose, "k6")["volumes"]
        .as_sequence()
        .expect("k6's volumes")
        .iter()
        .map(|v| v.as_str().expect("a short volume").to_owned())
        .collect();
    assert!(
        volumes.contains(&"./results:/results".to_owned()),
        "writable ./results: {volumes:?}"
    );
    assert!(
        root().join("results").is_dir(),
        "./results is in the repository"
    );
    assert_eq!(
        scalar(&service(&compose, "k6")["user"], "k6's user"),
        "${HOST_UID:-1000}:${HOST_GID:-1000}"
    );
    let lib = std::fs::read_to_string(root().join("k6/lib/user-orders.js"))
        .expect("reading k6/lib/user-orders.js");
    assert!(lib.contains("env('SUMMARY_JSON'"));
}
