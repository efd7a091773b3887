//! Running the clients under `interop/`: one run is a script, its
//! arguments, and the one JSON object it prints. A client that cannot run
//! here (no Node, no installed packages, no venv) fails the test with the
//! command that installs it, never a skip. user-service's interop tests
//! include this file by path.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

/// No client run takes this long unless something hangs.
const RUN_BOUND: Duration = Duration::from_secs(60);

/// The workspace's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .expect("the workspace root")
}

/// The Python with the pinned gRPC packages: `PYTHON` (scripts/test sets
/// it), else scripts/setup's venv, else `python3`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("PYTHON") {
        return p.into();
    }
    let venv = root().join(".tools/venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

/// Runs `interop/python/<script>` with `args`; its JSON answer.
pub async fn python_client(script: &str, args: &[&str]) -> Value {
    let python = python();
    let what = format!("interop/python/{script} {}", args.join(" "));
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(root().join("interop/python").join(script))
        .args(args);
    let out = run(cmd, &what, || {
        format!(
            "{} could not be run: run scripts/setup (it makes .tools/venv from \
             requirements-dev.txt), or set PYTHON to a Python with `pip install -r \
             requirements-dev.txt`",
            python.display()
        )
    })
    .await;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("ModuleNotFoundError") {
            panic!(
                "{what}: a pinned Python package is missing from {}: run scripts/setup, or \
                 `{} -m pip install -r requirements-dev.txt`\n{stderr}",
                python.display(),
                python.display()
            );
        }
    }
    answer(&what, &out)
}

/// Runs `interop/node/<script>` with `args`; its JSON answer.
pub async fn node_client(script: &str, args: &[&str]) -> Value {
    let dir = root().join("interop/node");
    assert!(
        dir.join("node_modules/@connectrpc/connect-node/package.json")
            .exists()
            && dir.join("node_modules/@grpc/grpc-js/package.json").exists(),
        "interop/node's packages are not installed: run `npm ci --prefix interop/node` \
         (scripts/setup does)"
    );
    let what = format!("interop/node/{script} {}", args.join(" "));
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(dir.join(script)).args(args);
    let out = run(cmd, &what, || {
        "node could not be run: install Node.js 20 or later with npm, then run scripts/setup"
            .to_owned()
    })
    .await;
    answer(&what, &out)
}

async fn run(
    mut cmd: tokio::process::Command,
    what: &str,
    install: impl FnOnce() -> String,
) -> std::process::Output {
    cmd.current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{what}: {}", install()),
        Err(e) => panic!("{what}: {e}"),
    };
    tokio::time::timeout(RUN_BOUND, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {RUN_BOUND:?}"))
        .expect("the client's output")
}

fn answer(what: &str, out: &std::process::Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {}\n{stderr}", out.status);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: its output is not one JSON object ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
