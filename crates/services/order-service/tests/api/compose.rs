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
//! other makes one of these fail. The checks both services make are
//! `testkit::compose`'s; what is order-service's own is here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use order_service::settings::{Cli, Settings};
use serde_norway::Value;
use testkit::compose::*;

/// This service's name in docker-compose.yml and its Dockerfile target.
const SERVICE: &str = "order-service";

/// Every listener on a free port of 127.0.0.1.
const FREE_PORTS: &[(&str, &str)] = &[
    ("ORDER_REST_ADDR", "127.0.0.1:0"),
    ("ORDER_GRPC_ADDR", "127.0.0.1:0"),
    ("ORDER_TCP_ADDR", "127.0.0.1:0"),
    ("ORDER_H3_ADDR", "127.0.0.1:0"),
];

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_order-service"))
}

/// The settings order-service builds from the compose file.
fn in_compose() -> Settings {
    parse::<Cli>(SERVICE, &environment(&compose(), SERVICE)).settings
}

#[test]
fn every_order_variable_in_the_compose_file_is_a_setting_and_parses() {
    let s = every_variable_is_a_setting::<Cli>(SERVICE).settings;
    assert!(
        s.database_url.is_some(),
        "the stack runs order-service on Postgres"
    );
}

#[test]
fn published_ports_are_the_listeners_on_all_interfaces() {
    let s = in_compose();
    publishes_its_listeners(
        SERVICE,
        &[
            ("REST", s.rest_addr),
            ("gRPC", s.grpc_addr),
            ("raw TCP", s.tcp_addr),
            ("HTTP/3 (UDP)", s.h3_addr.0.expect("HTTP/3 on in compose")),
        ],
    );
}

#[test]
fn the_dockerfile_exposes_the_default_ports() {
    let d = parse::<Cli>(SERVICE, &BTreeMap::new()).settings;
    assert_eq!(
        dockerfile_exposes(SERVICE),
        BTreeSet::from([
            d.rest_addr.port(),
            d.grpc_addr.port(),
            d.tcp_addr.port(),
            d.h3_addr.0.expect("HTTP/3 on by default").port(),
        ])
    );
}

#[test]
fn the_health_check_asks_readyz_on_the_rest_port() {
    health_check_asks_readyz(SERVICE, in_compose().rest_addr.port());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_command_passes_on_a_ready_service_and_fails_on_a_closed_port() {
    // In memory; /readyz asks nothing of another service.
    health_check_of_binary(
        SERVICE,
        binary(),
        FREE_PORTS,
        "order-service ready to serve",
    )
    .await;
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
fn k6_reaches_the_grpc_port_under_the_name_its_script_reads() {
    let compose = compose();
    let s = in_compose();
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

/// Postgres is reachable from the host for `lab run --database-url`, but
/// only on loopback, and not on 5432, where a local Postgres usually is; it
/// forwards to the port the services' URLs and the health check use.
#[test]
fn postgres_is_published_on_loopback_beside_a_local_postgres() {
    let compose = compose();
    let ports: Vec<&str> = service(&compose, "postgres")
        .get("ports")
        .and_then(Value::as_sequence)
        .expect("postgres publishes a port")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(ports.len(), 1, "{ports:?}");
    let parts: Vec<&str> = ports[0].split(':').collect();
    assert_eq!(
        parts.len(),
        3,
        "host address, host port, container port: {ports:?}"
    );
    assert_eq!(
        parts[0], "127.0.0.1",
        "published beyond loopback: {ports:?}"
    );
    assert_ne!(parts[1], "5432", "clashes with a local Postgres: {ports:?}");
    // The services reach it inside the stack at the container port.
    let url = in_compose().database_url.expect("a database URL").0;
    let authority = url
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the URL names a host");
    let (host, port) = host_port(authority);
    assert_eq!(host, "postgres");
    assert_eq!(port.map(|p| p.to_string()).as_deref(), Some(parts[2]));
}
