//! Chapter 4's main: `cargo run --example ch04` (add `-- --help` for the options). The tour and
//! the `--checkpoint` path live in `chapters/ch04-fused-moe/src/example.rs`, where the book quotes
//! them.

mod cli;
#[path = "../shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse(); // a usage error exits with status 2 and clap's message
    let opts = args.checkpoint_options();
    shared::main_with(|device, out| {
        ch04_fused_moe::example::run_with_tile(opts.as_ref(), args.tile, device, out)
    })
}
