//! Chapter 6's layer with the routing stage in place of the router + align.
//!
//! | step | chapter 6's [`AssembledLayer`] | [`StagedLayer`] |
//! |---|---|---|
//! | logits `[T, E]` f32 | tiny GEMM or cuBLAS ([`AssembledLayer::logits_for`]) | the same |
//! | ids and weights | chapter 5's fused router | the stage, which also sorts |
//! | the layout (tiled and grouped decode paths) | chapter 3's align (1 or 2 launches) | the stage's |
//! | the experts, shared expert, sum over k | chapter 4 | chapter 4, on the stage's layout |
//!
//! On chapter 4's decode path, which reads the ids and no layout, the stage's sort would be work
//! nobody reads: there [`StagedLayer`] is chapter 6's layer, launch for launch, and the stage
//! runs only where chapter 4's plan reads a layout (a BLOCK_M). [`StagedLayer::stage_everywhere`]
//! runs it on every path (the tests' way to hold the stage to chapter 6's bits on the decode
//! path too; the bench's `layer_stage`, which at the decode sizes says what the rule saves).

use crate::error::StageError;
use crate::stage::{RoutingStage, StageBuffers};
use ch01_router::chain::download;
use ch01_router::Routing;
use ch02_grouped::error::expect_len;
use ch02_grouped::layer::{rows_of, LayerOutput, MoeLayer};
use ch02_grouped::{Dtype, MoeConfig, MoeError};
use ch04_fused_moe::device::{Hidden, Layout};
use ch04_fused_moe::FusedWorkspace;
use ch05_fused_router::tiny_gemm;
use ch05_fused_router::LogitsFrom;
use ch06_layer::{AssembledLayer, LayerWorkspace};
use half::bf16;
use moe_kernels::blas::{linear, Linear};
use moe_kernels::{Device, DeviceBuffer, Module};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl From<StageError> for MoeError {
    fn from(e: StageError) -> Self {
        match e {
            StageError::Router(r) => MoeError::DeviceRouter(r),
            StageError::Align(a) => MoeError::Config {
                field: "the routing stage's layout",
                expected: "a BLOCK_M and sizes the layout takes".into(),
                found: a.to_string(),
            },
        }
    }
}

/// Chapter 6's layer (its weights, gate, bias and chapter 4's experts) routed by the stage.
pub struct StagedLayer {
    layer: AssembledLayer,
    id: u64,
    tiny: Arc<Module>,
    /// Run the stage on the decode path too ([`StagedLayer::stage_everywhere`]).
    everywhere: bool,
}

/// What one call for a batch of T tokens needs. It depends on T only.
pub struct StagedWorkspace {
    layer: u64,
    rows: usize,
    run: Run,
}

/// How a batch is routed: by the stage (where chapter 4's plan reads a layout), or by chapter
/// 6's router as chapter 6's layer does (the decode path, which reads none).
enum Run {
    Stage(Box<StageRun>),
    Pair(Box<LayerWorkspace>),
}

/// The stage's way: the logits, the stage and its outputs, chapter 4's workspace.
struct StageRun {
    from: LogitsFrom,
    /// `[T, E]` f32
    logits: DeviceBuffer<f32>,
    stage: RoutingStage,
    routing: StageBuffers,
    experts: FusedWorkspace,
}

impl StagedWorkspace {
    /// The batch size it was built for.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Where the logits come from at this batch size.
    pub fn logits_from(&self) -> LogitsFrom {
        match &self.run {
            Run::Stage(s) => s.from,
            Run::Pair(p) => p.logits_from(),
        }
    }
    /// The stage of this batch size; `None` where the layer routes as chapter 6's does (the
    /// decode path, unless [`StagedLayer::stage_everywhere`]).
    pub fn stage(&self) -> Option<&RoutingStage> {
        match &self.run {
            Run::Stage(s) => Some(&s.stage),
            Run::Pair(_) => None,
        }
    }
    /// Chapter 4's workspace for this batch.
    pub fn experts_workspace(&self) -> &FusedWorkspace {
        match &self.run {
            Run::Stage(s) => &s.experts,
            Run::Pair(p) => p.experts_workspace(),
        }
    }
    /// The routing of the last call, downloaded (ids `[T, k]`, weights `[T, k]`).
    pub fn routing(&self, k: usize) -> Result<Routing, MoeError> {
        if self.rows == 0 {
            return Ok(Routing::empty(k));
        }
        match &self.run {
            Run::Stage(s) => Ok(download(self.rows, k, &s.routing.ids, &s.routing.weights)?),
            Run::Pair(p) => p.routing(k),
        }
    }
}

impl StagedLayer {
    /// Chapter 6's `layer`, routed by the stage.
    pub fn new(layer: AssembledLayer) -> Result<Self, MoeError> {
        let tiny = layer.device().load(&tiny_gemm::KERNELS)?;
        Ok(StagedLayer {
            layer,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            tiny,
            everywhere: false,
        })
    }

    /// The same layer with the stage on every path, the decode path too, where nothing reads
    /// its layout: the tests hold the stage to chapter 6's bits there, and the bench times what
    /// the rule saves (`layer_stage`).
    pub fn stage_everywhere(mut self) -> Self {
        self.everywhere = true;
        self
    }

    /// Chapter 6's layer inside.
    pub fn assembled(&self) -> &AssembledLayer {
        &self.layer
    }

    pub fn device(&self) -> &'static Device {
        self.layer.device()
    }

    // ANCHOR: workspace
    /// Allocates what one call for `rows` tokens needs. Where chapter 4's plan for that batch
    /// reads a layout, the stage sorts to its BLOCK_M; on the decode path, which reads none, the
    /// workspace is chapter 6's (or, [`Self::stage_everywhere`], the stage's, sorting to chapter
    /// 3's smallest BLOCK_M).
    pub fn workspace(&self, rows: usize) -> Result<StagedWorkspace, MoeError> {
        let c = self.layer.config();
        if !self.everywhere && self.layer.experts_layer().plan_for(rows)?.block_m == 0 {
            return Ok(StagedWorkspace {
                layer: self.id,
                rows,
                run: Run::Pair(Box::new(self.layer.workspace(rows)?)),
            });
        }
        let experts = self.layer.experts_layer().workspace(rows)?;
        let block_m = stage_block_m(&experts);
        let (_, bias) = self.layer.gate();
        let bias_host = bias.map(|b| b.to_vec()).transpose()?;
        let stage = RoutingStage::new(
            self.device(),
            &c.router,
            rows,
            c.experts,
            block_m,
            bias_host.as_deref(),
        )?;
        Ok(StagedWorkspace {
            layer: self.id,
            rows,
            run: Run::Stage(Box::new(StageRun {
                from: self.layer.logits_for(rows),
                logits: self.device().alloc(rows * c.experts)?,
                routing: stage.alloc_outputs(self.device())?,
                stage,
                experts,
            })),
        })
    }
    // ANCHOR_END: workspace

    // ANCHOR: enqueue
    /// Queues the layer: `hidden` `[T, H]` bf16 in, `out` `[T, H]` f32 out. The logits GEMM,
    /// the stage, then chapter 4's experts on the stage's layout: no align launch, nothing
    /// allocated, copied or waited for. On the decode path, chapter 6's layer.
    pub fn enqueue(
        &self,
        ws: &StagedWorkspace,
        hidden: &DeviceBuffer<bf16>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        if ws.layer != self.id {
            return Err(MoeError::Config {
                field: "workspace",
                expected: "one built by this layer's StagedLayer::workspace".into(),
                found: "a workspace built by another layer".into(),
            });
        }
        let c = self.layer.config();
        let (rows, h, e) = (ws.rows, c.hidden, c.experts);
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("out [T, H]", out.len(), rows * h)?;
        if rows == 0 {
            return Ok(());
        }
        let s = match &ws.run {
            Run::Stage(s) => s,
            Run::Pair(p) => return self.layer.enqueue(p, hidden, out),
        };
        let (gate, bias) = self.layer.gate();
        // 1. The logits: chapter 6's choice of GEMM for T.
        match s.from {
            LogitsFrom::TinyGemm => {
                tiny_gemm::enqueue(&self.tiny, hidden, gate, &s.logits, rows, h, e)?
            }
            LogitsFrom::Blas => linear(
                self.device(),
                Linear {
                    rows,
                    in_features: h,
                    out_features: e,
                },
                &hidden.as_view(),
                &gate.as_view(),
                &s.logits.as_view(),
                false,
            )?,
        }
        // 2. The stage: ids, weights and the layout.
        s.stage.enqueue(&s.logits, bias, &s.routing)?;
        // 3. Chapter 4's experts on that layout.
        experts_on(&self.layer, &s.experts, hidden, &s.routing, out)
    }
    // ANCHOR_END: enqueue

    /// How many launches [`Self::enqueue`] makes for `ws` (cuBLAS's GEMM counted as one).
    pub fn launches(&self, ws: &StagedWorkspace) -> usize {
        match (&ws.run, ws.rows) {
            (_, 0) => 0,
            (Run::Pair(p), _) => self.layer.launches(p),
            (Run::Stage(s), _) => {
                1 + s.stage.launches()
                    + self
                        .layer
                        .experts_layer()
                        .launches_laid_out(&s.experts, Dtype::Bf16)
            }
        }
    }
}

/// Chapter 4's experts of `layer` on a routing and its layout made by a stage (`routing`): what
/// [`StagedLayer`] and chapter 9's one-launch layer run after their routers.
pub fn experts_on(
    layer: &AssembledLayer,
    ws: &FusedWorkspace,
    hidden: &DeviceBuffer<bf16>,
    routing: &StageBuffers,
    out: &DeviceBuffer<f32>,
) -> Result<(), MoeError> {
    let r = routing;
    layer.experts_layer().enqueue_experts_laid_out(
        ws,
        Hidden::Bf16(hidden),
        &r.ids,
        &r.weights,
        Layout {
            sorted_ids: &r.sorted_ids,
            expert_ids: &r.expert_ids,
            num_post: &r.num_post,
        },
        out,
    )
}

/// The BLOCK_M a stage sorts to for chapter 4's workspace `ws`: its plan's, or on the decode
/// path (which reads no layout) chapter 3's smallest.
pub fn stage_block_m(ws: &FusedWorkspace) -> usize {
    match ws.block_m() {
        0 => 16,
        bm => bm,
    }
}

impl MoeLayer for StagedLayer {
    fn name(&self) -> &'static str {
        "staged"
    }
    fn dtype(&self) -> Dtype {
        Dtype::Bf16
    }
    fn config(&self) -> &MoeConfig {
        self.layer.config()
    }

    /// Chapter 4's experts on a given routing.
    fn experts(&self, hidden: &[f32], routing: &Routing) -> Result<Vec<f32>, MoeError> {
        self.layer.experts(hidden, routing)
    }

    /// The whole layer ([`StagedLayer::enqueue`]) on `hidden` rounded to bf16.
    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError> {
        let ws = self.workspace(rows_of(self.config(), hidden)?)?;
        forward_bf16(self.device(), hidden, |x, out| {
            self.enqueue(&ws, x, out)?;
            ws.routing(self.config().router.k)
        })
    }
}

/// Chapter 2's `forward` for a layer run from bf16 hidden states: `hidden` rounded to bf16 and
/// uploaded, an output allocated, `run` queues the layer into it and returns the routing it made.
pub fn forward_bf16(
    device: &'static Device,
    hidden: &[f32],
    run: impl FnOnce(&DeviceBuffer<bf16>, &DeviceBuffer<f32>) -> Result<Routing, MoeError>,
) -> Result<LayerOutput, MoeError> {
    let b: Vec<bf16> = hidden.iter().map(|&x| bf16::from_f32(x)).collect();
    let x = device.upload(&b)?;
    let out = device.alloc::<f32>(hidden.len())?;
    let routing = run(&x, &out)?;
    Ok(LayerOutput {
        routing,
        out: out.to_vec()?,
    })
}
