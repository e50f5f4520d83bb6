//! One test body for every implementation of the layer, over every regime and both compute
//! types: the literal oracle gives the routing and the expected output; each implementation
//! runs the experts on that routing (so a near tie broken differently by another router cannot
//! hide or fake an error) and its whole forward pass, and must be within the stated tolerance
//! of the oracle ([`crate::compare`]). The snapshot of a regime is the oracle's text: it does
//! not depend on the backend, and every backend is checked against the numbers it shows.
//!
//! The Hugging Face fixtures (`tools/fixtures/ch02-hf/`: tiny random-weight models run by
//! transformers in fp32) are read here too, for every chapter's parity test: [`hf_layers`] gives
//! each MoE layer's weights, loaded by [`crate::checkpoint`], with transformers' own output and
//! routing for it.

use crate::checkpoint::{load, LoadOptions};
use crate::compare::{check_output, OutputError, Tolerance};
use crate::config::Dtype;
use crate::layer::MoeLayer;
use crate::literal::{literal_logits, LiteralLayer};
use crate::plan::GroupPlan;
use crate::regimes::MoeRegime;
use crate::weights::MoeWeights;
use ch01_router::compare::Tolerance as RouterTolerance;
use ch01_router::LiteralRouter;
use ch01_router::Routing;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What the oracle gives for one regime and type.
pub struct OracleRun {
    pub routing: Routing,
    pub out: Vec<f32>,
}

/// The oracle's routing and output for `r` in `dtype`.
pub fn oracle(r: &MoeRegime, dtype: Dtype) -> OracleRun {
    let lit = LiteralLayer::new(&r.weights, dtype).unwrap_or_else(|e| panic!("{}: {e}", r.name));
    let o = lit
        .forward(&r.hidden)
        .unwrap_or_else(|e| panic!("{}: {e}", r.name));
    OracleRun {
        routing: o.routing,
        out: o.out,
    }
}

/// Checks `layer` on regime `r` against `oracle`: its experts on the oracle's routing, and its
/// whole forward pass (whose routing must pick the same experts). Returns the two errors.
pub fn check_layer(
    r: &MoeRegime,
    oracle: &OracleRun,
    layer: &dyn MoeLayer,
) -> Result<(OutputError, OutputError), String> {
    let what = format!("regime {}, {} in {}", r.name, layer.name(), layer.dtype());
    let tol = Tolerance::vs_oracle(layer.dtype());
    let got = layer
        .experts(&r.hidden, &oracle.routing)
        .map_err(|e| format!("{what}: {e}"))?;
    let experts = check_output(&format!("{what}, experts"), &oracle.out, &got, tol)?;
    let fwd = layer
        .forward(&r.hidden)
        .map_err(|e| format!("{what}: {e}"))?;
    // The forward pass routes with its own f32 logits: chapter 1's rules decide whether its
    // choices are right (only near ties at the cut may swap) ...
    let w = &r.weights;
    let details = LiteralRouter {
        config: w.config.router.clone(),
    }
    .route_rows(
        &literal_logits(w, &r.hidden, r.rows),
        r.rows,
        w.config.experts,
        w.bias.as_deref(),
    )
    .map_err(|e| format!("{what}: {e}"))?;
    // The layer's output depends on the set of experts a token picked, not on their order, so
    // the sets are compared: they must be equal wherever the oracle's gap at the cut is wider
    // than f32 logits can blur (chapter 1's `OWN_LOGITS` gap); a near tie may swap the last one.
    let sorted = |ids: &[u32]| {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v
    };
    let gap = RouterTolerance::OWN_LOGITS.gap;
    for (t, d) in details.iter().enumerate() {
        let clear = d.cut.as_ref().is_none_or(|c| c.gap > gap);
        if clear && sorted(&d.ids) != sorted(fwd.routing.row_ids(t)) {
            return Err(format!(
                "{what}: row {t} picked experts {:?}, the oracle {:?} (gap at the cut {:?})",
                fwd.routing.row_ids(t),
                d.ids,
                d.cut.as_ref().map(|c| c.gap)
            ));
        }
    }
    // ... and the output is compared on the rows that picked the same experts as the oracle.
    let h = w.config.hidden;
    let same: Vec<usize> = (0..r.rows)
        .filter(|&t| sorted(fwd.routing.row_ids(t)) == sorted(oracle.routing.row_ids(t)))
        .collect();
    if same.len() * 10 < r.rows * 9 {
        return Err(format!(
            "{what}: only {} of {} rows routed as the oracle did",
            same.len(),
            r.rows
        ));
    }
    let pick = |v: &[f32]| -> Vec<f32> {
        same.iter()
            .flat_map(|&t| v[t * h..(t + 1) * h].iter().copied())
            .collect()
    };
    let forward = check_output(
        &format!("{what}, forward"),
        &pick(&oracle.out),
        &pick(&fwd.out),
        tol,
    )?;
    Ok((experts, forward))
}

/// The snapshot text of a regime: its title, how the oracle grouped the pairs, and the first
/// rows of its output to 4 decimals.
pub fn regime_text(r: &MoeRegime, dtype: Dtype, oracle: &OracleRun) -> String {
    let c = &r.weights.config;
    let mut s = format!(
        "{} ({dtype}): {}\nT {} H {} I {} E {} k {}, shared {:?}\n",
        r.name, r.about, r.rows, c.hidden, c.intermediate, c.experts, c.router.k, c.shared
    );
    let plan = GroupPlan::new(&oracle.routing, c.experts).expect("the oracle's ids are in range");
    let active = plan.active_experts();
    let counts: Vec<String> = active
        .iter()
        .map(|&e| format!("{e}:{}", plan.count(e)))
        .collect();
    s += &format!(
        "{} pairs on {} active experts (expert:pairs) {}\n",
        plan.pairs(),
        active.len(),
        counts.join(" ")
    );
    for t in 0..r.rows.min(4) {
        let row = &oracle.out[t * c.hidden..(t + 1) * c.hidden];
        let first: Vec<String> = row.iter().take(6).map(|v| format!("{v:.4}")).collect();
        s += &format!("out[{t}][..6] {}\n", first.join(" "));
    }
    s
}

/// The fixtures of `tools/fixtures/ch02-hf/` (`tools/fixtures/ch02_make_hf_fixtures.py`), one
/// folder each: the checkpoint twice (`per_expert/` as `save_pretrained` writes it, `fused/` as
/// the model's `state_dict()`) and `inputs.safetensors`.
pub const HF_FIXTURES: [&str; 4] = ["qwen3_moe", "deepseek_v3", "glm4_moe", "qwen2_moe"];

/// The folder of the fixture `name` (one of [`HF_FIXTURES`]).
pub fn hf_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/ch02-hf")
        .join(name)
}

/// What transformers computed for one fixture (its `inputs.safetensors`): `hidden` [T, H], and
/// per MoE layer its output `out.L` [T, H], its router's ids `ids.L` [T, k] and weights
/// `weights.L` [T, k]. For tests: a missing file or tensor panics, naming it.
pub struct HfReference {
    tensors: HashMap<String, candle_core::Tensor>,
}

impl HfReference {
    /// Reads `inputs.safetensors` of the fixture folder `dir`.
    pub fn read(dir: &Path) -> HfReference {
        let path = dir.join("inputs.safetensors");
        let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        HfReference { tensors }
    }
    fn get(&self, name: &str) -> &candle_core::Tensor {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }
    /// The tensor `name`, flattened, in f32.
    pub fn f32(&self, name: &str) -> Vec<f32> {
        self.get(name)
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    }
    /// The model's MoE layers, in order: those with an `out.L`.
    pub fn layers(&self) -> Vec<usize> {
        let mut l: Vec<usize> = self
            .tensors
            .keys()
            .filter_map(|k| k.strip_prefix("out.")?.parse().ok())
            .collect();
        l.sort();
        l
    }
    /// Row by row, transformers' routing of `layer` as (id, weight) pairs sorted by id
    /// (DeepSeek-V3's and GLM-4-MoE's routers return their top-k unsorted).
    pub fn routing(&self, layer: usize) -> Vec<Vec<(u32, f32)>> {
        let ids = self.get(&format!("ids.{layer}"));
        let k = ids.dims()[1];
        let ids = ids.flatten_all().unwrap().to_vec1::<i64>().unwrap();
        let w = self.f32(&format!("weights.{layer}"));
        ids.chunks(k)
            .zip(w.chunks(k))
            .map(|(i, w)| sorted_by_id(i.iter().map(|&i| i as u32).zip(w.iter().copied())))
            .collect()
    }
}

/// (id, weight) pairs sorted by id: one token's routing in an order that does not depend on the
/// router's.
pub fn sorted_by_id(pairs: impl Iterator<Item = (u32, f32)>) -> Vec<(u32, f32)> {
    let mut v: Vec<(u32, f32)> = pairs.collect();
    v.sort_by_key(|p| p.0);
    v
}

/// One MoE layer of a fixture, with what transformers computed for it.
pub struct HfLayer {
    /// The fixture, one of [`HF_FIXTURES`].
    pub fixture: &'static str,
    /// The model's layer index.
    pub layer: usize,
    /// The layer's weights, loaded from the fixture's `per_expert/` checkpoint.
    pub weights: MoeWeights,
    /// The fixture's hidden states [T, H].
    pub hidden: Vec<f32>,
    /// Transformers' output [T, H] for them.
    pub out: Vec<f32>,
    /// Transformers' routing, row by row ([`HfReference::routing`]).
    pub routing: Vec<Vec<(u32, f32)>>,
}

/// Every MoE layer of every fixture, fixture by fixture and layer by layer, each loaded when the
/// iterator reaches it. For tests: a fixture that does not load panics, naming it.
pub fn hf_layers() -> impl Iterator<Item = HfLayer> {
    HF_FIXTURES.into_iter().flat_map(|fixture| {
        let dir = hf_fixture(fixture);
        let hf = HfReference::read(&dir);
        let hidden = hf.f32("hidden");
        hf.layers().into_iter().map(move |layer| {
            let opts = LoadOptions {
                layer: Some(layer),
                progress: false,
            };
            let weights = load(&dir.join("per_expert"), &opts)
                .unwrap_or_else(|e| panic!("{fixture} layer {layer}: {e}"))
                .weights;
            HfLayer {
                fixture,
                layer,
                weights,
                hidden: hidden.clone(),
                out: hf.f32(&format!("out.{layer}")),
                routing: hf.routing(layer),
            }
        })
    })
}
