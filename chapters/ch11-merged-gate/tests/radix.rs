//! Radix select on every backend (the emulator always, the GPU with `--include-ignored` on a GPU
//! machine): the same ids and weights as chapter 5's fused router, bit for bit, on every named
//! regime, on rows of Kimi K3's width made of ties, and on random rows, in all three forms (eight
//! warps, four, or one per row); the host's literal loop against a sort; the limits and every bad
//! input as typed errors.

use ch01_router::chain::{DeviceRouterError, RouterOutputs};
use ch01_router::config::{Grouping, RouterConfig, Scoring};
use ch01_router::inputs::patterned;
use ch01_router::regimes::{regime, REGIMES};
use ch01_router::routing::Routing;
use ch01_router::RouterError;
use ch05_fused_router::fused::{route_logits_fused_as, RowForm};
use ch05_fused_router::route_logits_fused;
use ch11_merged_gate::front::{bias_in, KIMI_BIAS_RANGE};
use ch11_merged_gate::radix::{
    order, radix_select_row, route_logits_radix, route_logits_radix_in, Logits, RadixForm,
    RadixTopk,
};
use moe_kernels::testing::assert_same_bits;
use moe_kernels::Device;

/// Both routings, ids and weights, bit for bit.
fn assert_same(what: &str, a: &Routing, b: &Routing) {
    assert_eq!(a.ids, b.ids, "{what}: ids");
    assert_same_bits(&format!("{what}: weights"), &a.weights, &b.weights);
}

/// Radix select, in all three of its forms, against chapter 5's fused kernel on the same logits,
/// in every form of chapter 5.
fn check_against_fused(
    dev: &'static Device,
    what: &str,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
) {
    let radix = route_logits_radix(dev, config, rows, experts, logits, bias)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let fused = route_logits_fused(dev, config, rows, experts, logits, bias).unwrap();
    assert_same(what, &radix, &fused);
    // Each form forced, whichever the row count picks (RadixForm::for_rows).
    for (form, name) in [
        (RadixForm::Block, "a block"),
        (RadixForm::Half, "four warps"),
        (RadixForm::Warp, "a warp"),
    ] {
        let forced = route_logits_radix_in(dev, config, rows, experts, logits, bias, form)
            .unwrap_or_else(|e| panic!("{what} ({name} per row): {e}"));
        assert_same(&format!("{what} ({name} per row)"), &forced, &fused);
    }
    if config.grouping.is_none() {
        let block = route_logits_fused_as(
            dev,
            config,
            rows,
            experts,
            logits,
            bias,
            RowForm::BlockPerRow,
        )
        .unwrap();
        assert_same(&format!("{what} (block form)"), &radix, &block);
    }
}

// ANCHOR: identity_regimes
/// Every named regime (chapter 1's list: softmax, sigmoid + bias, grouped, √softplus; ties, NaN
/// and infinite logits, one row to 512): radix select gives chapter 5's ids and weights, bit for
/// bit, on the regime's fp32 logits.
fn same_bits_as_chapter_5_on_every_regime(dev: &'static Device) {
    for name in REGIMES {
        let r = regime(name).unwrap();
        let logits = r.logits_f32();
        check_against_fused(
            dev,
            name,
            &r.config,
            r.rows,
            r.experts,
            &logits,
            r.bias.as_deref(),
        );
    }
}
// ANCHOR_END: identity_regimes

/// Each family with the regime's logits but other switches: not renormalised, scaled, with and
/// without a bias (a softmax with a bias or without renormalisation is a full softmax, whose
/// sum must be taken in chapter 5's order).
fn same_bits_with_every_switch(dev: &'static Device) {
    let r = regime("large_prefill").unwrap();
    let logits = r.logits_f32();
    let bias = r.bias.clone().unwrap();
    for scoring in [Scoring::Softmax, Scoring::Sigmoid, Scoring::SqrtSoftplus] {
        for renormalize in [true, false] {
            for with_bias in [true, false] {
                let config = RouterConfig {
                    k: 8,
                    scoring,
                    renormalize,
                    grouping: None,
                    routed_scaling: 2.5,
                };
                let b = with_bias.then_some(&bias[..]);
                let what = format!("{scoring} renormalize {renormalize} bias {with_bias}");
                check_against_fused(dev, &what, &config, 64, r.experts, &logits[..64 * 128], b);
            }
        }
    }
    // Grouped: k at its limit, groups at theirs (32, of 4 experts each).
    for (n_group, topk_group, k) in [(8, 4, 8), (4, 2, 32), (32, 10, 32), (2, 1, 3)] {
        let config = RouterConfig {
            k,
            grouping: Some(Grouping {
                n_group,
                topk_group,
            }),
            ..RouterConfig::deepseek_v3()
        };
        let what = format!("groups {n_group}:{topk_group} k {k}");
        check_against_fused(
            dev,
            &what,
            &config,
            64,
            128,
            &logits[..64 * 128],
            Some(&bias),
        );
    }
}

/// Rows of Kimi K3's width (896 experts, k = 16) built to tie at the cut: every key equal, a block
/// of equal keys straddling the cut, equal keys that differ only in the sign of zero, NaN and
/// infinite logits, and k = E; ids and weights as chapter 5's.
fn same_bits_on_kimi_rows_made_of_ties(dev: &'static Device) {
    let e = 896;
    let bias = bias_in(e, KIMI_BIAS_RANGE, 5);
    let mut rows: Vec<Vec<f32>> = Vec::new();
    rows.push(vec![0.0; e]); // every logit equal
    let mut r = patterned(e, 6, 2.0);
    for x in r.iter_mut().skip(100).step_by(37) {
        *x = 1.5; // 22 equal logits, more than k
    }
    rows.push(r);
    let mut r = vec![-0.0f32; e];
    for x in r.iter_mut().step_by(2) {
        *x = 0.0;
    }
    rows.push(r);
    let mut r = patterned(e, 7, 3.0);
    for i in (0..e).step_by(5) {
        r[i] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][i % 3];
    }
    rows.push(r);
    rows.push(vec![f32::NAN; e]);
    let logits: Vec<f32> = rows.concat();
    let t = rows.len();
    for config in [RouterConfig::glm5(16), RouterConfig::qwen3(16)] {
        for b in [Some(&bias[..]), None] {
            let what = format!("{config} bias {}", b.is_some());
            check_against_fused(dev, &what, &config, t, e, &logits, b);
        }
    }
    // Keys equal after the bias: the bias undoes the logits' order exactly in a few places.
    let k_all = RouterConfig::glm5(32);
    check_against_fused(
        dev,
        "k = E",
        &k_all,
        2,
        32,
        &logits[..64],
        Some(&bias[..32]),
    );
}

/// Random rows at Kimi K3's width and at the other widths chapter 5 compiles, sigmoid + bias and
/// softmax.
fn same_bits_on_random_rows(dev: &'static Device) {
    for (experts, k, rows) in [(896, 16, 300), (288, 8, 200), (1024, 32, 64), (100, 3, 100)] {
        let logits = patterned(rows * experts, experts as u64, 4.0);
        let bias = bias_in(experts, KIMI_BIAS_RANGE, 9);
        let what = format!("{experts} experts k {k}");
        check_against_fused(
            dev,
            &what,
            &RouterConfig::glm5(k),
            rows,
            experts,
            &logits,
            Some(&bias),
        );
        check_against_fused(
            dev,
            &what,
            &RouterConfig::qwen3(k),
            rows,
            experts,
            &logits,
            None,
        );
    }
}

/// The bf16 entry point reads bf16 logits at a row stride: the same as the fp32 entry point on
/// those logits widened.
fn bf16_logits_at_a_stride(dev: &'static Device) {
    let (rows, experts, ld, k) = (9, 896, 896 + 40, 16);
    let wide = patterned(rows * ld, 21, 3.0);
    let b16: Vec<half::bf16> = wide.iter().map(|&x| half::bf16::from_f32(x)).collect();
    let widened: Vec<f32> = (0..rows)
        .flat_map(|t| b16[t * ld..t * ld + experts].iter().map(|x| x.to_f32()))
        .collect();
    let bias = bias_in(experts, KIMI_BIAS_RANGE, 3);
    let config = RouterConfig::glm5(k);
    let want = route_logits_fused(dev, &config, rows, experts, &widened, Some(&bias)).unwrap();
    for form in RadixForm::ALL {
        let topk = RadixTopk::new(dev, &config, rows, experts, Some(&bias))
            .unwrap()
            .with_form(form);
        let (buf, bias_d) = (dev.upload(&b16).unwrap(), dev.upload(&bias).unwrap());
        let ids = dev.alloc::<i32>(rows * k).unwrap();
        let weights = dev.alloc::<f32>(rows * k).unwrap();
        let outputs = RouterOutputs {
            ids: &ids,
            weights: &weights,
        };
        topk.enqueue(Logits::Bf16 { buf: &buf, ld }, Some(&bias_d), &outputs)
            .unwrap();
        let got = ch01_router::device_router::download(rows, k, &ids, &weights).unwrap();
        assert_same(&format!("bf16 at a stride ({form:?})"), &got, &want);
    }
}

// ANCHOR: bad_inputs
/// Every bad input a user can give is a typed error naming the problem.
fn bad_inputs_are_typed_errors(dev: &'static Device) {
    let logits = vec![0.5f32; 4 * 8];
    let route = |config: &RouterConfig, experts: usize, bias: Option<&[f32]>| {
        route_logits_radix(dev, config, 4, experts, &logits[..4 * experts], bias).unwrap_err()
    };
    let msg = |e: DeviceRouterError| e.to_string();
    assert_eq!(
        route(&RouterConfig::glm5(0), 8, None),
        DeviceRouterError::Router(RouterError::KZero)
    );
    assert_eq!(
        msg(route(&RouterConfig::glm5(9), 8, None)),
        "k = 9 exceeds the number of experts (8)"
    );
    assert_eq!(
        msg(route(&RouterConfig::glm5(2), 8, Some(&[0.1; 7]))),
        "bias has 7 values but there are 8 experts (one bias per expert)"
    );
    let big = vec![0.0f32; 4 * 1025];
    let e = route_logits_radix(dev, &RouterConfig::glm5(2), 4, 1025, &big, None).unwrap_err();
    assert!(
        msg(e.clone()).contains("experts (radix select packs an id into 10 bits) is 1025"),
        "{e}"
    );
    let wide = vec![0.0f32; 4 * 64];
    let e = route_logits_radix(dev, &RouterConfig::glm5(33), 4, 64, &wide, None).unwrap_err();
    assert!(
        msg(e.clone()).contains("k (radix select orders the picks with one warp) is 33"),
        "{e}"
    );
    // A stride shorter than a row, and logits of the wrong length.
    let topk = RadixTopk::new(dev, &RouterConfig::glm5(2), 4, 8, None).unwrap();
    let buf = dev.upload(&logits).unwrap();
    let ids = dev.alloc::<i32>(8).unwrap();
    let weights = dev.alloc::<f32>(8).unwrap();
    let out = RouterOutputs {
        ids: &ids,
        weights: &weights,
    };
    let e = topk
        .enqueue(Logits::F32 { buf: &buf, ld: 6 }, None, &out)
        .unwrap_err();
    assert!(msg(e.clone()).contains("row stride"), "{e}");
    let e = topk
        .enqueue(Logits::F32 { buf: &buf, ld: 9 }, None, &out)
        .unwrap_err();
    assert!(msg(e.clone()).contains("logits [T, ld]"), "{e}");
    // An empty batch is valid and launches nothing.
    let none = route_logits_radix(dev, &RouterConfig::glm5(2), 0, 8, &[], None).unwrap();
    assert!(none.ids.is_empty());
}
// ANCHOR_END: bad_inputs

moe_kernels::backend_tests!(
    same_bits_as_chapter_5_on_every_regime,
    same_bits_with_every_switch,
    same_bits_on_kimi_rows_made_of_ties,
    same_bits_on_random_rows,
    bf16_logits_at_a_stride,
    bad_inputs_are_typed_errors,
);

/// The form is a rule of the row count: eight warps a row below RADIX_HALF_FROM_ROWS rows, four
/// below RADIX_WARP_FROM_ROWS, one from there, in RadixTopk::new and route_logits_radix alike.
#[test]
fn the_form_follows_the_row_count() {
    use ch11_merged_gate::radix::{RADIX_HALF_FROM_ROWS as HALF, RADIX_WARP_FROM_ROWS as WARP};
    const { assert!(0 < HALF && HALF < WARP) };
    let steps = [
        (0, RadixForm::Block),
        (1, RadixForm::Block),
        (HALF - 1, RadixForm::Block),
        (HALF, RadixForm::Half),
        (WARP - 1, RadixForm::Half),
        (WARP, RadixForm::Warp),
        (2 * WARP, RadixForm::Warp),
    ];
    for (rows, want) in steps {
        assert_eq!(RadixForm::for_rows(rows), want, "{rows} rows");
    }
    let dev = moe_kernels::testing::emu();
    let config = RouterConfig::glm5(2);
    for (rows, want) in steps {
        let t = ch11_merged_gate::RadixTopk::new(dev, &config, rows, 8, None).unwrap();
        assert_eq!(t.form(), want, "{rows} rows");
    }
}

/// The host's literal loop against a sort of (key, id) pairs, with ties at the cut.
#[test]
fn literal_loop_matches_a_sort() {
    for (salt, n, k) in [(1u64, 896, 16), (2, 40, 40), (3, 300, 1), (4, 64, 33)] {
        let mut keys = patterned(n, salt, 1.0);
        for i in (0..n).step_by(7) {
            keys[i] = 0.25; // ties
        }
        let ordered: Vec<u32> = keys.iter().map(|&k| order(k)).collect();
        let (ids, passes) = radix_select_row(&ordered, k);
        let mut want: Vec<usize> = (0..n).collect();
        want.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]).then(a.cmp(&b)));
        want.truncate(k.min(n));
        assert_eq!(ids, want, "salt {salt}");
        assert!(passes <= 6, "{passes}");
    }
}

/// A routing case: name, config, rows, experts, logits, bias.
type Case = (
    String,
    RouterConfig,
    usize,
    usize,
    Vec<f32>,
    Option<Vec<f32>>,
);

/// On a GPU machine: radix select on the GPU gives the emulator's bits, on every regime and on
/// random rows at Kimi K3's width.
#[test]
#[ignore = "needs a GPU"]
fn gpu_matches_the_emulator_bit_for_bit() {
    let (gpu, emu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    let mut cases: Vec<Case> = REGIMES
        .iter()
        .map(|name| {
            let r = regime(name).unwrap();
            let logits = r.logits_f32();
            (
                name.to_string(),
                r.config,
                r.rows,
                r.experts,
                logits,
                r.bias,
            )
        })
        .collect();
    cases.push((
        "kimi random".into(),
        RouterConfig::glm5(16),
        500,
        896,
        patterned(500 * 896, 31, 4.0),
        Some(bias_in(896, KIMI_BIAS_RANGE, 32)),
    ));
    for (name, config, rows, experts, logits, bias) in cases {
        for form in RadixForm::ALL {
            let run = |dev| {
                route_logits_radix_in(dev, &config, rows, experts, &logits, bias.as_deref(), form)
                    .unwrap()
            };
            assert_same(&format!("{name} ({form:?})"), &run(gpu), &run(emu));
        }
    }
}
