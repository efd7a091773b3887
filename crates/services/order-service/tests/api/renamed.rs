//! Settings renamed to match user-service's still work for one release, with
//! a warning in the log; the new name wins when both are set.

use std::path::Path;
use std::time::Duration;

use testkit::process::{run_to_exit, unreachable_database, warnings};

fn order_service(env: &[(&str, &str)]) -> testkit::process::Exited {
    run_to_exit(
        Path::new(env!("CARGO_BIN_EXE_order-service")),
        env,
        Duration::from_secs(60),
    )
}

#[test]
fn an_old_variable_sets_the_new_setting() {
    // 0 connections is refused by the new setting's own check, naming it.
    let out = order_service(&[("ORDER_DB_MAX_CONNECTIONS", "0")]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("--database-max-connections"),
        "{}",
        out.stderr
    );
}

#[test]
fn the_old_log_format_variable_still_chooses_the_format_and_says_it_is_renamed() {
    let db = unreachable_database();
    let out = order_service(&[
        ("LOG_FORMAT", "json"),
        ("ORDER_DATABASE_URL", &db),
        ("ORDER_DB_ACQUIRE_TIMEOUT_MS", "200"),
    ]);
    assert!(!out.status.success(), "no database, no service");
    let w = warnings(&out.stdout);
    assert!(
        w.iter()
            .any(|m| m.contains("LOG_FORMAT is renamed ORDER_LOG_FORMAT")),
        "the log is JSON, and it says so: {}",
        out.stdout
    );
    assert!(
        w.iter().any(|m| m
            .contains("ORDER_DB_ACQUIRE_TIMEOUT_MS is renamed ORDER_DATABASE_ACQUIRE_TIMEOUT_MS")),
        "{w:?}"
    );

    // Both names set: the new one is used and the old one said to be ignored.
    let out = order_service(&[
        ("LOG_FORMAT", "text"),
        ("ORDER_LOG_FORMAT", "json"),
        ("ORDER_DATABASE_URL", &db),
    ]);
    assert!(
        warnings(&out.stdout)
            .iter()
            .any(|m| m.contains("LOG_FORMAT is ignored")),
        "{}",
        out.stdout
    );
}
