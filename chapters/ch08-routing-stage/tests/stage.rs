//! The routing stage on every backend (the emulator always, the GPU with `--include-ignored` on a
//! GPU machine): the same bits as chapter 5's fused router followed by chapter 3's align, in
//! both arrangements, on every regime of chapter 1, at the production shapes and with many
//! chunks; the counts and offsets against the host; the scratch left clean for the next call;
//! the article's regression (a zero or NaN sum of selected scores) as a named regime; the
//! launches; every bad input; and, on a GPU machine, the emulator and the GPU bit for bit.

use ch01_router::chain::DeviceRouterError;
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use ch01_router::literal::literal_route_row;
use ch01_router::regimes::{regime, REGIMES};
use ch01_router::RouterError;
use ch03_align::{choose_block_m, AlignError};
use ch08_routing_stage::stage::{counts_and_offsets, geometry, split, StageOutput};
use ch08_routing_stage::{
    arrangement_for, pair_then_align, route_stage_as, Arrangement, RoutingStage, StageError,
    ONE_BLOCK_MAX_ROWS,
};
use moe_kernels::testing::assert_same_bits;
use moe_kernels::{record_launches, Device};

/// One input of the stage: fp32 logits and the bias, as the GEMM in front hands them.
struct Case {
    name: String,
    config: RouterConfig,
    rows: usize,
    experts: usize,
    logits: Vec<f32>,
    bias: Option<Vec<f32>>,
}

/// Chapter 1's regimes, their logits rounded once to fp32 (what a GEMM gives at best).
fn regime_cases() -> Vec<Case> {
    REGIMES
        .iter()
        .map(|name| {
            let r = regime(name).unwrap();
            Case {
                name: name.to_string(),
                config: r.config.clone(),
                rows: r.rows,
                experts: r.experts,
                logits: r.logits_f32(),
                bias: r.bias.clone(),
            }
        })
        .collect()
}

/// Logits of the production shapes: GLM-like (288 experts, sigmoid + bias near 8), Qwen3 (128,
/// softmax), DeepSeek-V3 (256, 8 groups), and the widest row the stage takes (512).
fn shape_case(shape: &str, rows: usize, salt: u64) -> Case {
    let (config, experts, bias) = match shape {
        "glm" => (RouterConfig::glm5(8), 288, true),
        "qwen3" => (RouterConfig::qwen3(8), 128, false),
        "deepseek_v3" => (RouterConfig::deepseek_v3(), 256, true),
        "wide" => (RouterConfig::glm5(8), 512, true),
        _ => unreachable!(),
    };
    let bias = bias.then(|| {
        patterned(experts, salt + 1, 0.05)
            .iter()
            .map(|b| 8.0 + b)
            .collect()
    });
    Case {
        name: format!("{shape} × {rows}"),
        config,
        rows,
        experts,
        logits: patterned(rows * experts, salt, 3.0),
        bias,
    }
}

// ANCHOR: zero_sum
/// The router article's regression as a named regime: rows whose selected scores sum to zero
/// (every sigmoid 0: logits of −200, −∞, NaN; the picks made by the bias alone) or hold NaN
/// logits among finite ones. Chapter 1's rules give weights of 0 for the first (s / (0 + 1e-20)),
/// and never NaN.
fn zero_or_nan_score_sum() -> Case {
    let (rows, experts) = (6, 288);
    let mut logits = patterned(rows * experts, 0x2e50, 2.0);
    for e in 0..experts {
        logits[e] = -200.0; // row 0: every sigmoid underflows to 0
        logits[experts + e] = f32::NEG_INFINITY; // row 1: non-finite scores 0
        logits[2 * experts + e] = f32::NAN; // row 2: NaN everywhere
        if e % 3 == 0 {
            logits[3 * experts + e] = f32::NAN; // row 3: a third NaN
        }
    }
    logits[4 * experts + 7] = f32::INFINITY; // row 4: one +∞ (scores 0, ranks last)
    let bias = patterned(experts, 0x2e51, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect();
    Case {
        name: "zero_or_nan_score_sum".into(),
        config: RouterConfig::glm5(8),
        rows,
        experts,
        logits,
        bias: Some(bias),
    }
}
// ANCHOR_END: zero_sum

/// The arrangements that take `case`: both, unless it has more pairs than the one block holds.
fn arrangements(case: &Case) -> Vec<Arrangement> {
    let mut v = vec![Arrangement::TwoLaunches];
    if case.rows * case.config.k <= geometry::STAGE_ONE_BLOCK_MAX_PAIRS {
        v.insert(0, Arrangement::OneBlock);
    }
    v
}

fn run(dev: &'static Device, c: &Case, block_m: usize, a: Arrangement) -> StageOutput {
    route_stage_as(
        dev,
        &c.config,
        c.rows,
        c.experts,
        block_m,
        &c.logits,
        c.bias.as_deref(),
        a,
    )
    .unwrap_or_else(|e| panic!("{} ({a:?}, BLOCK_M {block_m}): {e}", c.name))
}

// ANCHOR: same_bits
/// The stage against chapter 5's router + chapter 3's align on the same logits: the ids, the
/// weights (bit for bit), the layout, and the counts and offsets against the host's.
fn check_case(dev: &'static Device, c: &Case, block_m: usize) {
    let (routing, aligned) = pair_then_align(
        dev,
        &c.config,
        c.rows,
        c.experts,
        block_m,
        &c.logits,
        c.bias.as_deref(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    let (counts, offsets) = counts_and_offsets(&routing, c.experts, block_m);
    for a in arrangements(c) {
        let what = format!("{} ({a:?}, BLOCK_M {block_m})", c.name);
        let got = run(dev, c, block_m, a);
        assert_eq!(got.routing.ids, routing.ids, "{what}: ids");
        assert_same_bits(
            &format!("{what}: weights"),
            &got.routing.weights,
            &routing.weights,
        );
        assert_eq!(got.aligned, aligned, "{what}: layout");
        assert_eq!(got.counts, counts, "{what}: counts");
        assert_eq!(got.offsets, offsets, "{what}: offsets");
        assert!(
            got.routing.weights.iter().all(|w| !w.is_nan()),
            "{what}: a NaN weight"
        );
    }
}
// ANCHOR_END: same_bits

fn same_bits_as_the_pair_and_align_on_every_regime(dev: &'static Device) {
    for c in regime_cases() {
        let pairs = c.rows * c.config.k;
        for block_m in [16, 64, choose_block_m(pairs, c.experts)] {
            check_case(dev, &c, block_m);
        }
    }
}

fn same_bits_at_the_production_shapes(dev: &'static Device) {
    for (shape, rows) in [
        ("glm", 1),
        ("glm", 6),
        ("glm", 16),
        ("glm", 64),
        ("glm", 96),
        ("qwen3", 1),
        ("qwen3", 16),
        ("qwen3", 200),
        ("deepseek_v3", 3),
        ("deepseek_v3", 40),
        ("wide", 2),
        ("wide", 33),
    ] {
        let c = shape_case(shape, rows, 8100 + rows as u64);
        check_case(dev, &c, choose_block_m(rows * c.config.k, c.experts));
    }
}

/// The first 8 rows of each of chapter 1's regimes and of the router article's regression, each
/// as a batch of its own, and one row of every production shape, k = 32 of 288 and of 512 among
/// them: one row is the decode step's batch, and these rows hold NaN logits, ties, picks of the
/// bias alone and the widest experts' words.
fn same_bits_one_row_at_a_time(dev: &'static Device) {
    let mut cases = regime_cases();
    cases.push(zero_or_nan_score_sum());
    for c in cases {
        for t in 0..c.rows.min(8) {
            let row = Case {
                name: format!("{} row {t}", c.name),
                config: c.config.clone(),
                rows: 1,
                experts: c.experts,
                logits: c.logits[t * c.experts..(t + 1) * c.experts].to_vec(),
                bias: c.bias.clone(),
            };
            for block_m in [16, 64] {
                check_case(dev, &row, block_m);
            }
        }
    }
    for (i, shape) in ["glm", "qwen3", "deepseek_v3", "wide"]
        .into_iter()
        .enumerate()
    {
        check_case(dev, &shape_case(shape, 1, 8150 + i as u64), 16);
    }
    for (shape, salt) in [("glm", 8160), ("wide", 8161)] {
        let mut c = shape_case(shape, 1, salt);
        c.config = RouterConfig::glm5(32);
        check_case(dev, &c, 16);
    }
}

/// Enough rows that a chunk holds several blocks of the first launch, and a last block with
/// fewer than 16 rows: the chunks' counts and the chunk boundaries.
fn same_bits_over_many_chunks(dev: &'static Device) {
    let rows = geometry::STAGE_MAX_CHUNKS * 16 * 2 + 5;
    let (blocks, per_chunk, chunks) = split(rows);
    assert!(
        per_chunk > 1 && chunks <= geometry::STAGE_MAX_CHUNKS,
        "{blocks} {per_chunk} {chunks}"
    );
    let c = shape_case("qwen3", rows, 8200);
    check_case(dev, &c, 16);
}

/// k = 32 and enough rows that each warp of the scatter holds three batches of 32 pairs: the
/// batches after a warp's first and the cursors each batch advances (with STAGE_SHORT_CHAIN=1,
/// which loads the first batch early, a scatter that reused it for the others passed every
/// older test and failed this one).
fn same_bits_with_several_batches_a_warp(dev: &'static Device) {
    let rows = 2053;
    let mut c = shape_case("glm", rows, 8250);
    c.config = RouterConfig::glm5(32);
    let (_, per_chunk, chunks) = split(rows);
    let pairs_a_warp = per_chunk * 16 * 32 / geometry::STAGE_WARPS;
    assert!(
        pairs_a_warp > 64,
        "{pairs_a_warp} pairs a warp, {chunks} chunks"
    );
    check_case(dev, &c, 16);
}

/// The same stage called again on other logits gives what a fresh stage gives: the last block of
/// the second launch left the chunk counts and the ticket at zero.
fn scratch_is_clean_for_the_next_call(dev: &'static Device) {
    let first = shape_case("glm", 300, 8300);
    let mut second = shape_case("glm", 300, 8301);
    second.bias = first.bias.clone(); // one stage, one bias: only the logits change
    let stage = RoutingStage::new(dev, &first.config, 300, 288, 16, first.bias.as_deref()).unwrap();
    assert_eq!(stage.arrangement(), Arrangement::TwoLaunches);
    let out = stage.alloc_outputs(dev).unwrap();
    let bias = dev.upload(first.bias.as_deref().unwrap()).unwrap();
    for c in [&first, &second, &first] {
        let logits = dev.upload(&c.logits).unwrap();
        stage.enqueue(&logits, Some(&bias), &out).unwrap();
        let got = ch08_routing_stage::stage::download_stage(300, 8, &out).unwrap();
        let fresh = run(dev, c, 16, Arrangement::TwoLaunches);
        assert_eq!(
            got, fresh,
            "{}: a second call differs from a fresh stage",
            c.name
        );
    }
}

fn zero_or_nan_sums_give_the_documented_weights(dev: &'static Device) {
    let c = zero_or_nan_score_sum();
    check_case(dev, &c, 16);
    let got = run(dev, &c, 16, Arrangement::OneBlock);
    let k = c.config.k;
    for t in 0..c.rows {
        let row = &c.logits[t * c.experts..(t + 1) * c.experts];
        let oracle = literal_route_row(&c.config, row, c.bias.as_deref());
        let w = &got.routing.weights[t * k..(t + 1) * k];
        let ids = &got.routing.ids[t * k..(t + 1) * k];
        assert_eq!(ids, oracle.ids.as_slice(), "row {t}: ids");
        if t < 3 {
            // Every selected score 0: every weight exactly 0, as chapter 1 documents.
            assert!(w.iter().all(|&x| x == 0.0), "row {t}: {w:?}");
        }
        for (g, o) in w.iter().zip(&oracle.weights) {
            assert!(
                g.is_finite() && (*g as f64 - o).abs() <= 1e-6 * o.abs().max(1.0),
                "row {t}: {w:?} vs {:?}",
                oracle.weights
            );
        }
    }
}

/// One launch for the one block (its wide form from 17 rows), two for the two launches, none for
/// an empty batch.
fn launches_are_one_or_two(dev: &'static Device) {
    for (rows, a, want) in [
        (
            4,
            Arrangement::OneBlock,
            vec!["ch08_routing_stage::stage_one_block_e288"],
        ),
        (
            16,
            Arrangement::OneBlock,
            vec!["ch08_routing_stage::stage_one_block_e288"],
        ),
        (
            17,
            Arrangement::OneBlock,
            vec!["ch08_routing_stage::stage_one_block_wide_e288"],
        ),
        (
            4,
            Arrangement::TwoLaunches,
            vec![
                "ch08_routing_stage::stage_route_count_e288",
                "ch08_routing_stage::stage_scatter",
            ],
        ),
    ] {
        let c = shape_case("glm", rows, 8400);
        let (out, names) = record_launches(|| run(dev, &c, 16, a));
        assert_eq!(names, want, "{rows} rows, {a:?}");
        assert_eq!(out.routing.rows, rows);
    }
    let c = shape_case("glm", 4, 8400);
    assert_eq!(
        arrangement_for(ONE_BLOCK_MAX_ROWS, 8),
        Arrangement::OneBlock
    );
    assert_eq!(
        arrangement_for(ONE_BLOCK_MAX_ROWS + 1, 8),
        Arrangement::TwoLaunches
    );
    assert_eq!(arrangement_for(16, 33), Arrangement::TwoLaunches); // 528 pairs
    let empty = RoutingStage::new(dev, &c.config, 0, 288, 16, c.bias.as_deref()).unwrap();
    assert_eq!(empty.launches(), 0);
    let (out, names) = record_launches(|| {
        route_stage_as(
            dev,
            &c.config,
            0,
            288,
            16,
            &[],
            c.bias.as_deref(),
            Arrangement::OneBlock,
        )
    });
    let out = out.unwrap();
    assert!(names.is_empty(), "{names:?}");
    assert!(out.routing.ids.is_empty() && out.aligned.sorted_ids.is_empty());
    assert_eq!(out.aligned.num_tokens_post_padded, 0);
    assert!(out.counts.iter().all(|&n| n == 0), "{:?}", out.counts);
}

fn bad_inputs_are_typed_errors(dev: &'static Device) {
    let c = shape_case("glm", 4, 8500);
    let bias = c.bias.as_deref();
    let new = |config: &RouterConfig, rows, experts, block_m, bias: Option<&[f32]>| {
        RoutingStage::new(dev, config, rows, experts, block_m, bias).err()
    };
    // Past the stage's scan (E ≤ 512) and chapter 5's limits (k ≤ 32).
    let b600: Vec<f32> = vec![8.0; 600];
    assert!(matches!(
        new(&c.config, 4, 600, 16, Some(&b600)),
        Some(StageError::Router(DeviceRouterError::Limit {
            limit: 512,
            got: 600,
            ..
        }))
    ));
    let k40 = RouterConfig::glm5(40);
    assert!(matches!(
        new(&k40, 4, 288, 16, bias),
        Some(StageError::Router(DeviceRouterError::Limit {
            limit: 32,
            got: 40,
            ..
        }))
    ));
    // Chapter 1's rules: k = 0, k > E, a bias of the wrong length.
    assert!(matches!(
        new(&RouterConfig::glm5(0), 4, 288, 16, bias),
        Some(StageError::Router(DeviceRouterError::Router(_)))
    ));
    let e = new(&c.config, 4, 288, 16, Some(&[8.0; 5])).unwrap();
    assert!(
        matches!(
            e,
            StageError::Router(DeviceRouterError::Router(RouterError::BiasLength { .. }))
        ),
        "{e}"
    );
    // Chapter 3's BLOCK_M rule.
    assert_eq!(
        new(&c.config, 4, 288, 24, bias),
        Some(StageError::Align(AlignError::BlockM { value: 24 }))
    );
    // The one block past its 512 pairs.
    let e =
        RoutingStage::with_arrangement(dev, &c.config, 65, 288, 16, bias, Arrangement::OneBlock)
            .err()
            .unwrap();
    assert!(e.to_string().contains("one-block arrangement"), "{e}");
    // Buffers of the wrong size at enqueue, and a bias the stage was not built for.
    let stage = RoutingStage::new(dev, &c.config, 4, 288, 16, bias).unwrap();
    let out = stage.alloc_outputs(dev).unwrap();
    let short = dev.upload(&c.logits[..100]).unwrap();
    let b = dev.upload(bias.unwrap()).unwrap();
    let e = stage.enqueue(&short, Some(&b), &out).unwrap_err();
    assert_eq!(
        e.to_string(),
        "logits [T, E] has 100 elements, expected 1152"
    );
    let logits = dev.upload(&c.logits).unwrap();
    let e = stage.enqueue(&logits, None, &out).unwrap_err();
    assert!(
        e.to_string().contains("the stage was built with one"),
        "{e}"
    );
    let b5 = dev.upload(&[8.0f32; 5]).unwrap();
    let e = stage.enqueue(&logits, Some(&b5), &out).unwrap_err();
    assert_eq!(e.to_string(), "bias [E] has 5 elements, expected 288");
    let other = RoutingStage::new(dev, &c.config, 5, 288, 16, bias).unwrap();
    let e = other.enqueue(&logits, Some(&b), &out).unwrap_err();
    assert!(
        e.to_string().starts_with("logits [T, E] has 1152 elements"),
        "{e}"
    );
}

moe_kernels::backend_tests!(
    same_bits_as_the_pair_and_align_on_every_regime,
    same_bits_at_the_production_shapes,
    same_bits_one_row_at_a_time,
    same_bits_over_many_chunks,
    same_bits_with_several_batches_a_warp,
    scratch_is_clean_for_the_next_call,
    zero_or_nan_sums_give_the_documented_weights,
    launches_are_one_or_two,
    bad_inputs_are_typed_errors,
);

/// The emulator and the GPU give the same bits (no tensor cores, no float atomics).
#[test]
#[ignore = "needs a GPU"]
fn emulator_and_gpu_give_the_same_bits() {
    let (gpu, emu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    let mut cases = regime_cases();
    cases.push(zero_or_nan_score_sum());
    cases.push(shape_case("glm", 96, 8600));
    cases.push(shape_case("deepseek_v3", 300, 8601));
    for c in &cases {
        for a in arrangements(c) {
            let bm = choose_block_m(c.rows * c.config.k, c.experts);
            assert_eq!(run(gpu, c, bm, a), run(emu, c, bm, a), "{} ({a:?})", c.name);
        }
    }
}

/// The same input gives the same bits run after run on the GPU, at 1, 96 and 8,192 rows.
#[test]
#[ignore = "needs a GPU"]
fn deterministic_over_100_runs_on_the_gpu() {
    let gpu = moe_kernels::testing::cuda();
    for rows in [1, 96, 8192] {
        let c = shape_case("glm", rows, 8700);
        let a = arrangement_for(rows, 8);
        let first = run(gpu, &c, 16, a);
        for _ in 0..100 {
            assert_eq!(run(gpu, &c, 16, a), first, "{rows} rows");
        }
    }
}
