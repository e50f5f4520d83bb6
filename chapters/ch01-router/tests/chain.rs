//! The five-line chain of plain kernels on every backend (the emulator always, the GPU with
//! `--include-ignored` on a GPU machine), on every regime, against the f64 literal oracle and
//! the regime snapshots; and, on a GPU machine, the emulator and the GPU compared bit for bit.

use ch01_router::chain::{
    route_logits_on_device, route_with_chain, DeviceMatrix, DeviceRouter, DeviceRouterError,
    FiveLineChain, GateDtype, GateInputs, GateShape, RouterOutputs,
};
use ch01_router::compare::{check_routing, Tolerance};
use ch01_router::config::RouterConfig;
use ch01_router::conformance::check_every_regime;
use ch01_router::literal::LiteralRouter;
use ch01_router::regimes::{regime, RegimeInput, REGIMES};
use ch01_router::routing::Routing;
use ch01_router::RouterError;
use moe_kernels::testing::assert_same_bits;
use moe_kernels::{record_launches, Device};

fn shape(r: &RegimeInput) -> GateShape {
    GateShape {
        rows: r.rows,
        hidden: r.hidden,
        experts: r.experts,
    }
}

fn run(dev: &'static Device, r: &RegimeInput) -> Routing {
    route_with_chain(
        dev,
        &r.config,
        shape(r),
        &r.hidden_states,
        &r.gate_weight,
        r.bias.as_deref(),
    )
    .unwrap_or_else(|e| panic!("regime {}: {e}", r.name))
}

// ANCHOR: chain_matches_the_oracle
/// The one test body every device router runs (chapter 5's fused router runs it too): every
/// regime against the f64 oracle, and the text of each regime's routing equal to the snapshot
/// the f32 reference prints.
fn chain_matches_the_oracle_on_every_regime(dev: &'static Device) {
    let make = |dev: &'static Device, r: &RegimeInput| {
        let chain = FiveLineChain::new(dev, &r.config, shape(r), r.bias.as_deref())?;
        Ok(Box::new(chain) as Box<dyn DeviceRouter>)
    };
    let results = check_every_regime(dev, GateDtype::F32, &make, Tolerance::OWN_LOGITS)
        .unwrap_or_else(|e| panic!("{e}"));
    for res in results {
        // The comparison must not pass by calling everything a near tie.
        assert!(
            res.exact_rows * 10 >= res.rows * 9 || matches!(res.name, "ties" | "nan_logits"),
            "regime {}: only {} of {} rows had a clear cut",
            res.name,
            res.exact_rows,
            res.rows
        );
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(format!("ch01_{}", res.name), res.text);
        });
    }
}
// ANCHOR_END: chain_matches_the_oracle

fn chain_from_logits_matches_the_oracle(dev: &'static Device) {
    for name in REGIMES {
        let r = regime(name).unwrap();
        let logits = r.logits_f32();
        let got = route_logits_on_device(
            dev,
            &r.config,
            r.rows,
            r.experts,
            &logits,
            r.bias.as_deref(),
        )
        .unwrap();
        let oracle = LiteralRouter {
            config: r.config.clone(),
        }
        .route_rows(&logits, r.rows, r.experts, r.bias.as_deref())
        .unwrap();
        check_routing(name, &oracle, &got, Tolerance::SAME_LOGITS)
            .unwrap_or_else(|e| panic!("from logits: {e}"));
    }
}

fn launch_counts_match_the_table(dev: &'static Device) {
    let cases = [
        (RouterConfig::glm5(8), true, 7),
        (RouterConfig::qwen3(8), false, 6),
        (RouterConfig::deepseek_v3(), true, 8),
        (
            RouterConfig {
                renormalize: false,
                routed_scaling: 2.0,
                ..RouterConfig::mixtral()
            },
            false,
            5,
        ),
        (
            RouterConfig {
                renormalize: false,
                ..RouterConfig::mixtral()
            },
            false,
            4,
        ),
    ];
    for (config, with_bias, want) in cases {
        let shape = GateShape {
            rows: 3,
            hidden: 16,
            experts: 64,
        };
        let bias = with_bias.then(|| vec![0.0f32; 64]);
        let chain = FiveLineChain::new(dev, &config, shape, bias.as_deref()).unwrap();
        assert_eq!(chain.launches_per_call(), want, "{config:?}");
        // ... and the chain really launches those kernels, in that order.
        let h = dev.upload(&[0.5f32; 3 * 16]).unwrap();
        let w = dev.upload(&vec![0.25f32; 64 * 16]).unwrap();
        let b = bias.as_deref().map(|b| dev.upload(b).unwrap());
        let ids = dev.alloc::<i32>(3 * config.k).unwrap();
        let ws = dev.alloc::<f32>(3 * config.k).unwrap();
        let inputs = GateInputs {
            hidden: DeviceMatrix::F32(&h),
            weight: DeviceMatrix::F32(&w),
            bias: b.as_ref(),
        };
        let outputs = RouterOutputs {
            ids: &ids,
            weights: &ws,
        };
        let (r, launched) = record_launches(|| chain.enqueue(&inputs, &outputs));
        r.unwrap();
        let want_names: Vec<String> = chain
            .launch_names()
            .iter()
            .map(|n| format!("ch01_router::{n}"))
            .collect();
        assert_eq!(launched, want_names, "{config:?}");
        // All-equal logits: the tie rule picks experts 0..k.
        let got: Vec<i32> = ids.to_vec().unwrap();
        assert_eq!(
            &got[..config.k],
            &(0..config.k as i32).collect::<Vec<_>>()[..],
            "{config:?}"
        );
    }
}

fn empty_batch_launches_nothing_and_returns_empty(dev: &'static Device) {
    let config = RouterConfig::glm5(8);
    let shape = GateShape {
        rows: 0,
        hidden: 32,
        experts: 16,
    };
    let (got, launched) = record_launches(|| {
        route_with_chain(
            dev,
            &config,
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

fn bad_inputs_are_typed_errors(dev: &'static Device) {
    let shape = GateShape {
        rows: 2,
        hidden: 8,
        experts: 16,
    };
    let h = vec![0.0f32; 16];
    let w = vec![0.0f32; 128];
    let e = route_with_chain(
        dev,
        &RouterConfig::glm5(8),
        shape,
        &h[..15],
        &w,
        Some(&[0.0; 16]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        DeviceRouterError::Shape {
            what: "hidden [T, H]",
            expected: 16,
            got: 15
        }
    );
    assert_eq!(e.to_string(), "hidden [T, H] has 15 elements, expected 16");
    let e = route_with_chain(
        dev,
        &RouterConfig::glm5(17),
        shape,
        &h,
        &w,
        Some(&[0.0; 16]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        DeviceRouterError::Router(RouterError::KTooLarge { k: 17, experts: 16 })
    );
    let e =
        route_with_chain(dev, &RouterConfig::glm5(4), shape, &h, &w, Some(&[0.0; 15])).unwrap_err();
    assert_eq!(
        e,
        DeviceRouterError::Router(RouterError::BiasLength {
            len: 15,
            experts: 16
        })
    );
    let e = route_with_chain(
        dev,
        &RouterConfig::glm5(4),
        shape,
        &h,
        &w,
        Some(&[f32::NAN; 16]),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            DeviceRouterError::Router(RouterError::BiasNotFinite { expert: 0, .. })
        ),
        "{e}"
    );
    let e = route_with_chain(
        dev,
        &RouterConfig {
            routed_scaling: f32::NAN,
            ..RouterConfig::glm5(4)
        },
        shape,
        &h,
        &w,
        None,
    )
    .unwrap_err();
    assert!(
        matches!(e, DeviceRouterError::Router(RouterError::BadScale { .. })),
        "{e}"
    );
    let e = route_with_chain(
        dev,
        &RouterConfig::glm5(4),
        GateShape {
            experts: 0,
            ..shape
        },
        &h,
        &[],
        None,
    )
    .unwrap_err();
    assert_eq!(e, DeviceRouterError::Router(RouterError::NoExperts));
    // The chain takes fp32 only: bf16 inputs are a typed error, not garbage.
    let chain = FiveLineChain::new(dev, &RouterConfig::qwen3(4), shape, None).unwrap();
    let hb = dev.upload(&[half::bf16::ZERO; 16]).unwrap();
    let wd = dev.upload(&w).unwrap();
    let ids = dev.alloc::<i32>(8).unwrap();
    let ws = dev.alloc::<f32>(8).unwrap();
    let e = chain
        .enqueue(
            &GateInputs {
                hidden: DeviceMatrix::Bf16(&hb),
                weight: DeviceMatrix::F32(&wd),
                bias: None,
            },
            &RouterOutputs {
                ids: &ids,
                weights: &ws,
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the chain router does not take hidden states in Bf16"
    );
}

/// From `TILED_GEMM_FROM_ROWS` rows on, the logits come from the tiled GEMM. The regimes stay
/// below that size (the emulator runs them in every CI run), so this test covers the tiled path:
/// 1,100 rows (not a multiple of the 64-row tile), hidden 100 (not a multiple of the 16-wide
/// slice), 40 experts (not a multiple of the 64-expert tile).
fn tiled_gemm_from_1024_rows_matches_the_oracle(dev: &'static Device) {
    use ch01_router::chain::TILED_GEMM_FROM_ROWS;
    let (config, shape, h, w, bias) = tiled_case();
    assert!(shape.rows >= TILED_GEMM_FROM_ROWS);
    let chain = FiveLineChain::new(dev, &config, shape, Some(&bias)).unwrap();
    assert_eq!(chain.launch_names()[0], "router_gemm_f32_tiled");
    let got = route_with_chain(dev, &config, shape, &h, &w, Some(&bias)).unwrap();
    // The oracle's logits: the f64 dot products, rounded once.
    let GateShape {
        rows,
        hidden,
        experts,
    } = shape;
    let logits: Vec<f32> = (0..rows * experts)
        .map(|i| {
            let (t, e) = (i / experts, i % experts);
            (0..hidden)
                .map(|k| h[t * hidden + k] as f64 * w[e * hidden + k] as f64)
                .sum::<f64>() as f32
        })
        .collect();
    let oracle = LiteralRouter {
        config: config.clone(),
    }
    .route_rows(&logits, rows, experts, Some(&bias))
    .unwrap();
    let exact = check_routing("tiled", &oracle, &got, Tolerance::OWN_LOGITS)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        exact * 10 >= rows * 9,
        "only {exact} of {rows} rows had a clear cut"
    );
}

type TiledCase = (RouterConfig, GateShape, Vec<f32>, Vec<f32>, Vec<f32>);

fn tiled_case() -> TiledCase {
    use ch01_router::inputs::patterned;
    let (rows, hidden, experts) = (1100, 100, 40);
    let bias: Vec<f32> = patterned(experts, 23, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect();
    (
        RouterConfig::glm5(6),
        GateShape {
            rows,
            hidden,
            experts,
        },
        patterned(rows * hidden, 21, 1.0),
        patterned(experts * hidden, 22, 0.3),
        bias,
    )
}

/// The few-row GEMM gives each expert its own block up to 8 rows and shares a block among 4
/// experts above; both add in the same order, so a token gets the same bits in a batch of 8 as
/// in a batch of 12 (unlike the tiled GEMM from 1,024 rows on).
fn few_row_gemm_bits_do_not_depend_on_experts_per_block(dev: &'static Device) {
    use ch01_router::chain::ONE_EXPERT_PER_BLOCK_UP_TO_ROWS;
    use ch01_router::inputs::patterned;
    let (hidden, experts) = (96, 30); // 30 = 7 blocks of 4 + a block of 2
    let config = RouterConfig::qwen3(4);
    let small = ONE_EXPERT_PER_BLOCK_UP_TO_ROWS;
    let big = small + 4;
    let h = patterned(big * hidden, 31, 1.0);
    let w = patterned(experts * hidden, 32, 0.3);
    let run = |rows: usize| {
        route_with_chain(
            dev,
            &config,
            GateShape {
                rows,
                hidden,
                experts,
            },
            &h[..rows * hidden],
            &w,
            None,
        )
        .unwrap()
    };
    let (a, b) = (run(small), run(big));
    assert_same_bits("ids", &a.ids, &b.ids[..small * 4]);
    assert_same_bits("weights", &a.weights, &b.weights[..small * 4]);
}

moe_kernels::backend_tests!(
    chain_matches_the_oracle_on_every_regime,
    chain_from_logits_matches_the_oracle,
    launch_counts_match_the_table,
    empty_batch_launches_nothing_and_returns_empty,
    bad_inputs_are_typed_errors,
    tiled_gemm_from_1024_rows_matches_the_oracle,
    few_row_gemm_bits_do_not_depend_on_experts_per_block,
);

// ANCHOR: emu_and_gpu_same_bits
/// Every regime, and the tiled GEMM's shape, on the emulator and on the GPU: the same bits.
#[test]
#[ignore = "needs a GPU"]
fn emulator_and_gpu_give_the_same_bits_on_every_regime() {
    let (gpu, emu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    for name in REGIMES {
        let r = regime(name).unwrap();
        let (g, c) = (run(gpu, &r), run(emu, &r));
        assert_same_bits(&format!("{name} ids"), &g.ids, &c.ids);
        assert_same_bits(&format!("{name} weights"), &g.weights, &c.weights);
    }
    let (config, shape, h, w, bias) = tiled_case();
    let g = route_with_chain(gpu, &config, shape, &h, &w, Some(&bias)).unwrap();
    let c = route_with_chain(emu, &config, shape, &h, &w, Some(&bias)).unwrap();
    assert_same_bits("tiled ids", &g.ids, &c.ids);
    assert_same_bits("tiled weights", &g.weights, &c.weights);
}
// ANCHOR_END: emu_and_gpu_same_bits
