//! Chapter 9's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! passes on your solution (or on the answers, with `--features answers`). They are ignored in a
//! plain `cargo test`; run them with `tools/steps exercises 9`, which is
//! `cargo test -p ch09-one-launch --test exercises -- --ignored`.

use ch09_one_launch::exercises::{block_scan, last_blocks};

/// Exercise 1: by hand, and on every order of a small grid: one router per group, the last to
/// finish in its group; the sorter is the router that finished last.
#[test]
#[ignore = "an exercise: tools/steps exercises 9"]
fn exercise_1_the_last_blocks() {
    // 2 groups of 3 blocks (0-2, 3-5).
    assert_eq!(last_blocks(&[0, 3, 1, 4, 5, 2], 3, 2), (vec![5, 2], 2));
    assert_eq!(last_blocks(&[5, 4, 3, 2, 1, 0], 3, 2), (vec![3, 0], 0));
    assert_eq!(last_blocks(&[7], 8, 1).0, Vec::<usize>::new());
    assert_eq!(last_blocks(&[0], 1, 1), (vec![0], 0));
    // Every one of a few hundred orders of 2 × 3 blocks (a fixed walk through the permutations).
    let mut order: Vec<usize> = (0..6).collect();
    for step in 0..300 {
        order.swap(step % 6, (step * 7 + 3) % 6);
        let (routers, sorter) = last_blocks(&order, 3, 2);
        assert_eq!(routers.len(), 2, "{order:?}");
        for &r in &routers {
            let group = r / 3;
            let last = order.iter().rposition(|&b| b / 3 == group).unwrap();
            assert_eq!(order[last], r, "{order:?}");
        }
        let pos = |b: usize| order.iter().position(|&x| x == b).unwrap();
        assert_eq!(
            sorter,
            *routers.iter().max_by_key(|&&r| pos(r)).unwrap(),
            "{order:?}"
        );
    }
}

/// Exercise 2: against a running sum, for counts that fill four per thread exactly, leave
/// threads empty, and end mid-thread.
#[test]
#[ignore = "an exercise: tools/steps exercises 9"]
fn exercise_2_the_block_scan() {
    for (n, threads) in [(8, 2), (7, 4), (1, 1), (1000, 256), (0, 8)] {
        let threads: usize = threads;
        let values: Vec<i32> = (0..n).map(|i: i32| (i * 37) % 11).collect();
        let mut got = values.clone();
        let total = block_scan(&mut got, threads);
        let mut run = 0;
        for (i, v) in values.iter().enumerate() {
            assert_eq!(got[i], run, "n {n}, entry {i}");
            run += v;
        }
        assert_eq!(total, run, "n {n}");
    }
}
