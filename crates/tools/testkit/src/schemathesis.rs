//! schemathesis (PyPI), run against a served OpenAPI document: both
//! services' hostile-input tests call [`run`].
//!
//! Needs schemathesis in the Python that `PYTHON` names, or in the
//! workspace's `.tools/venv` (`./scripts/test` installs it from
//! requirements-dev.txt). `SCHEMATHESIS_SEED` replays another seed;
//! `SCHEMATHESIS_EXAMPLES` changes the examples per operation.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Python that has schemathesis: `PYTHON`, else the project's venv.
fn python_with_schemathesis() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let python = std::env::var_os("PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".tools/venv/bin/python"));
    let found = std::process::Command::new(&python)
        .args(["-c", "import schemathesis"])
        .output();
    assert!(
        found.as_ref().is_ok_and(|o| o.status.success()),
        "schemathesis is not installed for {}: run ./scripts/test (it creates .tools/venv from \
         requirements-dev.txt), or `python3 -m venv .tools/venv && .tools/venv/bin/pip install \
         -r requirements-dev.txt`, or point PYTHON at a Python that has it ({})",
        python.display(),
        match &found {
            Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => e.to_string(),
        }
    );
    python
}

/// Runs `st run` against the document at `openapi_url` and fails the test,
/// with schemathesis's whole report, unless every check passed.
pub async fn run(openapi_url: &str) {
    let python = python_with_schemathesis();
    let seed = std::env::var("SCHEMATHESIS_SEED").unwrap_or_else(|_| "20261130".to_owned());
    let examples = std::env::var("SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "30".to_owned());
    // A directory of its own: nothing (a Hypothesis database, a report) lands
    // in the source tree.
    let work = std::env::temp_dir().join(format!("schemathesis-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&work).expect("a work directory for schemathesis");
    let run = tokio::process::Command::new(&python)
        .args([
            "-c",
            "import sys; from schemathesis.cli import schemathesis; sys.argv[0] = 'st'; sys.exit(schemathesis())",
            "run",
            openapi_url,
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--max-examples",
            &examples,
            "--seed",
            &seed,
            "--generation-database",
            "none",
            "--request-timeout",
            "10",
            // One worker: Python 3.11's parser is not thread-safe, and
            // Hypothesis parses lambdas while it generates
            // ("SystemError: AST constructor recursion depth mismatch").
            "--workers",
            "1",
            "--no-color",
        ])
        .current_dir(&work)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(55), run)
        .await
        .expect("schemathesis finishes within 55 s")
        .expect("running schemathesis");
    let _ = std::fs::remove_dir_all(&work);
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis failed ({}), seed {seed}:\n{report}",
        out.status
    );
    assert!(
        report.contains("passed") && !report.contains("0 generated"),
        "schemathesis ran no test:\n{report}"
    );
}
