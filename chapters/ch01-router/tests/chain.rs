//! The five-line chain of plain kernels on the backend under test (`MOE_BACKEND`; the emulator
//! without a GPU), on every regime, against the f64 literal oracle; and, on a GPU machine, the
//! same chain on the emulator, compared bit for bit.

use ch01_router::chain::{
    route_logits_on_device, route_on_device, ChainError, FiveLineChain, GateShape,
};
use ch01_router::compare::{check_routing, Tolerance};
use ch01_router::config::RouterConfig;
use ch01_router::literal::LiteralRouter;
use ch01_router::regimes::{regime, RegimeInput, REGIMES};
use ch01_router::routing::Routing;
use ch01_router::RouterError;
use moe_kernels::testing::{assert_same_bits, device, emu_too};
use moe_kernels::Device;

fn shape(r: &RegimeInput) -> GateShape {
    GateShape {
        rows: r.rows,
        hidden: r.hidden,
        experts: r.experts,
    }
}

fn run(dev: &'static Device, r: &RegimeInput) -> Routing {
    route_on_device(
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
#[test]
fn chain_matches_the_oracle_on_every_regime() {
    let dev = device();
    for name in REGIMES {
        let r = regime(name).unwrap();
        let got = run(dev, &r);
        let oracle = LiteralRouter {
            config: r.config.clone(),
        }
        .route_rows(&r.logits_f32(), r.rows, r.experts, r.bias.as_deref())
        .unwrap();
        let exact = check_routing(name, &oracle, &got, Tolerance::OWN_LOGITS)
            .unwrap_or_else(|e| panic!("{e}"));
        // The comparison must not pass by calling everything a near tie.
        assert!(
            exact * 10 >= r.rows * 9 || matches!(*name, "ties" | "nan_logits"),
            "regime {name}: only {exact} of {} rows had a clear cut",
            r.rows
        );
        assert!(
            got.weights.iter().all(|w| !w.is_nan()),
            "regime {name}: NaN weight"
        );
    }
}
// ANCHOR_END: chain_matches_the_oracle

#[test]
fn chain_from_logits_matches_the_oracle() {
    let dev = device();
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

// ANCHOR: emu_and_gpu_same_bits
#[test]
fn emulator_and_gpu_give_the_same_bits_on_every_regime() {
    let Some(emu) = emu_too() else {
        eprintln!("skipped: emulator_and_gpu_give_the_same_bits_on_every_regime needs MOE_BACKEND=cuda on a GPU machine");
        return;
    };
    for name in REGIMES {
        let r = regime(name).unwrap();
        let gpu = run(device(), &r);
        let cpu = run(emu, &r);
        assert_same_bits(&format!("{name} ids"), &gpu.ids, &cpu.ids);
        assert_same_bits(&format!("{name} weights"), &gpu.weights, &cpu.weights);
    }
}
// ANCHOR_END: emu_and_gpu_same_bits

#[test]
fn launch_counts_match_the_table() {
    let dev = device();
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
        // ... and the chain really launches that many.
        let before = dev.launches();
        let h = dev.upload(&vec![0.5f32; 3 * 16]).unwrap();
        let w = dev.upload(&vec![0.25f32; 64 * 16]).unwrap();
        let b = bias.as_deref().map(|b| dev.upload(b).unwrap());
        let ids = dev.alloc::<i32>(3 * config.k).unwrap();
        let ws = dev.alloc::<f32>(3 * config.k).unwrap();
        chain.enqueue(&h, &w, b.as_ref(), &ids, &ws).unwrap();
        dev.synchronize().unwrap();
        // Other tests may launch at the same time on this device; count at least ours.
        assert!(dev.launches() - before >= want as u64);
        // All-equal logits: the tie rule picks experts 0..k.
        let got: Vec<i32> = ids.to_vec().unwrap();
        assert_eq!(
            &got[..config.k],
            &(0..config.k as i32).collect::<Vec<_>>()[..],
            "{config:?}"
        );
    }
}

#[test]
fn empty_batch_launches_nothing_and_returns_empty() {
    let dev = device();
    let config = RouterConfig::glm5(8);
    let shape = GateShape {
        rows: 0,
        hidden: 32,
        experts: 16,
    };
    let got = route_on_device(
        dev,
        &config,
        shape,
        &[],
        &vec![0.0; 16 * 32],
        Some(&[0.0; 16]),
    )
    .unwrap();
    assert_eq!((got.rows, got.ids.len(), got.weights.len()), (0, 0, 0));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let dev = device();
    let shape = GateShape {
        rows: 2,
        hidden: 8,
        experts: 16,
    };
    let h = vec![0.0f32; 16];
    let w = vec![0.0f32; 128];
    let e = route_on_device(
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
        ChainError::Shape {
            what: "hidden [T, H]",
            expected: 16,
            got: 15
        }
    );
    assert_eq!(e.to_string(), "hidden [T, H] has 15 elements, expected 16");
    let e = route_on_device(
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
        ChainError::Router(RouterError::KTooLarge { k: 17, experts: 16 })
    );
    let e =
        route_on_device(dev, &RouterConfig::glm5(4), shape, &h, &w, Some(&[0.0; 15])).unwrap_err();
    assert_eq!(
        e,
        ChainError::Router(RouterError::BiasLength {
            len: 15,
            experts: 16
        })
    );
    let e = route_on_device(
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
            ChainError::Router(RouterError::BiasNotFinite { expert: 0, .. })
        ),
        "{e}"
    );
    let e = route_on_device(
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
    assert_eq!(e, ChainError::Router(RouterError::NoExperts));
}

/// From `TILED_GEMM_FROM_ROWS` rows on, the logits come from the tiled GEMM. The regimes stay
/// below that size (the emulator runs them in every CI run), so this test covers the tiled path:
/// 1,100 rows (not a multiple of the 64-row tile), hidden 100 (not a multiple of the 16-wide
/// slice), 40 experts (not a multiple of the 64-expert tile).
#[test]
fn tiled_gemm_from_1024_rows_matches_the_oracle() {
    use ch01_router::chain::TILED_GEMM_FROM_ROWS;
    use ch01_router::inputs::patterned;
    let (rows, hidden, experts) = (1100, 100, 40);
    assert!(rows >= TILED_GEMM_FROM_ROWS);
    let config = RouterConfig::glm5(6);
    let h = patterned(rows * hidden, 21, 1.0);
    let w = patterned(experts * hidden, 22, 0.3);
    let bias: Vec<f32> = patterned(experts, 23, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect();
    let shape = GateShape {
        rows,
        hidden,
        experts,
    };
    let chain = FiveLineChain::new(device(), &config, shape, Some(&bias)).unwrap();
    assert_eq!(chain.launch_names()[0], "router_gemm_f32_tiled");
    let got = route_on_device(device(), &config, shape, &h, &w, Some(&bias)).unwrap();
    // The oracle's logits: the f64 dot products, rounded once.
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
    if let Some(emu) = emu_too() {
        let cpu = route_on_device(emu, &config, shape, &h, &w, Some(&bias)).unwrap();
        assert_same_bits("tiled ids", &got.ids, &cpu.ids);
        assert_same_bits("tiled weights", &got.weights, &cpu.weights);
    }
}

/// The few-row GEMM gives each expert its own block up to 8 rows and shares a block among 4
/// experts above; both add in the same order, so a token gets the same bits in a batch of 8 as
/// in a batch of 12 (unlike the tiled GEMM from 1,024 rows on).
#[test]
fn few_row_gemm_bits_do_not_depend_on_experts_per_block() {
    use ch01_router::chain::ONE_EXPERT_PER_BLOCK_UP_TO_ROWS;
    use ch01_router::inputs::patterned;
    let (hidden, experts) = (96, 30); // 30 = 7 blocks of 4 + a block of 2
    let config = RouterConfig::qwen3(4);
    let small = ONE_EXPERT_PER_BLOCK_UP_TO_ROWS;
    let big = small + 4;
    let h = patterned(big * hidden, 31, 1.0);
    let w = patterned(experts * hidden, 32, 0.3);
    let run = |rows: usize| {
        route_on_device(
            device(),
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
