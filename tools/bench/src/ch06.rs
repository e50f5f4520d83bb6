//! Chapter 6: the assembled layer (chapter 5's router → chapter 3's align → chapter 4's experts,
//! one enqueue) at chapter 4's token counts, on two families' routers:
//!
//! | impl | what is timed | floor's bytes and FLOPs |
//! |---|---|---|
//! | `layer` | [`AssembledLayer::enqueue`]: bf16 hidden states in, the layer's output out (with its per-launch steps) | the gate and the weights of the experts its routing touches; the router's and the experts' FLOPs |
//! | `layer_bf16y` | the same with the experts' y in bf16 (`FusedDevice::with_bf16_y`, the engines' rounding) | the same |
//! | `router` | chapter 5's pair alone, its logits GEMM chosen as the layer chooses it | the gate and the hidden states read; the gate GEMM's FLOPs |
//! | `experts` | chapter 4's experts alone, on the routing the layer's router made, from the same bf16 input | the weights of the experts touched; the experts' FLOPs |
//!
//! The engines' pipeline is measured in the same GPU session by chapters 4 and 5's benches (the
//! Triton experts on chapter 4's routings, cuBLAS + the Triton router at chapter 5's rows): the
//! book's chapter 6 figures join the three CSVs.
//!
//! ```text
//! tools/bench/run ch06 [--out-dir D] [--quick]
//! ```
//!
//! Without a GPU, `--quick` builds and runs every case once on the emulator at a tiny shape (a
//! smoke test of this file; nothing is timed).

use crate::cases::{self, Case, Session, Work};
use crate::ch01::bias;
use crate::common::{write, GpuArgs};
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use ch01_router::Routing;
use ch02_grouped::MoeConfig;
use ch04_fused_moe::device::Hidden;
use ch04_fused_moe::{FusedDevice, FusedWorkspace};
use ch05_fused_router::FusedRouter;
use ch06_layer::{AssembledLayer, LayerWorkspace};
use half::bf16;
use moe_kernels::{BackendKind, Device, DeviceBuffer};
use moe_tools::bench_row::{BenchRow, StepRow, STEP_COLUMNS};
use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::rc::Rc;

/// One shape of the chapter: chapter 4's expert sizes with its family's router.
pub struct Shape {
    pub name: &'static str,
    pub hidden: usize,
    pub intermediate: usize,
    pub experts: usize,
    pub k: usize,
    pub router: fn(usize) -> RouterConfig,
    /// A selection bias (chapter 1's bench's, [`bias`]).
    pub bias: bool,
}

impl Shape {
    pub fn config(&self) -> MoeConfig {
        MoeConfig {
            hidden: self.hidden,
            intermediate: self.intermediate,
            experts: self.experts,
            router: (self.router)(self.k),
            shared: None,
        }
    }
}

/// Qwen3-30B-A3B (softmax over 128 experts, renormalised) and the GLM-like shape (sigmoid +
/// bias over 288, GLM-5.3-Flash's router from the router article): chapter 4's two shapes, named
/// as chapter 4's CSV names them.
pub const SHAPES: [Shape; 2] = [
    Shape {
        name: "qwen3_h2048_i768_e128_k8",
        hidden: 2048,
        intermediate: 768,
        experts: 128,
        k: 8,
        router: RouterConfig::qwen3,
        bias: false,
    },
    Shape {
        name: "glm_h4096_i1024_e288_k8",
        hidden: 4096,
        intermediate: 1024,
        experts: 288,
        k: 8,
        router: RouterConfig::glm5,
        bias: true,
    },
];

/// The emulator's smoke test: one small layer of each family.
pub(crate) const TINY: [Shape; 2] = [
    Shape {
        name: "tiny_qwen",
        hidden: 64,
        intermediate: 32,
        experts: 16,
        k: 4,
        router: RouterConfig::qwen3,
        bias: false,
    },
    Shape {
        name: "tiny_glm",
        hidden: 64,
        intermediate: 32,
        experts: 16,
        k: 4,
        router: RouterConfig::glm5,
        bias: true,
    },
];

/// Chapter 4's token counts.
pub const TOKENS: [usize; 5] = crate::ch04::TOKENS;
pub(crate) const TINY_TOKENS: [usize; 3] = [1, 8, 80];
/// Chapter 4's weight seed; the hidden states are chapter 2's (`HIDDEN_SALT + T`).
const SEED: u64 = crate::ch04::WEIGHT_SEED;

/// One layer per shape, built at its first case and shared by the shape's cases.
type LayerCell = Rc<OnceCell<Rc<AssembledLayer>>>;

fn layer_of(
    dev: &'static Device,
    shape: &Shape,
    cell: &LayerCell,
) -> Result<Rc<AssembledLayer>, String> {
    layer_of_y(dev, shape, cell, false)
}

/// [`layer_of`], its experts' y in bf16 when `bf16_y` ([`FusedDevice::with_bf16_y`]).
fn layer_of_y(
    dev: &'static Device,
    shape: &Shape,
    cell: &LayerCell,
    bf16_y: bool,
) -> Result<Rc<AssembledLayer>, String> {
    if let Some(l) = cell.get() {
        return Ok(l.clone());
    }
    let b = shape.bias.then(|| bias(shape.experts));
    let l = Rc::new(
        AssembledLayer::patterned_with_bias(dev, &shape.config(), SEED, b.as_deref())
            .and_then(|l| l.map_experts(|e| Ok(e.with_bf16_y(bf16_y))))
            .map_err(|e| e.to_string())?,
    );
    let _ = cell.set(l.clone());
    Ok(l)
}

pub(crate) fn hidden(
    dev: &'static Device,
    shape: &Shape,
    tokens: usize,
) -> Result<DeviceBuffer<bf16>, String> {
    let x: Vec<bf16> = patterned(
        tokens * shape.hidden,
        crate::ch04::HIDDEN_SALT + tokens as u64,
        1.0,
    )
    .into_iter()
    .map(bf16::from_f32)
    .collect();
    dev.upload(&x).map_err(|e| e.to_string())
}

/// A fresh layer of `shape` (chapter 4's weights, chapter 1's bias): for chapter 8's bench, which
/// times the layer beside its own.
pub(crate) fn new_layer(dev: &'static Device, shape: &Shape) -> Result<AssembledLayer, String> {
    let b = shape.bias.then(|| bias(shape.experts));
    AssembledLayer::patterned_with_bias(dev, &shape.config(), SEED, b.as_deref())
        .map_err(|e| e.to_string())
}

/// The layer's floor at `tokens` tokens, (bytes, FLOPs): the gate and the experts its routing
/// touches, the router's and the experts' FLOPs (the routing from one call of the layer).
pub(crate) fn layer_floor(
    dev: &'static Device,
    shape: &Shape,
    tokens: usize,
) -> Result<(f64, f64), String> {
    let layer = new_layer(dev, shape)?;
    let routing = routing_of(dev, &layer, shape, tokens)?;
    Ok((
        gate_bytes(shape, tokens) + touched_bytes(shape, &routing),
        gate_flops(shape, tokens) + expert_flops(shape, tokens),
    ))
}

/// The whole layer.
struct LayerWork {
    layer: Rc<AssembledLayer>,
    ws: LayerWorkspace,
    hidden: DeviceBuffer<bf16>,
    out: DeviceBuffer<f32>,
}

impl Work for LayerWork {
    fn enqueue(&self) -> Result<(), String> {
        self.layer
            .enqueue(&self.ws, &self.hidden, &self.out)
            .map_err(|e| e.to_string())
    }
}

/// Chapter 5's pair alone, as the layer runs it at this batch size.
struct RouterWork {
    router: FusedRouter,
    hidden: DeviceBuffer<bf16>,
    gate: DeviceBuffer<bf16>,
    bias: Option<DeviceBuffer<f32>>,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
}

impl Work for RouterWork {
    fn enqueue(&self) -> Result<(), String> {
        use ch01_router::chain::{DeviceMatrix, DeviceRouter, GateInputs, RouterOutputs};
        self.router
            .enqueue(
                &GateInputs {
                    hidden: DeviceMatrix::Bf16(&self.hidden),
                    weight: DeviceMatrix::Bf16(&self.gate),
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

/// Chapter 4's experts alone, on the routing the layer's router made.
struct ExpertsWork {
    layer: Rc<AssembledLayer>,
    ws: FusedWorkspace,
    hidden: DeviceBuffer<bf16>,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
}

impl Work for ExpertsWork {
    fn enqueue(&self) -> Result<(), String> {
        let experts: &FusedDevice = self.layer.experts_layer();
        experts
            .enqueue_experts_from(
                &self.ws,
                Hidden::Bf16(&self.hidden),
                &self.ids,
                &self.weights,
                &self.out,
            )
            .map_err(|e| e.to_string())
    }
}

/// The layer's routing of `tokens` tokens, from one call of the whole layer.
fn routing_of(
    dev: &'static Device,
    layer: &AssembledLayer,
    shape: &Shape,
    tokens: usize,
) -> Result<Routing, String> {
    let e = |e: ch02_grouped::MoeError| e.to_string();
    let ws = layer.workspace(tokens).map_err(e)?;
    let x = hidden(dev, shape, tokens)?;
    let out = dev
        .alloc::<f32>(tokens * shape.hidden)
        .map_err(|e| e.to_string())?;
    layer.enqueue(&ws, &x, &out).map_err(e)?;
    ws.routing(shape.k).map_err(e)
}

pub(crate) fn gate_flops(shape: &Shape, tokens: usize) -> f64 {
    2.0 * (tokens * shape.hidden * shape.experts) as f64
}

pub(crate) fn gate_bytes(shape: &Shape, tokens: usize) -> f64 {
    (2 * (shape.experts + tokens) * shape.hidden + if shape.bias { 4 * shape.experts } else { 0 })
        as f64
}

fn expert_flops(shape: &Shape, tokens: usize) -> f64 {
    let (h, i) = (shape.hidden as f64, shape.intermediate as f64);
    2.0 * (tokens * shape.k) as f64 * 3.0 * i * h
}

fn touched_bytes(shape: &Shape, routing: &Routing) -> f64 {
    let active = routing.ids.iter().collect::<BTreeSet<_>>().len();
    (active * 3 * shape.intermediate * shape.hidden * 2) as f64
}

/// The three cases of every shape and token count (the routing of each token count computed
/// once here, on `dev`, for the floors).
fn cases(
    dev: &'static Device,
    shapes: &'static [Shape],
    tokens: &[usize],
) -> Result<Vec<Case>, String> {
    let mut v = Vec::new();
    for shape in shapes {
        let cell: LayerCell = Rc::new(OnceCell::new());
        let cell_y: LayerCell = Rc::new(OnceCell::new());
        let layer = layer_of(dev, shape, &cell)?;
        for &t in tokens {
            let routing = Rc::new(routing_of(dev, &layer, shape, t)?);
            let touched = touched_bytes(shape, &routing);
            let (gb, gf, ef) = (
                gate_bytes(shape, t),
                gate_flops(shape, t),
                expert_flops(shape, t),
            );
            let whole = (gb + touched, gf + ef);
            v.push(layer_case(shape, t, cell.clone(), false, whole));
            v.push(layer_case(shape, t, cell_y.clone(), true, whole));
            let c = cell.clone();
            v.push(Case {
                chapter: "ch06",
                shape: shape.name,
                imp: "router",
                rows: t,
                bytes: gb + (8 * t * shape.k) as f64,
                read_bytes: gb,
                flops: gf,
                steps: false,
                build: Box::new(move |dev| {
                    let layer = layer_of(dev, shape, &c)?;
                    let config = shape.config();
                    let b = shape.bias.then(|| bias(shape.experts));
                    let router = FusedRouter::with_logits(
                        dev,
                        &config.router,
                        ch01_router::chain::GateShape {
                            rows: t,
                            hidden: shape.hidden,
                            experts: shape.experts,
                        },
                        b.as_deref(),
                        layer.logits_for(t),
                    )
                    .map_err(|e| e.to_string())?;
                    let gate: Vec<bf16> = ch04_fused_moe::fill::router_gate(&config, SEED)
                        .into_iter()
                        .map(bf16::from_f32)
                        .collect();
                    let e = |e: moe_kernels::KernelError| e.to_string();
                    Ok(Box::new(RouterWork {
                        router,
                        hidden: hidden(dev, shape, t)?,
                        gate: dev.upload(&gate).map_err(e)?,
                        bias: match b {
                            Some(b) => Some(dev.upload(&b).map_err(e)?),
                            None => None,
                        },
                        ids: dev.alloc(t * shape.k).map_err(e)?,
                        weights: dev.alloc(t * shape.k).map_err(e)?,
                    }) as Box<dyn Work>)
                }),
            });
            let c = cell.clone();
            v.push(Case {
                chapter: "ch06",
                shape: shape.name,
                imp: "experts",
                rows: t,
                bytes: touched,
                read_bytes: touched,
                flops: ef,
                steps: false,
                build: Box::new(move |dev| {
                    let layer = layer_of(dev, shape, &c)?;
                    let ws = layer
                        .experts_layer()
                        .workspace(t)
                        .map_err(|e| e.to_string())?;
                    let ids: Vec<i32> = routing.ids.iter().map(|&i| i as i32).collect();
                    let e = |e: moe_kernels::KernelError| e.to_string();
                    Ok(Box::new(ExpertsWork {
                        layer,
                        ws,
                        hidden: hidden(dev, shape, t)?,
                        ids: dev.upload(&ids).map_err(e)?,
                        weights: dev.upload(&routing.weights).map_err(e)?,
                        out: dev.alloc(t * shape.hidden).map_err(e)?,
                    }) as Box<dyn Work>)
                }),
            });
        }
    }
    Ok(v)
}

/// The whole layer (`layer`), or with its experts' y in bf16 (`layer_bf16y`: the engines'
/// rounding of y, the like-for-like peer of their pipeline); only the first has its steps
/// timed (the steps' CSV names no variant). `(bytes, flops)`: the floor's.
fn layer_case(
    shape: &'static Shape,
    t: usize,
    cell: LayerCell,
    bf16_y: bool,
    (bytes, flops): (f64, f64),
) -> Case {
    Case {
        chapter: "ch06",
        shape: shape.name,
        imp: if bf16_y { "layer_bf16y" } else { "layer" },
        rows: t,
        bytes,
        read_bytes: bytes,
        flops,
        steps: !bf16_y,
        build: Box::new(move |dev| {
            let layer = layer_of_y(dev, shape, &cell, bf16_y)?;
            let ws = layer.workspace(t).map_err(|e| e.to_string())?;
            Ok(Box::new(LayerWork {
                layer,
                ws,
                hidden: hidden(dev, shape, t)?,
                out: dev.alloc(t * shape.hidden).map_err(|e| e.to_string())?,
            }) as Box<dyn Work>)
        }),
    }
}

/// The layer's output equals its experts' output on its own routing, bit for bit (the same
/// kernels on the same input): the bench's check that the parts it times are the layer's.
fn check_parts(
    dev: &'static Device,
    shapes: &'static [Shape],
    tokens: &[usize],
) -> Result<(), String> {
    let e = |e: ch02_grouped::MoeError| e.to_string();
    let k = |e: moe_kernels::KernelError| e.to_string();
    for shape in shapes {
        let layer = layer_of(dev, shape, &Rc::new(OnceCell::new()))?;
        for &t in tokens {
            let ws = layer.workspace(t).map_err(e)?;
            let x = hidden(dev, shape, t)?;
            let whole = dev.alloc::<f32>(t * shape.hidden).map_err(k)?;
            layer.enqueue(&ws, &x, &whole).map_err(e)?;
            let routing = ws.routing(shape.k).map_err(e)?;
            let ids: Vec<i32> = routing.ids.iter().map(|&i| i as i32).collect();
            let (ids, weights) = (
                dev.upload(&ids).map_err(k)?,
                dev.upload(&routing.weights).map_err(k)?,
            );
            let parts = dev.alloc::<f32>(t * shape.hidden).map_err(k)?;
            let experts = layer.experts_layer();
            let ews = experts.workspace(t).map_err(e)?;
            experts
                .enqueue_experts_from(&ews, Hidden::Bf16(&x), &ids, &weights, &parts)
                .map_err(e)?;
            let (a, b) = (whole.to_vec().map_err(k)?, parts.to_vec().map_err(k)?);
            let differ = a
                .iter()
                .zip(&b)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            if differ > 0 || a.iter().any(|v| !v.is_finite()) {
                return Err(format!(
                    "{} at {t} tokens: the layer's output and its experts' on its routing differ in {differ} of {} values (or are not finite)",
                    shape.name,
                    a.len()
                ));
            }
        }
        eprintln!("bench ch06: {}: the layer's output is its experts' on its own routing, bit for bit, at {tokens:?} tokens", shape.name);
    }
    Ok(())
}

pub fn run(args: &GpuArgs) -> Result<(), String> {
    let quick = args.quick || cases::quick_from_env();
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    let (shapes, tokens): (&'static [Shape], &[usize]) = match dev.kind() {
        BackendKind::Cuda => (&SHAPES, &TOKENS),
        BackendKind::Emu if quick => (&TINY, &TINY_TOKENS),
        BackendKind::Emu => {
            return Err(format!(
                "bench ch06 measures on the GPU, and the backend is the emulator ({why}); \
                 --quick (or MOE_BENCH_QUICK=1) runs a smoke test of the same cases on the emulator"
            ))
        }
    };
    check_parts(dev, shapes, tokens)?;
    let cases = cases(dev, shapes, tokens)?;
    if dev.kind() == BackendKind::Emu {
        for c in &cases {
            let w = (c.build)(dev)?;
            w.enqueue()?;
        }
        println!(
            "bench ch06 --quick on the emulator: {} cases built and run once ({}); nothing timed",
            cases.len(),
            dev.describe()
        );
        return Ok(());
    }
    let session = Session::start(dev, quick)?;
    eprintln!("{}", session.describe());
    let (rows, steps): (Vec<BenchRow>, Vec<StepRow>) =
        session.run_all("ch06", "tokens", &cases, None)?;
    let out = &args.out_dir;
    let steps_csv: String = std::iter::once(STEP_COLUMNS.to_string())
        .chain(steps.iter().map(StepRow::to_csv))
        .map(|l| l + "\n")
        .collect();
    write(&out.join("ch06.csv"), &cases::csv(&rows))?;
    write(&out.join("ch06_steps.csv"), &steps_csv)?;
    write(&out.join("ch06_ceilings.csv"), &session.ceilings_csv())?;
    print!(
        "{}",
        cases::summary(
            &rows,
            &cases::SummaryLayout {
                shape_w: 26,
                rows_name: "tokens",
                rows_w: 6,
                imp_w: 12,
                tflops_digits: 1,
            }
        )
    );
    println!(
        "wrote ch06.csv, ch06_steps.csv and ch06_ceilings.csv in {}{}",
        out.display(),
        if quick {
            " (--quick: not numbers to publish)"
        } else {
            ""
        }
    );
    Ok(())
}
