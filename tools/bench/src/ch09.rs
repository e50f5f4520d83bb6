//! Chapter 9: the one-launch router along the row axis, beside every router of Parts I and II
//! that gives the experts their layout, and the layer with it beside chapter 6's layer.
//!
//! | impl | what is timed | launches |
//! |---|---|---|
//! | `one_launch` | [`OneLaunch::enqueue`]: bf16 hidden states and gate in, ids, weights and the layout out | 1 |
//! | `pair_align` | chapter 6's router (tiny GEMM or cuBLAS by row count, chapter 5's fused router), then chapter 3's align | 3 or 4 |
//! | `gemm_stage` | the same logits GEMM (the tiny GEMM or cuBLAS), then chapter 8's stage | 2 or 3 |
//! | `layer_one_launch` | [`OneLaunchLayer::enqueue`] at chapter 4's token counts | |
//!
//! The floor of every router row is one launch and one cold read of the gate weight (and the
//! hidden states): the issue's "≤ 1.15× the floor at one row".
//!
//! ```text
//! tools/bench/run ch09 [--out-dir D] [--quick]
//! ```

use crate::cases::{self, Case, Work, WorkFn};
use crate::ch01::bias;
use crate::ch06::{self, Shape};
use crate::common::GpuArgs;
use ch01_router::chain::{DeviceMatrix, DeviceRouter, GateInputs, GateShape, RouterOutputs};
use ch03_align::choose_block_m;
use ch03_align::device::{AlignBuffers, DeviceAlign};
use ch05_fused_router::{tiny_gemm, FusedRouter, LogitsFrom};
use ch06_layer::logits_for;
use ch08_routing_stage::{RoutingStage, StageBuffers};
use ch09_one_launch::{OneLaunch, OneLaunchLayer};
use half::bf16;
use moe_kernels::blas::{linear, Linear};
use moe_kernels::{BackendKind, Device, DeviceBuffer};

/// Chapter 8's row axis.
pub const ROWS: [usize; 16] = crate::ch08::ROWS;
const TINY_ROWS: [usize; 3] = [1, 6, 40];

/// The inputs every router of a case reads: bf16 hidden states (chapter 6's), the bf16 gate
/// (chapter 4's fill), the bias.
struct Inputs {
    hidden: DeviceBuffer<bf16>,
    gate: DeviceBuffer<bf16>,
    bias: Option<DeviceBuffer<f32>>,
}

fn inputs(dev: &'static Device, shape: &Shape, rows: usize) -> Result<Inputs, String> {
    let k = |e: moe_kernels::KernelError| e.to_string();
    let gate: Vec<bf16> =
        ch04_fused_moe::fill::router_gate(&shape.config(), crate::ch04::WEIGHT_SEED)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
    Ok(Inputs {
        hidden: ch06::hidden(dev, shape, rows)?,
        gate: dev.upload(&gate).map_err(k)?,
        bias: shape
            .bias
            .then(|| dev.upload(&bias(shape.experts)))
            .transpose()
            .map_err(k)?,
    })
}

fn gate_shape(shape: &Shape, rows: usize) -> GateShape {
    GateShape {
        rows,
        hidden: shape.hidden,
        experts: shape.experts,
    }
}

enum RouterWork {
    One(OneLaunch, StageBuffers, Inputs),
    PairAlign(
        Box<(FusedRouter, DeviceAlign, AlignBuffers)>,
        DeviceBuffer<i32>,
        DeviceBuffer<f32>,
        Inputs,
    ),
    GemmStage(Box<GemmStage>, StageBuffers, Inputs),
}

fn gate_inputs(i: &Inputs) -> GateInputs<'_> {
    GateInputs {
        hidden: DeviceMatrix::Bf16(&i.hidden),
        weight: DeviceMatrix::Bf16(&i.gate),
        bias: i.bias.as_ref(),
    }
}

impl Work for RouterWork {
    fn enqueue(&self) -> Result<(), String> {
        let s = |e: &dyn std::fmt::Display| e.to_string();
        match self {
            RouterWork::One(r, out, i) => r
                .enqueue(&i.hidden, &i.gate, i.bias.as_ref(), out)
                .map_err(|e| s(&e)),
            RouterWork::PairAlign(b, ids, weights, i) => {
                let (router, align, layout) = &**b;
                router
                    .enqueue(&gate_inputs(i), &RouterOutputs { ids, weights })
                    .map_err(|e| s(&e))?;
                align.enqueue(ids, layout).map_err(|e| s(&e))
            }
            RouterWork::GemmStage(g, out, i) => {
                g.gemm(i)?;
                g.stage
                    .enqueue(&g.logits, i.bias.as_ref(), out)
                    .map_err(|e| s(&e))
            }
        }
    }
}

/// Chapter 6's logits GEMM for the row count (the tiny GEMM or cuBLAS), then chapter 8's stage.
struct GemmStage {
    dev: &'static Device,
    tiny: std::sync::Arc<moe_kernels::Module>,
    from: LogitsFrom,
    shape: GateShape,
    logits: DeviceBuffer<f32>,
    stage: RoutingStage,
}

impl GemmStage {
    fn gemm(&self, i: &Inputs) -> Result<(), String> {
        let GateShape {
            rows,
            hidden: h,
            experts: e,
        } = self.shape;
        match self.from {
            LogitsFrom::TinyGemm => {
                tiny_gemm::enqueue(&self.tiny, &i.hidden, &i.gate, &self.logits, rows, h, e)
                    .map_err(|x| x.to_string())
            }
            LogitsFrom::Blas => linear(
                self.dev,
                Linear {
                    rows,
                    in_features: h,
                    out_features: e,
                },
                &i.hidden.as_view(),
                &i.gate.as_view(),
                &self.logits.as_view(),
                false,
            )
            .map_err(|x| x.to_string()),
        }
    }
}

fn router_case(shape: &'static Shape, rows: usize, imp: &'static str) -> Case {
    let read = ch06::gate_bytes(shape, rows);
    Case {
        chapter: "ch09",
        shape: shape.name,
        imp,
        rows,
        bytes: read + (8 * rows * shape.k) as f64,
        read_bytes: read,
        flops: ch06::gate_flops(shape, rows),
        steps: false,
        build: Box::new(move |dev| {
            let e = |e: &dyn std::fmt::Display| e.to_string();
            let config = shape.config().router;
            let b = shape.bias.then(|| bias(shape.experts));
            let (p, bm) = (
                rows * shape.k,
                choose_block_m(rows * shape.k, shape.experts),
            );
            let i = inputs(dev, shape, rows)?;
            let from = logits_for(rows, shape.hidden, shape.experts);
            let pair = || {
                FusedRouter::with_logits(dev, &config, gate_shape(shape, rows), b.as_deref(), from)
                    .map_err(|x| e(&x))
            };
            let k = |x: moe_kernels::KernelError| x.to_string();
            Ok(Box::new(match imp {
                "one_launch" => {
                    let r = OneLaunch::new(dev, &config, gate_shape(shape, rows), bm, b.as_deref())
                        .map_err(|x| e(&x))?;
                    let out = r.alloc_outputs(dev).map_err(|x| e(&x))?;
                    RouterWork::One(r, out, i)
                }
                "pair_align" => {
                    let align = DeviceAlign::new(dev, p, shape.experts, bm).map_err(|x| e(&x))?;
                    let layout = align.alloc_outputs(dev).map_err(|x| e(&x))?;
                    RouterWork::PairAlign(
                        Box::new((pair()?, align, layout)),
                        dev.alloc(p).map_err(k)?,
                        dev.alloc(p).map_err(k)?,
                        i,
                    )
                }
                _ => {
                    let stage =
                        RoutingStage::new(dev, &config, rows, shape.experts, bm, b.as_deref())
                            .map_err(|x| e(&x))?;
                    let out = stage.alloc_outputs(dev).map_err(|x| e(&x))?;
                    let g = GemmStage {
                        dev,
                        tiny: dev.load(&tiny_gemm::KERNELS).map_err(k)?,
                        from,
                        shape: gate_shape(shape, rows),
                        logits: dev.alloc(rows * shape.experts).map_err(k)?,
                        stage,
                    };
                    RouterWork::GemmStage(Box::new(g), out, i)
                }
            }) as Box<dyn Work>)
        }),
    }
}

fn layer_case(shape: &'static Shape, t: usize, (bytes, flops): (f64, f64)) -> Case {
    Case {
        chapter: "ch09",
        shape: shape.name,
        imp: "layer_one_launch",
        rows: t,
        bytes,
        read_bytes: bytes,
        flops,
        steps: false,
        build: Box::new(move |dev| {
            let e = |e: ch02_grouped::MoeError| e.to_string();
            let l = OneLaunchLayer::new(ch06::new_layer(dev, shape)?);
            let ws = l.workspace(t).map_err(e)?;
            let x = ch06::hidden(dev, shape, t)?;
            let out = dev
                .alloc::<f32>(t * shape.hidden)
                .map_err(|e| e.to_string())?;
            Ok(Box::new(WorkFn(move || l.enqueue(&ws, &x, &out).map_err(e))) as Box<dyn Work>)
        }),
    }
}

pub fn run(args: &GpuArgs) -> Result<(), String> {
    let quick = args.quick || cases::quick_from_env();
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    let (shapes, rows, tokens): (&'static [Shape], &[usize], &[usize]) = match dev.kind() {
        BackendKind::Cuda => (&ch06::SHAPES, &ROWS, &ch06::TOKENS),
        BackendKind::Emu if quick => (&ch06::TINY, &TINY_ROWS, &ch06::TINY_TOKENS),
        BackendKind::Emu => return Err(cases::emulator_refusal("ch09", &why)),
    };
    let mut cases = Vec::new();
    for shape in shapes {
        for &r in rows {
            for imp in ["one_launch", "pair_align", "gemm_stage"] {
                cases.push(router_case(shape, r, imp));
            }
        }
        for &t in tokens {
            cases.push(layer_case(shape, t, ch06::layer_floor(dev, shape, t)?));
        }
    }
    cases::time_or_smoke(dev, quick, "ch09", "rows", &cases, &args.out_dir)
}
