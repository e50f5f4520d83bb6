//! Chapter 7's main: `cargo run --example ch07` (add `-- --help` for the options). The fixture
//! run and the `--checkpoint` path live in `chapters/ch07-model/src/example.rs`, where the book
//! quotes them.

mod cli;
#[path = "../shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse(); // a usage error exits with status 2 and clap's message
    let opts = args.generate_run();
    shared::main_with(|device, out| ch07_model::example::run(opts.as_ref(), device, out))
}
