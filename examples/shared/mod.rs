//! What every chapter's main does around its chapter's `example::run`: pick the device (saying
//! which on stderr), run, and turn an error into `error: …` on stderr and a non-zero exit.
//! Included by `examples/chNN/main.rs` with `#[path = "../shared/mod.rs"] mod shared;`.

use moe_kernels::{Device, KernelError};
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
            say_error(&device_error(
                &e,
                std::env::var("MOE_BACKEND").ok().as_deref(),
            ));
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

/// The error of a device that cannot be had, saying what to change: when `MOE_BACKEND` forced
/// the GPU, that the variable did it and how to run on the emulator instead.
pub fn device_error(e: &KernelError, moe_backend: Option<&str>) -> String {
    match (e, moe_backend) {
        (KernelError::NoGpu { .. }, Some(v)) if v.trim().eq_ignore_ascii_case("cuda") => format!(
            "{e} (MOE_BACKEND={v} asks for the GPU: unset it to use the GPU when there is one \
             and the CPU emulator otherwise, or set MOE_BACKEND=emu)"
        ),
        _ => e.to_string(),
    }
}
