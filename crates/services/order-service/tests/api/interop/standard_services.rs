//! gRPC's standard services as third-party tools use them: health through
//! grpcio-health-checking's stubs (as a Kubernetes probe or a client-side
//! health checker asks) or grpc-js's generic client, and reflection through
//! grpcio-reflection's client or grpc-js with protobufjs decoding the
//! descriptors (as grpcurl and Postman list and describe a port).
//! user-service's interop tests include this file by path.

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::kit::{node_client, python_client};

/// The third-party client that asks.
#[derive(Debug, Clone, Copy)]
pub enum Client {
    /// Python's grpcio, with grpcio-health-checking and grpcio-reflection.
    Grpcio,
    /// Node's @grpc/grpc-js (interop/node/grpc_js.mjs).
    GrpcJs,
}

impl Client {
    /// Health: `args` are the scenario, the address and the services.
    async fn health(self, args: &[&str]) -> Value {
        match self {
            Client::Grpcio => python_client("health.py", args).await,
            Client::GrpcJs => {
                let all: Vec<&str> = std::iter::once("health")
                    .chain(args.iter().copied())
                    .collect();
                node_client("grpc_js.mjs", &all).await
            }
        }
    }
}

/// A service a port serves and its methods: (name, client streaming, server
/// streaming).
pub type Served<'a> = (&'a str, &'a [(&'a str, bool, bool)]);

/// grpc.health.v1.Health, which both services serve.
pub const HEALTH: Served<'static> = (
    "grpc.health.v1.Health",
    &[("Check", false, false), ("Watch", false, true)],
);

/// The reflection services: a port may list them beside the rest, or not.
const REFLECTION: [&str; 2] = [
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Check answers SERVING for the whole server ("") and each of `apis`, and
/// NOT_FOUND for a name no service has; a Watch on the whole server yields
/// SERVING and stays open until the caller's deadline.
pub async fn assert_serving(client: Client, addr: SocketAddr, apis: &[&str]) {
    let addr = addr.to_string();
    let mut args = vec!["check", &addr, ""];
    args.extend(apis);
    let got = client.health(&args).await;
    for name in std::iter::once(&"").chain(apis) {
        assert_eq!(
            got["check"][name]["status"], "SERVING",
            "Check({name:?}): {got}"
        );
    }
    assert_eq!(
        got["check"]["no.such.Service"]["error"]["code"], "NOT_FOUND",
        "Check of a name no service has: {got}"
    );
    assert_eq!(got["watch"]["statuses"], json!(["SERVING"]), "{got}");
    assert_eq!(
        got["watch"]["end"]["code"], "DEADLINE_EXCEEDED",
        "a Watch stays open until the caller's deadline: {got}"
    );
}

/// A Watch on a name no service has yields SERVICE_UNKNOWN and stays open
/// (the service may be registered later), as grpc.health.v1 specifies;
/// it is not ended with NOT_FOUND, which is Check's answer.
pub async fn assert_watch_of_unknown_says_service_unknown(client: Client, addr: SocketAddr) {
    let got = client.health(&["unknown", &addr.to_string()]).await;
    assert_eq!(
        got["watch"]["statuses"].get(0),
        Some(&json!("SERVICE_UNKNOWN")),
        "the first answer of a Watch on an unknown service: {got}"
    );
    assert_eq!(
        got["watch"]["end"]["code"], "DEADLINE_EXCEEDED",
        "the Watch stays open until the caller's deadline: {got}"
    );
}

/// What reflection `version` ("v1" or "v1alpha") says the port serves, as
/// `client` reads it.
pub async fn reflect(client: Client, addr: SocketAddr, version: &str) -> Value {
    let addr = addr.to_string();
    match client {
        Client::Grpcio => python_client("reflection.py", &[version, &addr]).await,
        Client::GrpcJs => node_client("grpc_js.mjs", &["reflection", version, &addr]).await,
    }
}

/// Every one of `served` is listed, and its descriptors (fetched through
/// reflection, with their imports) name its methods and their streaming.
pub fn assert_describes(got: &Value, served: &[Served<'_>]) {
    let listed = listed(got);
    for (name, methods) in served {
        assert!(
            listed.contains(&(*name).to_owned()),
            "{name} not listed: {got}"
        );
        let want: Vec<Value> = methods
            .iter()
            .map(|(m, client, server)| json!([m, client, server]))
            .collect();
        assert_eq!(got["methods"][name], json!(want), "{name}'s methods");
    }
}

/// Nothing is listed but `served` (and reflection itself): a client that
/// lists a port's services and calls one gets an answer, not UNIMPLEMENTED.
pub fn assert_lists_only(got: &Value, served: &[Served<'_>]) {
    let mut listed = listed(got);
    listed.retain(|s| !REFLECTION.contains(&s.as_str()));
    let mut want: Vec<String> = served.iter().map(|(n, _)| (*n).to_owned()).collect();
    want.sort();
    assert_eq!(listed, want, "the services listed, reflection aside: {got}");
}

fn listed(got: &Value) -> Vec<String> {
    let services = got["services"]
        .as_array()
        .unwrap_or_else(|| panic!("reflection gave no list of services: {got}"));
    services
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_owned())
        .collect()
}
