//! Chapter 11's main: `cargo run --example ch11`. Radix select on one row by hand, the kernel
//! against chapter 5's on every regime, a Kimi K3 layer's front separate and merged, and the
//! bf16-output variant. The tour lives in `chapters/ch11-merged-gate/src/example.rs`, where the
//! book quotes it.

#[path = "shared/mod.rs"]
mod shared;

use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args().len() > 1 {
        eprintln!("error: ch11 takes no arguments (it runs a fixed tour; see chapters/ch11-merged-gate/src/example.rs)");
        return ExitCode::from(2);
    }
    shared::main_with(ch11_merged_gate::example::run)
}
