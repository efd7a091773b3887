//! The database password stays out of order-service's `--help` and of
//! what a failed start prints (the checks: `password_kept_out.rs`).

use std::path::Path;

#[path = "password_kept_out.rs"]
mod password_kept_out;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_order-service"))
}

#[test]
fn help_does_not_show_the_database_password() {
    password_kept_out::help_does_not_show_it(bin(), "ORDER");
}

#[test]
fn a_failed_start_does_not_print_the_database_password() {
    password_kept_out::a_failed_start_does_not_print_it(bin(), "ORDER");
}
