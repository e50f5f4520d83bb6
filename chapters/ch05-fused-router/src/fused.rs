//! The fused router (`kernels/ch05_fused_router.cu`) and the routers built on it.
//!
//! | router | logits | steps 2 and 3 | launches |
//! |---|---|---|---|
//! | [`FusedRouter`] (`fused`) | tiny GEMM, bf16 in, fp32 out | for sigmoid scores without groups `fused_router_screen_e{W}` up to [`SCREENED_FEW_ROWS`] rows and `fused_router_screen_many_e{W}` past [`BLOCK_FORM_MAX_ROWS`], `fused_router_block` between; for the others `fused_router_block` up to [`BLOCK_FORM_MAX_ROWS`] rows, else `fused_router_e{W}`; W in 128, 256, 288, 320, 384, 512, 1024 ([`RowForm`]) | 2 |
//! | [`FusedRouter`] with [`LogitsFrom::Blas`] (`blas+fused`) | cuBLAS (the emulator: a reference GEMM) | the same | 1 + cuBLAS's |
//! | [`TinyGemmChain`] (`tiny+chain`) | tiny GEMM | chapter 1's chain after its GEMM | 6 or 7 |
//!
//! Every one takes bf16 hidden states and a bf16 gate weight (as engines store them), fp32
//! logits and an fp32 bias. The limits of the fused kernel: E ≤ 1024, k ≤ 32, at most 32 groups;
//! larger sizes are a [`DeviceRouterError::Limit`].

use crate::tiny_gemm::{self, GemmForm};
use ch01_router::chain::{
    expect_bias, expect_len, route_logits_with, route_on_device, BiasOwner, DeviceMatrix,
    DeviceRouter, DeviceRouterError, FiveLineChain, GateDtype, GateInputs, GateShape,
    RouterOutputs,
};
use ch01_router::config::{RouterConfig, Scoring};
use ch01_router::error::RouterError;
use ch01_router::routing::Routing;
use half::bf16;
use moe_kernels::blas::{linear, Linear};
use moe_kernels::{args, Device, DeviceBuffer, KernelArg, KernelSource, LaunchConfig, Module};
use std::sync::Arc;

/// `kernels/ch05_fused_router.cu`, built for the GPU (NVRTC at run time) and for the emulator.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch05_fused_router");

/// The launch geometry and limits, as `kernels/ch05_fused_router.cu` defines them.
pub mod geometry {
    moe_kernels::kernel_constants!("ch05_fused_router");
}
use geometry::*;

/// The row widths the kernel is compiled for (experts per row, at most), with their entry points:
/// the one-warp router's, the screened router's for a few rows (which widens a close cut) and
/// for many (which sends such a row to the one-warp router).
const WIDTHS: [(usize, &str, &str, &str); 7] = {
    // The names from the width, so that a row of the table cannot disagree with itself.
    macro_rules! width {
        ($w:literal) => {
            (
                $w,
                concat!("fused_router_e", $w),
                concat!("fused_router_screen_e", $w),
                concat!("fused_router_screen_many_e", $w),
            )
        };
    }
    [
        width!(128),
        width!(256),
        width!(288),
        width!(320),
        width!(384),
        width!(512),
        width!(1024),
    ]
};

/// The entry points of the narrowest width that holds `experts`.
fn width_for(experts: usize) -> Option<(&'static str, &'static str, &'static str)> {
    WIDTHS
        .iter()
        .find(|(w, ..)| *w >= experts)
        .map(|&(_, exact, few, many)| (exact, few, many))
}

/// The fused kernel's entry point for `experts` experts (the narrowest that holds the row).
pub fn kernel_for(experts: usize) -> Option<&'static str> {
    width_for(experts).map(|(exact, ..)| exact)
}

/// The screened kernel's entry point for `experts` experts and `rows` rows, as [`kernel_for`]:
/// up to [`SCREENED_FEW_ROWS`] rows the few-row one, past that the many-row one.
pub fn screened_kernel_for(experts: usize, rows: usize) -> Option<&'static str> {
    width_for(experts).map(|(_, few, many)| if rows <= SCREENED_FEW_ROWS { few } else { many })
}

/// The launch of the fused kernel for `rows` rows: one warp per row, 4 rows per block; a
/// programmatic dependent launch, so its blocks can be resident (their bias loaded) while the
/// kernel that writes the logits ends; the kernel waits (`moe_grid_wait`) before it reads them.
pub fn launch(rows: usize) -> LaunchConfig {
    LaunchConfig::blocks(
        rows.div_ceil(FR_ROWS_PER_BLOCK) as u32,
        32 * FR_ROWS_PER_BLOCK as u32,
    )
    .dependent()
}

// ANCHOR: row_form
/// How the fused kernel spreads a row over the GPU. Both give the same ids and weights, bit for
/// bit; they differ in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowForm {
    /// `fused_router_e{W}`: one warp per row, the row in its registers, k rounds of warp argmax.
    /// Fewer instructions per row than a block per row: the form for many rows of softmax and
    /// √softplus scores, and the only one with grouped selection.
    WarpPerRow,
    /// `fused_router_block`: one block per row, one thread per expert, the picks by two rank
    /// counts. More instructions per row but a much shorter chain: the form for few rows.
    BlockPerRow,
    /// `fused_router_screen_e{W}` (up to [`SCREENED_FEW_ROWS`] rows) and
    /// `fused_router_screen_many_e{W}` (more rows): one warp per row, the k best found on approximate sigmoid
    /// keys (two MUFU instructions an expert), then confirmed and ordered on exact ones; a row
    /// whose cut is too close to call takes every key near the cut and ranks them exactly (in
    /// `fused_router_screen_e{W}`; `..._many_e{W}` sends it to the one-warp router), and a row
    /// with a non-finite value (or with more picks and keys near its cut than a warp's 32 lanes)
    /// goes through the one-warp router. The same bits as the other
    /// forms; the fewest instructions per sigmoid row and the shortest chain, so the form for
    /// many of them and for a few. Other scorings and grouped selection run the one-warp router.
    Screened,
}

/// Up to how many rows [`RowForm::BlockPerRow`] is the default. `bench ch05` times both forms
/// (`fused_router_warp`, `fused_router_block`): the block form ahead at every count up to 96,
/// the one-warp form more than twice as fast at 8192, where the block form's extra instructions are
/// the time. 512 lies between, where a block per GLM-like row (288 threads) still fits on the
/// H200 at once (132 SMs × 2,048 threads hold 924); it is a choice, not a measured crossover.
pub const BLOCK_FORM_MAX_ROWS: usize = 512;

/// Up to how many rows [`RowForm::Screened`] is the default for sigmoid scores without groups,
/// ahead of the block form. Its warp per row has the shorter chain: in `bench ch05`, some 0.13 to
/// 0.38 µs less than a block per row at a few GLM-like rows. The count was chosen for the design
/// before the widened cut, in which a row whose cut the first screen could not call cost the launch
/// a second screen (0.5 to 0.75 µs), and one the second could not call the one-warp router (about
/// 3 µs): 2.0% and 0.23% of 100,000 random GLM-like rows on the H200 (the test
/// `random_100k_rows_glm_like`), so that the expected gain was gone at about 16 to 20 rows; 8 kept
/// a margin. A widened cut costs a few more rounds and one exact ranking instead (faster than the
/// second screen in `bench ch08`: `bench/results/h100/README.md`). `bench ch05` with it, on an
/// H100 (`bench/results/h100/logs/ch05_widened_s43.csv`), timed the screened form alone faster
/// than the block form at 1 to 6 GLM-like rows and slower at 8, one batch each: no case to move
/// the count either way. That run came before the few-row kernels took their picks' values from
/// registers, which made them faster still in `bench ch08`; they have not been timed against the
/// block form since. A choice, not a measured crossover.
pub const SCREENED_FEW_ROWS: usize = 8;

/// The form [`FusedTopk::new`] picks: for sigmoid scores without groups, the screened form up to
/// [`SCREENED_FEW_ROWS`] rows and past [`BLOCK_FORM_MAX_ROWS`], a block per row between; for the
/// other scorings without groups, a block per row up to [`BLOCK_FORM_MAX_ROWS`] rows, then one
/// warp per row; with groups, one warp per row (only it selects groups).
pub fn form_for(config: &RouterConfig, rows: usize) -> RowForm {
    let few = rows <= SCREENED_FEW_ROWS;
    match (config.grouping, rows <= BLOCK_FORM_MAX_ROWS, config.scoring) {
        (None, _, Scoring::Sigmoid) if few => RowForm::Screened,
        (None, true, _) => RowForm::BlockPerRow,
        (None, false, Scoring::Sigmoid) => RowForm::Screened,
        _ => RowForm::WarpPerRow,
    }
}

/// The launch of `fused_router_block`: one block per row, a thread per expert rounded up to
/// whole warps; a dependent launch, as [`launch`].
pub fn block_launch(rows: usize, experts: usize) -> LaunchConfig {
    LaunchConfig::blocks(rows as u32, 32 * experts.div_ceil(32) as u32).dependent()
}
// ANCHOR_END: row_form

// ANCHOR: limits
/// Checks `config` and the bias against `experts` (chapter 1's rules, in chapter 1's order),
/// then the fused kernel's limits: E ≤ 1024 (32 experts per lane), k ≤ 32 (a lane per pick),
/// at most 32 groups (a lane per group).
pub fn check_limits(
    config: &RouterConfig,
    experts: usize,
    bias: Option<&[f32]>,
) -> Result<(), DeviceRouterError> {
    config.validate(experts, bias)?;
    let limit = |what, limit, got| {
        if got > limit {
            Err(DeviceRouterError::Limit { what, limit, got })
        } else {
            Ok(())
        }
    };
    limit(
        "experts (the fused router keeps 32 per lane)",
        FR_MAX_EXPERTS,
        experts,
    )?;
    limit(
        "k (the fused router keeps one pick per lane)",
        FR_MAX_K,
        config.k,
    )?;
    if let Some(g) = config.grouping {
        limit(
            "n_group (the fused router keeps one group per lane)",
            FR_MAX_GROUPS,
            g.n_group,
        )?;
    }
    Ok(())
}
// ANCHOR_END: limits

/// Steps 2 and 3 in one kernel, for one shape: from `[rows, experts]` fp32 logits (and an fp32
/// bias when built with one) to ids and weights. What [`FusedRouter`] runs after its GEMM, and
/// what routes logits that are already on the device.
pub struct FusedTopk {
    module: Arc<Module>,
    config: RouterConfig,
    rows: usize,
    experts: usize,
    has_bias: bool,
    form: RowForm,
}

impl FusedTopk {
    /// Validates `config` and the bias against `experts` and the kernel's limits
    /// ([`check_limits`]); loads the kernels. The form is [`form_for`]'s.
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        rows: usize,
        experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        Self::with_form(device, config, rows, experts, bias, form_for(config, rows))
    }

    /// As [`FusedTopk::new`], in the form given: [`RowForm::BlockPerRow`] with grouped selection
    /// is a [`DeviceRouterError::Limit`] (n_group at most 1).
    pub fn with_form(
        device: &'static Device,
        config: &RouterConfig,
        rows: usize,
        experts: usize,
        bias: Option<&[f32]>,
        form: RowForm,
    ) -> Result<Self, DeviceRouterError> {
        check_limits(config, experts, bias)?;
        if let (RowForm::BlockPerRow, Some(g)) = (form, config.grouping) {
            return Err(DeviceRouterError::Limit {
                what: "n_group (the block-per-row form selects without groups)",
                limit: 1,
                got: g.n_group,
            });
        }
        Ok(FusedTopk {
            module: device.load(&KERNELS)?,
            config: config.clone(),
            rows,
            experts,
            has_bias: bias.is_some(),
            form,
        })
    }

    /// The form this router runs.
    pub fn form(&self) -> RowForm {
        self.form
    }

    /// The kernel one call launches.
    pub fn kernel(&self) -> &'static str {
        match self.form {
            RowForm::WarpPerRow => {
                kernel_for(self.experts).expect("experts checked against FR_MAX_EXPERTS")
            }
            RowForm::Screened => screened_kernel_for(self.experts, self.rows)
                .expect("experts checked against FR_MAX_EXPERTS"),
            RowForm::BlockPerRow => "fused_router_block",
        }
    }

    fn check(
        &self,
        bias: Option<&DeviceBuffer<f32>>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let k = self.config.k;
        expect_len("ids [T, k]", outputs.ids.len(), self.rows * k)?;
        expect_len("weights [T, k]", outputs.weights.len(), self.rows * k)?;
        expect_bias(self.has_bias, bias, self.experts, BiasOwner::Router)
    }

    // ANCHOR: enqueue_fused
    /// Queues the fused kernel on `logits [rows, experts]` f32 and the bias. Kernels:
    /// `fused_router_e{128,256,288,320,384,512,1024}(const float* logits, const float* bias,
    /// int* ids, float* weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    /// int renormalize, float scale)`, grid `⌈T / 4⌉`, blocks of 4 warps, one warp per row
    /// (`fused_router_screen_e{W}` the same); or
    /// `fused_router_block(logits, bias, ids, weights, T, E, k, scoring, renormalize, scale)`,
    /// grid `T`, blocks of `32 ⌈E / 32⌉` threads. An empty batch launches nothing.
    pub fn enqueue(
        &self,
        logits: &DeviceBuffer<f32>,
        bias: Option<&DeviceBuffer<f32>>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        expect_len("logits [T, E]", logits.len(), self.rows * self.experts)?;
        self.check(bias, outputs)?;
        if self.rows == 0 {
            return Ok(());
        }
        let c = &self.config;
        let scoring = match c.scoring {
            Scoring::Softmax => FR_SCORING_SOFTMAX,
            Scoring::Sigmoid => FR_SCORING_SIGMOID,
            Scoring::SqrtSoftplus => FR_SCORING_SQRT_SOFTPLUS,
        };
        let (n_group, topk_group) = c.grouping.map_or((0, 0), |g| (g.n_group, g.topk_group));
        // null: no bias
        let bias = bias.map_or(KernelArg::Ptr(0), KernelArg::from);
        // The same arguments for both forms but the groups, which only the one-warp form takes.
        let (rows, experts, k) = (self.rows as i32, self.experts as i32, c.k as i32);
        let mut a = args![
            logits,
            bias,
            outputs.ids,
            outputs.weights,
            rows,
            experts,
            k,
            scoring as i32
        ]
        .to_vec();
        let config = match self.form {
            RowForm::WarpPerRow | RowForm::Screened => {
                a.extend(args![n_group as i32, topk_group as i32]);
                launch(self.rows)
            }
            RowForm::BlockPerRow => block_launch(self.rows, self.experts),
        };
        a.extend(args![i32::from(c.renormalize), c.routed_scaling]);
        self.module.launch(self.kernel(), config, &a)?;
        Ok(())
    }
    // ANCHOR_END: enqueue_fused
}

/// Where a [`FusedRouter`] takes its logits from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsFrom {
    /// The tiny GEMM, at every row count (the same bits for a row whatever its batch).
    TinyGemm,
    /// The library GEMM: cuBLAS on the GPU (bf16 in, fp32 out; it picks its own kernels by
    /// shape, and may split the sum and add the parts in a second kernel), a reference GEMM on
    /// the emulator. What an engine runs above 16 rows.
    Blas,
}

/// The sizes the router's GEMM checks before it is built: E ≥ 1, and for the tiny GEMM whole
/// 16-byte slices of H.
fn check_shape(shape: GateShape, from: LogitsFrom) -> Result<(), DeviceRouterError> {
    if shape.experts == 0 {
        return Err(RouterError::NoExperts.into());
    }
    if from == LogitsFrom::TinyGemm {
        tiny_gemm::check_hidden(shape.hidden)?;
    }
    Ok(())
}

/// The inputs' bf16 buffers, checked against `shape` (`hidden` [T, H], `weight` [E, H]), or the
/// typed error naming the one that is not bf16 or not of its size.
fn bf16_inputs<'a>(
    router: &'static str,
    inputs: &GateInputs<'a>,
    shape: GateShape,
) -> Result<(&'a DeviceBuffer<bf16>, &'a DeviceBuffer<bf16>), DeviceRouterError> {
    match (inputs.hidden, inputs.weight) {
        (DeviceMatrix::Bf16(h), DeviceMatrix::Bf16(w)) => {
            expect_len("hidden [T, H]", h.len(), shape.rows * shape.hidden)?;
            expect_len("gate weight [E, H]", w.len(), shape.experts * shape.hidden)?;
            Ok((h, w))
        }
        (h, w) => {
            let (what, got) = if h.dtype() != GateDtype::Bf16 {
                ("hidden states", h.dtype())
            } else {
                ("gate weight", w.dtype())
            };
            Err(DeviceRouterError::Dtype { router, what, got })
        }
    }
}

// ANCHOR: fused_router
/// The fused pair for one shape on one device: a GEMM into fp32 logits (the tiny GEMM, or the
/// library GEMM with [`LogitsFrom::Blas`]), then the fused kernel. The logits buffer is
/// allocated up front, so [`DeviceRouter::enqueue`] only launches.
pub struct FusedRouter {
    device: &'static Device,
    tiny: Arc<Module>,
    topk: FusedTopk,
    shape: GateShape,
    from: LogitsFrom,
    gemm: GemmForm,            // the tiny GEMM's form (with LogitsFrom::TinyGemm)
    logits: DeviceBuffer<f32>, // [T, E] fp32
}

impl FusedRouter {
    /// The tiny GEMM + the fused kernel.
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: GateShape,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        Self::with_logits(device, config, shape, bias, LogitsFrom::TinyGemm)
    }

    /// The fused kernel after the GEMM `from`.
    pub fn with_logits(
        device: &'static Device,
        config: &RouterConfig,
        shape: GateShape,
        bias: Option<&[f32]>,
        from: LogitsFrom,
    ) -> Result<Self, DeviceRouterError> {
        check_shape(shape, from)?;
        let topk = FusedTopk::new(device, config, shape.rows, shape.experts, bias)?;
        Ok(FusedRouter {
            device,
            tiny: device.load(&tiny_gemm::KERNELS)?,
            topk,
            shape,
            from,
            gemm: tiny_gemm::form_for(shape.rows),
            logits: device.alloc(shape.rows * shape.experts)?,
        })
    }

    /// The same pair with the tiny GEMM in `form` at any row count, not [`tiny_gemm::form_for`]'s
    /// (the bench times the pair in each form; nothing changes with [`LogitsFrom::Blas`]).
    pub fn with_gemm_form(mut self, form: GemmForm) -> Self {
        self.gemm = form;
        self
    }

    /// The `[T, E]` fp32 logits of the last call (the example writes them out).
    pub fn logits(&self) -> &DeviceBuffer<f32> {
        &self.logits
    }

    /// The kernels one call launches, in order (cuBLAS's own kernels are one entry, `blas`).
    pub fn launch_names(&self) -> Vec<&'static str> {
        let gemm = match self.from {
            LogitsFrom::TinyGemm => {
                tiny_gemm::launch(self.gemm, self.shape.rows, self.shape.experts).0
            }
            LogitsFrom::Blas => "blas",
        };
        vec![gemm, self.topk.kernel()]
    }
}

impl DeviceRouter for FusedRouter {
    fn name(&self) -> &'static str {
        match self.from {
            LogitsFrom::TinyGemm => "fused",
            LogitsFrom::Blas => "blas+fused",
        }
    }

    fn shape(&self) -> GateShape {
        self.shape
    }

    fn config(&self) -> &RouterConfig {
        &self.topk.config
    }

    /// `hidden` [T, H] bf16, `weight` [E, H] bf16 and `bias` `[E]` f32 in; `ids` [T, k] i32 and
    /// `weights` [T, k] f32 out.
    fn enqueue(
        &self,
        inputs: &GateInputs<'_>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let (hidden, weight) = bf16_inputs(self.name(), inputs, self.shape)?;
        let GateShape {
            rows,
            hidden: h,
            experts,
        } = self.shape;
        self.topk.check(inputs.bias, outputs)?;
        if rows == 0 {
            return Ok(());
        }
        match self.from {
            LogitsFrom::TinyGemm => tiny_gemm::enqueue_as(
                self.gemm,
                &self.tiny,
                hidden,
                weight,
                &self.logits,
                rows,
                h,
                experts,
            )?,
            LogitsFrom::Blas => linear(
                self.device,
                Linear {
                    rows,
                    in_features: h,
                    out_features: experts,
                },
                &hidden.as_view(),
                &weight.as_view(),
                &self.logits.as_view(),
                false,
            )?,
        }
        self.topk.enqueue(&self.logits, inputs.bias, outputs)
    }
}
// ANCHOR_END: fused_router

/// The tiny GEMM, then chapter 1's chain from the logits on: what the fused kernel replaces,
/// with the same logits (the difference between the two is steps 2 and 3 alone).
pub struct TinyGemmChain {
    tiny: Arc<Module>,
    chain: FiveLineChain,
    shape: GateShape,
    logits: DeviceBuffer<f32>, // [T, E] fp32
}

impl TinyGemmChain {
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        shape: GateShape,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        check_shape(shape, LogitsFrom::TinyGemm)?;
        Ok(TinyGemmChain {
            tiny: device.load(&tiny_gemm::KERNELS)?,
            chain: FiveLineChain::new(device, config, shape, bias)?,
            shape,
            logits: device.alloc(shape.rows * shape.experts)?,
        })
    }

    /// How many kernels one call launches: the tiny GEMM and the chain's after its GEMM.
    pub fn launches_per_call(&self) -> usize {
        self.chain.launches_per_call()
    }
}

impl DeviceRouter for TinyGemmChain {
    fn name(&self) -> &'static str {
        "tiny+chain"
    }

    fn shape(&self) -> GateShape {
        self.shape
    }

    fn config(&self) -> &RouterConfig {
        self.chain.config()
    }

    fn enqueue(
        &self,
        inputs: &GateInputs<'_>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let (hidden, weight) = bf16_inputs(self.name(), inputs, self.shape)?;
        let s = self.shape;
        // The chain checks the outputs and the bias.
        tiny_gemm::enqueue(
            &self.tiny,
            hidden,
            weight,
            &self.logits,
            s.rows,
            s.hidden,
            s.experts,
        )?;
        self.chain
            .enqueue_from_logits(&self.logits, inputs.bias, outputs)
    }
}

/// Host in, host out, through the fused pair: `hidden` [T, H] and `weight` [E, H] (rounded to
/// bf16 on the way up), `bias` `[E]` f32; returns ids and weights.
pub fn route_fused(
    device: &'static Device,
    config: &RouterConfig,
    shape: GateShape,
    hidden: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Result<Routing, DeviceRouterError> {
    let router = FusedRouter::new(device, config, shape, bias)?;
    route_on_device(&router, device, GateDtype::Bf16, hidden, weight, bias)
}

/// Host in, host out, from logits: `logits` [rows, experts] f32 through the fused kernel alone,
/// in [`form_for`]'s form.
pub fn route_logits_fused(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
) -> Result<Routing, DeviceRouterError> {
    let form = form_for(config, rows);
    route_logits_fused_as(device, config, rows, experts, logits, bias, form)
}

/// As [`route_logits_fused`], in the form given.
pub fn route_logits_fused_as(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
    form: RowForm,
) -> Result<Routing, DeviceRouterError> {
    let topk = FusedTopk::with_form(device, config, rows, experts, bias, form)?;
    route_logits_with(
        device,
        rows,
        experts,
        config.k,
        logits,
        bias,
        &|logits, bias, outputs| topk.enqueue(logits, bias, outputs),
    )
}
