//! The decoder on the device: the whole decode step, from the token ids to the next token ids,
//! queued with no host synchronisation, so that a CUDA graph can hold it and chapter 6's MoE
//! layers can be timed as a share of a real step.
//!
//! | part ([`Part`]) | kernels | what runs |
//! |---|---|---|
//! | `embed` | `dec_embed` | each token's bf16 row, widened to fp32 |
//! | `norms` | `dec_add_rms_norm` | the residual add fused into the RMSNorm after it; bf16 out |
//! | `qkv_proj` | chapter 5's tiny GEMM | q, k and v in one bf16 weight `[(NH + 2 KVH) D, H]` |
//! | `attention` | `dec_qkv`, `dec_attention` | bias, q/k norm, rotary, the cache's append; one block per (row, head) over the cache |
//! | `o_proj` | chapter 5's tiny GEMM | `[H, NH D]` |
//! | `moe` | chapter 6's [`AssembledLayer::enqueue`] | router, experts, shared expert |
//! | `dense_mlp` | tiny GEMM, `dec_silu_mul`, tiny GEMM | the dense layers (GLM's first) |
//! | `lm_head` | tiny GEMM, `dec_argmax` | logits `[B, V]` and the greedy token |
//!
//! Everything but the MoE layers is plain (`kernels/ch07_decoder.cu` says what is not tuned and
//! why); the linear layers are chapter 5's tiny GEMM, which streams each weight once for up to 16
//! rows. Weights are bf16, activations fp32 between kernels, rounded to bf16 where a GEMM reads
//! them; the KV cache is fp32. All B rows of a step are at the same position (one batch of
//! sequences decoded together from equal-length contexts).

use crate::config::{parse_model_config, ModelConfig};
use crate::error::ModelError;
use crate::load::{MlpWeights, ModelWeights};
use ch02_grouped::MoeError;
use ch04_fused_moe::fill::fill_device;
use ch05_fused_router::tiny_gemm;
use ch06_layer::{AssembledLayer, LayerWorkspace};
use half::bf16;
use moe_kernels::{args, Device, DeviceBuffer, KernelSource, LaunchConfig, Module};
use std::sync::Arc;

/// `kernels/ch07_decoder.cu`, built for the GPU (NVRTC at run time) and for the emulator.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch07_decoder");

/// The launch geometry and limits, as `kernels/ch07_decoder.cu` defines them.
pub mod geometry {
    moe_kernels::kernel_constants!("ch07_decoder");
}
use geometry::*;

/// Qwen3-30B-A3B's `config.json` (the fields the decoder reads): 48 MoE layers of 128 experts
/// (k = 8, intermediate 768) at hidden 2048, 32 query heads over 4 KV heads of 128, a vocabulary
/// of 151,936. The full-size decode step of `tools/bench ch07` runs a random-weight model of
/// these shapes.
pub const QWEN3_30B_A3B: &str = r#"{
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "vocab_size": 151936, "hidden_size": 2048, "num_hidden_layers": 48,
  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
  "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "attention_bias": false, "tie_word_embeddings": false, "use_sliding_window": false
}"#;

/// Qwen3-30B-A3B's config, parsed.
pub fn qwen3_30b_a3b() -> ModelConfig {
    let json: serde_json::Value = serde_json::from_str(QWEN3_30B_A3B).expect("valid JSON");
    parse_model_config(&json).expect("a valid config")
}

/// The bf16 weights of a model of `c` whose every layer is MoE, in bytes: the embedding and the
/// LM head, the attention and the experts' weights and the routers' gates (the norms, in f32, are
/// a few kilobytes).
pub fn weight_bytes(c: &ModelConfig) -> usize {
    let (h, d) = (c.hidden, c.head_dim);
    let m = &c.moe.config;
    let attention = (c.heads + 2 * c.kv_heads) * d * h + h * c.heads * d;
    let moe = m.experts * 3 * m.intermediate * h + m.experts * h;
    2 * (2 * c.vocab * h + c.layers * (attention + moe))
}

/// The parts of a decode step, in the order a layer runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Embed,
    Norms,
    QkvProj,
    Attention,
    OProj,
    Moe,
    DenseMlp,
    LmHead,
}

/// Every part.
pub const PARTS: [Part; 8] = [
    Part::Embed,
    Part::Norms,
    Part::QkvProj,
    Part::Attention,
    Part::OProj,
    Part::Moe,
    Part::DenseMlp,
    Part::LmHead,
];

impl Part {
    /// Its name in the bench's CSV.
    pub fn name(self) -> &'static str {
        match self {
            Part::Embed => "embed",
            Part::Norms => "norms",
            Part::QkvProj => "qkv_proj",
            Part::Attention => "attention",
            Part::OProj => "o_proj",
            Part::Moe => "moe",
            Part::DenseMlp => "dense_mlp",
            Part::LmHead => "lm_head",
        }
    }
}

/// A layer's MLP on the device.
pub enum DeviceMlp {
    /// `gate_up [2 Id, H]` (gate rows, then up rows), `down [H, Id]`, bf16.
    Dense {
        gate_up: DeviceBuffer<bf16>,
        down: DeviceBuffer<bf16>,
        inter: usize,
    },
    /// Chapter 6's layer.
    Moe(Box<AssembledLayer>),
}

/// One layer's weights on the device.
pub struct DeviceLayer {
    input_norm: DeviceBuffer<f32>,
    post_norm: DeviceBuffer<f32>,
    /// `[(NH + 2 KVH) D, H]` bf16: q, k and v's weights stacked.
    wqkv: DeviceBuffer<bf16>,
    /// `[(NH + 2 KVH) D]` f32 (zeros without `attention_bias`).
    qkv_bias: DeviceBuffer<f32>,
    /// `[D]` f32 each (ones, unread, without q/k norm).
    q_norm: DeviceBuffer<f32>,
    k_norm: DeviceBuffer<f32>,
    /// `[H, NH D]` bf16
    wo: DeviceBuffer<bf16>,
    /// `[H]` f32, zeros without an output bias.
    o_bias: DeviceBuffer<f32>,
    mlp: DeviceMlp,
}

/// The model on the device.
pub struct DeviceModel {
    device: &'static Device,
    config: ModelConfig,
    dec: Arc<Module>,
    gemm: Arc<Module>,
    /// `[V, H]` bf16
    embed: DeviceBuffer<bf16>,
    layers: Vec<DeviceLayer>,
    norm: DeviceBuffer<f32>,
    /// `[V, H]` bf16
    lm_head: DeviceBuffer<bf16>,
    /// `[CAP, R/2]` f32: the rotary angles' cos and sin at every position the cache can hold.
    cos: DeviceBuffer<f32>,
    sin: DeviceBuffer<f32>,
    capacity: usize,
    /// `[H]` zeros: the residual add's bias where there is none.
    zeros: DeviceBuffer<f32>,
}

/// What a step of B rows needs beyond the weights: the activations, the KV cache of every layer
/// (`[B, CAP, KVH D]` f32 each), the logits, the token ids (the step's input, overwritten by its
/// greedy output) and chapter 6's workspace of each MoE layer.
pub struct DeviceState {
    rows: usize,
    x: DeviceBuffer<f32>,
    xb: DeviceBuffer<bf16>,
    qkv: DeviceBuffer<f32>,
    q: DeviceBuffer<f32>,
    attn: DeviceBuffer<bf16>,
    delta: DeviceBuffer<f32>,
    gu: DeviceBuffer<f32>,
    act: DeviceBuffer<bf16>,
    keys: Vec<DeviceBuffer<f32>>,
    values: Vec<DeviceBuffer<f32>>,
    logits: DeviceBuffer<f32>,
    tokens: DeviceBuffer<i32>,
    moe: Vec<Option<LayerWorkspace>>,
}

impl DeviceState {
    /// Its batch size.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// The last step's logits `[B, V]`, downloaded.
    pub fn logits(&self) -> Result<Vec<f32>, ModelError> {
        Ok(self.logits.to_vec().map_err(MoeError::from)?)
    }
    /// The token ids: the next step's input (the last step's greedy choices), downloaded.
    pub fn tokens(&self) -> Result<Vec<u32>, ModelError> {
        let t = self.tokens.to_vec().map_err(MoeError::from)?;
        Ok(t.into_iter().map(|t| t as u32).collect())
    }
    /// Sets the next step's input tokens (one per row).
    pub fn set_tokens(&mut self, tokens: &[u32], vocab: usize) -> Result<(), ModelError> {
        if tokens.len() != self.rows {
            return Err(MoeError::Config {
                field: "tokens",
                expected: format!("one per row of the state ({})", self.rows),
                found: tokens.len().to_string(),
            }
            .into());
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(ModelError::Token { token: t, vocab });
        }
        let t: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        self.tokens.copy_from(&t).map_err(MoeError::from)?;
        Ok(())
    }
    /// The workspace of every MoE layer (`None` for the dense ones).
    pub fn moe_workspaces(&self) -> &[Option<LayerWorkspace>] {
        &self.moe
    }
    /// The hidden states a MoE layer reads: `[B, H]` bf16.
    pub fn moe_input(&self) -> &DeviceBuffer<bf16> {
        &self.xb
    }
    /// Where a MoE layer writes its output: `[B, H]` f32.
    pub fn moe_output(&self) -> &DeviceBuffer<f32> {
        &self.delta
    }
}

fn to_bf16(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

fn dev_err(e: moe_kernels::KernelError) -> ModelError {
    ModelError::Layer(MoeError::from(e))
}

impl DeviceModel {
    /// Uploads a loaded model: every weight in bf16 (the norms in f32), every MoE layer as
    /// chapter 6's [`AssembledLayer`]; a KV cache of `capacity` positions.
    pub fn new(
        device: &'static Device,
        w: &ModelWeights,
        capacity: usize,
    ) -> Result<Self, ModelError> {
        let c = &w.config;
        let up16 = |v: &[f32]| device.upload(&to_bf16(v)).map_err(dev_err);
        let up32 = |v: &[f32]| device.upload(v).map_err(dev_err);
        let d = c.head_dim;
        let width = (c.heads + 2 * c.kv_heads) * d;
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            let a = &l.attention;
            let wqkv: Vec<f32> = [&a.q, &a.k, &a.v].into_iter().flatten().copied().collect();
            let bias: Vec<f32> = match (&a.q_bias, &a.k_bias, &a.v_bias) {
                (Some(q), Some(k), Some(v)) => [q, k, v].into_iter().flatten().copied().collect(),
                _ => vec![0.0; width],
            };
            let ones = vec![1f32; d];
            let mlp = match &l.mlp {
                MlpWeights::Dense(m) => {
                    let gu: Vec<f32> = m.gate.iter().chain(&m.up).copied().collect();
                    DeviceMlp::Dense {
                        gate_up: up16(&gu)?,
                        down: up16(&m.down)?,
                        inter: c.dense_intermediate,
                    }
                }
                MlpWeights::Moe(m) => DeviceMlp::Moe(Box::new(AssembledLayer::new(device, m)?)),
            };
            layers.push(DeviceLayer {
                input_norm: up32(&l.input_norm)?,
                post_norm: up32(&l.post_norm)?,
                wqkv: up16(&wqkv)?,
                qkv_bias: up32(&bias)?,
                q_norm: up32(a.q_norm.as_deref().unwrap_or(&ones))?,
                k_norm: up32(a.k_norm.as_deref().unwrap_or(&ones))?,
                wo: up16(&a.o)?,
                o_bias: up32(a.o_bias.as_deref().unwrap_or(&vec![0.0; c.hidden]))?,
                mlp,
            });
        }
        Self::assemble(
            device,
            c.clone(),
            up16(&w.embed)?,
            layers,
            up32(&w.norm)?,
            up16(&w.lm_head)?,
            capacity,
        )
    }

    /// A random-weight model of `config` made on the device (chapter 4's hash fill, seeded from
    /// `seed`), every layer MoE (chapter 6's layer with its weights made on the device); norms
    /// of ones. For the full-size shapes, whose weights the host need never hold.
    pub fn patterned(
        device: &'static Device,
        config: &ModelConfig,
        seed: u64,
        capacity: usize,
    ) -> Result<Self, ModelError> {
        let c = config;
        let fill = device.load(&ch04_fused_moe::device::KERNELS)?;
        let mut salt = 0u64;
        let mut filled = |n: usize, fan_in: usize| -> Result<DeviceBuffer<bf16>, ModelError> {
            let b = device.alloc::<bf16>(n).map_err(dev_err)?;
            salt += 1;
            let scale = 1.0 / (fan_in as f32).sqrt();
            fill_device(&fill, &b, 0, seed.wrapping_mul(1000) + salt, scale)?;
            Ok(b)
        };
        let (h, d) = (c.hidden, c.head_dim);
        let width = (c.heads + 2 * c.kv_heads) * d;
        let ones = |n: usize| device.upload(&vec![1f32; n]).map_err(dev_err);
        let zeros = |n: usize| device.zeros::<f32>(n).map_err(dev_err);
        let embed = filled(c.vocab * h, 1)?; // ±1: hidden states of size 1
        let mut layers = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let moe = AssembledLayer::patterned_on_device(
                device,
                &c.moe.config,
                seed.wrapping_add(1 + l as u64),
            )?;
            layers.push(DeviceLayer {
                input_norm: ones(h)?,
                post_norm: ones(h)?,
                wqkv: filled(width * h, h)?,
                qkv_bias: zeros(width)?,
                q_norm: ones(d)?,
                k_norm: ones(d)?,
                wo: filled(h * c.heads * d, c.heads * d)?,
                o_bias: zeros(h)?,
                mlp: DeviceMlp::Moe(Box::new(moe)),
            });
        }
        let lm_head = filled(c.vocab * h, h)?;
        Self::assemble(
            device,
            c.clone(),
            embed,
            layers,
            ones(h)?,
            lm_head,
            capacity,
        )
    }

    fn assemble(
        device: &'static Device,
        config: ModelConfig,
        embed: DeviceBuffer<bf16>,
        layers: Vec<DeviceLayer>,
        norm: DeviceBuffer<f32>,
        lm_head: DeviceBuffer<bf16>,
        capacity: usize,
    ) -> Result<Self, ModelError> {
        let c = &config;
        let limit = |field: &'static str, max: usize, got: usize, why: &str| {
            if got == 0 || got > max {
                Err(ModelError::Layer(MoeError::Config {
                    field,
                    expected: format!("1 to {max} ({why})"),
                    found: got.to_string(),
                }))
            } else {
                Ok(())
            }
        };
        limit(
            "head_dim",
            DEC_MAX_HEAD_DIM,
            c.head_dim,
            "the per-head kernels hold one head in shared memory",
        )?;
        limit(
            "the KV cache's capacity",
            DEC_MAX_CTX,
            capacity,
            "attention holds every score of a head in shared memory",
        )?;
        for (what, n) in [
            ("hidden_size", c.hidden),
            ("num_attention_heads × head_dim", c.heads * c.head_dim),
            ("intermediate_size", c.dense_intermediate),
        ] {
            tiny_gemm::check_hidden(n).map_err(|e| {
                ModelError::Layer(MoeError::Config {
                    field: "a linear layer's input",
                    expected: "a multiple of 8 (chapter 5's tiny GEMM)".into(),
                    found: format!("{what} = {n}: {e}"),
                })
            })?;
        }
        // The rotary table, as `cpu::rope_angles` computes it.
        let half = c.rotary_dim / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(capacity * half), Vec::new());
        for pos in 0..capacity {
            let (co, si) = crate::cpu::rope_angles(pos, c.rotary_dim, c.rope_theta);
            cos.extend(co);
            sin.extend(si);
        }
        Ok(DeviceModel {
            device,
            dec: device.load(&KERNELS)?,
            gemm: device.load(&tiny_gemm::KERNELS)?,
            embed,
            layers,
            norm,
            lm_head,
            cos: device.upload(&cos).map_err(dev_err)?,
            sin: device.upload(&sin).map_err(dev_err)?,
            capacity,
            zeros: device.zeros(c.hidden).map_err(dev_err)?,
            config,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn device(&self) -> &'static Device {
        self.device
    }

    /// The most positions a state's KV cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Chapter 6's layer of every MoE layer (`None` for the dense ones), in layer order.
    pub fn moe_layers(&self) -> Vec<Option<&AssembledLayer>> {
        self.layers
            .iter()
            .map(|l| match &l.mlp {
                DeviceMlp::Moe(m) => Some(&**m),
                DeviceMlp::Dense { .. } => None,
            })
            .collect()
    }

    /// Allocates a state for batches of `rows` rows (token ids 0 to start with; the caches
    /// zeroed).
    pub fn state(&self, rows: usize) -> Result<DeviceState, ModelError> {
        let c = &self.config;
        let dev = self.device;
        let a = |n: usize| dev.zeros::<f32>(n).map_err(dev_err);
        let a16 = |n: usize| dev.zeros::<bf16>(n).map_err(dev_err);
        let (h, d) = (c.hidden, c.head_dim);
        let kv = rows * self.capacity * c.kv_heads * d;
        let mut moe = Vec::with_capacity(self.layers.len());
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for l in &self.layers {
            moe.push(match &l.mlp {
                DeviceMlp::Moe(m) => Some(m.workspace(rows)?),
                DeviceMlp::Dense { .. } => None,
            });
            keys.push(a(kv)?);
            values.push(a(kv)?);
        }
        let inter = c.dense_intermediate;
        Ok(DeviceState {
            rows,
            x: a(rows * h)?,
            xb: a16(rows * h)?,
            qkv: a(rows * (c.heads + 2 * c.kv_heads) * d)?,
            q: a(rows * c.heads * d)?,
            attn: a16(rows * c.heads * d)?,
            delta: a(rows * h)?,
            gu: a(rows * 2 * inter)?,
            act: a16(rows * inter)?,
            keys,
            values,
            logits: a(rows * c.vocab)?,
            tokens: dev.zeros::<i32>(rows).map_err(dev_err)?,
            moe,
        })
    }

    fn linear(
        &self,
        x: &DeviceBuffer<bf16>,
        w: &DeviceBuffer<bf16>,
        y: &DeviceBuffer<f32>,
        rows: usize,
        n_in: usize,
        n_out: usize,
    ) -> Result<(), ModelError> {
        tiny_gemm::enqueue(&self.gemm, x, w, y, rows, n_in, n_out).map_err(MoeError::from)?;
        Ok(())
    }

    /// `dec_add_rms_norm`: `x += delta + bias` (when `add`), then `xb = bf16(norm(x) ⊙ w)`.
    fn add_norm(
        &self,
        st: &DeviceState,
        bias: &DeviceBuffer<f32>,
        w: &DeviceBuffer<f32>,
        add: bool,
    ) -> Result<(), ModelError> {
        let c = &self.config;
        self.dec.launch(
            "dec_add_rms_norm",
            LaunchConfig::blocks(st.rows as u32, DEC_THREADS as u32),
            &args![
                &st.x,
                &st.delta,
                bias,
                w,
                &st.xb,
                c.hidden as i32,
                c.rms_eps,
                add as i32
            ],
        )?;
        Ok(())
    }

    // ANCHOR: step
    /// Queues one decode step of the state's B rows at position `pos` (each row's cache holds
    /// positions `0..pos`): the state's token ids in, the logits and the greedy token ids out
    /// (into the same ids buffer, so that the next step reads them). Only the kernels of `parts`
    /// are launched (the bench times each part alone); [`Self::step`] launches them all. Only
    /// launches: a CUDA graph can capture it.
    pub fn enqueue_parts(
        &self,
        st: &DeviceState,
        pos: usize,
        parts: &[Part],
    ) -> Result<(), ModelError> {
        let c = &self.config;
        if pos >= self.capacity {
            return Err(ModelError::Layer(MoeError::Config {
                field: "position",
                expected: format!("below the KV cache's capacity ({})", self.capacity),
                found: pos.to_string(),
            }));
        }
        let on = |p: Part| parts.contains(&p);
        let (b, h, d) = (st.rows, c.hidden, c.head_dim);
        let (nh, kvh) = (c.heads, c.kv_heads);
        let width = (nh + 2 * kvh) * d;
        if on(Part::Embed) {
            self.dec.launch(
                "dec_embed",
                LaunchConfig::blocks(b as u32, DEC_THREADS as u32),
                &args![&self.embed, &st.tokens, &st.x, h as i32],
            )?;
        }
        for (l, layer) in self.layers.iter().enumerate() {
            if on(Part::Norms) {
                // The MLP output of the layer before joins the residual here.
                self.add_norm(st, &self.zeros, &layer.input_norm, l > 0)?;
            }
            if on(Part::QkvProj) {
                self.linear(&st.xb, &layer.wqkv, &st.qkv, b, h, width)?;
            }
            if on(Part::Attention) {
                let per_head = |heads: usize| LaunchConfig {
                    grid: (heads as u32, b as u32, 1),
                    block: (DEC_HEAD_THREADS as u32, 1, 1),
                    shared_bytes: 0,
                    dependent: false,
                };
                self.dec.launch(
                    "dec_qkv",
                    per_head(nh + 2 * kvh),
                    &args![
                        &st.qkv,
                        &layer.qkv_bias,
                        &layer.q_norm,
                        &layer.k_norm,
                        &self.cos,
                        &self.sin,
                        &st.q,
                        &st.keys[l],
                        &st.values[l],
                        pos as i32,
                        nh as i32,
                        kvh as i32,
                        d as i32,
                        c.rotary_dim as i32,
                        self.capacity as i32,
                        c.rms_eps,
                        c.qk_norm as i32
                    ],
                )?;
                self.dec.launch(
                    "dec_attention",
                    per_head(nh),
                    &args![
                        &st.q,
                        &st.keys[l],
                        &st.values[l],
                        &st.attn,
                        (pos + 1) as i32,
                        nh as i32,
                        kvh as i32,
                        d as i32,
                        self.capacity as i32
                    ],
                )?;
            }
            if on(Part::OProj) {
                self.linear(&st.attn, &layer.wo, &st.delta, b, nh * d, h)?;
            }
            if on(Part::Norms) {
                self.add_norm(st, &layer.o_bias, &layer.post_norm, true)?;
            }
            match (&layer.mlp, &st.moe[l]) {
                (DeviceMlp::Moe(m), Some(ws)) if on(Part::Moe) => {
                    m.enqueue(ws, &st.xb, &st.delta)?;
                }
                (
                    DeviceMlp::Dense {
                        gate_up,
                        down,
                        inter,
                    },
                    _,
                ) if on(Part::DenseMlp) => {
                    self.linear(&st.xb, gate_up, &st.gu, b, h, 2 * inter)?;
                    self.dec.launch(
                        "dec_silu_mul",
                        LaunchConfig::blocks(b as u32, DEC_THREADS as u32),
                        &args![&st.gu, &st.act, *inter as i32],
                    )?;
                    self.linear(&st.act, down, &st.delta, b, *inter, h)?;
                }
                _ => {}
            }
        }
        if on(Part::Norms) {
            self.add_norm(st, &self.zeros, &self.norm, true)?;
        }
        if on(Part::LmHead) {
            self.linear(&st.xb, &self.lm_head, &st.logits, b, h, c.vocab)?;
            self.dec.launch(
                "dec_argmax",
                LaunchConfig::blocks(b as u32, DEC_THREADS as u32),
                &args![&st.logits, &st.tokens, c.vocab as i32],
            )?;
        }
        Ok(())
    }
    // ANCHOR_END: step

    /// Queues the whole step ([`Self::enqueue_parts`] with every part).
    pub fn step(&self, st: &DeviceState, pos: usize) -> Result<(), ModelError> {
        self.enqueue_parts(st, pos, &PARTS)
    }

    /// Greedy decoding of one sequence: the prompt one position at a time (a decode step each),
    /// then `n - 1` more steps, each fed the last step's greedy token on the device. Returns the
    /// `n` tokens and, for each, the logits `[V]` it is the argmax of.
    pub fn generate(
        &self,
        prompt: &[u32],
        n: usize,
    ) -> Result<(Vec<u32>, Vec<Vec<f32>>), ModelError> {
        self.teacher_forced(prompt, &[], n)
    }

    /// As [`Self::generate`], but the first `forced.len()` generated positions are fed `forced`
    /// instead of the model's own choices (the logits then follow a given continuation, such as
    /// transformers'). Returns the greedy tokens and the logits of each of the `n` steps.
    pub fn teacher_forced(
        &self,
        prompt: &[u32],
        forced: &[u32],
        n: usize,
    ) -> Result<(Vec<u32>, Vec<Vec<f32>>), ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let vocab = self.config.vocab;
        let mut st = self.state(1)?;
        let (mut tokens, mut logits) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let steps = prompt.len() + n.saturating_sub(1);
        for pos in 0..steps.min(self.capacity) {
            if pos < prompt.len() {
                st.set_tokens(&prompt[pos..pos + 1], vocab)?;
            } else if let Some(&t) = forced.get(pos - prompt.len()) {
                st.set_tokens(&[t], vocab)?;
            }
            self.step(&st, pos)?;
            if pos + 1 >= prompt.len() {
                tokens.push(st.tokens()?[0]);
                logits.push(st.logits()?);
            }
        }
        if tokens.len() < n {
            return Err(ModelError::Layer(MoeError::Config {
                field: "the KV cache's capacity",
                expected: format!("at least {steps} positions"),
                found: self.capacity.to_string(),
            }));
        }
        Ok((tokens, logits))
    }
}
