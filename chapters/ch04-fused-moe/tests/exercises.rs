//! Chapter 4's exercises, checked: every test here fails on the stubs of `src/exercises.rs` and
//! `kernels/ch04_exercises.cu`, and passes on your solution (or on the answers, with
//! `--features answers`). They are ignored in a plain `cargo test`; run them with
//! `tools/steps exercises 4`, which is `cargo test -p ch04-fused-moe --test exercises -- --ignored`.
//! The kernel runs on the backend `MOE_BACKEND` selects (the GPU when there is one).

use ch01_router::inputs::patterned;
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::MoeError;
use ch03_align::literal::align_literal;
use ch03_align::regimes::{regime, REGIMES};
use ch04_fused_moe::exercises::{self, Overflow, Shape, TileWork, OFFSETS};
use moe_kernels::record_launches;
use moe_kernels::testing::device;

/// `out[t] = Σⱼ y[t·k + j]`, j in order: what `fused_combine` computes.
fn ordered_sum(y: &[f32], rows: usize, hidden: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * hidden];
    for t in 0..rows {
        for c in 0..hidden {
            let mut acc = 0f32;
            for j in 0..k {
                acc += y[(t * k + j) * hidden + c];
            }
            out[t * hidden + c] = acc;
        }
    }
    out
}

/// Every order of adding three terms into 0, as an atomic sum can take them.
fn sums_in_any_order(terms: [f32; 3]) -> Vec<f32> {
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    orders
        .iter()
        .map(|o| ((0f32 + terms[o[0]]) + terms[o[1]]) + terms[o[2]])
        .collect()
}

/// Exercise 1: the atomic sum, in one launch. On ordinary values it is within f32 rounding of the
/// ordered sum; on cancelling ones (1e8, a small value, −1e8) each output is the sum in one of the
/// 3! orders, and the test counts how many are not the ordered sum's bits.
#[test]
#[ignore = "an exercise: tools/steps exercises 4"]
fn exercise_1_the_atomic_combine_sums_in_arrival_order() {
    let dev = device();
    // Ordinary values: T 50, k 8, H 300.
    let (rows, hidden, k) = (50, 300, 8);
    let y = patterned(rows * k * hidden, 71, 1.0);
    let (got, launched) =
        record_launches(|| exercises::combine_atomic_on_device(dev, &y, rows, hidden, k));
    let got = got.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(launched, vec!["ch04_exercises::ex_combine_atomic"]);
    let want = ordered_sum(&y, rows, hidden, k);
    check_output("atomic combine", &want, &got, Tolerance::F32).unwrap_or_else(|e| panic!("{e}"));
    let differ = want
        .iter()
        .zip(&got)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    // Cancelling values, k = 3: the order decides whether the small value survives.
    let (rows, hidden, k) = (200, 64, 3);
    let small = patterned(rows * hidden, 72, 1.0);
    let mut y = vec![0f32; rows * k * hidden];
    for t in 0..rows {
        for c in 0..hidden {
            let (big, s) = (1e8 * (1.0 + (c % 7) as f32), small[t * hidden + c]);
            // Token t's three rows, their order turned by t so that no slot always holds the big one.
            let terms = [big, s, -big];
            for j in 0..k {
                y[(t * k + j) * hidden + c] = terms[(j + t) % 3];
            }
        }
    }
    let got = exercises::combine_atomic_on_device(dev, &y, rows, hidden, k).unwrap();
    let want = ordered_sum(&y, rows, hidden, k);
    let mut cancelled_differ = 0;
    for t in 0..rows {
        for c in 0..hidden {
            let terms = [0, 1, 2].map(|j| y[(t * k + j) * hidden + c]);
            let g = got[t * hidden + c];
            assert!(
                sums_in_any_order(terms).contains(&g),
                "out[{t}, {c}] = {g} is no order's sum of {terms:?}"
            );
            cancelled_differ += usize::from(g.to_bits() != want[t * hidden + c].to_bits());
        }
    }
    // A wrong length is a typed error; an empty batch launches nothing.
    let err = exercises::combine_atomic_on_device(dev, &y[1..], rows, hidden, k).unwrap_err();
    assert!(matches!(err, MoeError::Shape { .. }), "{err}");
    let (empty, launched) =
        record_launches(|| exercises::combine_atomic_on_device(dev, &[], 0, hidden, k));
    assert_eq!((empty.unwrap(), launched.len()), (vec![], 0));
    eprintln!(
        "outputs whose bits differ from the ordered sum: {differ} of {} (ordinary values), \
         {cancelled_differ} of {} (cancelling values)",
        50 * 300,
        rows * hidden
    );
}

/// The work of each tile, counted from chapter 3's layout: tiles, slots, and every 16-slot
/// sub-tile that holds a pair.
fn walk_layout(ids: &[u32], experts: usize, block_m: usize) -> TileWork {
    let wide: Vec<i64> = ids.iter().map(|&e| e as i64).collect();
    let a = align_literal(&wide, experts, block_m);
    let tiles = a.tiles(block_m);
    let live = a.sorted_ids[..tiles * block_m]
        .chunks(16)
        .filter(|sub| sub.iter().any(|&p| (p as usize) < ids.len()))
        .count();
    TileWork {
        tiles,
        staged_rows: tiles * block_m,
        mma_rows: 16 * live,
    }
}

/// Exercise 2, against a walk over chapter 3's layout on every regime and every tile height.
#[test]
#[ignore = "an exercise: tools/steps exercises 4"]
fn exercise_2_tile_work_counts_what_the_kernels_do() {
    let mut cases: Vec<(String, Vec<u32>, usize)> = REGIMES
        .iter()
        .map(|n| {
            let r = regime(n).unwrap();
            (
                n.to_string(),
                r.ids.iter().map(|&e| e as u32).collect(),
                r.experts,
            )
        })
        .collect();
    // One expert's run of 17 pairs: one sub-tile and one pair past it.
    cases.push(("17_on_one".into(), vec![3; 17], 8));
    for (name, ids, experts) in cases {
        let mut mma = Vec::new();
        for bm in [16, 32, 64, 128] {
            let got = exercises::tile_work(&ids, experts, bm);
            assert_eq!(got, walk_layout(&ids, experts, bm), "{name}, BLOCK_M {bm}");
            mma.push(got.mma_rows);
        }
        assert!(mma.iter().all(|&m| m == mma[0]), "{name}: {mma:?}");
    }
}

/// The first index whose offset a kernel computing `index * stride` in `int` gets wrong: it
/// multiplies the two as 32-bit integers (wrapping, as the GPU does) and compares with 64 bits.
fn first_wrong_in_32_bits(stride: usize, count: usize) -> Option<usize> {
    (0..count).find(|&i| {
        let wrapped = (i as i32).wrapping_mul(stride as i32) as i64;
        wrapped != (i * stride) as i64
    })
}

/// Exercise 3, against a kernel's 32-bit arithmetic simulated index by index, on real models'
/// shapes. The GLM-like shape (H 4096 and E 288 as in the router article's GLM-5.3-Flash, I 1024)
/// holds 288 × 2048 × 4096 ≈ 2.4 billion elements in w13.
#[test]
#[ignore = "an exercise: tools/steps exercises 4"]
fn exercise_3_the_offsets_that_overflow_32_bits() {
    let shape = |tokens, k, hidden, intermediate, experts| Shape {
        tokens,
        k,
        hidden,
        intermediate,
        experts,
    };
    let shapes = [
        ("GLM-like, one token", shape(1, 8, 4096, 1024, 288)),
        ("GLM-like, 65,537 tokens", shape(65_537, 8, 4096, 1024, 288)),
        ("DeepSeek-V3", shape(16, 8, 7168, 2048, 256)),
        ("Qwen3-30B-A3B, 8192 tokens", shape(8192, 8, 2048, 768, 128)),
        ("Mixtral-8x7B", shape(4096, 2, 4096, 14336, 8)),
        ("no tokens", shape(0, 8, 4096, 1024, 288)),
    ];
    for (name, s) in shapes {
        let pairs = s.tokens * s.k;
        let strides = [
            (2 * s.intermediate * s.hidden, s.experts),
            (s.hidden * s.intermediate, s.experts),
            (s.hidden, s.tokens),
            (s.intermediate, pairs),
            (s.hidden, pairs),
        ];
        let want: Vec<Overflow> = OFFSETS
            .iter()
            .zip(strides)
            .filter_map(|(&offset, (stride, count))| {
                first_wrong_in_32_bits(stride, count).map(|first| Overflow { offset, first })
            })
            .collect();
        assert_eq!(exercises::overflows(&s), want, "{name}");
    }
    // The numbers the book quotes.
    let glm = exercises::overflows(&shape(1, 8, 4096, 1024, 288));
    assert_eq!(
        glm,
        vec![Overflow {
            offset: OFFSETS[0],
            first: 256
        }]
    );
    let deepseek = exercises::overflows(&shape(16, 8, 7168, 2048, 256));
    let first: Vec<usize> = deepseek.iter().map(|o| o.first).collect();
    assert_eq!(first, vec![74, 147]);
    assert!(exercises::overflows(&shape(8192, 8, 2048, 768, 128)).is_empty());
    assert!(exercises::overflows(&shape(4096, 2, 4096, 14336, 8)).is_empty());
    let prefill = exercises::overflows(&shape(65_537, 8, 4096, 1024, 288));
    assert_eq!(
        prefill[1],
        Overflow {
            offset: OFFSETS[4],
            first: 524_288
        }
    );
}

/// Row `r`'s sum of `w [rows, cols]`, in f64: exact here, since every value is a small integer.
fn row_sums(w: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    (0..rows)
        .map(|r| w[r * cols..(r + 1) * cols].iter().map(|&v| v as f64).sum())
        .collect()
}

/// Exercise 4: the cp.async pipeline. Every value is a small integer, so every order of the sum
/// gives the same exact result and any difference is a slice read before it landed (on the
/// emulator a copy lands only at the wait that lets it, and a buffer holds its old contents until
/// then), read twice, or skipped. Rows of 1 to 11 slices: fewer slices than stages, exactly as
/// many, and several rounds of the buffers.
#[test]
#[ignore = "an exercise: tools/steps exercises 4"]
fn exercise_4_the_pipelined_row_sums_are_exact() {
    use exercises::geometry::{EX_PIPE_BK, EX_PIPE_STAGES, EX_PIPE_THREADS};
    use moe_kernels::{args, LaunchConfig};
    let dev = device();
    let m = dev
        .load(&exercises::KERNELS)
        .unwrap_or_else(|e| panic!("{e}"));
    for (rows, slices) in [
        (1, 1),
        (37, EX_PIPE_STAGES - 1),
        (37, EX_PIPE_STAGES),
        (5, 8),
        (3, 11),
    ] {
        let cols = slices * EX_PIPE_BK;
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 + i / cols) % 17) as f32 - 8.0)
            .collect();
        let wd = dev.upload(&w).unwrap_or_else(|e| panic!("{e}"));
        // NaN, so that a row the kernel never writes cannot pass.
        let out = dev
            .upload(&vec![f32::NAN; rows])
            .unwrap_or_else(|e| panic!("{e}"));
        m.launch(
            "ex_rowsum_pipelined",
            LaunchConfig::blocks(rows as u32, EX_PIPE_THREADS as u32),
            &args![&wd, &out, cols as i32],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let got = out.to_vec().unwrap_or_else(|e| panic!("{e}"));
        for (r, want) in row_sums(&w, rows, cols).into_iter().enumerate() {
            assert_eq!(
                got[r] as f64, want,
                "row {r} of {rows}, {slices} slices of {EX_PIPE_BK}: got {} want {want}",
                got[r]
            );
        }
    }
}
