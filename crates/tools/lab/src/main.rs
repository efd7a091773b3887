//! The `lab` binary: parse the command line, route Ctrl-C to a stop flag,
//! run. Everything else is in the library.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = lab::cli::Cli::parse();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // The children run in their own process groups, so the terminal's
    // SIGINT reaches only the lab, which then stops them itself.
    if let Err(e) = ctrlc::set_handler(move || {
        if !flag.swap(true, Ordering::SeqCst) {
            eprintln!(
                "\nstopping: killing the services and the load generator, keeping finished rounds…"
            );
        }
    }) {
        eprintln!("warning: Ctrl-C will not stop the run cleanly: {e}");
    }
    match lab::cli::run(cli, stop) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
