//! The assembled layer: bf16 hidden states `[T, H]` in, the layer's output `[T, H]` f32 out,
//! queued in one call with no host synchronisation.
//!
//! | step | what runs | launches |
//! |---|---|---|
//! | logits `[T, E]` f32 = x · gateᵀ | chapter 5's tiny GEMM up to [`switch_rows`], cuBLAS above | 1 (cuBLAS: its own) |
//! | ids, weights `[T, k]` | chapter 5's fused router | 1 |
//! | the experts, the shared expert, the sum over k | chapter 4's [`FusedDevice::enqueue_experts_from`] on chapter 4's plan for T | 2 or 3 at decode sizes; 4 to 8 tiled (chapter 3's align among them) |
//!
//! Both the router and the experts read the one bf16 copy of the input: no conversion launch.
//! Everything a call needs is allocated by [`AssembledLayer::workspace`] for a batch size, so
//! [`AssembledLayer::enqueue`] only launches, and a CUDA graph captured for one batch size serves
//! every input and every routing.

use crate::switch::{logits_for, switch_rows};
use ch01_router::chain::RouterOutputs;
use ch01_router::chain::{download, DeviceMatrix, DeviceRouter, GateInputs, GateShape};
use ch01_router::Routing;
use ch02_grouped::error::expect_len;
use ch02_grouped::layer::{rows_of, LayerOutput, MoeLayer};
use ch02_grouped::{Dtype, MoeConfig, MoeError, MoeWeights};
use ch04_fused_moe::device::Hidden;
use ch04_fused_moe::{BatchPlan, FusedDevice, FusedWorkspace};
use ch05_fused_router::tiny_gemm::GemmForm;
use ch05_fused_router::{FusedRouter, LogitsFrom};
use half::bf16;
use moe_kernels::{Device, DeviceBuffer};
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers the assembled layers of a process, so a workspace is only used by its layer.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The layer: chapter 4's experts (weights in bf16 on the device) and the router's gate in bf16
/// and bias in f32, as an engine holds them.
pub struct AssembledLayer {
    device: &'static Device,
    id: u64,
    config: MoeConfig,
    experts: FusedDevice,
    /// `[E, H]` bf16
    gate: DeviceBuffer<bf16>,
    /// `[E]` f32: the router's selection bias (DeepSeek-V3, GLM)
    bias: Option<DeviceBuffer<f32>>,
    bias_host: Option<Vec<f32>>,
    /// The logits GEMM chosen by the caller instead of [`logits_for`].
    logits: Option<LogitsFrom>,
    /// The tiny GEMM's form chosen by the caller instead of chapter 5's `form_for`.
    gemm_form: Option<GemmForm>,
}

/// What one call for a batch of T tokens needs beyond the weights: the router for T rows (its
/// logits buffer inside), the routing's buffers, and chapter 4's workspace. It depends on T only.
pub struct LayerWorkspace {
    layer: u64,
    rows: usize,
    from: LogitsFrom,
    /// None for an empty batch (nothing to route).
    router: Option<FusedRouter>,
    /// `[T, k]` i32
    ids: DeviceBuffer<i32>,
    /// `[T, k]` f32
    weights: DeviceBuffer<f32>,
    experts: FusedWorkspace,
}

impl LayerWorkspace {
    /// The batch size it was built for.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Where the router's logits come from at this batch size.
    pub fn logits_from(&self) -> LogitsFrom {
        self.from
    }
    /// Chapter 4's plan for this batch: path, fusion, tiles, BLOCK_M, decode geometry.
    pub fn plan(&self) -> BatchPlan {
        self.experts.plan()
    }
    /// The routing's buffers on the device: ids `[T, k]` i32 and weights `[T, k]` f32, which
    /// the router writes and the experts read.
    pub fn routing_buffers(&self) -> (&DeviceBuffer<i32>, &DeviceBuffer<f32>) {
        (&self.ids, &self.weights)
    }
    /// Chapter 4's workspace for this batch.
    pub fn experts_workspace(&self) -> &FusedWorkspace {
        &self.experts
    }
    /// The routing of the last call, downloaded (ids `[T, k]`, weights `[T, k]`).
    pub fn routing(&self, k: usize) -> Result<Routing, MoeError> {
        if self.rows == 0 {
            return Ok(Routing::empty(k));
        }
        Ok(download(self.rows, k, &self.ids, &self.weights)?)
    }
}

fn upload_bf16(dev: &Device, v: &[f32]) -> Result<DeviceBuffer<bf16>, MoeError> {
    let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
    Ok(dev.upload(&b)?)
}

impl AssembledLayer {
    /// Uploads `weights` to `device`: the experts in bf16 (chapter 4), the gate in bf16, the
    /// bias in f32.
    pub fn new(device: &'static Device, weights: &MoeWeights) -> Result<Self, MoeError> {
        let experts = FusedDevice::new(device, weights, Dtype::Bf16)?;
        Self::assemble(device, experts, &weights.gate, weights.bias.as_deref())
    }

    /// A layer of `config` whose expert weights are made on the device
    /// ([`FusedDevice::patterned_on_device`], seed `seed`) with its router's gate: for the
    /// production shapes, too big for the host.
    pub fn patterned_on_device(
        device: &'static Device,
        config: &MoeConfig,
        seed: u64,
    ) -> Result<Self, MoeError> {
        Self::patterned_with_bias(device, config, seed, None)
    }

    /// [`Self::patterned_on_device`] with the router's selection bias `[E]` (the GLM-like and
    /// DeepSeek-V3 families; the bench's shapes).
    pub fn patterned_with_bias(
        device: &'static Device,
        config: &MoeConfig,
        seed: u64,
        bias: Option<&[f32]>,
    ) -> Result<Self, MoeError> {
        let experts = FusedDevice::patterned_on_device(device, config, seed)?;
        let gate = ch04_fused_moe::fill::router_gate(config, seed);
        Self::assemble(device, experts, &gate, bias)
    }

    fn assemble(
        device: &'static Device,
        experts: FusedDevice,
        gate: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self, MoeError> {
        let config = experts.config().clone();
        expect_len("gate [E, H]", gate.len(), config.experts * config.hidden)?;
        // Chapter 1's rules and chapter 5's limits (E ≤ 1024, k ≤ 32, 32 groups), checked once
        // here rather than at the first batch.
        ch05_fused_router::fused::check_limits(&config.router, config.experts, bias)?;
        Ok(AssembledLayer {
            device,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            gate: upload_bf16(device, gate)?,
            bias: match bias {
                Some(b) => Some(device.upload(b)?),
                None => None,
            },
            bias_host: bias.map(<[f32]>::to_vec),
            config,
            experts,
            logits: None,
            gemm_form: None,
        })
    }

    /// The same layer with its logits from `from` at every batch size, instead of
    /// [`logits_for`]'s switch.
    pub fn with_logits(mut self, from: LogitsFrom) -> Self {
        self.logits = Some(from);
        self
    }

    /// The same layer with the tiny GEMM in `form` at every batch size (where it computes the
    /// logits), instead of chapter 5's switch from CUDA cores to tensor cores at 8 rows. Either
    /// form computes a row's logits the same whatever the other rows of its batch. A new
    /// identity: old workspaces are refused.
    pub fn with_gemm_form(mut self, form: GemmForm) -> Self {
        self.gemm_form = Some(form);
        self.id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self
    }

    /// The same layer with chapter 4's experts changed by `f` (a path, a tile configuration,
    /// a fusion: [`FusedDevice`]'s `with_*` methods). A new identity: old workspaces are refused.
    pub fn map_experts(
        mut self,
        f: impl FnOnce(FusedDevice) -> Result<FusedDevice, MoeError>,
    ) -> Result<Self, MoeError> {
        self.experts = f(self.experts)?;
        self.id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(self)
    }

    pub fn device(&self) -> &'static Device {
        self.device
    }

    /// Chapter 4's experts.
    pub fn experts_layer(&self) -> &FusedDevice {
        &self.experts
    }

    /// The router's gate `[E, H]` bf16 and selection bias `[E]` f32 on the device.
    pub fn gate(&self) -> (&DeviceBuffer<bf16>, Option<&DeviceBuffer<f32>>) {
        (&self.gate, self.bias.as_ref())
    }

    /// The logits GEMM for a batch of `rows` tokens: the caller's, else [`logits_for`].
    pub fn logits_for(&self, rows: usize) -> LogitsFrom {
        let c = &self.config;
        self.logits
            .unwrap_or_else(|| logits_for(rows, c.hidden, c.experts))
    }

    /// The last row count of the tiny GEMM for this layer's gate ([`switch_rows`]).
    pub fn switch_rows(&self) -> usize {
        switch_rows(self.config.hidden, self.config.experts)
    }

    // ANCHOR: workspace
    /// Allocates what one call for a batch of `rows` tokens needs: the router for that many rows
    /// (tiny GEMM or cuBLAS, [`Self::logits_for`]), the routing's buffers, chapter 4's workspace.
    pub fn workspace(&self, rows: usize) -> Result<LayerWorkspace, MoeError> {
        let c = &self.config;
        let from = self.logits_for(rows);
        let router = match rows {
            0 => None,
            _ => Some(router_for(
                self.device,
                c,
                rows,
                self.bias_host.as_deref(),
                from,
                self.gemm_form,
            )?),
        };
        let pairs = rows * c.router.k;
        Ok(LayerWorkspace {
            layer: self.id,
            rows,
            from,
            router,
            ids: self.device.alloc(pairs)?,
            weights: self.device.alloc(pairs)?,
            experts: self.experts.workspace(rows)?,
        })
    }
    // ANCHOR_END: workspace

    // ANCHOR: enqueue
    /// Queues the whole layer: `hidden` `[T, H]` bf16 in, `out` `[T, H]` f32 out, T the
    /// workspace's. The router writes the ids and weights into the workspace, and chapter 4's
    /// experts read them there: the routing never visits the host, and nothing is allocated,
    /// copied or waited for, so the call can be captured in a CUDA graph.
    pub fn enqueue(
        &self,
        ws: &LayerWorkspace,
        hidden: &DeviceBuffer<bf16>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        if ws.layer != self.id {
            return Err(MoeError::Config {
                field: "workspace",
                expected: "one built by this layer's AssembledLayer::workspace".into(),
                found: "a workspace built by another layer".into(),
            });
        }
        let (rows, h) = (ws.rows, self.config.hidden);
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("out [T, H]", out.len(), rows * h)?;
        let Some(router) = &ws.router else {
            return Ok(()); // an empty batch: nothing to launch
        };
        // 1-2. Logits (tiny GEMM or cuBLAS), then scores, top-k and weights in one kernel.
        router.enqueue(
            &GateInputs {
                hidden: DeviceMatrix::Bf16(hidden),
                weight: DeviceMatrix::Bf16(&self.gate),
                bias: self.bias.as_ref(),
            },
            &RouterOutputs {
                ids: &ws.ids,
                weights: &ws.weights,
            },
        )?;
        // 3. The experts on the same bf16 input: chapter 4's path for T (decode: two launches;
        //    tiled: chapter 3's align, the two GEMMs, the shared expert, the sum over k).
        self.experts.enqueue_experts_from(
            &ws.experts,
            Hidden::Bf16(hidden),
            &ws.ids,
            &ws.weights,
            out,
        )
    }
    // ANCHOR_END: enqueue

    /// How many launches [`Self::enqueue`] makes for `ws` (cuBLAS's GEMM counted as one): the
    /// router's two, then chapter 4's from bf16 input. It depends on the batch size only.
    pub fn launches(&self, ws: &LayerWorkspace) -> usize {
        match &ws.router {
            None => 0,
            Some(r) => {
                r.launch_names().len() + self.experts.launches_from(&ws.experts, Dtype::Bf16)
            }
        }
    }

    /// The router's kernels for `ws` (`family::kernel`; cuBLAS `blas::linear`), in order.
    pub fn router_kernels(&self, ws: &LayerWorkspace) -> Vec<String> {
        let Some(r) = &ws.router else {
            return Vec::new();
        };
        let names = r.launch_names();
        let gemm = match ws.from {
            LogitsFrom::TinyGemm => format!("ch05_tiny_gemm::{}", names[0]),
            LogitsFrom::Blas => "blas::linear".into(),
        };
        vec![gemm, format!("ch05_fused_router::{}", names[1])]
    }
}

impl MoeLayer for AssembledLayer {
    fn name(&self) -> &'static str {
        "assembled"
    }
    fn dtype(&self) -> Dtype {
        Dtype::Bf16
    }
    fn config(&self) -> &MoeConfig {
        &self.config
    }

    /// Chapter 4's experts on a given routing: chapter 4's own [`MoeLayer::experts`] (its f32
    /// input rounded on the device, the same bits as from bf16).
    fn experts(&self, hidden: &[f32], routing: &Routing) -> Result<Vec<f32>, MoeError> {
        self.experts.experts(hidden, routing)
    }

    /// The whole layer ([`AssembledLayer::enqueue`]) on `hidden` rounded to bf16; the routing
    /// downloaded afterwards, for the caller.
    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError> {
        let rows = rows_of(&self.config, hidden)?;
        let ws = self.workspace(rows)?;
        let x = upload_bf16(self.device, hidden)?; // the f32 convenience: an engine hands bf16
        let out = self.device.alloc::<f32>(hidden.len())?;
        self.enqueue(&ws, &x, &out)?;
        Ok(LayerOutput {
            routing: ws.routing(self.config.router.k)?,
            out: out.to_vec()?,
        })
    }
}

/// Chapter 5's fused pair for a batch of `rows` tokens of a layer shaped `config`: its logits
/// from `from`, the tiny GEMM in `form` where given (else chapter 5's choice by rows). The
/// router [`AssembledLayer::workspace`] builds, and chapter 12's ranks with it.
pub fn router_for(
    device: &'static Device,
    config: &MoeConfig,
    rows: usize,
    bias: Option<&[f32]>,
    from: LogitsFrom,
    form: Option<GemmForm>,
) -> Result<FusedRouter, MoeError> {
    let shape = GateShape {
        rows,
        hidden: config.hidden,
        experts: config.experts,
    };
    let router = FusedRouter::with_logits(device, &config.router, shape, bias, from)?;
    Ok(match form {
        Some(form) => router.with_gemm_form(form),
        None => router,
    })
}
