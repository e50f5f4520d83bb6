//! The engine's path: every MoE layer is chapter 6's assembled layer (bf16 hidden states, bf16
//! gate and experts, the fp32 accumulation of the tensor cores). transformers computed in fp32,
//! so the logits move by bf16's rounding and a routing choice at a near tie may go the other way
//! (the GLM fixture's smallest routing gap is below bf16's reach). What must hold: the first token
//! of every prompt (one prefill pass, where the rounding has not compounded) is transformers', the
//! typical step's logits stay within bf16's reach of transformers', and the f32 path is much
//! closer than the bf16 one (so the difference is the MoE layers' rounding, nothing else).

use ch02_grouped::Dtype;
use ch07_model::fixtures::{fixture_dir, Greedy, FIXTURES};
use ch07_model::{load, Model, ModelError};
use moe_kernels::Device;

/// The worst logit difference against transformers' at each step of the first prompt.
fn step_errors(model: &Model, fx: &Greedy) -> Vec<f32> {
    let v = model.config().vocab;
    let mut errors = Vec::new();
    model
        .generate(&fx.prompts[0], fx.tokens[0].len(), |s| {
            let hf = &fx.logits[errors.len() * v..(errors.len() + 1) * v];
            errors.push(
                s.logits
                    .iter()
                    .zip(hf)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max),
            );
            Ok::<(), ModelError>(())
        })
        .unwrap();
    errors
}

fn median(mut v: Vec<f32>) -> f32 {
    v.sort_by(f32::total_cmp);
    v[v.len() / 2]
}

fn bf16_path_follows_transformers(dev: &'static Device) {
    for name in FIXTURES {
        let fx = Greedy::read(&fixture_dir(name)).unwrap();
        let w = load(&fx.model, false).unwrap();
        let bf16 = Model::new(dev, w.clone(), Dtype::Bf16).unwrap();
        let f32 = Model::new(dev, w, Dtype::F32).unwrap();
        assert_eq!(bf16.moe_name(), Some("assembled"));
        for (prompt, want) in fx.prompts.iter().zip(&fx.tokens) {
            let got = bf16
                .generate(prompt, 1, |_| Ok::<(), ModelError>(()))
                .unwrap();
            assert_eq!(got[0], want[0], "{name} {prompt:?}");
        }
        let (e16, e32) = (
            median(step_errors(&bf16, &fx)),
            median(step_errors(&f32, &fx)),
        );
        assert!(
            e16 <= 2e-2,
            "{name}: bf16 logits {e16:e} from transformers' (median step)"
        );
        assert!(e32 * 100.0 < e16, "{name}: f32 {e32:e}, bf16 {e16:e}");
    }
}

moe_kernels::backend_tests!(bf16_path_follows_transformers);
