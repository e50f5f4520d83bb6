//! Chapter 1's main: `cargo run --example ch01` (add `-- --help` for the options). The tour and
//! the `--input` path live in `chapters/ch01-router/src/example.rs`, where the book quotes them.

mod cli;

use clap::Parser;
use moe_kernels::Device;
use std::io::Write;
use std::process::ExitCode;

/// `error: …` on stderr; a closed stderr (`2>&1 | head`) must not turn the error into a panic.
fn say_error(e: &dyn std::fmt::Display) {
    let _ = writeln!(std::io::stderr(), "error: {e}");
}

fn main() -> ExitCode {
    let args = cli::Args::parse(); // a usage error exits with status 2 and clap's message
    let device = match Device::auto() {
        Ok(d) => d,
        Err(e) => {
            say_error(&e);
            return ExitCode::FAILURE;
        }
    };
    let file = args.file_options();
    let input = file.as_ref().map(|(p, o)| (p.as_path(), o));
    let mut stdout = std::io::stdout().lock();
    match ch01_router::example::run(input, device, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say_error(&e);
            ExitCode::FAILURE
        }
    }
}
