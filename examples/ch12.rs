//! Chapter 12's main: `cargo run --example ch12`. The tour lives in
//! `chapters/ch12-parallel/src/example.rs`, where the book quotes it.

#[path = "shared/mod.rs"]
mod shared;

use clap::Parser;
use std::process::ExitCode;

/// Chapter 12: the layer across GPUs. Spreads one small layer over 2 and 4 in-process ranks with
/// tensor and with expert parallelism and checks both against the one-GPU layer (on the GPU when
/// there is one, else on the CPU emulator; MOE_BACKEND=cuda|emu forces it). The NCCL path needs
/// two GPUs: `cargo test -p ch12-parallel --test nccl -- --ignored`.
#[derive(Parser)]
#[command(name = "ch12")]
struct Args {}

fn main() -> ExitCode {
    let _ = Args::parse(); // `--help`; anything else is clap's usage error, exit status 2
    shared::main_with(ch12_parallel::example::run)
}
