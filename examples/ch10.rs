//! Chapter 10's main: `cargo run --example ch10`. The bias spreads and the bf16 values they keep,
//! a scaled-down flip count at the three router shapes against the fp64 router, and one flip
//! through chapter 2's layer (`chapters/ch10-precision/src/example.rs`, where the book quotes
//! it). CPU only: the committed numbers come from `cargo run -p ch10-precision --bin ch10-flips`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut out = std::io::stdout().lock();
    match ch10_precision::example::run(&mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
