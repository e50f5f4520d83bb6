//! The measurement checked against independent paths: each summation order against a literal
//! loop (bit for bit) and the fp64 sum against an exact integer sum; then a scaled-down run,
//! its flips recounted with chapter 1's literal router over the literal loops' logits.

use ch01_router::LiteralRouter;
use ch10_precision::flips::{
    bias_of, cases_csv, flips_csv, gaps_csv, gate_of, hidden_rows, run_shape, Options, CHUNK,
    WEIGHT_UNIT,
};
use ch10_precision::keys::same_set;
use ch10_precision::logits::{
    bf16, logits_f32_sequential, logits_f32_tiny_gemm, logits_f64, tiny_gemm_one, xor_tree_lane0,
};
use ch10_precision::shapes::{Sum, ARITHMETICS, SHAPES};

/// `v · 2^s` as an integer, checking that it is one (bf16 values of our inputs are).
fn scaled(v: f32, s: i32) -> i128 {
    let x = v as f64 * 2f64.powi(s);
    assert_eq!(x.fract(), 0.0, "{v} is not a multiple of 2^-{s}");
    x as i128
}

// ANCHOR: orders_test
/// At every shape (H 4096: 2 slices a thread; 2048: 1; 7168: 4 or 3), the blocked loops give the
/// literal loops' bits: fp32 in order, and the tiny GEMM's order as its threads add. The fp64
/// sum is within 1e-15 of the exact sum (an i128 sum of the products scaled to integers), far
/// below any gap it decides.
#[test]
fn every_order_is_the_literal_loops() {
    for shape in &SHAPES {
        let gate = gate_of(shape);
        let (h, e) = (shape.hidden, shape.experts);
        let rows = 3;
        let x = hidden_rows(shape, 0, rows);
        let (f64s, seq, tiny) = (
            logits_f64(&gate, &x),
            logits_f32_sequential(&gate, &x),
            logits_f32_tiny_gemm(&gate, &x),
        );
        for t in 0..rows {
            let xr = &x[t * h..(t + 1) * h];
            for ex in 0..e {
                let w = &gate.rows[ex * h..(ex + 1) * h];
                let mut acc = 0f32;
                let mut exact = 0i128;
                for j in 0..h {
                    acc += xr[j] * w[j];
                    exact += scaled(xr[j], 32) * scaled(w[j], 40);
                }
                let i = t * e + ex;
                assert_eq!(
                    seq[i].to_bits(),
                    acc.to_bits(),
                    "{} row {t} expert {ex}",
                    shape.name
                );
                let one = tiny_gemm_one(xr, w);
                assert_eq!(
                    tiny[i].to_bits(),
                    one.to_bits(),
                    "{} row {t} expert {ex}",
                    shape.name
                );
                let exact = exact as f64 / 2f64.powi(72);
                assert!(
                    (f64s[i] - exact).abs() <= 1e-15,
                    "{}: {} vs {exact}",
                    shape.name,
                    f64s[i]
                );
            }
        }
    }
    // The xor tree is not the sequential sum: lane 0 adds lane 16 first.
    let mut lanes = [0f32; 32];
    lanes[0] = 1e8;
    lanes[16] = -1e8;
    lanes[1] = 1.0;
    assert_eq!(xor_tree_lane0(&lanes), 1.0);
    let mut seq = 0f32;
    for v in lanes {
        seq += v;
    }
    assert_eq!(seq, 0.0);
}
// ANCHOR_END: orders_test

// ANCHOR: recount_test
/// A scaled-down run (700 rows: a whole chunk and part of one) gives the same counts on 1 and 2
/// threads, and its flips are recounted exactly by an independent path: logits from the literal
/// loops, sets and weights from chapter 1's literal f64 router (the weight the flipped rows give
/// to experts outside the fp64 set, within 1e-4 of a row's weight in all). (Its keys are f64 from the rounded logits,
/// where ours are f32: the two differ by about 1e-7, below every gap of these rows.)
#[test]
fn scaled_down_run_is_recounted_by_chapter_1() {
    let rows = CHUNK + 200;
    for shape in &SHAPES {
        let one = run_shape(shape, Options { rows, threads: 1 }, &|_| {});
        let two = run_shape(shape, Options { rows, threads: 2 }, &|_| {});
        let (a, b) = (vec![one.clone()], vec![two]);
        assert_eq!(flips_csv(&a), flips_csv(&b));
        assert_eq!(cases_csv(&a), cases_csv(&b));
        assert_eq!(gaps_csv(&a), gaps_csv(&b));
        assert_eq!(one.rows, rows as u64);

        let config = (shape.config)();
        let (h, e) = (shape.hidden, shape.experts);
        let gate = gate_of(shape);
        let router = LiteralRouter {
            config: config.clone(),
        };
        for case in &one.cases {
            let bias = case.spread.map(|s| bias_of(shape, &s));
            let bias16: Option<Vec<f32>> =
                bias.as_ref().map(|b| b.iter().map(|&v| bf16(v)).collect());
            let mut recount = vec![0u64; case.arith.len()];
            let mut outside = vec![0f64; case.arith.len()];
            let mut gaps = Vec::new();
            for first in (0..rows).step_by(CHUNK) {
                let n = CHUNK.min(rows - first);
                let x = hidden_rows(shape, first, n);
                let (mut exact, mut seq, mut tiny) = (vec![], vec![], vec![]);
                for t in 0..n {
                    for ex in 0..e {
                        let (xr, w) = (&x[t * h..(t + 1) * h], &gate.rows[ex * h..(ex + 1) * h]);
                        let mut acc = 0f32;
                        let mut acc64 = 0f64;
                        for j in 0..h {
                            acc += xr[j] * w[j];
                            acc64 += xr[j] as f64 * w[j] as f64;
                        }
                        exact.push(acc64 as f32);
                        seq.push(acc);
                        tiny.push(tiny_gemm_one(xr, w));
                    }
                }
                let want = router.route_rows(&exact, n, e, bias.as_deref()).unwrap();
                gaps.extend(want.iter().map(|d| d.cut.as_ref().unwrap().gap));
                for (i, at) in case.arith.iter().enumerate() {
                    let a = at.arithmetic;
                    let summed = if a.sum == Sum::TinyGemm { &tiny } else { &seq };
                    let l: Vec<f32> = summed
                        .iter()
                        .map(|&v| if a.bf16_logits { bf16(v) } else { v })
                        .collect();
                    let b = if a.bf16_bias {
                        bias16.as_deref()
                    } else {
                        bias.as_deref()
                    };
                    let got = router.route_rows(&l, n, e, b).unwrap();
                    for (w, g) in want.iter().zip(&got) {
                        if !same_set(&w.ids, &g.ids) {
                            recount[i] += 1;
                            // The share of this row's weight on experts outside the fp64 set.
                            let all: f64 = g.weights.iter().sum();
                            let off: f64 = g
                                .ids
                                .iter()
                                .zip(&g.weights)
                                .filter(|(id, _)| !w.ids.contains(id))
                                .map(|(_, x)| x)
                                .sum();
                            outside[i] += off / all;
                        }
                    }
                }
            }
            let counted: Vec<u64> = case.arith.iter().map(|a| a.flips).collect();
            assert_eq!(
                counted,
                recount,
                "{} {:?}",
                shape.name,
                case.spread.map(|s| s.name)
            );
            for (a, want) in case.arith.iter().zip(&outside) {
                let got = a.weight_outside as f64 / WEIGHT_UNIT;
                assert!(
                    (got - want).abs() <= 1e-4,
                    "{} {}: weight outside {got} vs {want}",
                    shape.name,
                    a.arithmetic.name
                );
            }
            // The gap's median, from the histogram, within its bin of the recount's.
            gaps.sort_by(f64::total_cmp);
            let m = gaps[gaps.len().div_ceil(2) - 1];
            let got = case.gaps.median().unwrap();
            assert!(
                (got / m - 1.0).abs() < 0.013,
                "{}: median gap {got} vs {m}",
                shape.name
            );
            // Every arithmetic that applies ran: five with a bias, three without.
            let want_n = ARITHMETICS
                .iter()
                .filter(|a| a.applies(bias.is_some()))
                .count();
            assert_eq!(case.arith.len(), want_n);
        }
    }
}
// ANCHOR_END: recount_test
