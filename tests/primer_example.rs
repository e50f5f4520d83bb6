//! The GPU primer's example, as the book shows it: its stdout is a snapshot, the same on the GPU
//! and on the emulator once the numbers measured on the machine (in `⟨ ⟩`) are masked; the
//! page's copy of that output (book/src/figures/gpu-primer-example.txt) must be the snapshot's.

#[path = "../examples/primer.rs"]
#[allow(dead_code)] // its `main`: the test calls `run`
mod primer;

#[path = "support/example_bin.rs"]
mod example_bin;

use example_bin::run_example;
use moe_kernels::testing::device;
use moe_kernels::{BackendKind, Device, KernelError};
use moe_tools::snap::mask_measured;

fn run_to_string() -> String {
    let mut out = Vec::new();
    primer::run(device(), &mut out).unwrap_or_else(|e| panic!("{e}"));
    String::from_utf8(out).unwrap()
}

/// The contents of every `⟨ ⟩` of `text` but the header's `⟨…⟩`, in order.
fn spans(text: &str) -> Vec<&str> {
    text.split('⟨')
        .skip(1)
        .map(|s| s.split('⟩').next().unwrap())
        .filter(|s| *s != "…")
        .collect()
}

#[test]
fn example_stdout() {
    let text = run_to_string();
    // Every check the example makes against the host says yes (a failed one prints NO).
    let checks = text.lines().filter(|l| l.ends_with(": yes")).count();
    assert_eq!(checks, 9, "{text}");
    assert!(!text.contains(": NO"), "{text}");
    // The values a reader can check by hand: a warp's sums, a block's sums, the thread table.
    for line in [
        "every lane holds 528, the host's sum 528",
        "every lane holds 1552, the host's sum 1552",
        "over 0..1023: 32640 98176 163712 229248, as the host: yes",
        "      32      0     1     0",
        "     127      1     1    31",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    // Measured numbers: none on the emulator; on the GPU, every one a positive number. How they
    // compare (strided slower than coalesced, a time near its floor) is a measurement, not a
    // test: it moves with the machine and under compute-sanitizer, so the H200's run of the
    // example states it and the page reads it, and no assertion times anything here.
    let measured = spans(&text);
    assert_eq!(measured.len(), 36, "{text}");
    match device().kind() {
        BackendKind::Emu => assert!(measured.iter().all(|s| *s == "-"), "{text}"),
        BackendKind::Cuda => {
            let v: Vec<f64> = measured
                .iter()
                .map(|s| s.parse().unwrap_or_else(|_| panic!("⟨{s}⟩ in\n{text}")))
                .collect();
            assert!(v.iter().all(|x| *x > 0.0), "{text}");
        }
    }
    let masked = mask_measured(&text);
    insta::assert_snapshot!("primer_example", masked);
    // The page includes this output from its own copy; keep the two the same.
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/book/src/figures/gpu-primer-example.txt"
    ))
    .unwrap();
    assert_eq!(
        page.trim_end(),
        masked.trim_end(),
        "book/src/figures/gpu-primer-example.txt differs from the example's output: copy the \
         snapshot's body (tests/snapshots/primer_example__primer_example.snap) into it"
    );
}

/// The primer takes no options: any argument is a usage error with status 2 (it once ignored
/// its arguments, ran every section and exited 0 on `--bogus`), and `--help` says what it is
/// instead of running.
#[test]
fn the_primer_refuses_arguments_and_has_a_help() {
    for args in [
        &["--bogus"][..],
        &["stray"],
        &["-x"],
        &["--input", "x.safetensors"],
    ] {
        let ran = run_example("primer", args, &[]);
        ran.assert_refused(&[&format!("unexpected argument '{}'", args[0])]);
        assert_eq!(ran.code, Some(2), "{ran:#?}");
        assert!(ran.stdout.is_empty(), "{ran:#?}");
    }
    for help in ["--help", "-h"] {
        let ran = run_example("primer", &[help], &[]);
        assert_eq!(ran.code, Some(0), "{ran:#?}");
        assert!(ran.stdout.contains("Usage: primer"), "{ran:#?}");
        assert!(!ran.stdout.contains("== Threads"), "it ran: {ran:#?}");
    }
}

/// `MOE_BACKEND=cuda` where the GPU cannot run: the error says that the variable asked for the GPU
/// and how to run on the emulator instead (it once named only the missing driver).
#[test]
fn a_forced_gpu_that_cannot_run_says_what_to_change() {
    let e = KernelError::NoGpu {
        why: "no CUDA driver library (libcuda.so.1) was found".into(),
    };
    let msg = primer::shared::device_error(&e, Some("cuda"));
    assert!(msg.starts_with(&e.to_string()), "{msg}");
    assert!(
        msg.contains("MOE_BACKEND=cuda asks for the GPU") && msg.contains("MOE_BACKEND=emu"),
        "{msg}"
    );
    assert_eq!(primer::shared::device_error(&e, None), e.to_string());
    let other = KernelError::UnknownBackend("gpu".into());
    assert_eq!(
        primer::shared::device_error(&other, Some("gpu")),
        other.to_string()
    );
    // As a user sees it, on a machine without a GPU (with one, MOE_BACKEND=cuda just runs).
    if Device::cuda().is_err() {
        for example in ["primer", "ch01"] {
            run_example(example, &[], &[("MOE_BACKEND", "cuda")]).assert_refused(&[
                "the CUDA backend cannot run here",
                "MOE_BACKEND=cuda asks for the GPU",
            ]);
        }
    }
}
