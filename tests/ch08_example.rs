//! Chapter 8's example, as the book shows it: its stdout is a snapshot (the same on the GPU and on
//! the emulator: integers, launch counts and the agreement with the pair + align only), and the
//! toy's layout and the tour's arrangements are checked by value before the snapshot freezes them.

use ch01_router::toy;
use ch03_align::literal::align_literal;
use ch08_routing_stage::example::{run, toy_rows, TOUR_ROWS};
use ch08_routing_stage::{arrangement_for, ONE_BLOCK_MAX_ROWS};
use moe_kernels::testing::device;

#[test]
fn example_stdout() {
    let mut out = Vec::new();
    run(device(), &mut out).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("Chapter 8: the routing stage\n\n"),
        "{text}"
    );
    // The toy's rows: chapter 1's f64 literal router picks, and the layout chapter 3's literal
    // sort makes of them, drawn as the example draws it.
    let logits = toy_rows();
    let config = toy::config();
    let mut ids = Vec::new();
    for t in 0..3 {
        let row = ch01_router::literal::literal_route_row(
            &config,
            &logits[t * 8..(t + 1) * 8],
            Some(&toy::bias()),
        );
        let line = format!("  row {t}: experts {} {} weights", row.ids[0], row.ids[1]);
        assert!(text.contains(&line), "{line}\n{text}");
        ids.extend(row.ids.iter().map(|&i| i as i64));
    }
    let aligned = align_literal(&ids, 8, 4);
    for line in ch03_align::text::draw(&aligned, 6, 4, 8).lines() {
        assert!(text.contains(&format!("    {line}\n")), "{line}\n{text}");
    }
    // Every row count of the tour in the arrangement the chapter's rule picks.
    for rows in TOUR_ROWS {
        let want = match arrangement_for(rows, 8) {
            ch08_routing_stage::Arrangement::OneBlock => "one block",
            ch08_routing_stage::Arrangement::TwoLaunches => "two launches",
        };
        let line = format!("  {rows:>5}  {want:<13}");
        assert_eq!(text.matches(&line).count(), 2, "{line}\n{text}");
    }
    assert!(text.contains(&format!("one block up to {ONE_BLOCK_MAX_ROWS} rows")));
    assert_eq!(
        text.matches("  yes\n").count(),
        2 * TOUR_ROWS.len(),
        "{text}"
    );
    insta::assert_snapshot!("ch08_example", text);
}
