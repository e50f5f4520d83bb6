//! Chapter 11's main: `cargo run --example ch11`. Radix select on one row by hand, the kernel
//! against chapter 5's on every regime, a Kimi K3 layer's front separate and merged, and the
//! bf16-output variant. The tour lives in `chapters/ch11-merged-gate/src/example.rs`, where the
//! book quotes it.

#[path = "shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

/// Chapter 11: a gate merged into the GEMM in front. Shows radix select on one row step by step,
/// checks the radix top-k kernel against chapter 5's fused router on every regime, runs the front
/// of a Kimi K3 layer separate and merged, and counts the rows the bf16-output variant moves (on
/// the GPU when there is one, else on the CPU emulator; MOE_BACKEND=cuda|emu forces it).
#[derive(Parser)]
#[command(name = "ch11")]
struct Args {}

fn main() -> ExitCode {
    let _ = Args::parse(); // `--help`; anything else is clap's usage error, exit status 2
    shared::main_with(ch11_merged_gate::example::run)
}
