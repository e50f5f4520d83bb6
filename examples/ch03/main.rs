//! Chapter 3's main: `cargo run --example ch03` (add `-- --help` for the options). The tour and
//! the `--input` path live in `chapters/ch03-align/src/example.rs`, where the book quotes them.

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
    let opts = args.input_options();
    let mut stdout = std::io::stdout().lock();
    match ch03_align::example::run(opts.as_ref(), device, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say_error(&e);
            ExitCode::FAILURE
        }
    }
}
