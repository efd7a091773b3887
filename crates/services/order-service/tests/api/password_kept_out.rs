//! What both services' `secrets.rs` check, for a service binary and its
//! settings' prefix (`ORDER`, `USER`): the database password never leaves
//! the process, not in `--help` (which shows the environment's values of
//! the other settings), not in what start-up prints when the database
//! cannot be reached, whether the password is in the URL's user
//! information or in its query.

use std::path::Path;
use std::time::Duration;

const IN_USERINFO: &str = "s3cret-in-userinfo";
const IN_QUERY: &str = "s3cret-in-query";

fn url() -> String {
    // Port 1: nothing listens there, so start-up fails on it.
    format!("postgres://postgres:{IN_USERINFO}@127.0.0.1:1/x?sslmode=disable&password={IN_QUERY}")
}

pub fn help_does_not_show_it(bin: &Path, prefix: &str) {
    let var = format!("{prefix}_DATABASE_URL");
    let out = std::process::Command::new(bin)
        .arg("--help")
        .env(&var, url())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&var), "{text}");
    for s in [IN_USERINFO, IN_QUERY] {
        assert!(!text.contains(s), "--help shows {s}:\n{text}");
    }
}

pub fn a_failed_start_does_not_print_it(bin: &Path, prefix: &str) {
    let url = url();
    let vars: Vec<(String, &str)> = [
        ("DATABASE_URL", url.as_str()),
        ("DATABASE_ACQUIRE_TIMEOUT_MS", "500"),
        ("REST_ADDR", "127.0.0.1:0"),
        ("GRPC_ADDR", "127.0.0.1:0"),
        ("TCP_ADDR", "127.0.0.1:0"),
    ]
    .into_iter()
    .map(|(k, v)| (format!("{prefix}_{k}"), v))
    .collect();
    let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let out = testkit::process::run_to_exit(bin, &env, Duration::from_secs(60));
    assert!(!out.status.success(), "it started on a database at port 1");
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("127.0.0.1:1"),
        "nothing names the database: {all}"
    );
    for s in [IN_USERINFO, IN_QUERY] {
        assert!(!all.contains(s), "start-up printed {s}:\n{all}");
    }
}
