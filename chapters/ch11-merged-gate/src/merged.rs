//! The layer's front three ways, for one shape on one device:
//!
//! | form | launches | what it runs |
//! |---|---|---|
//! | [`SeparateGate`] | 3 (cuBLAS's own count above 16 rows) | the projection GEMM (bf16 out), then chapter 5's pair: its GEMM (fp32 logits) and its fused router |
//! | [`MergedGate`] | 2 | one GEMM over the stacked weight `[E + P, H]` with fp32 out, then `merged_gate` (or `merged_gate_half` from 1,024 rows): radix select of the E logits and the cast of the P projection columns to bf16 |
//! | [`Bf16Gate`] | 2 | one GEMM over the stacked weight with bf16 out, then radix select on the bf16 logits: the variant that rounds the logits |
//!
//! The separate form's GEMMs are the tiny GEMM up to [`TINY_MAX_ROWS`] rows and the library GEMM
//! above ([`gemm_for`]); the merged form's one GEMM has its own switch, [`STACKED_TINY_MAX_ROWS`]
//! ([`stacked_gemm_for`]): its weight is five times the gate's. The bf16 variant's is the library
//! GEMM always (the tiny GEMM writes fp32).

use crate::front::{FrontShape, KIMI_K3};
use crate::radix::{Logits, RadixForm, RadixTopk};
use ch01_router::chain::{
    expect_len, DeviceMatrix, DeviceRouter, DeviceRouterError, GateInputs, GateShape, RouterOutputs,
};
use ch01_router::config::RouterConfig;
use ch05_fused_router::tiny_gemm;
use ch05_fused_router::{FusedRouter, LogitsFrom};
use half::bf16;
use moe_kernels::blas::{linear, Linear};
use moe_kernels::{args, Device, DeviceBuffer, KernelArg, Module};
use std::sync::Arc;

// ANCHOR: gemm_for
/// Up to how many rows the separate form's GEMMs are chapter 5's tiny GEMM; the library GEMM
/// above. SGLang's limit for its tiny GEMM (the router article, section 5.1).
pub const TINY_MAX_ROWS: usize = 16;

/// The separate form's GEMM for `rows` rows: the tiny GEMM up to [`TINY_MAX_ROWS`], the library
/// GEMM above.
pub fn gemm_for(rows: usize) -> LogitsFrom {
    tiny_up_to(rows, TINY_MAX_ROWS)
}

/// The tiny GEMM up to `max_rows` rows, the library GEMM above: both forms' switch.
fn tiny_up_to(rows: usize, max_rows: usize) -> LogitsFrom {
    if rows <= max_rows {
        LogitsFrom::TinyGemm
    } else {
        LogitsFrom::Blas
    }
}

/// Up to how many rows the merged form's GEMM (the stacked weight `[E + P, H]`, fp32 out) is
/// chapter 5's tiny GEMM, in the form chapter 5 picks for the rows; the library GEMM above. Set
/// from `bench ch11`'s sweep of that GEMM alone, both ways (`ch11_gemm.csv`; the bench prints
/// the crossover it measures and whether this constant agrees): on the H100 the tiny GEMM is
/// ahead at 1 and 2 rows and behind from 4 (3 is not measured), so the switch sits at the last
/// count measured ahead. (On the H200 the constant was 7, where chapter 5 leaves its CUDA-core
/// form, before any sweep had run.)
pub const STACKED_TINY_MAX_ROWS: usize = 2;

/// The merged form's GEMM for `rows` rows: the tiny GEMM up to [`STACKED_TINY_MAX_ROWS`], the
/// library GEMM above.
pub fn stacked_gemm_for(rows: usize) -> LogitsFrom {
    tiny_up_to(rows, STACKED_TINY_MAX_ROWS)
}
// ANCHOR_END: gemm_for

/// What the front writes: ids `[T, k]`, weights `[T, k]` and the projection `[T, P]` in bf16.
pub struct FrontOutputs<'a> {
    pub ids: &'a DeviceBuffer<i32>,
    pub weights: &'a DeviceBuffer<f32>,
    pub proj: &'a DeviceBuffer<bf16>,
}

/// The shape checks every form shares: E ≥ 1, and E and P whole 16-byte steps of fp32 (the
/// merged kernel's loads), H whole 16-byte slices of bf16 (the tiny GEMM's).
fn check_front(shape: FrontShape) -> Result<(), DeviceRouterError> {
    tiny_gemm::check_hidden(shape.hidden)?;
    for (what, n) in [
        ("the experts (E)", shape.experts),
        ("the projection (P)", shape.proj),
    ] {
        #[allow(clippy::manual_is_multiple_of)] // the workspace's MSRV is 1.85
        if n % 4 != 0 {
            return Err(DeviceRouterError::NotMultiple {
                what,
                of: 4,
                why: "the merged kernel loads the fp32 row in 16-byte steps",
                got: n,
            });
        }
    }
    Ok(())
}

/// The GEMM `y [rows, out] = hidden [rows, H] · w [out, H]ᵀ` with fp32 out, by `from`: chapter
/// 5's tiny GEMM (`tiny`, its module, in the form chapter 5 picks for the rows) or the library
/// GEMM. The merged form's GEMM; `bench ch11` times it alone both ways.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32(
    device: &'static Device,
    tiny: &Module,
    from: LogitsFrom,
    hidden: &DeviceBuffer<bf16>,
    w: &DeviceBuffer<bf16>,
    y: &DeviceBuffer<f32>,
    rows: usize,
    h: usize,
    out: usize,
) -> Result<(), DeviceRouterError> {
    match from {
        LogitsFrom::TinyGemm => tiny_gemm::enqueue(tiny, hidden, w, y, rows, h, out),
        LogitsFrom::Blas => Ok(linear(
            device,
            Linear {
                rows,
                in_features: h,
                out_features: out,
            },
            &hidden.as_view(),
            &w.as_view(),
            &y.as_view(),
            false,
        )?),
    }
}

// ANCHOR: merged_gate
/// The merged front: one GEMM over the stacked weight `[E + P, H]` into fp32 `y [T, E + P]`
/// ([`stacked_gemm_for`]), then `merged_gate` (or `merged_gate_half`), which selects k of each
/// row's E logits by radix select and casts its P projection columns to bf16.
pub struct MergedGate {
    device: &'static Device,
    tiny: Arc<Module>,
    topk: RadixTopk,
    shape: FrontShape,
    rows: usize,
    from: LogitsFrom,
    y: DeviceBuffer<f32>, // [T, E + P] fp32
}

impl MergedGate {
    /// Checks the shape, `config` and the bias ([`crate::radix::check_limits`]); allocates `y`.
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: FrontShape,
        rows: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        check_front(shape)?;
        let topk = RadixTopk::new(device, config, rows, shape.experts, bias)?;
        Ok(MergedGate {
            device,
            tiny: device.load(&tiny_gemm::KERNELS)?,
            topk,
            shape,
            rows,
            from: stacked_gemm_for(rows),
            y: device.alloc(rows * (shape.experts + shape.proj))?,
        })
    }

    /// The same front with the GEMM `from` at any row count (the bench times both).
    pub fn with_gemm(mut self, from: LogitsFrom) -> Self {
        self.from = from;
        self
    }

    /// The GEMM's fp32 output of the last call, `[T, E + P]`.
    pub fn y(&self) -> &DeviceBuffer<f32> {
        &self.y
    }

    /// The kernels one call launches, in order (cuBLAS's own kernels are one entry, `blas`).
    pub fn launch_names(&self) -> Vec<&'static str> {
        let gemm = match self.from {
            LogitsFrom::TinyGemm => {
                let out = self.shape.experts + self.shape.proj;
                tiny_gemm::launch(tiny_gemm::form_for(self.rows), self.rows, out).0
            }
            LogitsFrom::Blas => "blas",
        };
        vec![gemm, self.kernel().0]
    }

    /// The kernel after the GEMM and its block, by the form radix select takes for the rows
    /// ([`RadixForm::for_rows`], or [`MergedGate::with_form`]): eight warps select in the block
    /// form (`merged_gate`), four in the others (`merged_gate_half`); four more warps cast.
    fn kernel(&self) -> (&'static str, u32) {
        use crate::radix::geometry::{RS_HALF_THREADS, RS_MERGED_CASTERS, RS_THREADS};
        match self.topk.form() {
            RadixForm::Block => ("merged_gate", (RS_THREADS + RS_MERGED_CASTERS) as u32),
            RadixForm::Half | RadixForm::Warp => (
                "merged_gate_half",
                (RS_HALF_THREADS + RS_MERGED_CASTERS) as u32,
            ),
        }
    }

    /// The same front selecting as radix select's `form` does, whatever the rows (the warp form
    /// selects with four warps here: a row's block also casts).
    pub fn with_form(mut self, form: RadixForm) -> Self {
        self.topk = self.topk.with_form(form);
        self
    }

    /// Queues the front: `hidden [T, H]` bf16, `stacked [E + P, H]` bf16 (gate rows first),
    /// `bias [E]` f32. Kernel: `merged_gate(const float* y, const float* bias, int* ids, float*
    /// weights, bf16* proj, int T, int E, int P, int k, int scoring, int n_group, int
    /// topk_group, int renormalize, float scale)` (or `merged_gate_half`, the same arguments),
    /// grid T, blocks of `RS_THREADS` (or `RS_HALF_THREADS`) + `RS_MERGED_CASTERS` threads.
    pub fn enqueue(
        &self,
        hidden: &DeviceBuffer<bf16>,
        stacked: &DeviceBuffer<bf16>,
        bias: Option<&DeviceBuffer<f32>>,
        out: &FrontOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let FrontShape {
            hidden: h,
            experts,
            proj,
            ..
        } = self.shape;
        let rows = self.rows;
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len(
            "stacked weight [E + P, H]",
            stacked.len(),
            (experts + proj) * h,
        )?;
        expect_len("projection out [T, P]", out.proj.len(), rows * proj)?;
        let outputs = RouterOutputs {
            ids: out.ids,
            weights: out.weights,
        };
        self.topk.check(bias, &outputs)?;
        if rows == 0 {
            return Ok(());
        }
        gemm_f32(
            self.device,
            &self.tiny,
            self.from,
            hidden,
            stacked,
            &self.y,
            rows,
            h,
            experts + proj,
        )?;
        let bias = bias.map_or(KernelArg::Ptr(0), KernelArg::from); // null: no bias
        let mut a = args![&self.y, bias, out.ids, out.weights, out.proj].to_vec();
        let tail = self.topk.tail_args(); // T, E, k, scoring, n_group, topk_group, renorm, scale
        a.extend_from_slice(&tail[..2]);
        a.push(KernelArg::from(proj as i32));
        a.extend_from_slice(&tail[2..]);
        let (kernel, threads) = self.kernel();
        let cfg = moe_kernels::LaunchConfig::blocks(rows as u32, threads).dependent();
        self.topk.module().launch(kernel, cfg, &a)?;
        Ok(())
    }
}
// ANCHOR_END: merged_gate

// ANCHOR: separate_gate
/// The separate front: the projection GEMM with bf16 out, then chapter 5's pair (its GEMM into
/// fp32 logits, its fused router), both GEMMs by [`gemm_for`] (the projection's is the library
/// GEMM at every row count: the tiny GEMM writes fp32 only).
pub struct SeparateGate {
    device: &'static Device,
    pair: FusedRouter,
    shape: FrontShape,
    rows: usize,
    two_streams: bool,
}

impl SeparateGate {
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: FrontShape,
        rows: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        check_front(shape)?;
        let gate = GateShape {
            rows,
            hidden: shape.hidden,
            experts: shape.experts,
        };
        Ok(SeparateGate {
            device,
            pair: FusedRouter::with_logits(device, config, gate, bias, gemm_for(rows))?,
            shape,
            rows,
            two_streams: false,
        })
    }

    /// The two-stream variant: the projection GEMM on a second stream beside the pair
    /// ([`Device::side_by_side`]), so the GPU may run the two at once: neither reads what the
    /// other writes. The same outputs, bit for bit.
    pub fn on_two_streams(mut self) -> Self {
        self.two_streams = true;
        self
    }

    /// The kernels one call launches, in order.
    pub fn launch_names(&self) -> Vec<&'static str> {
        let mut v = vec!["blas"];
        v.extend(self.pair.launch_names());
        v
    }

    /// The pair's fp32 logits of the last call, `[T, E]`.
    pub fn logits(&self) -> &DeviceBuffer<f32> {
        self.pair.logits()
    }

    /// Queues the front: `hidden [T, H]`, `gate [E, H]`, `proj_w [P, H]` bf16, `bias [E]` f32.
    pub fn enqueue(
        &self,
        hidden: &DeviceBuffer<bf16>,
        gate: &DeviceBuffer<bf16>,
        proj_w: &DeviceBuffer<bf16>,
        bias: Option<&DeviceBuffer<f32>>,
        out: &FrontOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let FrontShape {
            hidden: h, proj, ..
        } = self.shape;
        expect_len("projection weight [P, H]", proj_w.len(), proj * h)?;
        expect_len("projection out [T, P]", out.proj.len(), self.rows * proj)?;
        let projection = || -> Result<(), DeviceRouterError> {
            if self.rows > 0 {
                linear(
                    self.device,
                    Linear {
                        rows: self.rows,
                        in_features: h,
                        out_features: proj,
                    },
                    &hidden.as_view(),
                    &proj_w.as_view(),
                    &out.proj.as_view(),
                    false,
                )?;
            }
            Ok(())
        };
        let pair = || {
            self.pair.enqueue(
                &GateInputs {
                    hidden: DeviceMatrix::Bf16(hidden),
                    weight: DeviceMatrix::Bf16(gate),
                    bias,
                },
                &RouterOutputs {
                    ids: out.ids,
                    weights: out.weights,
                },
            )
        };
        if self.two_streams {
            self.device.side_by_side(projection, pair).map(|_| ())
        } else {
            projection()?;
            pair()
        }
    }
}
// ANCHOR_END: separate_gate

// ANCHOR: bf16_gate
/// The bf16-output variant: one library GEMM over the stacked weight with bf16 out (the logits
/// rounded too), then radix select on the bf16 logits, widened exactly to fp32. The projection
/// stays where the GEMM wrote it, columns E.. of `y16` (an expert kernel would read it at that
/// stride).
pub struct Bf16Gate {
    device: &'static Device,
    topk: RadixTopk,
    shape: FrontShape,
    rows: usize,
    y16: DeviceBuffer<bf16>, // [T, E + P] bf16
}

impl Bf16Gate {
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: FrontShape,
        rows: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        check_front(shape)?;
        Ok(Bf16Gate {
            device,
            topk: RadixTopk::new(device, config, rows, shape.experts, bias)?,
            shape,
            rows,
            y16: device.alloc(rows * (shape.experts + shape.proj))?,
        })
    }

    /// The GEMM's bf16 output of the last call, `[T, E + P]`.
    pub fn y16(&self) -> &DeviceBuffer<bf16> {
        &self.y16
    }

    /// Queues the variant: the stacked GEMM (bf16 out), then `radix_topk_bf16` at stride E + P.
    pub fn enqueue(
        &self,
        hidden: &DeviceBuffer<bf16>,
        stacked: &DeviceBuffer<bf16>,
        bias: Option<&DeviceBuffer<f32>>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let FrontShape {
            hidden: h,
            experts,
            proj,
            ..
        } = self.shape;
        expect_len(
            "stacked weight [E + P, H]",
            stacked.len(),
            (experts + proj) * h,
        )?;
        self.topk.check(bias, outputs)?;
        if self.rows == 0 {
            return Ok(());
        }
        linear(
            self.device,
            Linear {
                rows: self.rows,
                in_features: h,
                out_features: experts + proj,
            },
            &hidden.as_view(),
            &stacked.as_view(),
            &self.y16.as_view(),
            false,
        )?;
        self.topk.enqueue(
            Logits::Bf16 {
                buf: &self.y16,
                ld: experts + proj,
            },
            bias,
            outputs,
        )
    }
}
// ANCHOR_END: bf16_gate

/// The shape the chapter is about, for messages: `H 7168, E 896 + P 3584, k 16`.
pub fn describe(shape: FrontShape) -> String {
    let name = if shape == KIMI_K3 { " (Kimi K3)" } else { "" };
    format!(
        "H {}, E {} + P {}, k {}{name}",
        shape.hidden, shape.experts, shape.proj, shape.k
    )
}
