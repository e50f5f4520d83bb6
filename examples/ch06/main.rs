//! Chapter 6's main: `cargo run --example ch06` (add `-- --help` for the options). The tour and
//! the `--checkpoint` path live in `chapters/ch06-layer/src/example.rs`, where the book quotes
//! them.

mod cli;
#[path = "../shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse(); // a usage error exits with status 2 and clap's message
    let opts = args.checkpoint_run();
    shared::main_with(|device, out| ch06_layer::example::run(opts.as_ref(), device, out))
}
