//! One layer's tensors, read once each from the memory map and converted to f32 straight into
//! the packed `w13` [E, 2I, H] and `w2` [E, H, I] of [`MoeWeights`].
//!
//! Two passes. The first reads only headers: every tensor the family reads under the config must
//! be there with the shape the config gives it, and the layer's MLP (`model.layers.{L}.mlp.*`)
//! must hold nothing else. Only then is anything allocated, so every allocation is bounded by what
//! the files hold. The second converts the bytes.
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
use super::files::{FileDtype, Files, Raw};
use super::layers::{mlp_prefix, Storage};
use crate::weights::{MoeWeights, SharedWeights};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeSet;

/// Expert weights above this many bytes (as stored) get a progress bar when one is asked for.
pub const PROGRESS_BYTES: u64 = 64 << 20;

/// Converts checked tensors into f32, and remembers the experts' file types.
struct Reader {
    expert_dtypes: BTreeSet<FileDtype>,
    bar: Option<ProgressBar>,
}

impl Reader {
    /// An expert matrix (its shape checked) into `dst`, counted in the progress bar; refused if
    /// it holds a NaN or an infinity.
    fn expert(&mut self, raw: &Raw<'_>, dst: &mut [f32]) -> Result<(), CheckpointError> {
        raw.convert_finite(0, dst)?;
        self.expert_dtypes.insert(raw.dtype);
        self.tick(raw.data.len());
        Ok(())
    }

    /// A fused `[E, rows, cols]` tensor (its shape checked) into `dst`, one expert at a time (for
    /// the progress bar; the tensor is still read once).
    fn fused(&mut self, raw: &Raw<'_>, dst: &mut [f32]) -> Result<(), CheckpointError> {
        let per = raw.shape[1] * raw.shape[2];
        for (e, chunk) in dst.chunks_mut(per).enumerate() {
            raw.convert_finite(e * per, chunk)?;
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

/// A bar left by an early return (a tensor refused) is cleared too, before the error is printed.
impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
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

/// A layer's experts, their headers checked.
enum Experts<'a> {
    /// Expert by expert: `[gate_proj, up_proj, down_proj]`.
    PerExpert(Vec<[Raw<'a>; 3]>),
    /// `gate_up_proj`, `down_proj`.
    Fused(Raw<'a>, Raw<'a>),
}

/// The shared expert, its headers checked.
struct Shared<'a> {
    gate_proj: Raw<'a>,
    up_proj: Raw<'a>,
    down_proj: Raw<'a>,
    /// Qwen2-MoE's `shared_expert_gate`.
    gate: Option<Raw<'a>>,
}

/// Every tensor the layer reads, found and of the shape the config gives it; nothing converted.
struct Checked<'a> {
    gate: Raw<'a>,
    bias: Option<Raw<'a>>,
    experts: Experts<'a>,
    shared: Option<Shared<'a>>,
}

impl Checked<'_> {
    /// Every tensor, in the order read.
    fn all(&self) -> Vec<&Raw<'_>> {
        let mut all = vec![&self.gate];
        all.extend(&self.bias);
        match &self.experts {
            Experts::PerExpert(v) => all.extend(v.iter().flatten()),
            Experts::Fused(gate_up, down) => all.extend([gate_up, down]),
        }
        if let Some(s) = &self.shared {
            all.extend([&s.gate_proj, &s.up_proj, &s.down_proj]);
            all.extend(&s.gate);
        }
        all
    }

    /// The bytes of the expert weights as stored.
    fn expert_bytes(&self) -> u64 {
        match &self.experts {
            Experts::PerExpert(v) => v.iter().flatten().map(|r| r.data.len() as u64).sum(),
            Experts::Fused(a, b) => (a.data.len() + b.data.len()) as u64,
        }
    }
}

/// The tensor `name` of `files`, if it has shape `shape` (its header only: no byte is read).
fn check<'a>(files: &'a Files, name: &str, shape: &[usize]) -> Result<Raw<'a>, CheckpointError> {
    let raw = files.get(name)?;
    raw.expect_shape(shape)?;
    Ok(raw)
}

/// Finds every tensor of layer `layer` that the family reads under this config, checks its
/// header's shape against the config, and checks that the layer's MLP holds nothing else.
fn check_layer<'a>(
    files: &'a Files,
    parsed: &ParsedConfig,
    n: &Names,
    layer: usize,
    storage: Storage,
) -> Result<Checked<'a>, CheckpointError> {
    let c = &parsed.config;
    let (h, i, e) = (c.hidden, c.intermediate, c.experts);
    let family = parsed.family;
    // The router first: its [E, H] bounds E · H by what the file holds before the experts'
    // headers are looked up, E of them.
    let gate = check(files, &n.router(), &[e, h])?;
    let bias = if family.is_deepseek_like() {
        Some(check(files, &n.bias(), &[e])?)
    } else {
        None
    };
    let experts = match storage {
        Storage::PerExpert => Experts::PerExpert(
            (0..e)
                .map(|x| {
                    Ok([
                        check(files, &n.expert(x, "gate_proj"), &[i, h])?,
                        check(files, &n.expert(x, "up_proj"), &[i, h])?,
                        check(files, &n.expert(x, "down_proj"), &[h, i])?,
                    ])
                })
                .collect::<Result<_, CheckpointError>>()?,
        ),
        Storage::Fused => Experts::Fused(
            check(files, &n.fused("gate_up_proj"), &[e, 2 * i, h])?,
            check(files, &n.fused("down_proj"), &[e, h, i])?,
        ),
    };
    let shared = match c.shared {
        None => None,
        Some(s) => {
            let is = s.intermediate;
            Some(Shared {
                gate_proj: check(files, &n.shared(family, "gate_proj"), &[is, h])?,
                up_proj: check(files, &n.shared(family, "up_proj"), &[is, h])?,
                down_proj: check(files, &n.shared(family, "down_proj"), &[h, is])?,
                // nn.Linear(H, 1): [1, H]
                gate: if s.gated {
                    Some(check(files, &n.shared_gate(), &[1, h])?)
                } else {
                    None
                },
            })
        }
    };
    let checked = Checked {
        gate,
        bias,
        experts,
        shared,
    };
    // A tensor of the layer's MLP that is not read would be a part of the layer left out: a
    // shared expert while `n_shared_experts` is 0, a bias, an expert beyond `E`.
    let read: BTreeSet<&str> = checked.all().iter().map(|r| r.name.as_str()).collect();
    let unused: Vec<String> = files
        .names()
        .filter(|name| name.starts_with(&n.p) && !read.contains(name))
        .map(String::from)
        .collect();
    if !unused.is_empty() {
        return Err(CheckpointError::UnusedTensors {
            layer,
            family,
            tensors: unused,
        });
    }
    Ok(checked)
}

/// Layer `layer`'s weights, packed, and the experts' file type(s) (`bf16`, or `bf16+f32` when
/// they differ).
///
/// Every tensor's header is checked against the config (and the layer's MLP for tensors left
/// out) before anything is allocated, so every allocation is bounded by what the files hold: a
/// config of 2¹⁶ experts of hidden size 2³⁰ is refused by the router's shape, not by the
/// allocator.
pub fn pack(
    files: &Files,
    parsed: &ParsedConfig,
    layer: usize,
    storage: Storage,
    progress: bool,
) -> Result<(MoeWeights, String), CheckpointError> {
    let c = &parsed.config;
    let (h, i) = (c.hidden, c.intermediate);
    let n = Names {
        p: mlp_prefix(layer),
    };
    let checked = check_layer(files, parsed, &n, layer, storage)?;

    // Every tensor is refused if it holds a NaN or an infinity, checked in the conversion's pass.
    let gate = checked.gate.to_f32_finite()?; // [E, H]
    let bias = checked.bias.as_ref().map(Raw::to_f32_finite).transpose()?; // [E]

    let expert_bytes = checked.expert_bytes();
    let mut r = Reader {
        expert_dtypes: BTreeSet::new(),
        bar: (progress && expert_bytes > PROGRESS_BYTES).then(|| progress_bar(layer, expert_bytes)),
    };

    // ANCHOR: pack_experts
    let mut w13 = vec![0f32; c.w13_len()]; // [E, 2I, H]
    let mut w2 = vec![0f32; c.w2_len()]; // [E, H, I]
    match &checked.experts {
        Experts::PerExpert(experts) => {
            for ((w13_e, w2_e), [gate_proj, up_proj, down_proj]) in w13
                .chunks_mut(2 * i * h)
                .zip(w2.chunks_mut(h * i))
                .zip(experts)
            {
                let (gate_rows, up_rows) = w13_e.split_at_mut(i * h);
                r.expert(gate_proj, gate_rows)?; // [I, H]
                r.expert(up_proj, up_rows)?; // [I, H]
                r.expert(down_proj, w2_e)?; // [H, I]
            }
        }
        Experts::Fused(gate_up_proj, down_proj) => {
            r.fused(gate_up_proj, &mut w13)?; // [E, 2I, H]
            r.fused(down_proj, &mut w2)?; // [E, H, I]
        }
    }
    // ANCHOR_END: pack_experts

    // The shared expert: w13 [2Is, H] (gate rows, then up rows), w2 [H, Is], Qwen2-MoE's gate
    // [1, H] as [H].
    let shared = match &checked.shared {
        None => None,
        Some(s) => {
            let is_h: usize = s.gate_proj.shape.iter().product(); // checked: [Is, H]
            let mut w13 = vec![0f32; 2 * is_h];
            let (g, u) = w13.split_at_mut(is_h);
            s.gate_proj.convert_finite(0, g)?;
            s.up_proj.convert_finite(0, u)?;
            Some(SharedWeights {
                w13,
                w2: s.down_proj.to_f32_finite()?,
                gate: s.gate.as_ref().map(Raw::to_f32_finite).transpose()?,
            })
        }
    };
    if let Some(bar) = r.bar.take() {
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
