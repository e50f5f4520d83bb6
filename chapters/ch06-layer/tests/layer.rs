//! The assembled layer on every regime of chapters 2 and 4, with both logits GEMMs (the tiny GEMM
//! and cuBLAS, a reference GEMM on the emulator) and on chapter 4's paths (decode, grouped decode,
//! tiled), against chapter 2's literal loop; bf16 input giving chapter 4's f32-input bits; the
//! launches it makes (four at one token); a CUDA graph of the whole layer (GPU only); and every
//! error a caller can provoke.
//!
//! An engine's layer is handed bf16 hidden states and holds a bf16 gate, so the regimes are made
//! bf16-exact first (the hidden states and the gate rounded to bf16): the literal loop then sees
//! the very values the layer's router multiplies, and only the order of the f32 sums separates
//! their logits (chapter 1's `OWN_LOGITS` near ties).

use ch01_router::chain::DeviceRouterError;
use ch01_router::compare::Tolerance as RouterTolerance;
use ch01_router::LiteralRouter;
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::{check_layer, oracle};
use ch02_grouped::literal::literal_logits;
use ch02_grouped::regimes::{regime, MoeRegime, REGIMES};
use ch02_grouped::{Dtype, MoeConfig, MoeError, MoeLayer};
use ch04_fused_moe::regimes::{fused_regime, FUSED_REGIMES};
use ch04_fused_moe::{DecodeGeometry, FusedDevice, Fusion, Path};
use ch05_fused_router::LogitsFrom;
use ch06_layer::AssembledLayer;
use half::bf16;
use moe_kernels::testing::assert_same_bits;
use moe_kernels::{record_launches, Device};

/// `v` rounded to bf16 (and back to f32).
fn round(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

/// Chapter 2's regimes, then chapter 4's, made bf16-exact.
fn every_regime() -> impl Iterator<Item = MoeRegime> {
    REGIMES
        .iter()
        .chain(FUSED_REGIMES)
        .map(|n| bf16_exact(regime(n).or_else(|| fused_regime(n)).unwrap()))
}

/// The regime with its hidden states and its gate rounded to bf16.
fn bf16_exact(mut r: MoeRegime) -> MoeRegime {
    r.hidden = round(&r.hidden);
    r.weights.gate = round(&r.weights.gate);
    r
}

/// The two logits GEMMs a regime can run: the tiny GEMM needs H a multiple of 8.
fn logits_for_regime(r: &MoeRegime) -> Vec<LogitsFrom> {
    match r.weights.config.hidden % 8 {
        0 => vec![LogitsFrom::TinyGemm, LogitsFrom::Blas],
        _ => vec![LogitsFrom::Blas],
    }
}

// ANCHOR: every_regime
/// The one test body: every regime, both logits GEMMs, every path of chapter 4; the layer's
/// experts on the oracle's routing and its whole forward pass against chapter 2's literal loop
/// (chapter 2's `check_layer`: the same experts picked wherever the oracle's gap at the cut is
/// clear, the output within [`Tolerance::BF16_VS_ORACLE`]); the routing the layer left on the
/// device is the one its forward pass returned.
fn assembled_layer_matches_the_literal_loop(dev: &'static Device) {
    let mut worst = (0.0f64, String::new());
    for r in every_regime() {
        let o = oracle(&r, Dtype::Bf16);
        let base = AssembledLayer::new(dev, &r.weights).unwrap();
        for from in logits_for_regime(&r) {
            for path in Path::ALL {
                let what = format!("{} ({from:?} logits, {path} path)", r.name);
                let layer = AssembledLayer::new(dev, &r.weights)
                    .unwrap()
                    .with_logits(from)
                    .map_experts(|e| Ok(e.with_path(path)))
                    .unwrap();
                let (e, f) = check_layer(&r, &o, &layer).unwrap_or_else(|e| panic!("{what}: {e}"));
                let rel = e.relative.max(f.relative);
                if rel >= worst.0 {
                    worst = (rel, what.clone());
                }
                eprintln!(
                    "{what:<60} vs literal loop: experts {:.2e} forward {:.2e}",
                    e.relative, f.relative
                );
            }
        }
        // The default layer (the switch point's GEMM, chapter 4's plan) once more.
        check_layer(&r, &o, &base).unwrap_or_else(|e| panic!("{} (default): {e}", r.name));
    }
    eprintln!(
        "largest relative error against the literal loop: {:.2e} ({}), tolerance {:.0e}",
        worst.0,
        worst.1,
        Tolerance::BF16_VS_ORACLE.0
    );
}
// ANCHOR_END: every_regime

/// A change of chapter 4's layer (a fusion, a decode geometry).
type Variant = fn(FusedDevice) -> FusedDevice;

/// Chapter 4's experts from bf16 input give the bits they give from f32 input, on every path:
/// the tiled and grouped decode paths read the bf16 input where they read `fused_to_bf16`'s
/// output, and the decode path's `_bf16` entry points load the values its f32 ones round to.
fn bf16_input_gives_the_f32_input_bits(dev: &'static Device) {
    for r in REGIMES
        .iter()
        .chain(FUSED_REGIMES)
        .map(|n| regime(n).or_else(|| fused_regime(n)).unwrap())
    {
        let o = oracle(&r, Dtype::Bf16);
        let f32_in = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
        let bf16_in = AssembledLayer::new(dev, &r.weights).unwrap();
        for path in Path::ALL {
            let a = f32_in.clone().with_path(path);
            let want = a.experts(&r.hidden, &o.routing).unwrap();
            let b = AssembledLayer::new(dev, &r.weights)
                .unwrap()
                .map_experts(|e| Ok(e.with_path(path)))
                .unwrap();
            let got = b.experts(&r.hidden, &o.routing).unwrap();
            assert_same_bits(&format!("{} ({path} path)", r.name), &got, &want);
        }
        // The decode path's other `_bf16` entry points: unfused (gate|up), and the weights
        // streamed (`_na`), each against its f32 twin.
        let variants: [(&str, Variant); 2] = [
            ("unfused", |e| e.with_fusion(Fusion::Unfused)),
            ("streamed", move |e| {
                e.with_decode_geometry(DecodeGeometry {
                    stream: true,
                    ..DecodeGeometry::DEFAULT
                })
                .unwrap()
            }),
        ];
        for (what, f) in variants {
            let a = f(f32_in.clone().with_path(Path::Decode));
            let want = a.experts(&r.hidden, &o.routing).unwrap();
            let b = AssembledLayer::new(dev, &r.weights)
                .unwrap()
                .map_experts(|e| Ok(f(e.with_path(Path::Decode))))
                .unwrap();
            let ws = b.workspace(r.rows).unwrap();
            let names = b
                .experts_layer()
                .kernel_names_from(ws.experts_workspace(), Dtype::Bf16);
            if r.rows > 0 {
                assert!(names[0].ends_with("_bf16"), "{names:?}");
            }
            let got = b.experts(&r.hidden, &o.routing).unwrap();
            assert_same_bits(&format!("{} (decode path, {what})", r.name), &got, &want);
        }
        drop(bf16_in);
    }
}

/// The two logits GEMMs pick the same experts wherever the oracle's gap at the cut is wider than
/// f32 logits can blur (chapter 1's `OWN_LOGITS`: cuBLAS on the GPU sums in its own order), and
/// on the rows that agree the outputs are within chapter 2's tolerance between two bf16 layers
/// (same roundings, other sum orders).
fn tiny_gemm_and_cublas_agree(dev: &'static Device) {
    for name in [
        "decode_1tok",
        "spec_decode_6rows",
        "large_prefill",
        "mini_sglang",
    ] {
        let r = bf16_exact(regime(name).or_else(|| fused_regime(name)).unwrap());
        let w = &r.weights;
        let (h, e) = (w.config.hidden, w.config.experts);
        let run = |from| {
            AssembledLayer::new(dev, w)
                .unwrap()
                .with_logits(from)
                .forward(&r.hidden)
                .unwrap()
        };
        let (tiny, blas) = (run(LogitsFrom::TinyGemm), run(LogitsFrom::Blas));
        let details = LiteralRouter {
            config: w.config.router.clone(),
        }
        .route_rows(
            &literal_logits(w, &r.hidden, r.rows),
            r.rows,
            e,
            w.bias.as_deref(),
        )
        .unwrap();
        let set = |ids: &[u32]| {
            let mut v = ids.to_vec();
            v.sort_unstable();
            v
        };
        let mut same = Vec::new();
        for (t, d) in details.iter().enumerate() {
            if set(tiny.routing.row_ids(t)) == set(blas.routing.row_ids(t)) {
                same.push(t);
            } else {
                let gap = d.cut.as_ref().map_or(f64::INFINITY, |c| c.gap);
                assert!(
                    gap <= RouterTolerance::OWN_LOGITS.gap,
                    "{name}: row {t}, gap {gap}"
                );
            }
        }
        assert!(
            same.len() * 10 >= r.rows * 9,
            "{name}: {} of {} rows agree",
            same.len(),
            r.rows
        );
        let pick = |v: &[f32]| -> Vec<f32> {
            same.iter()
                .flat_map(|&t| v[t * h..(t + 1) * h].iter().copied())
                .collect()
        };
        check_output(
            &format!("{name}: tiny GEMM vs cuBLAS logits"),
            &pick(&blas.out),
            &pick(&tiny.out),
            Tolerance::BF16_VS_BF16,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

// ANCHOR: launches
/// What one call launches, recorded, is what [`AssembledLayer::launches`] says, on every regime
/// and path; at one token (decode path) it is four kernels: the tiny GEMM, the fused router and
/// chapter 4's two decode GEMMs, the shared expert (gated or not) inside those two.
fn launches_at_one_token(dev: &'static Device) {
    for r in every_regime() {
        for path in Path::ALL {
            let layer = AssembledLayer::new(dev, &r.weights)
                .unwrap()
                .map_experts(|e| Ok(e.with_path(path)))
                .unwrap();
            let ws = layer.workspace(r.rows).unwrap();
            let x = dev
                .upload(&vec![bf16::ZERO; r.rows * r.weights.config.hidden])
                .unwrap();
            let out = dev.alloc::<f32>(x.len()).unwrap();
            let (res, names) = record_launches(|| layer.enqueue(&ws, &x, &out));
            res.unwrap();
            assert_eq!(
                names.len(),
                layer.launches(&ws),
                "{} ({path}): {names:?}",
                r.name
            );
            assert_eq!(
                names[..2.min(names.len())],
                layer.router_kernels(&ws)[..],
                "{}",
                r.name
            );
        }
    }
    for name in ["decode_1tok", "shared_expert", "gated_shared_expert"] {
        let mut r = regime(name).unwrap();
        r.rows = 1;
        r.hidden.truncate(r.weights.config.hidden);
        let layer = AssembledLayer::new(dev, &r.weights).unwrap();
        let ws = layer.workspace(1).unwrap();
        let x = dev
            .upload(&vec![bf16::ONE; r.weights.config.hidden])
            .unwrap();
        let out = dev.alloc::<f32>(x.len()).unwrap();
        let (res, names) = record_launches(|| layer.enqueue(&ws, &x, &out));
        res.unwrap();
        assert_eq!(ws.plan().path, Path::Decode, "{name}");
        assert_eq!(ws.logits_from(), LogitsFrom::TinyGemm, "{name}");
        assert_eq!(names.len(), 4, "{name}: {names:?}");
        assert!(names[0].starts_with("ch05_tiny_gemm::"), "{names:?}");
        assert!(names[1].starts_with("ch05_fused_router::"), "{names:?}");
        assert!(
            names[2].starts_with("ch04_fused_moe::decode_gemm1_swiglu")
                && names[2].ends_with("_bf16")
        );
        assert!(
            names[3].starts_with("ch04_fused_moe::decode_gemm2_sum"),
            "{names:?}"
        );
    }
}
// ANCHOR_END: launches

/// Every error a caller can provoke is a typed error, never a panic or a wrong answer.
fn bad_inputs_are_typed_errors(dev: &'static Device) {
    let r = bf16_exact(regime("spec_decode_6rows").unwrap());
    let c = r.weights.config.clone();
    let layer = AssembledLayer::new(dev, &r.weights).unwrap();
    let ws = layer.workspace(r.rows).unwrap();
    let x = dev.upload(&vec![bf16::ZERO; r.rows * c.hidden]).unwrap();
    let out = dev.alloc::<f32>(r.rows * c.hidden).unwrap();
    // The hidden states and the output of another batch size.
    let short = dev
        .upload(&vec![bf16::ZERO; (r.rows - 1) * c.hidden])
        .unwrap();
    assert!(matches!(
        layer.enqueue(&ws, &short, &out),
        Err(MoeError::Shape { ref what, .. }) if what.starts_with("hidden")
    ));
    let small = dev.alloc::<f32>(c.hidden).unwrap();
    assert!(matches!(
        layer.enqueue(&ws, &x, &small),
        Err(MoeError::Shape { ref what, .. }) if what.starts_with("out")
    ));
    // A workspace of another layer.
    let other = AssembledLayer::new(dev, &r.weights).unwrap();
    let theirs = other.workspace(r.rows).unwrap();
    assert!(matches!(
        layer.enqueue(&theirs, &x, &out),
        Err(MoeError::Config {
            field: "workspace",
            ..
        })
    ));
    // A hidden state that is not whole rows, through the f32 convenience.
    assert!(matches!(
        layer.forward(&r.hidden[1..]),
        Err(MoeError::Shape { .. })
    ));
    // A routing with an id past E, handed to the experts.
    let mut routing = oracle(&r, Dtype::Bf16).routing;
    routing.ids[3] = c.experts as u32;
    assert!(matches!(
        layer.experts(&r.hidden, &routing),
        Err(MoeError::IdOutOfRange {
            row: 0,
            slot: 3,
            ..
        })
    ));
    // The tiny GEMM asked for at a hidden size that is no multiple of 8.
    let odd = regime("unaligned_sizes").unwrap();
    let forced = AssembledLayer::new(dev, &odd.weights)
        .unwrap()
        .with_logits(LogitsFrom::TinyGemm);
    assert!(matches!(
        forced.workspace(odd.rows),
        Err(MoeError::DeviceRouter(
            DeviceRouterError::NotMultiple { .. }
        ))
    ));
    // More experts than the fused router holds (E ≤ 1024), refused when the layer is built.
    let wide = MoeConfig {
        hidden: 8,
        intermediate: 8,
        experts: 1025,
        router: ch01_router::RouterConfig::qwen3(2),
        shared: None,
    };
    let weights = ch02_grouped::MoeWeights::patterned(&wide, 1, 0.1, false);
    assert!(matches!(
        AssembledLayer::new(dev, &weights),
        Err(MoeError::DeviceRouter(DeviceRouterError::Limit { .. }))
    ));
    // An empty batch: empty outputs and no launch.
    let ws0 = layer.workspace(0).unwrap();
    let none = dev.alloc::<bf16>(0).unwrap();
    let out0 = dev.alloc::<f32>(0).unwrap();
    let (res, names) = record_launches(|| layer.enqueue(&ws0, &none, &out0));
    res.unwrap();
    assert!(names.is_empty());
    assert_eq!(layer.launches(&ws0), 0);
    assert!(layer.forward(&[]).unwrap().out.is_empty());
}

moe_kernels::backend_tests!(
    assembled_layer_matches_the_literal_loop,
    bf16_input_gives_the_f32_input_bits,
    tiny_gemm_and_cublas_agree,
    launches_at_one_token,
    bad_inputs_are_typed_errors,
);
