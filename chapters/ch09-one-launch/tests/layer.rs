//! Chapter 6's layer routed by the one launch ([`OneLaunchLayer`]) on every regime of chapters 2
//! and 4 and every path of chapter 4: within chapter 2's tolerance of the literal loop, and below
//! chapter 5's tensor-core rows (where chapter 6's tiny GEMM sums as the one launch does) the
//! same bits as chapter 6's layer; the launches (one for the whole router); another layer's
//! workspace refused.

use ch02_grouped::conformance::{check_layer, oracle};
use ch02_grouped::regimes::{regime, MoeRegime, REGIMES};
use ch02_grouped::{Dtype, MoeLayer};
use ch04_fused_moe::regimes::{fused_regime, FUSED_REGIMES};
use ch04_fused_moe::Path;
use ch05_fused_router::tiny_gemm::form_for;
use ch05_fused_router::tiny_gemm::GemmForm;
use ch05_fused_router::LogitsFrom;
use ch06_layer::AssembledLayer;
use ch09_one_launch::OneLaunchLayer;
use half::bf16;
use moe_kernels::testing::assert_same_bits;
use moe_kernels::Device;

fn every_regime() -> impl Iterator<Item = MoeRegime> {
    REGIMES
        .iter()
        .chain(FUSED_REGIMES)
        .map(|n| regime(n).or_else(|| fused_regime(n)).unwrap())
        .map(|mut r| {
            let round =
                |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect() };
            r.hidden = round(&r.hidden);
            r.weights.gate = round(&r.weights.gate);
            r
        })
        // The one launch computes its logits with the tiny GEMM: H a multiple of 8.
        .filter(|r| r.weights.config.hidden % 8 == 0)
}

fn assembled(dev: &'static Device, r: &MoeRegime, path: Path) -> AssembledLayer {
    AssembledLayer::new(dev, &r.weights)
        .unwrap()
        .with_logits(LogitsFrom::TinyGemm)
        .map_experts(|e| Ok(e.with_path(path)))
        .unwrap()
}

// ANCHOR: against_the_loop
fn one_launch_layer_matches_the_literal_loop(dev: &'static Device) {
    let mut exact = 0;
    for r in every_regime() {
        let o = oracle(&r, Dtype::Bf16);
        let rows = r.hidden.len() / r.weights.config.hidden;
        for path in Path::ALL {
            let what = format!("{} ({path} path)", r.name);
            let layer = OneLaunchLayer::new(assembled(dev, &r, path));
            check_layer(&r, &o, &layer).unwrap_or_else(|e| panic!("{what}: {e}"));
            // Where chapter 6's tiny GEMM runs its CUDA-core form, the same logits: the same bits.
            if form_for(rows) == GemmForm::CudaCores {
                let want = assembled(dev, &r, path).forward(&r.hidden).unwrap();
                let got = layer.forward(&r.hidden).unwrap();
                assert_eq!(got.routing.ids, want.routing.ids, "{what}: ids");
                assert_same_bits(&format!("{what}: output"), &got.out, &want.out);
                exact += 1;
            }
        }
    }
    assert!(exact >= 6, "only {exact} cases compared bit for bit");
}
// ANCHOR_END: against_the_loop

fn launches_are_one_for_the_router(dev: &'static Device) {
    for r in every_regime() {
        let rows = r.hidden.len() / r.weights.config.hidden;
        if rows == 0 {
            continue; // no launches at all
        }
        let a = assembled(dev, &r, Path::Tiled);
        let aw = a.workspace(rows).unwrap();
        let pair_and_align = 2 + a.experts_layer().align_launches(aw.experts_workspace());
        let one = OneLaunchLayer::new(assembled(dev, &r, Path::Tiled));
        let ow = one.workspace(rows).unwrap();
        assert_eq!(
            one.launches(&ow),
            a.launches(&aw) - pair_and_align + 1,
            "{}",
            r.name
        );
    }
}

fn another_layers_workspace_is_refused(dev: &'static Device) {
    let r = every_regime().next().unwrap();
    let rows = r.hidden.len() / r.weights.config.hidden;
    let one = OneLaunchLayer::new(assembled(dev, &r, Path::Tiled));
    let two = OneLaunchLayer::new(assembled(dev, &r, Path::Tiled));
    let ws = one.workspace(rows).unwrap();
    let x = dev.upload(&vec![bf16::ZERO; r.hidden.len()]).unwrap();
    let out = dev.alloc::<f32>(r.hidden.len()).unwrap();
    let e = two.enqueue(&ws, &x, &out).unwrap_err();
    assert!(e.to_string().contains("another layer"), "{e}");
}

moe_kernels::backend_tests!(
    one_launch_layer_matches_the_literal_loop,
    launches_are_one_for_the_router,
    another_layers_workspace_is_refused,
);
