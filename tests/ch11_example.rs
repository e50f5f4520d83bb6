//! Chapter 11's example, as the book shows it: its stdout is a snapshot (the same on the GPU and
//! on the emulator but the values in `⟨ ⟩`, which depend on the library GEMM and are checked here
//! against their bounds instead).

#[path = "support/example_bin.rs"]
mod example_bin;

use ch11_merged_gate::example::{run, TOUR_ROWS};
use example_bin::assert_no_options;
use moe_kernels::testing::device;
use moe_tools::snap::mask_measured;

#[test]
fn example_stdout() {
    let mut out = Vec::new();
    run(device(), &mut out).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("Chapter 11: a gate merged into the GEMM in front\n\n"),
        "{text}"
    );
    // Checked by value before the snapshot freezes the layout.
    assert!(text.contains("top 4: experts 6 10 1 3 after"), "{text}");
    assert_eq!(
        text.matches(": ids same, weights same bits").count(),
        10,
        "{text}"
    );
    assert!(text.contains("each by 1 bf16 step or < 2^-16"), "{text}");
    assert!(
        text.contains("merged against separate: ids same, weights same bits"),
        "{text}"
    );
    assert!(text.contains("merged launches 2:"), "{text}");
    // The measured values: projection values that differ (within the bound), rows moved.
    let measured: Vec<usize> = text
        .split('⟨')
        .skip(1)
        .map(|s| s.split('⟩').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(measured.len(), 2, "{text}");
    assert!(measured[0] * 100 <= TOUR_ROWS * 3584, "{text}");
    assert!(measured[1] <= TOUR_ROWS, "{text}");
    insta::assert_snapshot!("ch11_example", mask_measured(&text));
}

/// ch11 takes no options: `--help` says what it is instead of running (it once answered
/// "ch11 takes no arguments" with status 2 and no help), and any argument is clap's usage error
/// with status 2.
#[test]
fn ch11_refuses_arguments_and_has_a_help() {
    assert_no_options(
        "ch11",
        "Chapter 11: a gate merged",
        "keys 0.61",
        &[&["--bogus"], &["stray"], &["-x"]],
    );
}
