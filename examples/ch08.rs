//! Chapter 8's main: `cargo run --example ch08`. The tour lives in
//! `chapters/ch08-routing-stage/src/example.rs`, where the book quotes it.

#[path = "shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

/// Chapter 8: the routing stage. Routes the router article's toy layer and a GLM-like and a
/// Qwen3 router along the row axis through the stage, beside chapter 5's router + chapter 3's
/// align (on the GPU when there is one, else on the CPU emulator; MOE_BACKEND=cuda|emu forces it).
#[derive(Parser)]
#[command(name = "ch08")]
struct Args {}

fn main() -> ExitCode {
    let _ = Args::parse(); // `--help`; anything else is clap's usage error, exit status 2
    shared::main_with(ch08_routing_stage::example::run)
}
