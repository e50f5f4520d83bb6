//! The fused pair on every backend (the emulator always, the GPU with `--include-ignored` on a
//! GPU machine): chapter 1's test body on every regime, against the f64 oracle and the regime
//! snapshots; the launches, the limits and every bad input; the tiny GEMM's bits
//! against the batch; and, on a GPU machine, the emulator and the GPU compared bit for bit, and
//! 100,000 random rows at GLM-like and Qwen3-like shapes.

use candle_core::Tensor;
use ch01_router::chain::{
    route_on_device, DeviceMatrix, DeviceRouter, DeviceRouterError, GateDtype, GateInputs,
    GateShape, RouterOutputs,
};
use ch01_router::compare::{check_routing, Tolerance};
use ch01_router::config::{Grouping, RouterConfig, Scoring};
use ch01_router::conformance::{as_dtype, check_every_regime, MakeRouter, RegimeResult};
use ch01_router::inputs::patterned;
use ch01_router::literal::{literal_route_row, LiteralRouter, RowDetail};
use ch01_router::reference::ReferenceRouter;
use ch01_router::regimes::{regime, RegimeInput, REGIMES};
use ch01_router::routing::{Router, Routing};
use ch01_router::RouterError;
use ch05_fused_router::fused::{
    form_for, kernel_for, route_fused, route_logits_fused, route_logits_fused_as,
    screened_kernel_for, RowForm, BLOCK_FORM_MAX_ROWS, SCREENED_FEW_ROWS,
};
use ch05_fused_router::tiny_gemm::GemmForm;
use ch05_fused_router::{tiny_gemm, FusedRouter, LogitsFrom, TinyGemmChain};
use half::bf16;
use moe_kernels::testing::{assert_same_bits, EqualityTable, Tally};
use moe_kernels::{record_launches, Device};

fn shape(r: &RegimeInput) -> GateShape {
    GateShape {
        rows: r.rows,
        hidden: r.hidden,
        experts: r.experts,
    }
}

/// The fused kernel's three forms.
const FORMS: [RowForm; 3] = [RowForm::WarpPerRow, RowForm::BlockPerRow, RowForm::Screened];

/// The comparison must not pass by calling everything a near tie: most rows of a regime are
/// compared exactly (all but a few in `ties` and `nan_logits`, which are made of near ties).
fn assert_clear_cuts(res: &RegimeResult) {
    assert!(
        res.exact_rows * 10 >= res.rows * 9 || matches!(res.name, "ties" | "nan_logits"),
        "regime {}: only {} of {} rows had a clear cut",
        res.name,
        res.exact_rows,
        res.rows
    );
}

/// The regime's results must compare most rows exactly and print the regime's snapshot
/// (`tests/snapshots/ch05_<regime>.snap`): the pair's, which the tiny GEMM + chain prints too.
/// (Chapter 1's snapshots are of fp32 inputs; these routers read the inputs rounded to bf16, so
/// their weights differ in the third decimal.)
fn check_snapshots(results: &[RegimeResult]) {
    for res in results {
        assert_clear_cuts(res);
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(format!("ch05_{}", res.name), res.text);
        });
    }
}

fn every_regime(dev: &'static Device, make: MakeRouter<'_>) -> Vec<RegimeResult> {
    check_every_regime(dev, GateDtype::Bf16, make, Tolerance::OWN_LOGITS)
        .unwrap_or_else(|e| panic!("{e}"))
}

// ANCHOR: pair_matches_the_oracle
/// Chapter 1's test body, with the fused pair: every regime (bf16 hidden states and gate
/// weight) against the f64 oracle, and a snapshot of every regime.
fn fused_pair_matches_the_oracle_on_every_regime(dev: &'static Device) {
    let make = |dev: &'static Device, r: &RegimeInput| {
        let pair = FusedRouter::new(dev, &r.config, shape(r), r.bias.as_deref())?;
        Ok(Box::new(pair) as Box<dyn DeviceRouter>)
    };
    check_snapshots(&every_regime(dev, &make));
}
// ANCHOR_END: pair_matches_the_oracle

/// The two combinations: the library GEMM's logits through the fused kernel, and the tiny
/// GEMM's logits through chapter 1's chain. The chain prints the pair's snapshots (the same
/// logits, and kernels that give the same bits on both backends). The library GEMM is checked
/// against the oracle only: cuBLAS sums in its own order, so a printed weight could land on the
/// other side of a 4-decimal rounding on the GPU.
fn combinations_match_the_oracle_on_every_regime(dev: &'static Device) {
    let blas = |dev: &'static Device, r: &RegimeInput| {
        let pair = FusedRouter::with_logits(
            dev,
            &r.config,
            shape(r),
            r.bias.as_deref(),
            LogitsFrom::Blas,
        )?;
        Ok(Box::new(pair) as Box<dyn DeviceRouter>)
    };
    let results = every_regime(dev, &blas);
    results.iter().for_each(assert_clear_cuts);
    let chain = |dev: &'static Device, r: &RegimeInput| {
        let c = TinyGemmChain::new(dev, &r.config, shape(r), r.bias.as_deref())?;
        Ok(Box::new(c) as Box<dyn DeviceRouter>)
    };
    check_snapshots(&every_regime(dev, &chain));
}

/// The fused kernel alone, on the f32 logits the oracle routes (every regime), and on the
/// pair's own logits: the same bits as the pair.
fn fused_kernel_from_logits_matches_the_oracle(dev: &'static Device) {
    for name in REGIMES {
        let r = regime(name).unwrap();
        let logits = r.logits_f32();
        let bias = r.bias.as_deref();
        let got = route_logits_fused(dev, &r.config, r.rows, r.experts, &logits, bias).unwrap();
        let oracle = LiteralRouter {
            config: r.config.clone(),
        }
        .route_rows(&logits, r.rows, r.experts, bias)
        .unwrap();
        check_routing(name, &oracle, &got, Tolerance::SAME_LOGITS)
            .unwrap_or_else(|e| panic!("from logits: {e}"));
        // The pair = its tiny GEMM's logits through the kernel alone.
        let rb = as_dtype(&r, GateDtype::Bf16);
        let pair = FusedRouter::new(dev, &r.config, shape(&r), bias).unwrap();
        let a = route_on_device(
            &pair,
            dev,
            GateDtype::Bf16,
            &rb.hidden_states,
            &rb.gate_weight,
            bias,
        )
        .unwrap();
        let own = pair.logits().to_vec().unwrap();
        let b = route_logits_fused(dev, &r.config, r.rows, r.experts, &own, bias).unwrap();
        assert_same_bits(&format!("{name} ids"), &a.ids, &b.ids);
        assert_same_bits(&format!("{name} weights"), &a.weights, &b.weights);
    }
}

/// Logits to route, with their config and bias.
struct LogitsCase {
    name: String,
    rows: usize,
    experts: usize,
    config: RouterConfig,
    logits: Vec<f32>,
    bias: Option<Vec<f32>>,
}

/// Rows of every width the kernel is compiled for (E = 129, 300, 1000 and 1024, not multiples
/// of 32), k up to 32, every scoring, grouped and not, 13 rows each: row 1 an exact tie (one
/// value repeated), row 2 non-finite logits, row 3 all NaN. With the bias of a sigmoid config.
fn wide_cases() -> Vec<LogitsCase> {
    let cases = [
        (129, RouterConfig::qwen3(32)),
        (288, RouterConfig::glm5(8)),
        (300, RouterConfig::glm5(8)),
        (1000, RouterConfig::deepseek_v4(32)),
        (
            1024,
            RouterConfig {
                k: 16,
                grouping: Some(Grouping {
                    n_group: 32,
                    topk_group: 5,
                }),
                ..RouterConfig::deepseek_v3()
            },
        ),
        (
            96,
            RouterConfig {
                renormalize: false,
                routed_scaling: 2.5,
                ..RouterConfig::mixtral()
            },
        ),
    ];
    let rows = WIDE_ROWS;
    cases
        .into_iter()
        .enumerate()
        .map(|(i, (experts, config))| {
            let mut logits = patterned(rows * experts, 500 + i as u64, 4.0);
            logits[experts..2 * experts].fill(0.75);
            logits[2 * experts + 3] = f32::NAN;
            logits[2 * experts + 7] = f32::INFINITY;
            logits[2 * experts + 8] = f32::NEG_INFINITY;
            logits[3 * experts..4 * experts].fill(f32::NAN);
            // Rows 4 and 5: one lane's experts (3, 35, 67, ...) hold the row's largest logits,
            // far above the others (below -4: a sigmoid score under 0.02, less than the bias
            // spread), so the one-warp kernel's lane 3 wins round after round (on its second and
            // fourth wins, and so on, it takes a new pass over its slots); in row 5 they are equal.
            for l in &mut logits[4 * experts..6 * experts] {
                *l = *l * 0.25 - 5.0;
            }
            for e in (3..experts).step_by(32) {
                logits[4 * experts + e] = 8.0 + 0.25 * (e / 32) as f32;
                logits[5 * experts + e] = 12.0;
            }
            let bias = (config.scoring == Scoring::Sigmoid).then(|| {
                patterned(experts, 600 + i as u64, 0.05)
                    .iter()
                    .map(|b| 8.0 + b)
                    .collect::<Vec<f32>>()
            });
            LogitsCase {
                name: format!("wide E = {experts}"),
                rows,
                experts,
                config,
                logits,
                bias,
            }
        })
        .collect()
}
const WIDE_ROWS: usize = 13;

/// The wide cases against the oracle on the same logits, in every form (the grouped case in the
/// one-warp and screened forms only).
fn wide_rows_and_large_k_match_the_oracle(dev: &'static Device) {
    let rows = WIDE_ROWS;
    for LogitsCase {
        experts,
        config,
        logits,
        bias,
        ..
    } in wide_cases()
    {
        let forms = match config.grouping {
            Some(_) => &[RowForm::WarpPerRow, RowForm::Screened][..],
            None => &FORMS[..],
        };
        for &form in forms {
            let got =
                route_logits_fused_as(dev, &config, rows, experts, &logits, bias.as_deref(), form)
                    .unwrap();
            let oracle = LiteralRouter {
                config: config.clone(),
            }
            .route_rows(&logits, rows, experts, bias.as_deref())
            .unwrap();
            let exact = check_routing("wide", &oracle, &got, Tolerance::SAME_LOGITS)
                .unwrap_or_else(|e| panic!("E = {experts} {form:?}: {e}"));
            // Rows 1, 3, 4 and 5 may have no clear cut: equal scores, NaN, or (4 and 5) the
            // picks past lane 3's experts among scores of about 1e-6.
            assert!(
                exact >= rows - 4,
                "E = {experts} {form:?}: {exact} clear cuts"
            );
            assert!(got.weights.iter().all(|w| !w.is_nan()), "E = {experts}");
            // The all-equal row without a bias: experts 0..k in order; the all-NaN row: weights
            // 0 (the zero-sum guard).
            let first: Vec<u32> = (0..config.k as u32).collect();
            if config.grouping.is_none() && bias.is_none() {
                assert_eq!(got.row_ids(1), &first[..], "E = {experts} {form:?}");
            }
            assert!(
                got.row_weights(3).iter().all(|&w| w == 0.0),
                "E = {experts} {form:?}"
            );
            // Rows 4 and 5 without groups: the first picks are lane 3's experts (every one when
            // k allows), so lane 3 won that many rounds; without a bias, in row 4 the largest
            // logit first and in row 5 (all equal) the lowest id first (a bias orders them by
            // itself, and the oracle above checks that order).
            if config.grouping.is_none() {
                let lane3: Vec<u32> = (3..experts as u32).step_by(32).collect();
                let n = lane3.len().min(config.k);
                for row in [4, 5] {
                    let ids = &got.row_ids(row)[..n];
                    assert!(
                        ids.iter().all(|e| e % 32 == 3),
                        "E = {experts} {form:?} row {row}: {ids:?}"
                    );
                }
                if bias.is_none() {
                    let descending: Vec<u32> = lane3.iter().rev().copied().collect();
                    assert_eq!(
                        &got.row_ids(4)[..n],
                        &descending[..n],
                        "E = {experts} {form:?}"
                    );
                    assert_eq!(&got.row_ids(5)[..n], &lane3[..n], "E = {experts} {form:?}");
                }
            }
        }
    }
}

// ANCHOR: both_forms
/// The fused kernel's three forms on the same logits give the same ids and weights, bit for bit:
/// every regime and every wide case (one block per row and the screened form against one warp per
/// row). A grouped config in the block form is a typed error.
fn both_forms_give_the_same_bits(dev: &'static Device) {
    let mut inputs: Vec<LogitsCase> = REGIMES
        .iter()
        .map(|name| {
            let r = regime(name).unwrap();
            LogitsCase {
                name: name.to_string(),
                rows: r.rows,
                experts: r.experts,
                logits: r.logits_f32(),
                config: r.config,
                bias: r.bias,
            }
        })
        .collect();
    inputs.extend(wide_cases());
    let (total, mut compared, mut grouped) = (inputs.len(), 0, 0);
    for LogitsCase {
        name,
        rows,
        experts,
        config,
        logits,
        bias,
    } in inputs
    {
        let bias = bias.as_deref();
        let route = |form| route_logits_fused_as(dev, &config, rows, experts, &logits, bias, form);
        if let Some(g) = config.grouping {
            assert_eq!(
                route(RowForm::BlockPerRow).unwrap_err(),
                DeviceRouterError::Limit {
                    what: "n_group (the block-per-row form selects without groups)",
                    limit: 1,
                    got: g.n_group
                },
                "{name}"
            );
            assert_eq!(form_for(&config, 1), RowForm::WarpPerRow, "{name}");
            grouped += 1;
            continue;
        }
        let warp = route(RowForm::WarpPerRow).unwrap();
        for form in [RowForm::BlockPerRow, RowForm::Screened] {
            let other = route(form).unwrap();
            assert_same_bits(&format!("{name} ids, {form:?}"), &warp.ids, &other.ids);
            assert_same_bits(
                &format!("{name} weights, {form:?}"),
                &warp.weights,
                &other.weights,
            );
        }
        compared += 1;
    }
    assert_eq!((compared + grouped, total), (total, total));
    assert!(
        compared > grouped,
        "{compared} inputs compared, {grouped} grouped"
    );
}
// ANCHOR_END: both_forms

// ANCHOR: by_logit
/// A renormalised softmax without bias or groups is ranked by the logits themselves (the
/// kernel's `fr_by_logit`), where the fp32 probabilities can tie. One row of 128 experts, k = 8:
/// expert 0 at 100, experts 1 to 6 at 50, expert 7 at 1 and expert 8 one float above 1, the rest
/// at -20. The eighth pick is 7 or 8; in f32, 1 - 100 and (the next float above 1) - 100 are
/// both -99, so the two probabilities are the same float (checked here), and chapter 1's f32
/// reference router, which ranks them, takes 7, the lower id; the f64 oracle and every form of
/// the fused kernel take 8, the larger logit. Then a row of 4 with k = 4 where even the f64
/// probabilities tie (underflow) and one logit is infinite: the comparison takes either order.
fn softmax_ranks_by_the_logit_where_probabilities_tie(dev: &'static Device) {
    // One row through every form of the fused kernel, each checked against the f64 oracle's
    // row (`literal_route_row`); returns the oracle's row and each form's routing.
    let every_form = |config: &RouterConfig, logits: &[f32]| {
        let oracle = literal_route_row(config, logits, None);
        let routed = FORMS.map(|form| {
            let got =
                route_logits_fused_as(dev, config, 1, logits.len(), logits, None, form).unwrap();
            check_routing(
                "by logit",
                std::slice::from_ref(&oracle),
                &got,
                Tolerance::SAME_LOGITS,
            )
            .unwrap_or_else(|e| panic!("{form:?}: {e}"));
            (form, got)
        });
        (oracle, routed)
    };
    let mut logits = vec![-20.0f32; 128];
    logits[0] = 100.0;
    logits[1..7].fill(50.0);
    logits[7] = 1.0;
    logits[8] = f32::from_bits(1.0f32.to_bits() + 1);
    let p = |l: f32| (l - 100.0).exp(); // the row's sum is 1 in f32: 1 + 6 e^-50 rounds to 1
    assert_eq!(p(logits[7]), p(logits[8]), "the fp32 probabilities tie");
    assert!(p(logits[7]) > 0.0 && p(-20.0) == 0.0);
    let config = RouterConfig::qwen3(8);
    let tensor = Tensor::from_slice(&logits, (1, 128), &candle_core::Device::Cpu).unwrap();
    let f32_router = ReferenceRouter {
        config: config.clone(),
    };
    assert_eq!(
        f32_router.route(&tensor, None).unwrap().row_ids(0),
        [0, 1, 2, 3, 4, 5, 6, 7]
    );
    let (oracle, routed) = every_form(&config, &logits);
    assert_eq!(oracle.ids, [0, 1, 2, 3, 4, 5, 6, 8]);
    for (form, got) in routed {
        assert_eq!(got.row_ids(0), oracle.ids, "{form:?}");
        // The eighth weight: e^-99 over a sum of 1, a subnormal float, not 0.
        assert!(got.row_weights(0)[7] > 0.0, "{form:?}");
    }
    // k = E, where the order is compared: logits 0, 1000, 1 and +inf. Experts 0 and 2 have
    // probability 0 even in f64, so the oracle ties them (0 first) where the kernel ranks 2
    // first; expert 3, not finite, ranks last on both sides.
    let (oracle, routed) = every_form(&RouterConfig::qwen3(4), &[0.0, 1000.0, 1.0, f32::INFINITY]);
    assert_eq!(oracle.ids, [1, 0, 2, 3]);
    for (form, got) in routed {
        assert_eq!(got.row_ids(0), [1, 2, 0, 3], "{form:?}");
        assert_eq!(got.row_weights(0), [1.0, 0.0, 0.0, 0.0], "{form:?}");
    }
}
// ANCHOR_END: by_logit

// ANCHOR: screened_close_calls
/// The screened form where its approximations cannot decide, against the one-warp form bit for
/// bit, at 288 experts, k = 8 (and 5), an equal bias (8) for every expert, so equal logits are equal
/// keys. Row 1: the two best experts, 5 and 37 (lane 5, slots 0 and 1), have equal logits:
/// their packed approximate keys differ only by the id bits, which put 37 first, so only the exact
/// ordering of the picks gives 5, 37. Row 2: experts 10 and 40 tie for the eighth pick: the
/// screen would take 40 (slot 1), so only an exact ranking (of the widened cut) gives 10. Rows 3 to 34: logits on a
/// grid of 1/16 in [-2, 2), so most rows hold ties and near ties, at the cut and among the picks.
/// Row 0 is random.
fn screened_form_resolves_close_calls(dev: &'static Device) {
    let (experts, rows, config) = (288, 35, RouterConfig::glm5(8));
    let mut logits = patterned(rows * experts, 77, 1.0);
    let row = |r: usize| r * experts..(r + 1) * experts;
    for l in &mut logits[row(1).start..row(2).end] {
        *l = *l * 0.25 - 3.0;
    }
    logits[experts + 5] = 6.0;
    logits[experts + 37] = 6.0;
    for (i, e) in [200, 3, 90, 150, 260, 17].into_iter().enumerate() {
        logits[experts + e] = 5.0 - 0.25 * i as f32;
        logits[2 * experts + e] = 5.0 - 0.25 * i as f32;
    }
    logits[2 * experts + 100] = 5.5;
    logits[2 * experts + 10] = 2.0;
    logits[2 * experts + 40] = 2.0;
    for l in &mut logits[row(3).start..] {
        *l = (*l * 16.0).round().clamp(-32.0, 31.0) / 16.0;
    }
    let bias = vec![8.0f32; experts];
    let route = |config: &RouterConfig, form| {
        route_logits_fused_as(dev, config, rows, experts, &logits, Some(&bias), form).unwrap()
    };
    // Two cuts: after the eighth pick and after the fifth.
    for k in [5, 8] {
        let c = RouterConfig {
            k,
            ..config.clone()
        };
        let (warp, screened) = (route(&c, RowForm::WarpPerRow), route(&c, RowForm::Screened));
        assert_same_bits(&format!("k = {k} ids"), &warp.ids, &screened.ids);
        assert_same_bits(
            &format!("k = {k} weights"),
            &warp.weights,
            &screened.weights,
        );
        // 35 rows run the many-row kernel; the same rows a few at a time, the few-row kernel.
        for start in (0..rows).step_by(SCREENED_FEW_ROWS) {
            let n = SCREENED_FEW_ROWS.min(rows - start);
            let few = route_logits_fused_as(
                dev,
                &c,
                n,
                experts,
                &logits[start * experts..(start + n) * experts],
                Some(&bias),
                RowForm::Screened,
            )
            .unwrap();
            let part = start * k..(start + n) * k;
            assert_same_bits(
                &format!("k = {k} ids from row {start}"),
                &warp.ids[part.clone()],
                &few.ids,
            );
            assert_same_bits(
                &format!("k = {k} weights from row {start}"),
                &warp.weights[part],
                &few.weights,
            );
        }
    }
    let screened = route(&config, RowForm::Screened);
    assert_eq!(screened.row_ids(1), &[5, 37, 200, 3, 90, 150, 260, 17]);
    assert_eq!(screened.row_ids(2), &[100, 200, 3, 90, 150, 260, 17, 10]);
    // The grid rows do hold ties among their nine best keys.
    let tied = (3..rows)
        .filter(|&r| {
            let mut top: Vec<f32> = logits[row(r)].to_vec();
            top.sort_by(|a, b| b.total_cmp(a));
            top[..9].windows(2).any(|w| w[0] == w[1])
        })
        .count();
    assert!(tied >= 20, "only {tied} of 32 grid rows have a tie");
}
// ANCHOR_END: screened_close_calls

// ANCHOR: screen_paths
/// Which path decides a row of the screened form, from its test entry point
/// (`fused_router_screen_path_e288`, which also stores the row's routing), at 288 experts,
/// k = 8, a bias of 8 for every expert but expert 40 (8 + 2^-15). In every row experts 200, 3,
/// 90, 150, 260, 17 and 100 are the seven best by far (logits 5 to 3.5) and every other logit is
/// at most -1 but those at the cut, which is:
///   row 0: expert 10 at logit 1, clear: the screen decides (1);
///   row 1: experts 10 and 40 at logit 0, keys 8.5 and 8.5 + 2^-15 (3.1e-5): within the screen's
///          margin (about 7.3e-5 at keys near 0.5 after c = 8), so the cut widens to both, and
///          their exact keys take 40 (2);
///   row 2: experts 11 and 41 at logit 0, the same key: widened (2), and the tie goes to 11;
///   row 3: as row 1, with a NaN logit at expert 250: the exact router (0), by chapter 1's rules;
///   row 4: experts 101 to 125 at logit 0, 25 equal keys at the cut: widened to 7 + 25 = 32
///          picks, a warp's lanes (2), and the tie goes to 101;
///   row 5: experts 101 to 126, 26 of them: 7 + 26 = 33 picks, more than a warp's lanes, so the
///          exact router (0), which takes 101 too.
/// Every row's ids and weights are the one-warp form's, bit for bit.
fn screened_form_widens_a_close_cut(dev: &'static Device) {
    let (experts, rows, config) = (288, 6, RouterConfig::glm5(8));
    let mut logits = vec![0.0f32; rows * experts];
    for (r, row) in logits.chunks_mut(experts).enumerate() {
        for (e, l) in row.iter_mut().enumerate() {
            *l = -1.0 - (e % 7) as f32 * 0.125;
        }
        for (i, e) in [200, 3, 90, 150, 260, 17, 100].into_iter().enumerate() {
            row[e] = 5.0 - 0.25 * i as f32;
        }
        match r {
            0 => row[10] = 1.0,
            1 | 3 => (row[10], row[40]) = (0.0, 0.0),
            2 => (row[11], row[41]) = (0.0, 0.0),
            4 => row[101..126].fill(0.0),
            _ => row[101..127].fill(0.0),
        }
    }
    logits[3 * experts + 250] = f32::NAN;
    let mut bias = vec![8.0f32; experts];
    bias[40] = 8.0 + 2f32.powi(-15);
    let (path, warp) = screen_paths_as_warp(dev, &config, rows, &logits, &bias);
    assert_eq!(path, [1, 2, 2, 0, 2, 0]);
    let eighth: Vec<u32> = (0..rows).map(|r| warp.row_ids(r)[7]).collect();
    assert_eq!(eighth, [10, 40, 11, 40, 101, 101]);
}
// ANCHOR_END: screen_paths

/// The screened form against the one-warp form on 4,000 rows like the bench's (logits in
/// [-3, 3), the GLM-like bias 8 ± 0.05), where some rows' cuts lie within the screen's margin:
/// the same bits, every row decided by the screen (no row of such data has its k picks and the
/// keys near its cut add up to more than 32), and the widened cut among the paths taken (how
/// often depends on the backend's approximate sigmoid; the bits do not).
fn screened_form_on_random_rows(dev: &'static Device) {
    let (experts, rows, config) = (288, 4000, RouterConfig::glm5(8));
    let logits = patterned(rows * experts, 0x0c08, 3.0);
    let bias: Vec<f32> = patterned(experts, 2, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect();
    let (path, _) = screen_paths_as_warp(dev, &config, rows, &logits, &bias);
    let widened = path.iter().filter(|&&p| p == 2).count();
    assert!(
        path.iter().all(|&p| p == 1 || p == 2),
        "a row took the exact router"
    );
    assert!(
        (rows / 200..rows / 10).contains(&widened),
        "{widened} of {rows} rows widened their cut"
    );
}

/// [`screen_paths`], with its ids and weights checked against the one-warp form's, bit for bit:
/// each row's path, and the one-warp form's routing.
fn screen_paths_as_warp(
    dev: &'static Device,
    config: &RouterConfig,
    rows: usize,
    logits: &[f32],
    bias: &[f32],
) -> (Vec<i32>, Routing) {
    let (path, ids, weights) = screen_paths(dev, config, rows, logits, bias);
    let warp = route_logits_fused_as(
        dev,
        config,
        rows,
        288,
        logits,
        Some(bias),
        RowForm::WarpPerRow,
    )
    .unwrap();
    assert_same_bits("ids", &warp.ids, &ids);
    assert_same_bits("weights", &warp.weights, &weights);
    (path, warp)
}

/// `fused_router_screen_path_e288` on `rows` rows of 288 logits (a sigmoid config without
/// groups): each row's path (1 the screen, 2 the screen with its cut widened, 0 the exact
/// router), ids and weights.
fn screen_paths(
    dev: &'static Device,
    config: &RouterConfig,
    rows: usize,
    logits: &[f32],
    bias: &[f32],
) -> (Vec<i32>, Vec<u32>, Vec<f32>) {
    assert_eq!((logits.len(), bias.len()), (rows * 288, 288));
    let m = dev.load(&ch05_fused_router::fused::KERNELS).unwrap();
    let (ld, bd) = (dev.upload(logits).unwrap(), dev.upload(bias).unwrap());
    let ids = dev.zeros::<i32>(rows * config.k).unwrap();
    let weights = dev.zeros::<f32>(rows * config.k).unwrap();
    let path = dev.zeros::<i32>(rows).unwrap();
    let (t, e, k) = (rows as i32, 288i32, config.k as i32);
    let sigmoid = ch05_fused_router::fused::geometry::FR_SCORING_SIGMOID as i32;
    let renormalize = i32::from(config.renormalize);
    m.launch(
        "fused_router_screen_path_e288",
        ch05_fused_router::fused::launch(rows),
        &moe_kernels::args![
            &ld,
            &bd,
            &ids,
            &weights,
            &path,
            t,
            e,
            k,
            sigmoid,
            0i32,
            0i32,
            renormalize,
            config.routed_scaling
        ],
    )
    .unwrap();
    let ids = ids.to_vec().unwrap().iter().map(|&i| i as u32).collect();
    (path.to_vec().unwrap(), ids, weights.to_vec().unwrap())
}

// ANCHOR: screen_error
/// The bound fr_clear relies on: the screen's approximate sigmoid (two MUFU instructions on the
/// GPU; glibc's exp2f and a division on the emulator) within 2^-20 of the exact score, at 2^20
/// logits from -120 to 120 and at the special points near 0 and the ends. The measured maximum
/// is printed.
fn screen_approximation_is_within_its_bound(dev: &'static Device) {
    let n = 1 << 20;
    let mut x: Vec<f32> = (0..n)
        .map(|i| -120.0 + 240.0 * i as f32 / n as f32)
        .collect();
    x.extend([
        0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 104.0, -104.0, 1e30, -1e30,
    ]);
    let m = dev.load(&ch05_fused_router::fused::KERNELS).unwrap();
    let xd = dev.upload(&x).unwrap();
    let (a, e) = (
        dev.zeros::<f32>(x.len()).unwrap(),
        dev.zeros::<f32>(x.len()).unwrap(),
    );
    let len = x.len() as i32;
    m.launch(
        "fused_router_screen_error",
        moe_kernels::LaunchConfig::for_elements(x.len(), 256),
        &moe_kernels::args![&xd, &a, &e, len],
    )
    .unwrap();
    let (a, e) = (a.to_vec().unwrap(), e.to_vec().unwrap());
    let worst = a
        .iter()
        .zip(&e)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0f32, f32::max);
    eprintln!(
        "screen approximation: max |approx - exact| = {worst:e} = 2^{:.1}",
        worst.log2()
    );
    assert!(a.iter().chain(&e).all(|v| v.is_finite()));
    assert!(worst <= 2f32.powi(-20), "max error {worst:e} above 2^-20");
}
// ANCHOR_END: screen_error

fn launches_are_the_pair(dev: &'static Device) {
    let config = RouterConfig::glm5(8);
    for (rows, experts, gemm) in [
        (1, 288, "tiny_gemm_r1"),
        (3, 288, "tiny_gemm_r4"),
        (6, 128, "tiny_gemm_r8"),
        (7, 128, "tiny_gemm_r8"),
        (8, 100, "tiny_gemm_tc"),
        (16, 100, "tiny_gemm_tc"),
        (40, 33, "tiny_gemm_tc"),
    ] {
        let shape = GateShape {
            rows,
            hidden: 64,
            experts,
        };
        let bias = vec![8.0f32; experts];
        let pair = FusedRouter::new(dev, &config, shape, Some(&bias)).unwrap();
        let h = patterned(rows * 64, 7, 1.0);
        let w = patterned(experts * 64, 8, 0.3);
        let (got, launched) = record_launches(|| {
            route_on_device(&pair, dev, GateDtype::Bf16, &h, &w, Some(&bias)).unwrap()
        });
        // GLM-5's config: sigmoid scores without groups, screened up to SCREENED_FEW_ROWS rows,
        // then a block per row.
        let fused = if rows <= SCREENED_FEW_ROWS {
            screened_kernel_for(experts, rows).unwrap()
        } else {
            "fused_router_block"
        };
        assert_eq!(
            launched,
            vec![
                format!("ch05_tiny_gemm::{gemm}"),
                format!("ch05_fused_router::{fused}")
            ],
            "{rows} rows, {experts} experts"
        );
        assert_eq!(pair.launch_names(), vec![gemm, fused]);
        assert_eq!(got.rows, rows);
    }
    assert_eq!(kernel_for(128), Some("fused_router_e128"));
    assert_eq!(kernel_for(129), Some("fused_router_e256"));
    assert_eq!(kernel_for(288), Some("fused_router_e288"));
    assert_eq!(kernel_for(289), Some("fused_router_e320"));
    assert_eq!(kernel_for(321), Some("fused_router_e384"));
    assert_eq!(kernel_for(385), Some("fused_router_e512"));
    assert_eq!(kernel_for(1024), Some("fused_router_e1024"));
    assert_eq!(kernel_for(1025), None);
    assert_eq!(
        screened_kernel_for(288, 1),
        Some("fused_router_screen_e288")
    );
    assert_eq!(
        screened_kernel_for(288, SCREENED_FEW_ROWS),
        Some("fused_router_screen_e288")
    );
    assert_eq!(
        screened_kernel_for(288, SCREENED_FEW_ROWS + 1),
        Some("fused_router_screen_many_e288")
    );
    assert_eq!(
        screened_kernel_for(1024, 8192),
        Some("fused_router_screen_many_e1024")
    );
    assert_eq!(screened_kernel_for(1025, 1), None);
    // Sigmoid scores: screened up to SCREENED_FEW_ROWS rows and past BLOCK_FORM_MAX_ROWS, a
    // block per row between; the other scorings: a block per row, then one warp per row; the
    // one-warp form for grouped selection at any count.
    let glm = RouterConfig::glm5(8);
    assert_eq!(form_for(&glm, 1), RowForm::Screened);
    assert_eq!(form_for(&glm, SCREENED_FEW_ROWS), RowForm::Screened);
    assert_eq!(form_for(&glm, SCREENED_FEW_ROWS + 1), RowForm::BlockPerRow);
    assert_eq!(form_for(&glm, BLOCK_FORM_MAX_ROWS), RowForm::BlockPerRow);
    assert_eq!(form_for(&glm, BLOCK_FORM_MAX_ROWS + 1), RowForm::Screened);
    let qwen3 = RouterConfig::qwen3(8);
    assert_eq!(form_for(&qwen3, 1), RowForm::BlockPerRow);
    assert_eq!(
        form_for(&qwen3, BLOCK_FORM_MAX_ROWS + 1),
        RowForm::WarpPerRow
    );
    let shape = GateShape {
        rows: BLOCK_FORM_MAX_ROWS + 1,
        hidden: 64,
        experts: 288,
    };
    let pair = FusedRouter::new(dev, &glm, shape, Some(&[8.0; 288])).unwrap();
    assert_eq!(pair.launch_names()[1], "fused_router_screen_many_e288");
    let v3 = RouterConfig::deepseek_v3();
    assert_eq!(form_for(&v3, 1), RowForm::WarpPerRow);
    assert_eq!(form_for(&v3, BLOCK_FORM_MAX_ROWS + 1), RowForm::WarpPerRow);
}

fn empty_batch_launches_nothing_and_returns_empty(dev: &'static Device) {
    let shape = GateShape {
        rows: 0,
        hidden: 32,
        experts: 16,
    };
    let (got, launched) = record_launches(|| {
        route_fused(
            dev,
            &RouterConfig::glm5(4),
            shape,
            &[],
            &vec![0.0; 16 * 32],
            Some(&[0.0; 16]),
        )
        .unwrap()
    });
    assert_eq!((got.rows, got.ids.len(), got.weights.len()), (0, 0, 0));
    assert_eq!(launched, Vec::<String>::new());
}

// ANCHOR: limits_are_typed_errors
fn limits_and_bad_inputs_are_typed_errors(dev: &'static Device) {
    let shape = |rows, hidden, experts| GateShape {
        rows,
        hidden,
        experts,
    };
    let limit = |e: DeviceRouterError| match e {
        DeviceRouterError::Limit { limit, got, .. } => (limit, got),
        other => panic!("expected a Limit error, got {other:?}"),
    };
    let new = |c: &RouterConfig, s: GateShape| FusedRouter::new(dev, c, s, None).err().unwrap();
    assert_eq!(
        limit(new(&RouterConfig::qwen3(8), shape(1, 64, 1025))),
        (1024, 1025)
    );
    assert_eq!(
        limit(new(&RouterConfig::qwen3(33), shape(1, 64, 64))),
        (32, 33)
    );
    let grouped = RouterConfig {
        k: 8,
        grouping: Some(Grouping {
            n_group: 64,
            topk_group: 8,
        }),
        ..RouterConfig::deepseek_v3()
    };
    assert_eq!(limit(new(&grouped, shape(1, 64, 128))), (32, 64));
    let e = new(&RouterConfig::qwen3(8), shape(1, 12, 64));
    assert_eq!(
        e.to_string(),
        "the hidden size must be a multiple of 8 (the tiny GEMM loads whole 16-byte slices of bf16), got 12"
    );
    // H = 0 is a multiple of 8, and still no router: every logit would be 0.
    assert_eq!(
        new(&RouterConfig::qwen3(8), shape(1, 0, 64)).to_string(),
        "the hidden size is 0: every logit would be 0, and every row routed to the lowest ids"
    );
    // Chapter 1's rules come first, with chapter 1's errors.
    assert_eq!(
        new(&RouterConfig::qwen3(65), shape(1, 64, 64)),
        DeviceRouterError::Router(RouterError::KTooLarge { k: 65, experts: 64 })
    );
    assert_eq!(
        new(&RouterConfig::qwen3(8), shape(1, 64, 0)),
        DeviceRouterError::Router(RouterError::NoExperts)
    );
    let e = FusedRouter::new(
        dev,
        &RouterConfig::glm5(4),
        shape(2, 8, 16),
        Some(&[0.0; 15]),
    )
    .err()
    .unwrap();
    assert_eq!(
        e,
        DeviceRouterError::Router(RouterError::BiasLength {
            len: 15,
            experts: 16
        })
    );
    // Wrong lengths and types at enqueue.
    let s = shape(2, 8, 16);
    let e = route_fused(
        dev,
        &RouterConfig::qwen3(4),
        s,
        &[0.0; 15],
        &[0.0; 128],
        None,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "hidden [T, H] has 15 elements, expected 16");
    let pair = FusedRouter::new(dev, &RouterConfig::qwen3(4), s, None).unwrap();
    let h32 = dev.upload(&[0.0f32; 16]).unwrap();
    let w16 = dev.upload(&[bf16::ZERO; 128]).unwrap();
    let bias = dev.upload(&[0.0f32; 16]).unwrap();
    let ids = dev.alloc::<i32>(8).unwrap();
    let ws = dev.alloc::<f32>(8).unwrap();
    let outputs = RouterOutputs {
        ids: &ids,
        weights: &ws,
    };
    let e = pair
        .enqueue(
            &GateInputs {
                hidden: DeviceMatrix::F32(&h32),
                weight: DeviceMatrix::Bf16(&w16),
                bias: None,
            },
            &outputs,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the fused router does not take hidden states in F32"
    );
    let h16 = dev.upload(&[bf16::ZERO; 16]).unwrap();
    let e = pair
        .enqueue(
            &GateInputs {
                hidden: DeviceMatrix::Bf16(&h16),
                weight: DeviceMatrix::Bf16(&w16),
                bias: Some(&bias),
            },
            &outputs,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "bias (the router was built without one) has 16 elements, expected 0"
    );
    let e = route_logits_fused(dev, &RouterConfig::qwen3(4), 2, 16, &[0.0; 31], None).unwrap_err();
    assert_eq!(e.to_string(), "logits [T, E] has 31 elements, expected 32");
}
// ANCHOR_END: limits_are_typed_errors

// ANCHOR: batch_invariance
/// A row's logits do not depend on its batch within a form: on CUDA cores the same bits alone,
/// in a batch of 5, of 16 (one block along y) and of 40 (three), because every block height adds
/// in the same order; on tensor cores the same bits in batches of 1, 17 and 39 as in one of 40.
/// Both are the exact dot products within an fp32 sum's rounding.
fn tiny_gemm_bits_do_not_depend_on_the_batch(dev: &'static Device) {
    // 257 slices: a CUDA-core thread with two slices and one with none; 64 chunks of 32 and a
    // partial one on tensor cores; 37 experts: a partial tile of 16.
    let (hidden, experts) = (2056, 37);
    let h: Vec<bf16> = patterned(40 * hidden, 41, 1.0)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let w: Vec<bf16> = patterned(experts * hidden, 42, 0.05)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let m = dev.load(&tiny_gemm::KERNELS).unwrap();
    let wd = dev.upload(&w).unwrap();
    let logits_of = |form, rows: usize| {
        let hd = dev.upload(&h[..rows * hidden]).unwrap();
        let out = dev.alloc::<f32>(rows * experts).unwrap();
        tiny_gemm::enqueue_as(form, &m, &hd, &wd, &out, rows, hidden, experts).unwrap();
        out.to_vec().unwrap()
    };
    for (form, batches) in [
        (GemmForm::CudaCores, [1, 5, 16]),
        (GemmForm::TensorCores, [1, 17, 39]),
    ] {
        let all = logits_of(form, 40);
        for rows in batches {
            assert_same_bits(
                &format!("{form:?}, {rows} rows"),
                &logits_of(form, rows),
                &all[..rows * experts],
            );
        }
        // Against the exact dot products: the error of an fp32 sum of 2056 exact products.
        for t in 0..40 {
            for e in 0..experts {
                let (mut exact, mut size) = (0.0f64, 0.0f64);
                for j in 0..hidden {
                    let p = h[t * hidden + j].to_f64() * w[e * hidden + j].to_f64();
                    exact += p;
                    size += p.abs();
                }
                let got = all[t * experts + e] as f64;
                assert!(
                    (got - exact).abs() <= 1e-6 * size,
                    "{form:?}: row {t} expert {e}: {got} vs {exact}"
                );
            }
        }
    }
    // The forms by row count.
    assert_eq!(tiny_gemm::form_for(7), GemmForm::CudaCores);
    assert_eq!(tiny_gemm::form_for(8), GemmForm::TensorCores);
}
// ANCHOR_END: batch_invariance

moe_kernels::backend_tests!(
    fused_pair_matches_the_oracle_on_every_regime,
    combinations_match_the_oracle_on_every_regime,
    fused_kernel_from_logits_matches_the_oracle,
    wide_rows_and_large_k_match_the_oracle,
    both_forms_give_the_same_bits,
    softmax_ranks_by_the_logit_where_probabilities_tie,
    screened_form_resolves_close_calls,
    screened_form_widens_a_close_cut,
    screened_form_on_random_rows,
    screen_approximation_is_within_its_bound,
    launches_are_the_pair,
    empty_batch_launches_nothing_and_returns_empty,
    limits_and_bad_inputs_are_typed_errors,
    tiny_gemm_bits_do_not_depend_on_the_batch,
);

fn run(dev: &'static Device, r: &RegimeInput) -> (Routing, Vec<f32>) {
    let rb = as_dtype(r, GateDtype::Bf16);
    let pair = FusedRouter::new(dev, &r.config, shape(r), r.bias.as_deref()).unwrap();
    let got = route_on_device(
        &pair,
        dev,
        GateDtype::Bf16,
        &rb.hidden_states,
        &rb.gate_weight,
        r.bias.as_deref(),
    )
    .unwrap_or_else(|e| panic!("regime {}: {e}", r.name));
    (got, pair.logits().to_vec().unwrap())
}

// ANCHOR: emu_and_gpu_same_bits
/// Every regime on the emulator and on the GPU: the same logits, ids and weights, bit for bit;
/// and the GPU's routing is the f64 oracle's on the GPU's own logits. Each comparison is counted
/// in the chapter's equality table (`EQUALITY`).
#[test]
#[ignore = "needs a GPU"]
fn emulator_and_gpu_give_the_same_bits_on_every_regime() {
    let (gpu, emu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    for name in REGIMES {
        let r = regime(name).unwrap();
        let ((g, gl), (c, cl)) = (run(gpu, &r), run(emu, &r));
        let mut t = EQUALITY.tally("regimes", name);
        let logits = format!("{name} logits");
        t.same_bits_up_to_nan_payload(LOGITS_EMU_GPU, &logits, &gl, &cl);
        t.same_bits(IDS_EMU_GPU, &format!("{name} ids"), &g.ids, &c.ids);
        let weights = format!("{name} weights");
        t.same_bits(WEIGHTS_EMU_GPU, &weights, &g.weights, &c.weights);
        let oracle = LiteralRouter {
            config: r.config.clone(),
        }
        .route_rows(&gl, r.rows, r.experts, r.bias.as_deref())
        .unwrap();
        oracle_lines(&mut t, name, &oracle, &g);
        t.record();
    }
}
// ANCHOR_END: emu_and_gpu_same_bits

/// The chapter's equality table: `bench/results/h200/ch05_equality.csv` once a GPU run's
/// `MOE_EQUALITY_DIR` copy is committed, printed in the book by `plot`. Its names are made only
/// on a GPU machine; `equality_names_are_plain_csv` checks every one of them on any machine.
static EQUALITY: EqualityTable = EqualityTable::new("ch05_equality");
const LOGITS_EMU_GPU: &str = "logits: emulator vs GPU";
const IDS_EMU_GPU: &str = "ids: emulator vs GPU";
const WEIGHTS_EMU_GPU: &str = "weights: emulator vs GPU";
const CLEAR_CUTS: &str = "rows with a clear cut: ids vs the f64 oracle";
const NEAR_TIES: &str = "rows at a near tie: within chapter 1's tie rule";
const IDS_ON_GPU_LOGITS: &str = "ids: emulator vs GPU (on the GPU's logits)";
const WEIGHTS_ON_GPU_LOGITS: &str = "weights: emulator vs GPU (on the GPU's logits)";
const IDS_PATHS: &str = "ids: screened form's paths vs the pair (GPU)";
const WEIGHTS_PATHS: &str = "weights: screened form's paths vs the pair (GPU)";
const LOGITS_64: &str = "logits of the first 64 rows: emulator vs GPU";

/// The lines of one form against the pair: ids, then weights.
fn form_lines(form: RowForm) -> [String; 2] {
    let name = match form {
        RowForm::WarpPerRow => "one-warp form",
        RowForm::BlockPerRow => "block form",
        RowForm::Screened => "screened form",
    };
    ["ids", "weights"].map(|w| format!("{w}: {name} vs the pair (GPU)"))
}

/// The case of a random-rows test.
fn random_case(shape: &str, hidden: usize, experts: usize, rows: usize) -> String {
    format!("{shape} (H {hidden}; {experts} experts; {rows} rows)")
}

#[test]
fn equality_names_are_plain_csv() {
    let forms = FORMS.iter().flat_map(|&f| form_lines(f));
    let fixed = [
        LOGITS_EMU_GPU,
        IDS_EMU_GPU,
        WEIGHTS_EMU_GPU,
        CLEAR_CUTS,
        NEAR_TIES,
        IDS_ON_GPU_LOGITS,
        WEIGHTS_ON_GPU_LOGITS,
        IDS_PATHS,
        WEIGHTS_PATHS,
        LOGITS_64,
    ];
    let cases = [
        random_case("GLM-like", 4096, 288, 100_000),
        random_case("Qwen3-like", 2048, 128, 100_000),
    ];
    let names = fixed
        .map(String::from)
        .into_iter()
        .chain(forms)
        .chain(cases);
    let names: Vec<String> = names.chain(REGIMES.iter().map(|r| r.to_string())).collect();
    names
        .iter()
        .for_each(|n| moe_kernels::testing::check_plain(n));
    assert_eq!(names.len(), 10 + 6 + 2 + REGIMES.len());
}

/// The GPU's routing against the f64 oracle on the same logits (chapter 1's comparison, which
/// fails the test on a wrong row), counted as two lines: the rows with a clear cut, whose ids
/// must be the oracle's, and the rows at a near tie, held to chapter 1's rule for those. Returns
/// how many rows had a clear cut. A wrong row is counted as one row with a clear cut that
/// differs (the comparison stops at the first), written, and then fails the test.
fn oracle_lines(t: &mut Tally, case: &str, oracle: &[RowDetail], got: &Routing) -> usize {
    match check_routing(case, oracle, got, Tolerance::SAME_LOGITS) {
        Ok(clear) => {
            t.add(CLEAR_CUTS, clear, 0);
            t.add(NEAR_TIES, got.rows - clear, 0);
            clear
        }
        Err(e) => {
            t.add(CLEAR_CUTS, 1, 1);
            t.record();
            panic!("{e}")
        }
    }
}

/// `rows` random rows through the pair on the GPU in chunks: the ids of every clear cut equal
/// the f64 oracle's on the pair's own logits, every weight within 2e-6 of it and never NaN; and
/// the fused kernel on the emulator, given the GPU's logits, gives the same ids and weights bit
/// for bit, as does the block-per-row form on the GPU. The logits' bits are compared with the emulator on the first chunk's first 64 rows
/// (the emulator's GEMM at this size would take minutes).
fn random_rows(
    shape: &str,
    hidden: usize,
    experts: usize,
    config: RouterConfig,
    with_bias: bool,
    salt: u64,
) {
    let (gpu, emu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    let (rows, chunk) = (100_000usize, 10_000usize);
    let w = patterned(experts * hidden, salt, 0.02);
    let bias: Option<Vec<f32>> = with_bias.then(|| {
        patterned(experts, salt + 1, 0.05)
            .iter()
            .map(|b| 8.0 + b)
            .collect()
    });
    let bias = bias.as_deref();
    let mut exact = 0;
    let mut paths = [0usize; 3]; // rows decided by the exact router, the screen, the widened cut
    let case = random_case(shape, hidden, experts, rows);
    let mut t = EQUALITY.tally("random rows", &case);
    for c in 0..rows / chunk {
        let h = patterned(chunk * hidden, salt + 10 + c as u64, 1.0);
        let s = GateShape {
            rows: chunk,
            hidden,
            experts,
        };
        let pair = FusedRouter::new(gpu, &config, s, bias).unwrap();
        let got = route_on_device(&pair, gpu, GateDtype::Bf16, &h, &w, bias).unwrap();
        let logits = pair.logits().to_vec().unwrap();
        let oracle = LiteralRouter {
            config: config.clone(),
        }
        .route_rows(&logits, chunk, experts, bias)
        .unwrap();
        exact += oracle_lines(&mut t, &format!("random, chunk {c}"), &oracle, &got);
        let on_emu = route_logits_fused(emu, &config, chunk, experts, &logits, bias).unwrap();
        let (ids, weights) = (format!("chunk {c} ids"), format!("chunk {c} weights"));
        t.same_bits(IDS_ON_GPU_LOGITS, &ids, &got.ids, &on_emu.ids);
        t.same_bits(
            WEIGHTS_ON_GPU_LOGITS,
            &weights,
            &got.weights,
            &on_emu.weights,
        );
        // The chunk runs form_for's form (screened for sigmoid scores, else one warp per row);
        // every other form gives the same bits on the GPU.
        for form in FORMS {
            let b = route_logits_fused_as(gpu, &config, chunk, experts, &logits, bias, form);
            let b = b.unwrap();
            let [id_line, weight_line] = form_lines(form);
            let (ids, weights) = (format!("{ids}, {form:?}"), format!("{weights}, {form:?}"));
            t.same_bits(&id_line, &ids, &got.ids, &b.ids);
            t.same_bits(&weight_line, &weights, &got.weights, &b.weights);
        }
        if let (288, Scoring::Sigmoid, None, Some(b)) =
            (experts, config.scoring, config.grouping, bias)
        {
            let (path, ids, weights) = screen_paths(gpu, &config, chunk, &logits, b);
            let what = format!("chunk {c} ids, screen paths");
            t.same_bits(IDS_PATHS, &what, &got.ids, &ids);
            let what = format!("chunk {c} weights, screen paths");
            t.same_bits(WEIGHTS_PATHS, &what, &got.weights, &weights);
            for p in path {
                paths[p as usize] += 1;
            }
        }
        if c == 0 {
            let few = GateShape { rows: 64, ..s };
            let on_emu = FusedRouter::new(emu, &config, few, bias).unwrap();
            route_on_device(&on_emu, emu, GateDtype::Bf16, &h[..64 * hidden], &w, bias).unwrap();
            let el = on_emu.logits().to_vec().unwrap();
            t.same_bits(LOGITS_64, "logits of 64 rows", &el, &logits[..64 * experts]);
        }
    }
    t.record();
    eprintln!(
        "{rows} random rows, {experts} experts: {exact} clear cuts, every one the oracle's ids"
    );
    assert!(exact * 10 >= rows * 9, "only {exact} clear cuts");
    if paths != [0; 3] {
        let [exact_router, first, second] = paths;
        eprintln!(
            "{rows} random rows, the screened form: {first} decided by the screen, \
             {second} with their cut widened, {exact_router} by the exact router"
        );
        // Each row has one path; the screens decide nearly every row of random logits.
        assert_eq!(first + second + exact_router, rows);
        assert!(
            exact_router * 100 < rows,
            "{exact_router} rows took the exact router"
        );
    }
}

/// The router kernel is a dependent launch of the tiny GEMM: it must read the logits only after
/// its wait, even when the tiny GEMM has more blocks than fit at once and the router's blocks
/// start before its last ones (GLM-like: the tensor-core form's 18 × 32 blocks at 512 rows, two
/// per SM; 600 rows take the screened form, 512 the block form). A read
/// hoisted above the wait gave other experts for row 16 of 32 (bench ch05, first H200 run with
/// the dependent launch). Fresh buffers each time, several batch sizes, five times each: the
/// pair's ids and weights must be the fused kernel's bits on the pair's own final logits.
#[test]
#[ignore = "needs a GPU"]
fn pair_reads_the_logits_only_after_the_tiny_gemm_ends() {
    let gpu = moe_kernels::testing::cuda();
    let (hidden, experts, config) = (4096, 288, RouterConfig::glm5(8));
    let w = patterned(experts * hidden, 9300, 0.02);
    let bias: Vec<f32> = patterned(experts, 9301, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect();
    for rows in [17, 32, 64, 96, 512, 600] {
        for rep in 0..5 {
            let h = patterned(rows * hidden, 9310 + rep, 1.0);
            let s = GateShape {
                rows,
                hidden,
                experts,
            };
            let pair = FusedRouter::new(gpu, &config, s, Some(&bias)).unwrap();
            let got = route_on_device(&pair, gpu, GateDtype::Bf16, &h, &w, Some(&bias)).unwrap();
            let logits = pair.logits().to_vec().unwrap();
            let alone =
                route_logits_fused(gpu, &config, rows, experts, &logits, Some(&bias)).unwrap();
            assert_same_bits(
                &format!("{rows} rows, run {rep}: ids"),
                &got.ids,
                &alone.ids,
            );
            assert_same_bits(
                &format!("{rows} rows, run {rep}: weights"),
                &got.weights,
                &alone.weights,
            );
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn random_100k_rows_glm_like() {
    random_rows("GLM-like", 4096, 288, RouterConfig::glm5(8), true, 9100);
}

#[test]
#[ignore = "needs a GPU"]
fn random_100k_rows_qwen3_like() {
    random_rows("Qwen3-like", 2048, 128, RouterConfig::qwen3(8), false, 9200);
}
