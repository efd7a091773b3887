//! Reading docker-compose.yml (and the Dockerfile) as the services' compose
//! tests do: one copy of the helpers both use.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_norway::Value;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

pub fn compose() -> Value {
    let path = root().join("docker-compose.yml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parsing docker-compose.yml: {e}"))
}

pub fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    compose
        .get("services")
        .and_then(|s| s.get(name))
        .unwrap_or_else(|| panic!("docker-compose.yml has no service {name:?}"))
}

pub fn scalar(v: &Value, what: &str) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("{what}: expected a plain value, found {other:?}"),
    }
}

/// A service's `environment`, in either of compose's two forms, as the
/// service gets it when the shell sets nothing: `${NAME:-default}` is its
/// default. Values the file would take from the host (no value) or
/// interpolate otherwise are refused: the test could not know them.
pub fn environment(compose: &Value, name: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    match service(compose, name).get("environment") {
        None => {}
        Some(Value::Mapping(m)) => {
            for (k, v) in m {
                let k = scalar(k, "an environment name");
                assert!(
                    !v.is_null(),
                    "{name}: {k} has no value, so it would come from the host's environment"
                );
                let v = scalar(v, &k);
                env.insert(k, v);
            }
        }
        Some(Value::Sequence(items)) => {
            for item in items {
                let item = scalar(item, "an environment entry");
                let (k, v) = item.split_once('=').unwrap_or_else(|| {
                    panic!("{name}: {item} has no value, so it would come from the host")
                });
                env.insert(k.to_owned(), v.to_owned());
            }
        }
        Some(other) => panic!("{name}: environment is neither a mapping nor a list: {other:?}"),
    }
    for (k, v) in env.iter_mut() {
        if let Some(default) = v
            .strip_prefix("${")
            .and_then(|r| r.strip_suffix('}'))
            .and_then(|r| r.split_once(":-"))
            .map(|(_, default)| default.to_owned())
        {
            *v = default;
        }
        assert!(
            !v.contains('$'),
            "{name}: {k}={v}: only a whole `${{NAME:-default}}` is understood here"
        );
    }
    env
}

/// Environment variable name -> the clap argument it sets, for command `C`.
pub fn settings_by_env<C: clap::CommandFactory>() -> BTreeMap<String, clap::Arg> {
    C::command()
        .get_arguments()
        .filter_map(|a| {
            a.get_env()
                .map(|e| (e.to_string_lossy().into_owned(), a.clone()))
        })
        .collect()
}

/// What clap command `C` (user-service's or order-service's) builds from
/// `env`, value parsers and defaults included, with the test process's own
/// environment ignored.
pub fn parse<C: clap::Parser>(bin: &str, env: &BTreeMap<String, String>) -> C {
    let mut args = vec![bin.to_owned()];
    for (name, arg) in settings_by_env::<C>() {
        let Some(value) = env.get(&name) else {
            continue;
        };
        let long = arg
            .get_long()
            .unwrap_or_else(|| panic!("{name} has no --flag"));
        if arg.get_action().takes_values() {
            args.push(format!("--{long}={value}"));
        } else {
            // A flag (`USER_SEED`): clap reads the variable as a bool.
            match value.as_str() {
                "true" => args.push(format!("--{long}")),
                "false" => {}
                other => panic!("{name}={other}: the service accepts only true or false"),
            }
        }
    }
    let cmd = C::command().mut_args(|a| a.env(Option::<&'static str>::None));
    let matches = cmd.try_get_matches_from(&args).unwrap_or_else(|e| {
        panic!("{bin} refuses the settings in docker-compose.yml ({args:?}): {e}")
    });
    C::from_arg_matches(&matches).unwrap_or_else(|e| panic!("{e}"))
}

/// Container ports a service publishes, TCP or UDP (`8443:8443/udp`, the
/// HTTP/3 listener). Host ports must equal them: the README and the k6
/// scripts' defaults use the same numbers on localhost.
pub fn published_ports(compose: &Value, name: &str) -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    let Some(list) = service(compose, name).get("ports") else {
        return ports;
    };
    for p in list.as_sequence().expect("ports is a list") {
        if let Some(target) = p.get("target") {
            let target = scalar(target, "ports.target");
            ports.insert(target.parse().expect("ports.target is a port"));
            if let Some(published) = p.get("published") {
                assert_eq!(
                    scalar(published, "ports.published"),
                    target,
                    "{name}: {p:?}"
                );
            }
            continue;
        }
        let spec = scalar(p, "a port");
        let spec = spec
            .strip_suffix("/tcp")
            .or_else(|| spec.strip_suffix("/udp"))
            .unwrap_or(&spec);
        assert!(
            !spec.contains('/') && !spec.contains('-'),
            "{name}: {spec}: only single TCP or UDP ports are understood here"
        );
        let parts: Vec<&str> = spec.rsplitn(3, ':').collect();
        let container: u16 = parts[0]
            .parse()
            .unwrap_or_else(|e| panic!("{name}: port {spec}: {e}"));
        if let Some(host) = parts.get(1) {
            assert_eq!(
                *host, parts[0],
                "{name}: {spec} publishes on another host port"
            );
        }
        ports.insert(container);
    }
    ports
}

/// `scheme://[user[:password]@]host[:port][/path]`, without any library's
/// opinion on schemes.
#[derive(Debug, PartialEq)]
pub struct Url {
    pub scheme: String,
    pub user: Option<String>,
    pub password: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    pub path: String,
}

pub fn url(s: &str) -> Url {
    let (scheme, rest) = s
        .split_once("://")
        .unwrap_or_else(|| panic!("{s} is not a URL"));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((u, p)) => (Some(u.to_owned()), Some(p.to_owned())),
            None => (Some(u.to_owned()), None),
        },
        None => (None, None),
    };
    let (host, port) = host_port(hostport);
    Url {
        scheme: scheme.to_owned(),
        user,
        password,
        host,
        port,
        path: path.to_owned(),
    }
}

pub fn host_port(s: &str) -> (String, Option<u16>) {
    match s.rsplit_once(':') {
        Some((h, p)) => (
            h.to_owned(),
            Some(p.parse().unwrap_or_else(|e| panic!("{s}: port: {e}"))),
        ),
        None => (s.to_owned(), None),
    }
}

/// The `bash -c` command of a service's health check.
pub fn healthcheck_command(compose: &Value, name: &str) -> String {
    let test = service(compose, name)
        .get("healthcheck")
        .and_then(|h| h.get("test"))
        .unwrap_or_else(|| panic!("{name} has no health check"));
    let test: Vec<String> = test
        .as_sequence()
        .unwrap_or_else(|| panic!("{name}: healthcheck.test is not a list"))
        .iter()
        .map(|v| scalar(v, "healthcheck.test"))
        .collect();
    assert_eq!(test.len(), 4, "{name}: {test:?}");
    assert_eq!(
        test[..3],
        ["CMD", "bash", "-c"],
        "{name}: the health check runs bash (the image has no curl)"
    );
    test[3].clone()
}

/// The port a `/dev/tcp/127.0.0.1/PORT` health check connects to.
pub fn healthcheck_port(cmd: &str) -> u16 {
    const TCP: &str = "/dev/tcp/127.0.0.1/";
    let at = cmd
        .find(TCP)
        .unwrap_or_else(|| panic!("the health check does not connect to {TCP}…: {cmd}"));
    let digits: String = cmd[at + TCP.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect("a port after /dev/tcp/127.0.0.1/")
}

// ---------------------------------------------------------------------------
// The checks both services' compose tests make, each given what differs.

/// Jaeger all-in-one's OTLP/gRPC port.
pub const JAEGER_OTLP_GRPC_PORT: u16 = 4317;

/// Variables a service reads outside its clap settings (the telemetry
/// crate), each with a value the binary must refuse, naming what it refuses.
/// `RUST_LOG` is apart: a bad filter is not an error.
pub const TELEMETRY_PROBES: &[(&str, &str, &str)] = &[
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "http://[not-a-uri",
        "OTLP exporter",
    ),
    ("OTEL_TRACES_SAMPLER_ARG", "2.5", "OTEL_TRACES_SAMPLER_ARG"),
    ("OTEL_TRACES_SAMPLER", "sometimes", "OTEL_TRACES_SAMPLER"),
];

/// The `condition` of `name`'s `depends_on` entry for `on`.
pub fn depends_on<'a>(compose: &'a Value, name: &str, on: &str) -> Option<&'a str> {
    service(compose, name)
        .get("depends_on")
        .and_then(|d| d.get(on))
        .and_then(|d| d.get("condition"))
        .and_then(Value::as_str)
}

/// Checks that every variable `name` sets in docker-compose.yml is a
/// setting of its clap command `C` or a telemetry variable, and returns the
/// command as the service builds it from them.
pub fn every_variable_is_a_setting<C: clap::Parser>(name: &str) -> C {
    let compose = compose();
    let env = environment(&compose, name);
    let known = settings_by_env::<C>();
    for var in env.keys() {
        if known.contains_key(var) {
            continue;
        }
        let telemetry = TELEMETRY_PROBES.iter().any(|(n, ..)| n == var)
            || var == tracing_subscriber::EnvFilter::DEFAULT_ENV;
        assert!(
            telemetry,
            "{name} reads no variable {var} (its settings: {:?})",
            known.keys().collect::<Vec<_>>()
        );
    }
    parse::<C>(name, &env)
}

/// Checks that `name`'s listeners are on all interfaces (a container
/// listening on 127.0.0.1 cannot be reached) and that it publishes exactly
/// their ports.
pub fn publishes_its_listeners(name: &str, listeners: &[(&str, std::net::SocketAddr)]) {
    for (what, addr) in listeners {
        assert!(
            addr.ip().is_unspecified(),
            "{name}'s {what} listener is on {addr}: unreachable from outside its container"
        );
    }
    let listening: BTreeSet<u16> = listeners.iter().map(|(_, a)| a.port()).collect();
    assert_eq!(
        published_ports(&compose(), name),
        listening,
        "{name} publishes other ports than it listens on"
    );
}

/// The ports the Dockerfile's stage `name` exposes.
pub fn dockerfile_exposes(name: &str) -> BTreeSet<u16> {
    let dockerfile =
        std::fs::read_to_string(root().join("Dockerfile")).expect("reading Dockerfile");
    let stage = dockerfile
        .split("\nFROM ")
        .find(|s| {
            s.lines()
                .next()
                .is_some_and(|l| l.ends_with(&format!(" AS {name}")))
        })
        .unwrap_or_else(|| panic!("the Dockerfile has no stage {name}"));
    stage
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|l| {
            l.split_whitespace().map(|p| {
                let p = p
                    .strip_suffix("/udp")
                    .or_else(|| p.strip_suffix("/tcp"))
                    .unwrap_or(p);
                p.parse::<u16>().expect("a port")
            })
        })
        .collect()
}

/// Checks that `name`'s health check asks `/readyz` on its REST port.
pub fn health_check_asks_readyz(name: &str, rest_port: u16) {
    let cmd = healthcheck_command(&compose(), name);
    assert_eq!(healthcheck_port(&cmd), rest_port, "{cmd}");
    assert!(cmd.contains("GET /readyz "), "{cmd}");
}

/// Runs `name`'s health check command, as compose would, against `port` of
/// 127.0.0.1 instead of the port in the file.
pub async fn run_health_check(name: &str, port: u16) -> std::process::Output {
    let cmd = healthcheck_command(&compose(), name);
    let in_file = format!("/dev/tcp/127.0.0.1/{}", healthcheck_port(&cmd));
    let cmd = cmd.replace(&in_file, &format!("/dev/tcp/127.0.0.1/{port}"));
    tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&cmd)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("running bash")
}

/// Checks `name`'s health check against its binary, started with `env`
/// (in memory, on free ports) and ready once it logs `ready_message`, and
/// against a closed port; then that the binary stops cleanly on SIGTERM.
pub async fn health_check_of_binary(
    name: &str,
    binary: &Path,
    env: &[(&str, &str)],
    ready_message: &str,
) {
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    let proc = crate::process::start_binary(binary, &env, ready_message).await;
    let rest: std::net::SocketAddr = proc.addr("rest").parse().expect("a REST address");
    health_check_tells_ready_from_closed(name, rest.port()).await;
    let exit = proc.sigterm().await;
    assert!(exit.success(), "{name} exited with {exit}");
}

/// Checks that `name`'s health check passes against a ready service on
/// `ready_port`, and fails with nothing listening.
pub async fn health_check_tells_ready_from_closed(name: &str, ready_port: u16) {
    let out = run_health_check(name, ready_port).await;
    assert!(
        out.status.success(),
        "the health check failed against a ready {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    assert!(
        !run_health_check(name, closed).await.status.success(),
        "the health check passed with nothing listening"
    );
}

/// Checks that `name` waits for a healthy Postgres and that `database_url`
/// names it, with its credentials, and a database its init script creates.
pub fn waits_for_postgres_and_its_database(name: &str, database_url: &str) {
    let compose = compose();
    let db = url(database_url);
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
        depends_on(&compose, name, &db.host),
        Some("service_healthy")
    );

    // The database is created by an init script the postgres service mounts.
    let database = db.path.trim_start_matches('/');
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
            .any(|s| s.contains(&format!("CREATE DATABASE {database};"))),
        "no init script of {} creates the database {database}",
        db.host
    );
}

/// The Jaeger service `host`: the v2 image, started on a configuration
/// file from this repository, which receives OTLP/gRPC on every interface
/// at [`JAEGER_OTLP_GRPC_PORT`], stores the traces in memory (bounded) and
/// serves them to the UI from that same store.
pub fn jaeger_v2_receives_otlp_grpc(compose: &Value, host: &str) {
    let jaeger = service(compose, host);
    let image = jaeger.get("image").and_then(Value::as_str).unwrap_or("");
    assert!(
        image.starts_with("jaegertracing/jaeger:2."),
        "{host} runs {image:?}, not Jaeger v2"
    );
    let command: Vec<&str> = jaeger
        .get("command")
        .and_then(Value::as_sequence)
        .map(|c| c.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let at = command.iter().position(|a| *a == "--config");
    let inside = at
        .and_then(|i| command.get(i + 1))
        .unwrap_or_else(|| panic!("{host} is not given --config FILE: {command:?}"));
    // The file mounted there, from this repository.
    let mounted = jaeger
        .get("volumes")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|v| {
            let mut p = v.split(':');
            let (from, to) = (p.next()?, p.next()?);
            (to == *inside).then(|| from.to_owned())
        })
        .unwrap_or_else(|| panic!("{host}: nothing is mounted at {inside}"));
    let path = root().join(&mounted);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let cfg: Value =
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    let at = |keys: &[&str]| -> Value {
        keys.iter()
            .try_fold(&cfg, |v, k| v.get(*k))
            .cloned()
            .unwrap_or_else(|| panic!("{}: no {}", path.display(), keys.join(".")))
    };
    let list = |keys: &[&str]| -> Vec<String> {
        at(keys)
            .as_sequence()
            .map(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let grpc = scalar(
        &at(&["receivers", "otlp", "protocols", "grpc", "endpoint"]),
        "endpoint",
    );
    assert_eq!(
        grpc,
        format!("0.0.0.0:{JAEGER_OTLP_GRPC_PORT}"),
        "other containers must reach it"
    );
    assert!(list(&["service", "pipelines", "traces", "receivers"]).contains(&"otlp".to_owned()));
    let exporters = list(&["service", "pipelines", "traces", "exporters"]);
    assert!(
        exporters.contains(&"jaeger_storage_exporter".to_owned()),
        "{exporters:?}"
    );
    let store = scalar(
        &at(&["exporters", "jaeger_storage_exporter", "trace_storage"]),
        "store",
    );
    let max = at(&[
        "extensions",
        "jaeger_storage",
        "backends",
        &store,
        "memory",
        "max_traces",
    ]);
    assert!(
        max.as_u64().is_some_and(|n| n > 0),
        "memory storage must be bounded: {max:?}"
    );
    assert_eq!(
        scalar(
            &at(&["extensions", "jaeger_query", "storage", "traces"]),
            "query store"
        ),
        store,
        "the UI reads the store the traces are written to"
    );
    let ext = list(&["service", "extensions"]);
    for e in ["jaeger_storage", "jaeger_query"] {
        assert!(ext.contains(&e.to_owned()), "{e} is not enabled: {ext:?}");
    }
}

/// Checks that the telemetry variables are read by the binary (it refuses
/// a bad value of each, naming it: `quiet` is what puts its listeners on
/// free ports) and that the stack sends `name`'s traces to Jaeger.
pub fn telemetry_goes_to_jaeger(name: &str, binary: &Path, quiet: &[(&str, &str)]) {
    let compose = compose();
    let env = environment(&compose, name);
    for (var, bad, named) in TELEMETRY_PROBES {
        let mut given = quiet.to_vec();
        given.push((var, bad));
        let out = crate::process::run_to_exit(binary, &given, std::time::Duration::from_secs(60));
        assert!(
            !out.status.success(),
            "{name} accepted {var}={bad} and exited successfully:\n{}",
            out.stderr
        );
        assert!(
            out.stderr.contains(named),
            "{var}={bad}: {name} failed, but not over {named}:\n{}",
            out.stderr
        );
    }

    let endpoint = url(env
        .get("OTEL_EXPORTER_OTLP_ENDPOINT")
        .expect("the stack exports traces"));
    assert_eq!(endpoint.scheme, "http", "Jaeger's OTLP port is plain gRPC");
    assert_eq!(endpoint.port, Some(JAEGER_OTLP_GRPC_PORT), "{endpoint:?}");
    jaeger_v2_receives_otlp_grpc(&compose, &endpoint.host);

    let ratio: f64 = env
        .get("OTEL_TRACES_SAMPLER_ARG")
        .map_or(Ok(1.0), |r| r.parse())
        .expect("a ratio");
    assert!(
        (0.0..=1.0).contains(&ratio),
        "OTEL_TRACES_SAMPLER_ARG={ratio} is not a ratio from 0 to 1"
    );
    // The argument is read only by a ratio sampler (the services refuse it
    // otherwise); parent-based, so that a trace is whole or absent.
    if env.contains_key("OTEL_TRACES_SAMPLER_ARG") {
        assert_eq!(
            env.get("OTEL_TRACES_SAMPLER").map(String::as_str),
            Some("parentbased_traceidratio"),
            "OTEL_TRACES_SAMPLER_ARG needs OTEL_TRACES_SAMPLER=parentbased_traceidratio"
        );
    }
}
