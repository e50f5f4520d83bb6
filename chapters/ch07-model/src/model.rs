//! The decoder: every layer is RMSNorm → grouped-query attention (with the KV cache) → residual
//! → RMSNorm → MLP → residual, and the MLP of a MoE layer runs on the device; the rest is
//! [`crate::cpu`]'s plain loops.
//!
//! | part | where | what runs |
//! |---|---|---|
//! | embedding, norms, attention, dense MLP, LM head, argmax | CPU, f32 | [`crate::cpu`] |
//! | every MoE layer, [`Dtype::Bf16`] | the device (GPU or emulator) | chapter 6's [`AssembledLayer`]: bf16 in, the engine's path |
//! | every MoE layer, [`Dtype::F32`] | the device (GPU or emulator) | chapter 2's [`GroupedDevice`] in f32: router and experts in f32 |
//!
//! transformers computes the fixtures in fp32, so the f32 path is the one that must give its
//! tokens exactly; the bf16 path is chapter 6's layer as an engine runs it, and the example
//! measures how far its tokens follow.

use crate::cpu::{argmax, attend, linear, rms_norm, rope, rope_angles, silu};
use crate::error::ModelError;
use crate::load::{AttentionWeights, DenseWeights, MlpWeights, ModelWeights};
use crate::ModelConfig;
use ch02_grouped::{Dtype, GroupedDevice, MoeLayer};
use ch06_layer::AssembledLayer;
use moe_kernels::Device;
use std::time::{Duration, Instant};

/// A layer's MLP, ready to run.
pub enum Mlp {
    Dense(DenseWeights),
    /// Chapter 6's layer (bf16) or chapter 2's grouped layer in f32, on the device.
    Moe(Box<dyn MoeLayer>),
}

/// One decoder layer, ready to run.
pub struct Layer {
    input_norm: Vec<f32>,
    attention: AttentionWeights,
    post_norm: Vec<f32>,
    mlp: Mlp,
}

/// The model: host weights for the plain parts, device layers for the MoE parts.
pub struct Model {
    config: ModelConfig,
    dtype: Dtype,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    lm_head: Vec<f32>,
}

// ANCHOR: kv_cache
/// The keys and values of every position so far, per layer: `[positions, kv_heads · D]` each,
/// keys already rotated. A decode step appends one row per layer and reads them all.
pub struct KvCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    len: usize,
}
// ANCHOR_END: kv_cache

impl KvCache {
    /// How many positions it holds.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What [`Model::generate`] reports for each token as it comes.
pub struct Step<'a> {
    pub token: u32,
    /// The logits `[V]` it is the argmax of.
    pub logits: &'a [f32],
    /// The forward pass that produced it: the prompt's prefill for the first, one position after.
    pub took: Duration,
    /// Its logit's gap to the runner-up (how close this greedy choice was).
    pub gap: f32,
}

impl Model {
    /// Puts every MoE layer on `device`: chapter 6's [`AssembledLayer`] for [`Dtype::Bf16`],
    /// chapter 2's [`GroupedDevice`] in f32 for [`Dtype::F32`].
    pub fn new(device: &'static Device, w: ModelWeights, dtype: Dtype) -> Result<Self, ModelError> {
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in w.layers {
            // ANCHOR: moe_choice
            let mlp = match l.mlp {
                MlpWeights::Dense(d) => Mlp::Dense(d),
                MlpWeights::Moe(m) => Mlp::Moe(match dtype {
                    Dtype::Bf16 => Box::new(AssembledLayer::new(device, &m)?),
                    Dtype::F32 => Box::new(GroupedDevice::new(device, &m, Dtype::F32)?),
                }),
            };
            // ANCHOR_END: moe_choice
            layers.push(Layer {
                input_norm: l.input_norm,
                attention: l.attention,
                post_norm: l.post_norm,
                mlp,
            });
        }
        Ok(Model {
            config: w.config,
            dtype,
            embed: w.embed,
            layers,
            norm: w.norm,
            lm_head: w.lm_head,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The MoE layers' compute type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Which MoE layer implementation runs (`assembled`, `grouped-device`).
    pub fn moe_name(&self) -> Option<&'static str> {
        self.layers.iter().find_map(|l| match &l.mlp {
            Mlp::Moe(m) => Some(m.name()),
            Mlp::Dense(_) => None,
        })
    }

    /// An empty cache for this model.
    pub fn cache(&self) -> KvCache {
        KvCache {
            keys: vec![Vec::new(); self.layers.len()],
            values: vec![Vec::new(); self.layers.len()],
            len: 0,
        }
    }

    // ANCHOR: forward
    /// Runs `tokens` at the positions after the cache's (all the prompt at once, then one token
    /// per step), appends their keys and values to `cache`, and returns the logits `[V]` of the
    /// last one. After an error the cache may hold some layers' rows of the failed call: start
    /// a new one.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let h = c.hidden;
        if tokens.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        // [T, H]: each token's row of the embedding.
        let mut x = Vec::with_capacity(tokens.len() * h);
        for &t in tokens {
            if t as usize >= c.vocab {
                return Err(ModelError::Token {
                    token: t,
                    vocab: c.vocab,
                });
            }
            x.extend_from_slice(&self.embed[t as usize * h..(t as usize + 1) * h]);
        }
        // ANCHOR: layer
        for (l, layer) in self.layers.iter().enumerate() {
            let a = rms_norm(&x, &layer.input_norm, c.rms_eps);
            let a = self.attention(&layer.attention, &a, l, cache);
            x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
            let m = rms_norm(&x, &layer.post_norm, c.rms_eps);
            let m = match &layer.mlp {
                Mlp::Dense(d) => dense_mlp(d, &m, h, c.dense_intermediate),
                Mlp::Moe(moe) => moe.forward(&m)?.out, // the device: [T, H] in, [T, H] out
            };
            x.iter_mut().zip(&m).for_each(|(x, m)| *x += m);
        }
        // ANCHOR_END: layer
        cache.len += tokens.len();
        // Only the last position's logits are needed for the next token.
        let last = rms_norm(&x[x.len() - h..], &self.norm, c.rms_eps);
        Ok(linear(&last, &self.lm_head, None, h, c.vocab))
    }
    // ANCHOR_END: forward

    // ANCHOR: attention
    /// Grouped-query attention of `x [T, H]` at positions `cache.len()..`: project, normalise
    /// each head of q and k (when the family does), rotate, append k and v to the cache, then
    /// each query head attends over every cached position up to its own (causal) through its KV
    /// head, and the output projection.
    fn attention(
        &self,
        w: &AttentionWeights,
        x: &[f32],
        l: usize,
        cache: &mut KvCache,
    ) -> Vec<f32> {
        let c = &self.config;
        let (h, d) = (c.hidden, c.head_dim);
        let (qn, kvn) = (c.heads * d, c.kv_heads * d);
        let mut q = linear(x, &w.q, w.q_bias.as_deref(), h, qn); // [T, heads·D]
        let mut k = linear(x, &w.k, w.k_bias.as_deref(), h, kvn); // [T, kv_heads·D]
        let v = linear(x, &w.v, w.v_bias.as_deref(), h, kvn); // [T, kv_heads·D]
        if let (Some(qw), Some(kw)) = (&w.q_norm, &w.k_norm) {
            q = rms_norm(&q, qw, c.rms_eps); // per head: rows of D
            k = rms_norm(&k, kw, c.rms_eps);
        }
        let start = cache.len;
        for (t, (qt, kt)) in q
            .chunks_exact_mut(qn)
            .zip(k.chunks_exact_mut(kvn))
            .enumerate()
        {
            let (cos, sin) = rope_angles(start + t, c.rotary_dim, c.rope_theta);
            qt.chunks_exact_mut(d)
                .for_each(|head| rope(head, &cos, &sin));
            kt.chunks_exact_mut(d)
                .for_each(|head| rope(head, &cos, &sin));
        }
        cache.keys[l].extend_from_slice(&k);
        cache.values[l].extend_from_slice(&v);
        let group = c.heads / c.kv_heads; // query heads per KV head
        let mut out = vec![0f32; q.len()];
        for (t, (qt, ot)) in q.chunks_exact(qn).zip(out.chunks_exact_mut(qn)).enumerate() {
            let seen = (start + t + 1) * kvn; // positions 0..=start+t
            for (head, (qh, oh)) in qt.chunks_exact(d).zip(ot.chunks_exact_mut(d)).enumerate() {
                let at = head / group * d;
                oh.copy_from_slice(&attend(
                    qh,
                    &cache.keys[l][..seen],
                    &cache.values[l][..seen],
                    kvn,
                    at,
                ));
            }
        }
        linear(&out, &w.o, w.o_bias.as_deref(), qn, h)
    }
    // ANCHOR_END: attention

    // ANCHOR: generate
    /// Greedy decoding: the prompt in one forward pass, then `n - 1` single-token passes, each
    /// token the argmax of the last logits; `each` sees every token as it comes (and may stop
    /// the run with its error).
    pub fn generate<E: From<ModelError>>(
        &self,
        prompt: &[u32],
        n: usize,
        mut each: impl FnMut(&Step) -> Result<(), E>,
    ) -> Result<Vec<u32>, E> {
        let mut cache = self.cache();
        let mut tokens = Vec::with_capacity(n);
        let mut input = prompt.to_vec();
        while tokens.len() < n {
            let start = Instant::now();
            let logits = self.forward(&input, &mut cache)?;
            let token = argmax(&logits);
            each(&Step {
                token,
                logits: &logits,
                took: start.elapsed(),
                gap: crate::cpu::top2_gap(&logits),
            })?;
            tokens.push(token);
            input = vec![token];
        }
        Ok(tokens)
    }
    // ANCHOR_END: generate
}

/// The dense SwiGLU MLP of `x [T, H]`: `down(silu(gate·x) ⊙ up·x)`.
fn dense_mlp(w: &DenseWeights, x: &[f32], h: usize, id: usize) -> Vec<f32> {
    let g = linear(x, &w.gate, None, h, id);
    let u = linear(x, &w.up, None, h, id);
    let a: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
    linear(&a, &w.down, None, id, h)
}
