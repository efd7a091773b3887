//! The database password stays out of user-service's `--help` and of
//! what a failed start prints (the checks: `password_kept_out.rs`).

use std::path::Path;

#[path = "../../../order-service/tests/api/password_kept_out.rs"]
mod password_kept_out;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_user-service"))
}

#[test]
fn help_does_not_show_the_database_password() {
    password_kept_out::help_does_not_show_it(bin(), "USER");
}

#[test]
fn a_failed_start_does_not_print_the_database_password() {
    password_kept_out::a_failed_start_does_not_print_it(bin(), "USER");
}
