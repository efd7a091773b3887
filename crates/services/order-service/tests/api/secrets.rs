//! The database password never leaves the process: not in `--help` (which
//! shows the environment's values of the other settings), not in what
//! start-up prints when the database cannot be reached, whether the
//! password is in the URL's user information or in its query.

use std::path::Path;
use std::time::Duration;

const IN_USERINFO: &str = "s3cret-in-userinfo";
const IN_QUERY: &str = "s3cret-in-query";

fn url() -> String {
    // Port 1: nothing listens there, so start-up fails on it.
    format!("postgres://postgres:{IN_USERINFO}@127.0.0.1:1/x?sslmode=disable&password={IN_QUERY}")
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_order-service"))
}

#[test]
fn help_does_not_show_the_database_password() {
    let out = std::process::Command::new(bin())
        .arg("--help")
        .env("ORDER_DATABASE_URL", url())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ORDER_DATABASE_URL"), "{text}");
    for s in [IN_USERINFO, IN_QUERY] {
        assert!(!text.contains(s), "--help shows {s}:\n{text}");
    }
}

#[test]
fn a_failed_start_does_not_print_the_database_password() {
    let url = url();
    let out = testkit::process::run_to_exit(
        bin(),
        &[
            ("ORDER_DATABASE_URL", url.as_str()),
            ("ORDER_DATABASE_ACQUIRE_TIMEOUT_MS", "500"),
            ("ORDER_REST_ADDR", "127.0.0.1:0"),
            ("ORDER_GRPC_ADDR", "127.0.0.1:0"),
            ("ORDER_TCP_ADDR", "127.0.0.1:0"),
        ],
        Duration::from_secs(60),
    );
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
