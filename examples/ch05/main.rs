//! Chapter 5's main: `cargo run --example ch05` (add `-- --help` for the options). The tour and
//! the `--input` path live in `chapters/ch05-fused-router/src/example.rs`, where the book quotes
//! them.

mod cli;
#[path = "../shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse(); // a usage error exits with status 2 and clap's message
    let file = args.file_options();
    shared::main_with(|device, out| {
        ch05_fused_router::example::run(file.as_ref().map(|(p, o)| (p.as_path(), o)), device, out)
    })
}
