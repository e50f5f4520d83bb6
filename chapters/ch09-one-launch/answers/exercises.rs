//! Chapter 9's exercises, answered (built with `--features answers` in place of
//! `src/exercises.rs`).

// ANCHOR: exercise_1
/// Exercise 1: the last-block protocol, on the host (see the stub).
pub fn last_blocks(
    finish_order: &[usize],
    blocks_per_group: usize,
    groups: usize,
) -> (Vec<usize>, usize) {
    let mut group_tickets = vec![0usize; groups];
    let mut grid_ticket = 0usize;
    let (mut routers, mut sorter) = (Vec::new(), usize::MAX);
    for &b in finish_order {
        let g = b / blocks_per_group;
        let ticket = group_tickets[g];
        group_tickets[g] += 1;
        if ticket == blocks_per_group - 1 {
            routers.push(b);
            if grid_ticket == groups - 1 {
                sorter = b;
            }
            grid_ticket += 1;
        }
    }
    (routers, sorter)
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the block scan (see the stub).
pub fn block_scan(values: &mut [i32], threads: usize) -> i32 {
    let sums: Vec<i32> = (0..threads)
        .map(|t| values.iter().skip(4 * t).take(4).sum())
        .collect();
    let mut run = 0;
    for (t, s) in sums.iter().enumerate() {
        let mut r = run;
        for v in values.iter_mut().skip(4 * t).take(4) {
            let x = *v;
            *v = r;
            r += x;
        }
        run += s;
    }
    run
}
// ANCHOR_END: exercise_2
