//! Reading docker-compose.yml (and the Dockerfile) as the services' compose
//! tests do: one copy of the helpers both use.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_norway::Value;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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

/// Container ports a service publishes. Host ports must equal them: the
/// README and the k6 scripts' defaults use the same numbers on localhost.
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
        let spec = spec.strip_suffix("/tcp").unwrap_or(&spec);
        assert!(
            !spec.contains('/') && !spec.contains('-'),
            "{name}: {spec}: only single TCP ports are understood here"
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
