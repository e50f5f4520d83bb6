//! Chapter 9's main: `cargo run --example ch09`. The tour lives in
//! `chapters/ch09-one-launch/src/example.rs`, where the book quotes it.

#[path = "shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

/// Chapter 9: the whole router in one launch. Routes GLM-like and Qwen3 batches through the
/// one-launch kernel and checks it against chapter 5's tiny GEMM and chapter 8's stage (on the GPU
/// when there is one, else on the CPU emulator; MOE_BACKEND=cuda|emu forces it).
#[derive(Parser)]
#[command(name = "ch09")]
struct Args {}

fn main() -> ExitCode {
    let _ = Args::parse(); // `--help`; anything else is clap's usage error, exit status 2
    shared::main_with(ch09_one_launch::example::run)
}
