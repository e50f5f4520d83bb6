//! Chapter 12's example, as the book shows it: its stdout is a snapshot (the same on the GPU and on
//! the emulator), with its verdicts checked by value before the snapshot freezes them.

use ch12_parallel::example::run;
use moe_kernels::testing::device;

#[test]
fn example_stdout() {
    let mut out = Vec::new();
    run(device(), &mut out).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("Chapter 12: the layer across GPUs\n"),
        "{text}"
    );
    // Two tensor-parallel rows of three verdicts, two expert-parallel verdicts, the imbalance.
    assert_eq!(text.matches(" yes").count(), 2 * 3 + 2 + 1, "{text}");
    assert!(!text.contains("NO"), "{text}");
    assert!(
        text.contains("pairs to rank 3: 48, to the others: 0"),
        "{text}"
    );
    insta::assert_snapshot!("ch12_example", text);
}
