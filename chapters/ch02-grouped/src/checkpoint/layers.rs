//! Which layers are MoE, told by their tensor names, and how a layer stores its experts.
//!
//! A layer `N` is MoE when the checkpoint has `model.layers.N.mlp.gate.weight` (the router) or any
//! `model.layers.N.mlp.experts.*`; a dense layer has `mlp.gate_proj.weight` instead. The names
//! are the truth: DeepSeek-V3's `first_k_dense_replace`, Qwen's `mlp_only_layers` and
//! `decoder_sparse_step` only say what the names show.

use super::error::CheckpointError;
use super::files::Files;
use std::collections::BTreeSet;

/// How a checkpoint holds one layer's experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The Hub's form (and what transformers' `save_pretrained` writes): one tensor per expert
    /// and projection, `mlp.experts.{e}.gate_proj.weight` [I, H], `up_proj` [I, H],
    /// `down_proj` [H, I].
    PerExpert,
    /// transformers 5.x's modules (`state_dict()`): `mlp.experts.gate_up_proj` [E, 2I, H] and
    /// `mlp.experts.down_proj` [E, H, I].
    Fused,
}

/// The prefix of layer `layer`'s MLP tensors.
pub fn mlp_prefix(layer: usize) -> String {
    format!("model.layers.{layer}.mlp.")
}

/// The layers the names mention, and which of them are MoE.
#[derive(Clone, Debug, PartialEq)]
pub struct Layers {
    pub all: BTreeSet<usize>,
    /// Ascending.
    pub moe: Vec<usize>,
}

/// Reads the layers from the tensor names.
pub fn scan<'a>(names: impl Iterator<Item = &'a str>) -> Layers {
    let mut all = BTreeSet::new();
    let mut moe = BTreeSet::new();
    for name in names {
        let Some(rest) = name.strip_prefix("model.layers.") else {
            continue;
        };
        let Some((n, rest)) = rest.split_once('.') else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else { continue };
        all.insert(n);
        if rest == "mlp.gate.weight" || rest.starts_with("mlp.experts.") {
            moe.insert(n);
        }
    }
    Layers {
        all,
        moe: moe.into_iter().collect(),
    }
}

impl Layers {
    /// `want`, checked, or the first MoE layer.
    pub fn choose(&self, want: Option<usize>) -> Result<usize, CheckpointError> {
        match want {
            None => self
                .moe
                .first()
                .copied()
                .ok_or(CheckpointError::NoMoeLayer {
                    layers: self.all.len(),
                }),
            Some(l) if self.moe.contains(&l) => Ok(l),
            Some(l) if self.all.contains(&l) => Err(CheckpointError::NotMoeLayer {
                layer: l,
                moe_layers: self.moe.clone(),
            }),
            Some(l) => Err(CheckpointError::NoSuchLayer {
                layer: l,
                layers: self.all.len(),
                moe_layers: self.moe.clone(),
            }),
        }
    }
}

/// How `layer` stores its experts: fused when it has `experts.gate_up_proj` or
/// `experts.down_proj`, per expert when it has any `experts.{e}.*`.
pub fn storage(files: &Files, layer: usize) -> Result<Storage, CheckpointError> {
    let p = mlp_prefix(layer);
    let fused_names = [
        format!("{p}experts.gate_up_proj"),
        format!("{p}experts.down_proj"),
    ];
    let fused = fused_names.iter().any(|n| files.contains(n));
    let experts = format!("{p}experts.");
    let per_expert = files.names().any(|n| {
        n.strip_prefix(&experts)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    });
    match (per_expert, fused) {
        (true, true) => Err(CheckpointError::MixedStorage { layer }),
        (true, false) => Ok(Storage::PerExpert),
        (false, true) => Ok(Storage::Fused),
        (false, false) => Err(CheckpointError::NoExperts {
            layer,
            per_expert: format!("{p}experts.0.gate_proj.weight"),
            fused: fused_names[0].clone(),
        }),
    }
}
