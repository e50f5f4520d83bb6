//! The loop grouped by expert on a device: one library GEMM per active expert and projection
//! (cuBLAS on the GPU, the runtime's reference GEMM on the emulator), and the three small
//! kernels of `kernels/ch02_grouped.cu` between them (gather, SwiGLU, combine).
//!
//! How many experts are active, and how many tokens each received, is only known once the
//! routing is back on the host: each GEMM's row count is a host number. So a layer is: route on
//! the device (chapter 1's chain), copy the ids back (a synchronisation), group on the host
//! ([`GroupPlan`]), upload the plan, then launch `3 + 2 × active experts` kernels and GEMMs
//! (plus the shared expert's). Both the synchronisation and the launch count are what
//! chapters 3 and 4 remove.

use crate::config::{Dtype, MoeConfig};
use crate::error::{expect_len, MoeError};
use crate::layer::{experts_rows, rows_of, LayerOutput, MoeLayer};
use crate::plan::GroupPlan;
use crate::weights::MoeWeights;
use ch01_router::chain::{
    download, DeviceMatrix, DeviceRouter, FiveLineChain, GateInputs, GateShape, RouterOutputs,
};
use ch01_router::Routing;
use half::bf16;
use moe_kernels::blas::{self, Linear};
use moe_kernels::{
    args, Device, DeviceBuffer, DeviceView, KernelArg, KernelSource, LaunchConfig, Module,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `kernels/ch02_grouped.cu`, built for both backends.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch02_grouped");

/// The launch-geometry constants of `ch02_grouped.cu`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch02_grouped");
}
use geometry::CH02_THREADS;

/// A matrix on the device in the layer's compute type.
pub enum Mats {
    F32(DeviceBuffer<f32>),
    Bf16(DeviceBuffer<bf16>),
}

/// Elements `range` of a [`Mats`]: what a GEMM takes.
#[derive(Clone, Copy)]
pub enum MatsView<'a> {
    F32(DeviceView<'a, f32>),
    Bf16(DeviceView<'a, bf16>),
}

impl Mats {
    /// `data` uploaded in `dtype` (bf16: rounded to nearest even).
    pub fn upload(dev: &Device, dtype: Dtype, data: &[f32]) -> Result<Mats, MoeError> {
        Ok(match dtype {
            Dtype::F32 => Mats::F32(dev.upload(data)?),
            Dtype::Bf16 => {
                let v: Vec<bf16> = data.iter().map(|&x| bf16::from_f32(x)).collect();
                Mats::Bf16(dev.upload(&v)?)
            }
        })
    }

    /// `len` elements of `dtype`, poisoned (NaN) until written.
    pub fn alloc(dev: &Device, dtype: Dtype, len: usize) -> Result<Mats, MoeError> {
        Ok(match dtype {
            Dtype::F32 => Mats::F32(dev.alloc(len)?),
            Dtype::Bf16 => Mats::Bf16(dev.alloc(len)?),
        })
    }

    pub fn view(&self, range: std::ops::Range<usize>) -> Result<MatsView<'_>, MoeError> {
        Ok(match self {
            Mats::F32(b) => MatsView::F32(b.view(range)?),
            Mats::Bf16(b) => MatsView::Bf16(b.view(range)?),
        })
    }

    pub fn len(&self) -> usize {
        match self {
            Mats::F32(b) => b.len(),
            Mats::Bf16(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its device address, as a kernel argument.
    pub fn ptr(&self) -> u64 {
        match self {
            Mats::F32(b) => b.device_ptr(),
            Mats::Bf16(b) => b.device_ptr(),
        }
    }

    /// Bytes it occupies.
    pub fn bytes(&self) -> usize {
        match self {
            Mats::F32(b) => b.bytes(),
            Mats::Bf16(b) => b.bytes(),
        }
    }
}

/// `y [rows, out] = x [rows, in] · w [out, in]ᵀ` through the runtime's library GEMM, for the
/// type combinations a layer uses: f32·f32 → f32, bf16·bf16 → bf16 or f32.
fn linear(
    dev: &Device,
    shape: Linear,
    x: MatsView<'_>,
    w: MatsView<'_>,
    y: MatsView<'_>,
) -> Result<(), MoeError> {
    use MatsView::{Bf16, F32};
    match (x, w, y) {
        (F32(x), F32(w), F32(y)) => blas::linear::<f32, f32>(dev, shape, &x, &w, &y, false)?,
        (Bf16(x), Bf16(w), Bf16(y)) => blas::linear::<bf16, bf16>(dev, shape, &x, &w, &y, false)?,
        (Bf16(x), Bf16(w), F32(y)) => blas::linear::<bf16, f32>(dev, shape, &x, &w, &y, false)?,
        _ => unreachable!("a layer's GEMMs take x and w in its compute type"),
    }
    Ok(())
}

/// The shared expert on the device.
struct SharedDevice {
    inter: usize,
    w13: Mats,
    w2: Mats,
    /// `[1, H]` in the compute type.
    gate: Option<Mats>,
}

/// Numbers the device layers of a process, so that a workspace can tell which one built it.
static NEXT_LAYER_ID: AtomicU64 = AtomicU64::new(0);

/// The grouped layer on a device: its weights uploaded once, in the compute type. It keeps no
/// host copy of them.
pub struct GroupedDevice {
    device: &'static Device,
    /// This layer's number: a [`Workspace`] is only used by the layer that built it.
    id: u64,
    config: MoeConfig,
    /// The selection bias on the host too: chapter 1's chain checks it when it is built.
    bias_host: Option<Vec<f32>>,
    dtype: Dtype,
    module: Arc<Module>,
    gate: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
    w13: Mats,
    w2: Mats,
    shared: Option<SharedDevice>,
}

/// Everything one call needs beyond the weights, for one routing: the plan on the host, its
/// arrays on the device, and the intermediate buffers. Built by [`GroupedDevice::workspace`];
/// [`GroupedDevice::enqueue_experts`] then only launches, so a CUDA graph can capture it.
pub struct Workspace {
    /// The [`GroupedDevice::id`] of the layer that built it.
    layer: u64,
    plan: GroupPlan,
    token_of: DeviceBuffer<i32>,
    slot_of: DeviceBuffer<i32>,
    weights: DeviceBuffer<f32>,
    /// `[P, H]` the pairs' rows, sorted by expert
    xs: Mats,
    /// `[P, 2I]` gate | up
    h: Mats,
    /// `[P, I]` SwiGLU
    a: Mats,
    /// `[P, H]` f32 down projection of every slot
    y: DeviceBuffer<f32>,
    shared: Option<SharedWorkspace>,
}

struct SharedWorkspace {
    /// `[T]` 0..T: the bf16 layer's shared expert gathers every token once (its conversion).
    identity: DeviceBuffer<i32>,
    /// `[T, H]` the tokens in bf16 (unused for f32: the hidden states are the input).
    xq: Option<Mats>,
    h: Mats,
    a: Mats,
    y: DeviceBuffer<f32>,
    /// `[T]` the shared expert's gate logit.
    gate: Option<DeviceBuffer<f32>>,
}

impl Workspace {
    /// The grouping this workspace was built for.
    pub fn plan(&self) -> &GroupPlan {
        &self.plan
    }
}

impl GroupedDevice {
    /// Uploads `weights` to `device` in `dtype`.
    pub fn new(
        device: &'static Device,
        weights: &MoeWeights,
        dtype: Dtype,
    ) -> Result<Self, MoeError> {
        weights.validate()?;
        let c = &weights.config;
        let shared = match (&c.shared, &weights.shared) {
            (Some(s), Some(sw)) => Some(SharedDevice {
                inter: s.intermediate,
                w13: Mats::upload(device, dtype, &sw.w13)?,
                w2: Mats::upload(device, dtype, &sw.w2)?,
                gate: match &sw.gate {
                    Some(g) => Some(Mats::upload(device, dtype, g)?),
                    None => None,
                },
            }),
            _ => None,
        };
        Ok(GroupedDevice {
            device,
            module: device.load(&KERNELS)?,
            gate: device.upload(&weights.gate)?,
            bias: match &weights.bias {
                Some(b) => Some(device.upload(b)?),
                None => None,
            },
            w13: Mats::upload(device, dtype, &weights.w13)?,
            w2: Mats::upload(device, dtype, &weights.w2)?,
            shared,
            id: NEXT_LAYER_ID.fetch_add(1, Ordering::Relaxed),
            config: c.clone(),
            bias_host: weights.bias.clone(),
            dtype,
        })
    }

    pub fn device(&self) -> &'static Device {
        self.device
    }

    /// Groups `routing` by expert and allocates what one call of [`Self::enqueue_experts`] needs.
    pub fn workspace(&self, routing: &Routing) -> Result<Workspace, MoeError> {
        let c = &self.config;
        let (dev, dt) = (self.device, self.dtype);
        let plan = GroupPlan::new(routing, c.experts)?;
        if plan.pairs() > i32::MAX as usize {
            return Err(MoeError::Config {
                field: "tokens x k",
                expected: format!("at most {}", i32::MAX),
                found: plan.pairs().to_string(),
            });
        }
        let (rows, p, h, i) = (plan.rows, plan.pairs(), c.hidden, c.intermediate);
        let shared = match &self.shared {
            Some(s) => Some(SharedWorkspace {
                identity: dev.upload(&(0..rows as i32).collect::<Vec<_>>())?,
                xq: match dt {
                    Dtype::Bf16 => Some(Mats::alloc(dev, dt, rows * h)?),
                    Dtype::F32 => None,
                },
                h: Mats::alloc(dev, dt, rows * 2 * s.inter)?,
                a: Mats::alloc(dev, dt, rows * s.inter)?,
                y: dev.alloc(rows * h)?,
                gate: match s.gate {
                    Some(_) => Some(dev.alloc(rows)?),
                    None => None,
                },
            }),
            None => None,
        };
        Ok(Workspace {
            layer: self.id,
            token_of: dev.upload(&plan.token_of)?,
            slot_of: dev.upload(&plan.slot_of)?,
            weights: dev.upload(&routing.weights)?,
            xs: Mats::alloc(dev, dt, p * h)?,
            h: Mats::alloc(dev, dt, p * 2 * i)?,
            a: Mats::alloc(dev, dt, p * i)?,
            y: dev.alloc(p * h)?,
            shared,
            plan,
        })
    }

    /// The launches [`Self::enqueue_experts`] makes for `plan`: kernels and GEMMs alike.
    pub fn launches(&self, plan: &GroupPlan) -> usize {
        if plan.rows == 0 {
            return 0;
        }
        let shared = match &self.shared {
            None => 0,
            Some(s) => 3 + usize::from(self.dtype == Dtype::Bf16) + usize::from(s.gate.is_some()),
        };
        3 + 2 * plan.active_experts().len() + shared
    }

    fn swiglu(&self, h: &Mats, a: &Mats, rows: usize, inter: usize) -> Result<(), MoeError> {
        let cfg = LaunchConfig::for_elements(rows * inter, CH02_THREADS as u32);
        let name = match self.dtype {
            Dtype::F32 => "ch02_swiglu_f32",
            Dtype::Bf16 => "ch02_swiglu_bf16",
        };
        self.module
            .launch(name, cfg, &args![h, a, int(rows), int(inter)])?;
        Ok(())
    }

    fn gather(
        &self,
        hidden: &DeviceBuffer<f32>,
        index: &DeviceBuffer<i32>,
        out: &Mats,
        rows: usize,
    ) -> Result<(), MoeError> {
        let h = int(self.config.hidden);
        let name = match self.dtype {
            Dtype::F32 => "ch02_gather_f32",
            Dtype::Bf16 => "ch02_gather_bf16",
        };
        self.module.launch(
            name,
            LaunchConfig::blocks(rows as u32, CH02_THREADS as u32),
            &args![hidden, index, out, int(rows), h],
        )?;
        Ok(())
    }

    // ANCHOR: enqueue_experts
    /// Queues the experts for `ws`'s routing: `hidden` [T, H] f32 in, `out` [T, H] f32 out.
    /// Only launches (no allocation, no copy, no synchronisation).
    pub fn enqueue_experts(
        &self,
        ws: &Workspace,
        hidden: &DeviceBuffer<f32>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        if ws.layer != self.id {
            return Err(MoeError::Config {
                field: "workspace",
                expected: "one built by this layer's GroupedDevice::workspace".into(),
                found: "a workspace built by another layer".into(),
            });
        }
        let c = &self.config;
        let (dev, plan) = (self.device, &ws.plan);
        let (rows, k, h, i) = (plan.rows, plan.k, c.hidden, c.intermediate);
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("out [T, H]", out.len(), rows * h)?;
        if rows == 0 {
            return Ok(());
        }
        // 1. The shared expert, if any, on every token (first, so that its launches read apart
        //    from the routed experts' in a launch list).
        let (mut shared_y, mut shared_gate) = (0u64, 0u64);
        if let (Some(s), Some(sw)) = (&self.shared, &ws.shared) {
            let xq = match &sw.xq {
                Some(xq) => {
                    self.gather(hidden, &sw.identity, xq, rows)?;
                    xq.view(0..rows * h)?
                }
                None => MatsView::F32(hidden.as_view()),
            };
            linear(
                dev,
                Linear {
                    rows,
                    in_features: h,
                    out_features: 2 * s.inter,
                },
                xq,
                s.w13.view(0..s.w13.len())?,
                sw.h.view(0..sw.h.len())?,
            )?;
            self.swiglu(&sw.h, &sw.a, rows, s.inter)?;
            linear(
                dev,
                Linear {
                    rows,
                    in_features: s.inter,
                    out_features: h,
                },
                sw.a.view(0..sw.a.len())?,
                s.w2.view(0..s.w2.len())?,
                MatsView::F32(sw.y.as_view()),
            )?;
            shared_y = sw.y.device_ptr();
            if let (Some(g), Some(gl)) = (&s.gate, &sw.gate) {
                linear(
                    dev,
                    Linear {
                        rows,
                        in_features: h,
                        out_features: 1,
                    },
                    xq,
                    g.view(0..h)?,
                    MatsView::F32(gl.as_view()),
                )?;
                shared_gate = gl.device_ptr();
            }
        }
        // 2. Gather each slot's token row, converted to the compute type.
        self.gather(hidden, &ws.token_of, &ws.xs, plan.pairs())?;
        // 3. gate | up = xs · w13[e]ᵀ for each active expert's run of slots.
        let active = plan.active_experts();
        for &e in &active {
            let (s0, n) = (plan.offsets[e], plan.count(e));
            linear(
                dev,
                Linear {
                    rows: n,
                    in_features: h,
                    out_features: 2 * i,
                },
                ws.xs.view(s0 * h..(s0 + n) * h)?,
                self.w13.view(e * 2 * i * h..(e + 1) * 2 * i * h)?,
                ws.h.view(s0 * 2 * i..(s0 + n) * 2 * i)?,
            )?;
        }
        // 4. SwiGLU over every slot at once.
        self.swiglu(&ws.h, &ws.a, plan.pairs(), i)?;
        // 5. y = a · w2[e]ᵀ for each active expert, in f32.
        for &e in &active {
            let (s0, n) = (plan.offsets[e], plan.count(e));
            linear(
                dev,
                Linear {
                    rows: n,
                    in_features: i,
                    out_features: h,
                },
                ws.a.view(s0 * i..(s0 + n) * i)?,
                self.w2.view(e * h * i..(e + 1) * h * i)?,
                MatsView::F32(ws.y.view(s0 * h..(s0 + n) * h)?),
            )?;
        }
        // 6. out[t] = Σⱼ weight[t, j] · y[slot_of[t, j]] (+ shared), in a fixed order.
        self.module.launch(
            "ch02_combine",
            LaunchConfig::for_elements(rows * h, CH02_THREADS as u32),
            &args![
                &ws.y,
                &ws.slot_of,
                &ws.weights,
                KernelArg::Ptr(shared_y),
                KernelArg::Ptr(shared_gate),
                out,
                int(rows),
                int(h),
                int(k)
            ],
        )?;
        Ok(())
    }
    // ANCHOR_END: enqueue_experts

    /// Bytes of expert weights a call with `plan` reads: each active expert's `w13` and `w2`
    /// slices once, and the shared expert's whole weights.
    pub fn weight_bytes_touched(&self, plan: &GroupPlan) -> usize {
        let c = &self.config;
        let mut n = plan.active_experts().len() * c.expert_len();
        if let Some(s) = c.shared {
            n += 3 * s.intermediate * c.hidden + if s.gated { c.hidden } else { 0 };
        }
        n * self.dtype.bytes()
    }
}

/// A size as a kernel's `int` argument. Every size is below 2³¹: [`MoeConfig::validate`]
/// bounds H, I and E, and [`GroupedDevice::workspace`] bounds T·k.
///
/// [`MoeConfig::validate`]: crate::config::MoeConfig::validate
fn int(v: usize) -> KernelArg {
    KernelArg::I32(v as i32)
}

impl From<&Mats> for KernelArg {
    fn from(m: &Mats) -> Self {
        KernelArg::Ptr(m.ptr())
    }
}

impl MoeLayer for GroupedDevice {
    fn name(&self) -> &'static str {
        "grouped-device"
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
        let ws = self.workspace(routing)?;
        let x = self.device.upload(hidden)?;
        let out = self.device.alloc::<f32>(hidden.len())?;
        self.enqueue_experts(&ws, &x, &out)?;
        Ok(out.to_vec()?)
    }

    // ANCHOR: grouped_forward
    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError> {
        let c = &self.config;
        let rows = rows_of(&self.config, hidden)?;
        if rows == 0 {
            return Ok(LayerOutput {
                routing: Routing::empty(c.router.k),
                out: Vec::new(),
            });
        }
        let dev = self.device;
        let x = dev.upload(hidden)?;
        // Route on the device with chapter 1's chain ...
        let shape = GateShape {
            rows,
            hidden: c.hidden,
            experts: c.experts,
        };
        let chain = FiveLineChain::new(dev, &c.router, shape, self.bias_host.as_deref())?;
        let ids = dev.alloc::<i32>(rows * c.router.k)?;
        let weights = dev.alloc::<f32>(rows * c.router.k)?;
        chain.enqueue(
            &GateInputs {
                hidden: DeviceMatrix::F32(&x),
                weight: DeviceMatrix::F32(&self.gate),
                bias: self.bias.as_ref(),
            },
            &RouterOutputs {
                ids: &ids,
                weights: &weights,
            },
        )?;
        // ... bring the routing back (the GEMMs' row counts are host numbers) and group it ...
        let routing = download(rows, c.router.k, &ids, &weights)?;
        let ws = self.workspace(&routing)?;
        // ... and run the experts.
        let out = dev.alloc::<f32>(rows * c.hidden)?;
        self.enqueue_experts(&ws, &x, &out)?;
        Ok(LayerOutput {
            routing,
            out: out.to_vec()?,
        })
    }
    // ANCHOR_END: grouped_forward
}
