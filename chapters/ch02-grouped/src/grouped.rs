//! The loop grouped by expert, on the CPU, with candle.
//!
//! Instead of running every token through its experts one by one, gather the tokens routed to
//! each expert into one matrix, multiply it by that expert's weights once (a GEMM instead of
//! `count` matrix-vector products, so each weight is read once per expert, not once per token),
//! and scatter-add the results back, times their weights. Same arithmetic as the engines'
//! bf16 path: f32 products and sums, with the values rounded to bf16 where a bf16 layer stores
//! them ([`crate::config::Dtype::Bf16`]).

use crate::config::{Dtype, MoeConfig};
use crate::error::MoeError;
use crate::layer::{experts_rows, rows_of, LayerOutput, MoeLayer};
use crate::plan::GroupPlan;
use crate::weights::MoeWeights;
use candle_core::{DType, Device, Tensor};
use ch01_router::{ReferenceRouter, Router, Routing};

/// The CPU grouped layer: weights as candle tensors, rounded to the compute type.
pub struct GroupedCpu {
    config: MoeConfig,
    dtype: Dtype,
    gate: Tensor,
    bias: Option<Tensor>,
    /// `[E, 2I, H]`
    w13: Tensor,
    /// `[E, H, I]`
    w2: Tensor,
    /// The shared expert's `w13` [2Is, H], `w2` [H, Is], gate [1, H].
    shared: Option<(Tensor, Tensor, Option<Tensor>)>,
}

/// Rounds an f32 tensor to what `dtype` holds (bf16: to nearest even), keeping it f32.
fn round(t: Tensor, dtype: Dtype) -> candle_core::Result<Tensor> {
    match dtype {
        Dtype::F32 => Ok(t),
        Dtype::Bf16 => t.to_dtype(DType::BF16)?.to_dtype(DType::F32),
    }
}

/// One SwiGLU MLP on the rows of `x` [n, H]: `w13` [2I, H], `w2` [H, I] → [n, H] f32, with
/// the `[gate | up]` output and the activation rounded to `dtype`.
fn swiglu(x: &Tensor, w13: &Tensor, w2: &Tensor, dtype: Dtype) -> candle_core::Result<Tensor> {
    let inter = w2.dim(1)?;
    let gate_up = round(x.matmul(&w13.t()?)?, dtype)?; // [n, 2I]
    let g = gate_up.narrow(1, 0, inter)?;
    let u = gate_up.narrow(1, inter, inter)?;
    let a = round((g.silu()? * u)?, dtype)?; // [n, I]
    a.matmul(&w2.t()?) // [n, H]
}

impl GroupedCpu {
    pub fn new(weights: &MoeWeights, dtype: Dtype) -> Result<Self, MoeError> {
        weights.validate()?;
        let w = weights.rounded(dtype);
        let c = &w.config;
        let (h, i, e) = (c.hidden, c.intermediate, c.experts);
        let cpu = &Device::Cpu;
        let shared = match (&c.shared, &w.shared) {
            (Some(s), Some(sw)) => Some((
                Tensor::from_slice(&sw.w13, (2 * s.intermediate, h), cpu)?,
                Tensor::from_slice(&sw.w2, (h, s.intermediate), cpu)?,
                match &sw.gate {
                    Some(g) => Some(Tensor::from_slice(g, (1, h), cpu)?),
                    None => None,
                },
            )),
            _ => None,
        };
        Ok(GroupedCpu {
            gate: Tensor::from_slice(&w.gate, (e, h), cpu)?,
            bias: match &w.bias {
                Some(b) => Some(Tensor::from_slice(b, e, cpu)?),
                None => None,
            },
            w13: Tensor::from_slice(&w.w13, (e, 2 * i, h), cpu)?,
            w2: Tensor::from_slice(&w.w2, (e, h, i), cpu)?,
            shared,
            config: weights.config.clone(),
            dtype,
        })
    }

    // ANCHOR: grouped_cpu
    fn experts_tensors(
        &self,
        hidden: &[f32],
        rows: usize,
        routing: &Routing,
    ) -> Result<Tensor, MoeError> {
        let c = &self.config;
        let cpu = &Device::Cpu;
        let x = round(
            Tensor::from_slice(hidden, (rows, c.hidden), cpu)?,
            self.dtype,
        )?;
        let plan = GroupPlan::new(routing, c.experts)?;
        let mut out = Tensor::zeros((rows, c.hidden), DType::F32, cpu)?;
        for e in plan.active_experts() {
            let slots = plan.offsets[e]..plan.offsets[e + 1];
            // The tokens routed to expert e, and their weights, in slot order.
            let tokens: Vec<u32> = plan.token_of[slots.clone()]
                .iter()
                .map(|&t| t as u32)
                .collect();
            let weights: Vec<f32> = plan.pair_of[slots.clone()]
                .iter()
                .map(|&p| routing.weights[p])
                .collect();
            let idx = Tensor::from_vec(tokens, slots.len(), cpu)?;
            let xs = x.index_select(&idx, 0)?; // gather: [n_e, H]
            let y = swiglu(&xs, &self.w13.get(e)?, &self.w2.get(e)?, self.dtype)?; // [n_e, H]
            let wt = Tensor::from_vec(weights, (slots.len(), 1), cpu)?;
            out = out.index_add(&idx, &y.broadcast_mul(&wt)?, 0)?; // weighted scatter-add
        }
        if let Some((w13, w2, gate)) = &self.shared {
            let mut y = swiglu(&x, w13, w2, self.dtype)?; // every token
            if let Some(g) = gate {
                let s = (x.matmul(&g.t()?)?.neg()?.exp()? + 1.0)?.recip()?; // σ: [T, 1]
                y = y.broadcast_mul(&s)?;
            }
            out = (out + y)?;
        }
        Ok(out)
    }
    // ANCHOR_END: grouped_cpu
}

impl MoeLayer for GroupedCpu {
    fn name(&self) -> &'static str {
        "grouped-cpu"
    }
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn config(&self) -> &MoeConfig {
        &self.config
    }

    fn experts(&self, hidden: &[f32], routing: &Routing) -> Result<Vec<f32>, MoeError> {
        let rows = experts_rows(&self.config, hidden, routing)?;
        if rows == 0 {
            return Ok(Vec::new());
        }
        Ok(self
            .experts_tensors(hidden, rows, routing)?
            .flatten_all()?
            .to_vec1::<f32>()?)
    }

    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError> {
        let c = &self.config;
        let rows = rows_of(&self.config, hidden)?;
        let x = Tensor::from_slice(hidden, (rows, c.hidden), &Device::Cpu)?;
        let logits = x.matmul(&self.gate.t()?)?; // [T, E] f32
        let routing = ReferenceRouter {
            config: c.router.clone(),
        }
        .route(&logits, self.bias.as_ref())?;
        let out = self.experts(hidden, &routing)?;
        Ok(LayerOutput { routing, out })
    }
}
