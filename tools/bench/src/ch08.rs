//! Chapter 8: the routing stage along the row axis, beside what it replaces, and the layer with
//! it beside chapter 6's layer.
//!
//! | impl | what is timed | floor's bytes |
//! |---|---|---|
//! | `stage` | [`RoutingStage::enqueue`] in the arrangement the chapter picks | the logits and the bias read, the outputs written |
//! | `stage_one_block`, `stage_two_launches` | the same in each arrangement (the one block up to 512 pairs) | the same |
//! | `pair_align` | chapter 5's fused router from the same logits (its own form for the row count), then chapter 3's align | the same |
//! | `layer_stage` | [`StagedLayer::enqueue`] with [`StagedLayer::stage_everywhere`], at chapter 4's token counts: the stage on every path, the decode path too (where the layer itself runs chapter 6's launches, so that there this line says what that rule saves) | chapter 6's `layer` floor |
//! | `layer_pair` | chapter 6's [`ch06_layer::AssembledLayer::enqueue`], in the same session | the same |
//!
//! The floor of the stage is one launch and a cold read of the logits: what the issue's "≤ 1.25×
//! the floor" compares with. BLOCK_M is chapter 3's rule for the pairs ([`choose_block_m`]).
//!
//! ```text
//! tools/bench/run ch08 [--out-dir D] [--quick]
//! ```
//!
//! Without a GPU, `--quick` builds and runs every case once on the emulator at small sizes, and
//! checks that the stage and the pair + align agree on each (nothing is timed).

use crate::cases::{self, Case, Work, WorkFn};
use crate::ch01::bias;
use crate::ch06::{self, Shape};
use crate::common::GpuArgs;
use ch01_router::chain::RouterOutputs;
use ch01_router::inputs::patterned;
use ch03_align::choose_block_m;
use ch03_align::device::{AlignBuffers, DeviceAlign};
use ch05_fused_router::FusedTopk;
use ch08_routing_stage::stage::{route_stage_as, StageBuffers};
use ch08_routing_stage::{
    arrangement_for, pair_then_align, Arrangement, RoutingStage, StagedLayer,
};
use moe_kernels::{BackendKind, Device, DeviceBuffer};

/// The row axis of the stage: every count the issue names (1 … 16, 96, 8,192) and the steps
/// between.
pub const ROWS: [usize; 16] = [
    1, 2, 4, 6, 8, 12, 16, 24, 32, 64, 96, 128, 512, 1024, 4096, 8192,
];
const TINY_ROWS: [usize; 4] = [1, 6, 40, 300];
/// The logits' salt: patterned logits of scale 3 (a sigmoid's working range), as chapter 5's.
const LOGITS_SALT: u64 = 0x0c08;

fn logits(dev: &'static Device, rows: usize, experts: usize) -> Result<DeviceBuffer<f32>, String> {
    dev.upload(&patterned(rows * experts, LOGITS_SALT + rows as u64, 3.0))
        .map_err(|e| e.to_string())
}

fn bias_of(dev: &'static Device, shape: &Shape) -> Result<Option<DeviceBuffer<f32>>, String> {
    shape
        .bias
        .then(|| dev.upload(&bias(shape.experts)))
        .transpose()
        .map_err(|e| e.to_string())
}

struct StageWork {
    stage: RoutingStage,
    logits: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
    out: StageBuffers,
}

impl Work for StageWork {
    fn enqueue(&self) -> Result<(), String> {
        self.stage
            .enqueue(&self.logits, self.bias.as_ref(), &self.out)
            .map_err(|e| e.to_string())
    }
}

struct PairWork {
    topk: FusedTopk,
    align: DeviceAlign,
    logits: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
    ids: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
    layout: AlignBuffers,
}

impl Work for PairWork {
    fn enqueue(&self) -> Result<(), String> {
        let outputs = RouterOutputs {
            ids: &self.ids,
            weights: &self.weights,
        };
        self.topk
            .enqueue(&self.logits, self.bias.as_ref(), &outputs)
            .map_err(|e| e.to_string())?;
        self.align
            .enqueue(&self.ids, &self.layout)
            .map_err(|e| e.to_string())
    }
}

/// The stage's floor: the logits and the bias read, the ids, weights and layout written.
fn stage_bytes(shape: &Shape, rows: usize) -> (f64, f64) {
    let (e, p) = (shape.experts, rows * shape.k);
    let bm = choose_block_m(p, e);
    let read = (4 * rows * e + if shape.bias { 4 * e } else { 0 }) as f64;
    let written = (8 * p + 4 * ch03_align::capacity(p, e, bm) + 4 * (2 * e + 2)) as f64;
    (read + written, read)
}

fn stage_case(
    shape: &'static Shape,
    rows: usize,
    imp: &'static str,
    a: Option<Arrangement>,
) -> Case {
    let (bytes, read_bytes) = stage_bytes(shape, rows);
    Case {
        chapter: "ch08",
        shape: shape.name,
        imp,
        rows,
        bytes,
        read_bytes,
        flops: 0.0,
        steps: false,
        build: Box::new(move |dev| {
            let config = shape.config().router;
            let bm = choose_block_m(rows * shape.k, shape.experts);
            let b = shape.bias.then(|| bias(shape.experts));
            let a = a.unwrap_or_else(|| arrangement_for(rows, shape.k));
            let stage = RoutingStage::with_arrangement(
                dev,
                &config,
                rows,
                shape.experts,
                bm,
                b.as_deref(),
                a,
            )
            .map_err(|e| e.to_string())?;
            Ok(Box::new(StageWork {
                out: stage.alloc_outputs(dev).map_err(|e| e.to_string())?,
                stage,
                logits: logits(dev, rows, shape.experts)?,
                bias: bias_of(dev, shape)?,
            }) as Box<dyn Work>)
        }),
    }
}

fn pair_case(shape: &'static Shape, rows: usize) -> Case {
    let (bytes, read_bytes) = stage_bytes(shape, rows);
    Case {
        chapter: "ch08",
        shape: shape.name,
        imp: "pair_align",
        rows,
        bytes,
        read_bytes,
        flops: 0.0,
        steps: false,
        build: Box::new(move |dev| {
            let config = shape.config().router;
            let (p, e) = (rows * shape.k, shape.experts);
            let b = shape.bias.then(|| bias(e));
            let k = |e: moe_kernels::KernelError| e.to_string();
            let align =
                DeviceAlign::new(dev, p, e, choose_block_m(p, e)).map_err(|e| e.to_string())?;
            Ok(Box::new(PairWork {
                topk: FusedTopk::new(dev, &config, rows, e, b.as_deref())
                    .map_err(|e| e.to_string())?,
                layout: align.alloc_outputs(dev).map_err(|e| e.to_string())?,
                align,
                logits: logits(dev, rows, e)?,
                bias: bias_of(dev, shape)?,
                ids: dev.alloc(p).map_err(k)?,
                weights: dev.alloc(p).map_err(k)?,
            }) as Box<dyn Work>)
        }),
    }
}

fn layer_case(shape: &'static Shape, t: usize, staged: bool, (bytes, flops): (f64, f64)) -> Case {
    Case {
        chapter: "ch08",
        shape: shape.name,
        imp: if staged { "layer_stage" } else { "layer_pair" },
        rows: t,
        bytes,
        read_bytes: bytes,
        flops,
        steps: false,
        build: Box::new(move |dev| {
            let e = |e: ch02_grouped::MoeError| e.to_string();
            let layer = ch06::new_layer(dev, shape)?;
            let x = ch06::hidden(dev, shape, t)?;
            let out = dev
                .alloc::<f32>(t * shape.hidden)
                .map_err(|e| e.to_string())?;
            Ok(if staged {
                let l = StagedLayer::new(layer).map_err(e)?.stage_everywhere();
                let ws = l.workspace(t).map_err(e)?;
                Box::new(WorkFn(move || l.enqueue(&ws, &x, &out).map_err(e))) as Box<dyn Work>
            } else {
                let ws = layer.workspace(t).map_err(e)?;
                Box::new(WorkFn(move || layer.enqueue(&ws, &x, &out).map_err(e)))
            })
        }),
    }
}

fn cases(
    dev: &'static Device,
    shapes: &'static [Shape],
    rows: &[usize],
    tokens: &[usize],
) -> Result<Vec<Case>, String> {
    let mut v = Vec::new();
    for shape in shapes {
        for &r in rows {
            v.push(stage_case(shape, r, "stage", None));
            if r * shape.k <= ch08_routing_stage::stage::geometry::STAGE_ONE_BLOCK_MAX_PAIRS {
                v.push(stage_case(
                    shape,
                    r,
                    "stage_one_block",
                    Some(Arrangement::OneBlock),
                ));
            }
            v.push(stage_case(
                shape,
                r,
                "stage_two_launches",
                Some(Arrangement::TwoLaunches),
            ));
            v.push(pair_case(shape, r));
        }
        for &t in tokens {
            let floor = ch06::layer_floor(dev, shape, t)?;
            v.push(layer_case(shape, t, true, floor));
            v.push(layer_case(shape, t, false, floor));
        }
    }
    Ok(v)
}

/// The stage and the pair + align agree on every case's logits (ids, weights, layout), in both
/// arrangements: the bench's check that what it times does the same work.
fn check_agreement(
    dev: &'static Device,
    shapes: &'static [Shape],
    rows: &[usize],
) -> Result<(), String> {
    for shape in shapes {
        let config = shape.config().router;
        let b = shape.bias.then(|| bias(shape.experts));
        for &r in rows {
            let (p, e) = (r * shape.k, shape.experts);
            let bm = choose_block_m(p, e);
            let l = patterned(r * e, LOGITS_SALT + r as u64, 3.0);
            let (routing, aligned) = pair_then_align(dev, &config, r, e, bm, &l, b.as_deref())
                .map_err(|e| e.to_string())?;
            for a in [Arrangement::OneBlock, Arrangement::TwoLaunches] {
                if a == Arrangement::OneBlock
                    && p > ch08_routing_stage::stage::geometry::STAGE_ONE_BLOCK_MAX_PAIRS
                {
                    continue;
                }
                let s = route_stage_as(dev, &config, r, e, bm, &l, b.as_deref(), a)
                    .map_err(|e| e.to_string())?;
                let same = s.routing.ids == routing.ids
                    && s.routing
                        .weights
                        .iter()
                        .zip(&routing.weights)
                        .all(|(x, y)| x.to_bits() == y.to_bits())
                    && s.aligned == aligned;
                if !same {
                    return Err(format!(
                        "{} at {r} rows ({a:?}): the stage and the pair + align differ",
                        shape.name
                    ));
                }
            }
        }
        eprintln!(
            "bench ch08: {}: the stage gives the pair + align's bits at {rows:?} rows",
            shape.name
        );
    }
    Ok(())
}

pub fn run(args: &GpuArgs) -> Result<(), String> {
    let quick = args.quick || cases::quick_from_env();
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    let (shapes, rows, tokens): (&'static [Shape], &[usize], &[usize]) = match dev.kind() {
        BackendKind::Cuda => (&ch06::SHAPES, &ROWS, &ch06::TOKENS),
        BackendKind::Emu if quick => (&ch06::TINY, &TINY_ROWS, &ch06::TINY_TOKENS),
        BackendKind::Emu => return Err(cases::emulator_refusal("ch08", &why)),
    };
    check_agreement(dev, shapes, rows)?;
    let cases = cases(dev, shapes, rows, tokens)?;
    cases::time_or_smoke(dev, quick, "ch08", "rows", &cases, &args.out_dir)
}
