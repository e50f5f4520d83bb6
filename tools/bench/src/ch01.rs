//! Chapter 1's cases: the five-line chain of plain kernels at the router article's GLM shape and
//! at Qwen3-30B-A3B's, from one decode token to a prefill chunk.

use crate::cases::{Case, Work};
use ch01_router::chain::{
    DeviceMatrix, DeviceRouter, FiveLineChain, GateInputs, GateShape, RouterOutputs,
};
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use moe_kernels::{Device, DeviceBuffer};

/// One benchmarked router shape.
pub struct Shape {
    pub name: &'static str,
    pub hidden: usize,
    pub experts: usize,
    pub config: fn() -> RouterConfig,
    pub bias: bool,
}

pub const SHAPES: [Shape; 2] = [
    // GLM-5.3-Flash's router (the router article): sigmoid + selection bias, 288 experts, k = 8.
    Shape {
        name: "glm_h4096_e288_k8",
        hidden: 4096,
        experts: 288,
        config: || RouterConfig::glm5(8),
        bias: true,
    },
    // Qwen3-30B-A3B's router: softmax over 128 experts, k = 8, renormalised.
    Shape {
        name: "qwen3_h2048_e128_k8",
        hidden: 2048,
        experts: 128,
        config: || RouterConfig::qwen3(8),
        bias: false,
    },
];

/// One decode token; one request verifying 6 speculative tokens; 16 rows; 16 such requests; a
/// prefill chunk.
pub const ROWS: [usize; 5] = [1, 6, 16, 96, 8192];

struct ChainWork {
    chain: FiveLineChain,
    hidden: DeviceBuffer<f32>,
    weight: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
}

impl Work for ChainWork {
    fn enqueue(&self) -> Result<(), String> {
        self.chain
            .enqueue(
                &GateInputs {
                    hidden: DeviceMatrix::F32(&self.hidden),
                    weight: DeviceMatrix::F32(&self.weight),
                    bias: self.bias.as_ref(),
                },
                &RouterOutputs {
                    ids: &self.ids,
                    weights: &self.weights,
                },
            )
            .map_err(|e| e.to_string())
    }
}

/// The bias every benchmarked sigmoid router uses: GLM-like, 8 ± 0.05.
pub fn bias(experts: usize) -> Vec<f32> {
    patterned(experts, 2, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect()
}

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for s in &SHAPES {
        for rows in ROWS {
            let (h, e, k) = (s.hidden, s.experts, (s.config)().k);
            // The fp32 five-line router must read hidden, gate weight and bias once, and write
            // ids and weights.
            let read = 4.0 * (rows * h + e * h + if s.bias { e } else { 0 }) as f64;
            let bytes = read + 8.0 * (rows * k) as f64;
            let (name, hidden, experts, config, with_bias) =
                (s.name, s.hidden, s.experts, s.config, s.bias);
            v.push(Case {
                chapter: "ch01",
                shape: name,
                imp: "chain",
                rows,
                bytes,
                read_bytes: read,
                flops: 2.0 * (rows * h * e) as f64,
                steps: true,
                build: Box::new(move |dev: &'static Device| {
                    let config = config();
                    let b = bias(experts);
                    let shape = GateShape {
                        rows,
                        hidden,
                        experts,
                    };
                    let chain =
                        FiveLineChain::new(dev, &config, shape, with_bias.then_some(&b[..]))
                            .map_err(|e| e.to_string())?;
                    let err = |e: moe_kernels::KernelError| e.to_string();
                    Ok(Box::new(ChainWork {
                        chain,
                        hidden: dev
                            .upload(&patterned(rows * hidden, 3 + rows as u64, 1.0))
                            .map_err(err)?,
                        weight: dev
                            .upload(&patterned(experts * hidden, 1, 0.02))
                            .map_err(err)?,
                        bias: if with_bias {
                            Some(dev.upload(&b).map_err(err)?)
                        } else {
                            None
                        },
                        ids: dev.alloc::<i32>(rows * config.k).map_err(err)?,
                        weights: dev.alloc::<f32>(rows * config.k).map_err(err)?,
                    }) as Box<dyn Work>)
                }),
            });
        }
    }
    v
}
