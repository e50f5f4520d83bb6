//! One layer's tensors, read once each from the memory map and converted to f32 straight into
//! the packed `w13` [E, 2I, H] and `w2` [E, H, I] of [`MoeWeights`].
//!
//! The fused form is transformers 5.x's own (read in `models/qwen3_moe/modeling_qwen3_moe.py`,
//! `Qwen3MoeExperts`, and `conversion_mapping.py`, 5.17.0): `gate_up_proj` is
//! `nn.Parameter(torch.empty(E, 2 * I, H))`, used as `linear(x, gate_up_proj[e]).chunk(2, -1)` →
//! `gate, up`, and built from the Hub's tensors by `MergeModulelist(dim=0)` then
//! `Concatenate(dim=1)` of `[gate_proj, up_proj]`: expert `e`'s gate rows, then its up rows,
//! exactly our `w13`; `down_proj` is `[E, H, I]`, our `w2`. (Qwen3-VL-MoE and Llama 4 store
//! theirs transposed, `[E, H, 2I]`; those are not families this loader reads.)

use super::config::{Family, ParsedConfig};
use super::error::CheckpointError;
use super::files::{FileDtype, Files};
use super::layers::{mlp_prefix, Storage};
use crate::weights::{MoeWeights, SharedWeights};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeSet;

/// Expert weights above this many bytes (as stored) get a progress bar when one is asked for.
pub const PROGRESS_BYTES: u64 = 64 << 20;

/// Reads tensors into f32, checking their shapes, and remembers the experts' file types.
struct Reader<'a> {
    files: &'a Files,
    expert_dtypes: BTreeSet<FileDtype>,
    bar: Option<ProgressBar>,
}

impl Reader<'_> {
    /// Reads `name` of shape `shape` into `dst` (whose length is the shape's product).
    fn read(
        &mut self,
        name: &str,
        shape: &[usize],
        dst: &mut [f32],
    ) -> Result<FileDtype, CheckpointError> {
        let raw = self.files.get(name)?;
        raw.expect_shape(shape)?;
        raw.convert(0, dst);
        Ok(raw.dtype)
    }

    /// [`Reader::read`] of an expert matrix, counted in the progress bar.
    fn read_expert(
        &mut self,
        name: &str,
        shape: &[usize],
        dst: &mut [f32],
    ) -> Result<(), CheckpointError> {
        let dtype = self.read(name, shape, dst)?;
        self.expert_dtypes.insert(dtype);
        self.tick(dst.len() * dtype.bytes());
        Ok(())
    }

    /// A fused `[E, rows, cols]` tensor into `dst`, one expert at a time (for the progress bar;
    /// the tensor is still read once).
    fn read_fused(
        &mut self,
        name: &str,
        shape: [usize; 3],
        dst: &mut [f32],
    ) -> Result<(), CheckpointError> {
        let raw = self.files.get(name)?;
        raw.expect_shape(&shape)?;
        let per = shape[1] * shape[2];
        for (e, chunk) in dst.chunks_mut(per).enumerate() {
            raw.convert(e * per, chunk);
            self.tick(per * raw.dtype.bytes());
        }
        self.expert_dtypes.insert(raw.dtype);
        Ok(())
    }

    fn tick(&self, bytes: usize) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes as u64);
        }
    }
}

/// The bar for `bytes` of expert weights, on stderr (drawn only when stderr is a terminal).
fn progress_bar(layer: usize, bytes: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{wide_bar}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(format!("layer {layer}: packing experts"));
    bar
}

/// The names of one layer's tensors.
struct Names {
    p: String,
}

impl Names {
    fn router(&self) -> String {
        format!("{}gate.weight", self.p)
    }
    fn bias(&self) -> String {
        format!("{}gate.e_score_correction_bias", self.p)
    }
    fn expert(&self, e: usize, proj: &str) -> String {
        format!("{}experts.{e}.{proj}.weight", self.p)
    }
    fn fused(&self, what: &str) -> String {
        format!("{}experts.{what}", self.p)
    }
    /// DeepSeek-V3's `shared_experts` (plural: `n_shared_experts` of them, stored as one MLP),
    /// Qwen2-MoE's `shared_expert`.
    fn shared(&self, family: Family, proj: &str) -> String {
        let module = if family.is_deepseek_like() {
            "shared_experts"
        } else {
            "shared_expert"
        };
        format!("{}{module}.{proj}.weight", self.p)
    }
    fn shared_gate(&self) -> String {
        format!("{}shared_expert_gate.weight", self.p)
    }
}

/// Layer `layer`'s weights, packed, and the experts' file type(s) (`bf16`, or `bf16+f32` when
/// they differ).
pub fn pack(
    files: &Files,
    parsed: &ParsedConfig,
    layer: usize,
    storage: Storage,
    progress: bool,
) -> Result<(MoeWeights, String), CheckpointError> {
    let c = &parsed.config;
    let (h, i, e) = (c.hidden, c.intermediate, c.experts);
    let n = Names {
        p: mlp_prefix(layer),
    };
    let mut r = Reader {
        files,
        expert_dtypes: BTreeSet::new(),
        bar: None,
    };

    let mut gate = vec![0f32; e * h]; // [E, H]
    r.read(&n.router(), &[e, h], &mut gate)?;
    let bias = if parsed.family.is_deepseek_like() {
        let mut b = vec![0f32; e]; // [E]
        r.read(&n.bias(), &[e], &mut b)?;
        Some(b)
    } else {
        None
    };

    // The bar's size, from the type of the first expert tensor (its header, not its bytes).
    let first = match storage {
        Storage::PerExpert => n.expert(0, "gate_proj"),
        Storage::Fused => n.fused("gate_up_proj"),
    };
    let expert_bytes = (c.w13_len() + c.w2_len()) as u64 * files.get(&first)?.dtype.bytes() as u64;
    r.bar = (progress && expert_bytes > PROGRESS_BYTES).then(|| progress_bar(layer, expert_bytes));

    // ANCHOR: pack_experts
    let mut w13 = vec![0f32; c.w13_len()]; // [E, 2I, H]
    let mut w2 = vec![0f32; c.w2_len()]; // [E, H, I]
    match storage {
        Storage::PerExpert => {
            for (x, (w13_e, w2_e)) in w13
                .chunks_mut(2 * i * h)
                .zip(w2.chunks_mut(h * i))
                .enumerate()
            {
                let (gate_rows, up_rows) = w13_e.split_at_mut(i * h);
                r.read_expert(&n.expert(x, "gate_proj"), &[i, h], gate_rows)?;
                r.read_expert(&n.expert(x, "up_proj"), &[i, h], up_rows)?;
                r.read_expert(&n.expert(x, "down_proj"), &[h, i], w2_e)?;
            }
        }
        Storage::Fused => {
            r.read_fused(&n.fused("gate_up_proj"), [e, 2 * i, h], &mut w13)?;
            r.read_fused(&n.fused("down_proj"), [e, h, i], &mut w2)?;
        }
    }
    // ANCHOR_END: pack_experts

    let shared = match c.shared {
        None => None,
        Some(s) => {
            let is = s.intermediate;
            let mut sw13 = vec![0f32; 2 * is * h]; // [2Is, H]: gate rows, then up rows
            let (g, u) = sw13.split_at_mut(is * h);
            r.read(&n.shared(parsed.family, "gate_proj"), &[is, h], g)?;
            r.read(&n.shared(parsed.family, "up_proj"), &[is, h], u)?;
            let mut sw2 = vec![0f32; h * is]; // [H, Is]
            r.read(&n.shared(parsed.family, "down_proj"), &[h, is], &mut sw2)?;
            let gate = if s.gated {
                let mut g = vec![0f32; h]; // nn.Linear(H, 1): [1, H]
                r.read(&n.shared_gate(), &[1, h], &mut g)?;
                Some(g)
            } else {
                None
            };
            Some(SharedWeights {
                w13: sw13,
                w2: sw2,
                gate,
            })
        }
    };
    if let Some(bar) = &r.bar {
        bar.finish_and_clear();
    }
    let file_dtype = r
        .expert_dtypes
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join("+");
    let weights = MoeWeights {
        config: c.clone(),
        gate,
        bias,
        w13,
        w2,
        shared,
    };
    Ok((weights, file_dtype))
}
