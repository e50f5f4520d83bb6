//! What every chapter's main does around its chapter's `example::run`: pick the device (saying
//! which on stderr), run, and turn an error into `error: …` on stderr and a non-zero exit.
//! Included by `examples/chNN/main.rs` with `#[path = "../shared/mod.rs"] mod shared;`.

use moe_kernels::Device;
use std::io::Write;
use std::process::ExitCode;

/// `error: …` on stderr; a closed stderr (`2>&1 | head`) must not turn the error into a panic.
fn say_error(e: &dyn std::fmt::Display) {
    let _ = writeln!(std::io::stderr(), "error: {e}");
}

/// Runs `run` on the selected device with stdout, and maps the outcome to the exit status.
pub fn main_with<E: std::fmt::Display>(
    run: impl FnOnce(&'static Device, &mut dyn Write) -> Result<(), E>,
) -> ExitCode {
    let device = match Device::auto() {
        Ok(d) => d,
        Err(e) => {
            say_error(&e);
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    match run(device, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say_error(&e);
            ExitCode::FAILURE
        }
    }
}
