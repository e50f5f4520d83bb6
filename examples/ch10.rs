//! Chapter 10's main: `cargo run --example ch10`. The bias spreads and the bf16 values they keep,
//! a scaled-down flip count at the three router shapes against the fp64 router, and one flip
//! through chapter 2's layer (`chapters/ch10-precision/src/example.rs`, where the book quotes
//! it). CPU only: the committed numbers come from `cargo run -p ch10-precision --bin ch10-flips`.

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

/// Chapter 10: precision, the router against fp64. Shows the bias spreads of the router article's
/// models and the bf16 values they keep, counts the rows whose experts flip when the router runs
/// in fp32 or bf16 instead of fp64 at three router shapes (scaled down), and follows one flip
/// through chapter 2's layer. Runs on the CPU only, whatever MOE_BACKEND says.
#[derive(Parser)]
#[command(name = "ch10")]
struct Args {}

fn main() -> ExitCode {
    let _ = Args::parse(); // `--help`; anything else is clap's usage error, exit status 2
                           // Every other chapter's main picks the device from MOE_BACKEND; this tour has no device
                           // code, so say that the variable changes nothing rather than ignore it silently.
    if let Some(v) = std::env::var_os("MOE_BACKEND").filter(|v| !v.is_empty()) {
        let _ = writeln!(
            std::io::stderr(),
            "note: chapter 10's tour runs on the CPU whatever MOE_BACKEND says (MOE_BACKEND={} \
             changes nothing here)",
            v.to_string_lossy()
        );
    }
    let mut out = std::io::stdout().lock();
    match ch10_precision::example::run(&mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}
