//! Chapter 9's example, as the book shows it: its stdout is a snapshot (the same on the GPU and on
//! the emulator), with the kernels and grids checked by value before the snapshot freezes them.

use ch09_one_launch::example::{run, TOUR_ROWS};
use ch09_one_launch::router::{block_rows, kernel_for};
use moe_kernels::testing::device;

#[test]
fn example_stdout() {
    let mut out = Vec::new();
    run(device(), &mut out).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("Chapter 9: the whole router in one launch\n\n"),
        "{text}"
    );
    for (experts, groups_of) in [(288, 144), (128, 64)] {
        for rows in TOUR_ROWS {
            let kernel = kernel_for(rows, experts).unwrap();
            let grid = format!("{groups_of} × {}", rows.div_ceil(block_rows(rows)));
            let line = format!("  {rows:>4}  {kernel:<22} {grid:>12}         1");
            assert!(text.contains(&line), "{line}\n{text}");
        }
    }
    assert_eq!(
        text.matches("  yes\n").count(),
        2 * TOUR_ROWS.len(),
        "{text}"
    );
    insta::assert_snapshot!("ch09_example", text);
}
