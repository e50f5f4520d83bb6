//! Chapter 3's main: `cargo run --example ch03` (add `-- --help` for the options). The tour and
//! the `--input` path live in `chapters/ch03-align/src/example.rs`, where the book quotes them.

mod cli;
#[path = "../shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse(); // a usage error exits with status 2 and clap's message
    let opts = args.input_options();
    shared::main_with(|device, out| ch03_align::example::run(opts.as_ref(), device, out))
}
