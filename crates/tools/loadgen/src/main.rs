//! `loadgen`: see `loadgen --help`.

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let options = loadgen::options::Options::parse();
    match options.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}
