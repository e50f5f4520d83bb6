//! Radix select (`kernels/ch11_merged_gate.cu`, `radix_topk`): steps 2 and 3 of the router with
//! one block (or warp) per row, the top-k found by binning the leading bits of order-preserving
//! keys instead of chapter 5's k rounds of warp argmax, with the same ids and weights bit for bit.
//!
//! Three forms ([`RadixForm`]): a block of eight warps per row (`radix_topk`), a block of four
//! (`radix_topk_half`), and a warp per row (`radix_topk_warp`, four rows a block), which waits at
//! the warp's barrier instead of the block's. In a block, warp 0 scans each pass's histogram
//! while the others wait. The same instructions otherwise, so the same bits.
//! [`RadixTopk::new`] picks by the row count ([`RadixForm::for_rows`]): eight warps below
//! [`RADIX_HALF_FROM_ROWS`] rows, four below [`RADIX_WARP_FROM_ROWS`], one from there.
//!
//! [`RadixTopk`] takes fp32 logits (or bf16 ones, [`Logits::Bf16`]) at any row stride, so that
//! it can read the logits where a merged GEMM leaves them: the first E columns of a wider row.

use ch01_router::chain::{
    expect_bias, expect_len, route_logits_with, BiasOwner, DeviceRouterError, RouterOutputs,
};
use ch01_router::config::{RouterConfig, Scoring};
use ch01_router::routing::Routing;
use half::bf16;
use moe_kernels::{args, Device, DeviceBuffer, KernelArg, KernelSource, LaunchConfig, Module};
use std::sync::Arc;

/// `kernels/ch11_merged_gate.cu`, built for the GPU (NVRTC at run time) and for the emulator.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch11_merged_gate");

/// The limits and the launch geometry, as `kernels/ch11_merged_gate.cu` defines them.
pub mod geometry {
    moe_kernels::kernel_constants!("ch11_merged_gate");
}
use geometry::*;

// ANCHOR: limits
/// Checks `config` and the bias against `experts` (chapter 1's rules, in chapter 1's order),
/// then the kernel's limits: E ≤ 1024 (an id fits the 10 bits under the key), k ≤ 32 (one warp
/// orders the picks), at most 32 groups (a lane of warp 0 per group).
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
        "experts (radix select packs an id into 10 bits)",
        RS_MAX_EXPERTS,
        experts,
    )?;
    limit(
        "k (radix select orders the picks with one warp)",
        RS_MAX_K,
        config.k,
    )?;
    if let Some(g) = config.grouping {
        limit(
            "n_group (radix select keeps one group per lane)",
            RS_MAX_GROUPS,
            g.n_group,
        )?;
    }
    Ok(())
}
// ANCHOR_END: limits

/// The threads of one row's block: a warp per 32 experts, at most `RS_THREADS` (256).
pub fn threads_for(experts: usize) -> u32 {
    (32 * experts.div_ceil(32)).clamp(32, RS_THREADS) as u32
}

/// The launch for `rows` rows: one block per row, a programmatic dependent launch (its blocks may
/// start while the GEMM ahead ends; the kernel waits before it reads the logits).
pub fn launch(rows: usize, experts: usize) -> LaunchConfig {
    LaunchConfig::blocks(rows as u32, threads_for(experts)).dependent()
}

/// Which kernel routes a row: a block of eight warps, a block of four, or one warp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RadixForm {
    /// `radix_topk`, `radix_topk_bf16`: a block per row, [`threads_for`]`(E)` threads.
    #[default]
    Block,
    /// `radix_topk_half`, `radix_topk_half_bf16`: a block per row of at most `RS_HALF_THREADS`
    /// (128) threads, four warps.
    Half,
    /// `radix_topk_warp`, `radix_topk_warp_bf16`: a warp per row, `RS_WARP_ROWS` rows a block.
    Warp,
}

/// From how many rows [`RadixForm::for_rows`] takes the half-block form, and
/// [`RADIX_WARP_FROM_ROWS`] the warp form. Measured on the H100 with the probe
/// `tools/gpu/probes/ch11_radix_times.cu` (the two block forms at 1 to 4,096 rows, 256, 512 and
/// 2,048 among them, the warp form from 1,024 to 8,192;
/// `bench/results/h100/logs/ch11_radix_times_s36.txt`) and by `bench ch11` (the `radix_block`,
/// `radix_half` and `radix_warp` rows of `ch11.csv`): eight warps a row lead up
/// to 512 rows, where a row's latency is the time; four lead at 1,024, where the rows' work is,
/// and seven warps of eight wait while one scans a pass's histogram; at 2,048 and 4,096 four
/// warps a row and one take about the same time, and at 8,192 one is far ahead, so the warp
/// form from 2,048.
pub const RADIX_HALF_FROM_ROWS: usize = 1024;
/// See [`RADIX_HALF_FROM_ROWS`].
pub const RADIX_WARP_FROM_ROWS: usize = 2048;

impl RadixForm {
    /// The three forms, the widest first.
    pub const ALL: [RadixForm; 3] = [RadixForm::Block, RadixForm::Half, RadixForm::Warp];

    /// The form for a batch of `rows` rows: the block form below [`RADIX_HALF_FROM_ROWS`], the
    /// half-block form up to [`RADIX_WARP_FROM_ROWS`], the warp form from there.
    pub fn for_rows(rows: usize) -> RadixForm {
        if rows >= RADIX_WARP_FROM_ROWS {
            RadixForm::Warp
        } else if rows >= RADIX_HALF_FROM_ROWS {
            RadixForm::Half
        } else {
            RadixForm::Block
        }
    }

    /// The kernel of this form for fp32 logits, or (`bf16`) for bf16 ones.
    pub fn kernel(self, bf16: bool) -> &'static str {
        match (self, bf16) {
            (RadixForm::Block, false) => "radix_topk",
            (RadixForm::Block, true) => "radix_topk_bf16",
            (RadixForm::Half, false) => "radix_topk_half",
            (RadixForm::Half, true) => "radix_topk_half_bf16",
            (RadixForm::Warp, false) => "radix_topk_warp",
            (RadixForm::Warp, true) => "radix_topk_warp_bf16",
        }
    }

    /// The launch for `rows` rows of `experts`: a programmatic dependent launch, as [`launch`].
    pub fn launch(self, rows: usize, experts: usize) -> LaunchConfig {
        match self {
            RadixForm::Block => launch(rows, experts),
            RadixForm::Half => LaunchConfig::blocks(
                rows as u32,
                threads_for(experts).min(RS_HALF_THREADS as u32),
            )
            .dependent(),
            RadixForm::Warp => LaunchConfig::blocks(
                rows.div_ceil(RS_WARP_ROWS) as u32,
                (32 * RS_WARP_ROWS) as u32,
            )
            .dependent(),
        }
    }
}

/// The kernel's `scoring` argument.
pub(crate) fn scoring_arg(s: Scoring) -> i32 {
    (match s {
        Scoring::Softmax => RS_SCORING_SOFTMAX,
        Scoring::Sigmoid => RS_SCORING_SIGMOID,
        Scoring::SqrtSoftplus => RS_SCORING_SQRT_SOFTPLUS,
    }) as i32
}

/// Where the logits are: `[T, ld]` row-major, row t's E logits first in its row.
#[derive(Clone, Copy)]
pub enum Logits<'a> {
    /// fp32, as the router's own GEMM or the merged GEMM writes them.
    F32 {
        buf: &'a DeviceBuffer<f32>,
        ld: usize,
    },
    /// bf16, as a GEMM with bf16 output writes them (the bf16-output variant).
    Bf16 {
        buf: &'a DeviceBuffer<bf16>,
        ld: usize,
    },
}

/// Steps 2 and 3 by radix select, for one shape: from `[rows, experts]` logits (and an fp32 bias
/// when built with one) to ids and weights.
pub struct RadixTopk {
    module: Arc<Module>,
    pub(crate) config: RouterConfig,
    rows: usize,
    experts: usize,
    has_bias: bool,
    form: RadixForm,
}

impl RadixTopk {
    /// Validates `config` and the bias against `experts` and the kernel's limits
    /// ([`check_limits`]); loads the kernels, of the form [`RadixForm::for_rows`] picks for
    /// `rows` ([`RadixTopk::with_form`] sets another).
    pub fn new(
        device: &'static Device,
        config: &RouterConfig,
        rows: usize,
        experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Self, DeviceRouterError> {
        check_limits(config, experts, bias)?;
        Ok(RadixTopk {
            module: device.load(&KERNELS)?,
            config: config.clone(),
            rows,
            experts,
            has_bias: bias.is_some(),
            form: RadixForm::for_rows(rows),
        })
    }

    /// The same with the kernels of `form`.
    pub fn with_form(mut self, form: RadixForm) -> Self {
        self.form = form;
        self
    }

    /// The form its kernels take.
    pub fn form(&self) -> RadixForm {
        self.form
    }

    /// The module the kernels were loaded into (the merged gate launches from it too).
    pub(crate) fn module(&self) -> &Module {
        &self.module
    }

    /// Checks the bias and the outputs against the shape this was built for.
    pub(crate) fn check(
        &self,
        bias: Option<&DeviceBuffer<f32>>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let k = self.config.k;
        expect_len("ids [T, k]", outputs.ids.len(), self.rows * k)?;
        expect_len("weights [T, k]", outputs.weights.len(), self.rows * k)?;
        expect_bias(self.has_bias, bias, self.experts, BiasOwner::Router)
    }

    /// The arguments every kernel of the family takes after its own: T, E, k, scoring, n_group,
    /// topk_group, renormalize, scale.
    pub(crate) fn tail_args(&self) -> [KernelArg; 8] {
        let c = &self.config;
        let (n_group, topk_group) = c.grouping.map_or((0, 0), |g| (g.n_group, g.topk_group));
        args![
            self.rows as i32,
            self.experts as i32,
            c.k as i32,
            scoring_arg(c.scoring),
            n_group as i32,
            topk_group as i32,
            i32::from(c.renormalize),
            c.routed_scaling
        ]
    }

    // ANCHOR: enqueue_radix
    /// Queues radix select on `logits` (`[rows, ld]`, ld ≥ experts) and the bias. Kernels:
    /// `radix_topk(const float* logits, int ld, const float* bias, int* ids, float* weights,
    /// int T, int E, int k, int scoring, int n_group, int topk_group, int renormalize, float
    /// scale)` and `radix_topk_bf16` (the same with bf16 logits); grid T, blocks of
    /// [`threads_for`]`(E)` threads; in the half-block form `radix_topk_half` and
    /// `radix_topk_half_bf16`, in the warp form `radix_topk_warp` and `radix_topk_warp_bf16`
    /// ([`RadixForm::launch`]). An empty batch launches nothing.
    pub fn enqueue(
        &self,
        logits: Logits<'_>,
        bias: Option<&DeviceBuffer<f32>>,
        outputs: &RouterOutputs<'_>,
    ) -> Result<(), DeviceRouterError> {
        let (bf16, len, ld, ptr) = match logits {
            Logits::F32 { buf, ld } => (false, buf.len(), ld, KernelArg::from(buf)),
            Logits::Bf16 { buf, ld } => (true, buf.len(), ld, KernelArg::from(buf)),
        };
        let name = self.form.kernel(bf16);
        if ld < self.experts {
            return Err(DeviceRouterError::Shape {
                what: "the logits' row stride (at least E)",
                expected: self.experts,
                got: ld,
            });
        }
        expect_len("logits [T, ld]", len, self.rows * ld)?;
        self.check(bias, outputs)?;
        if self.rows == 0 {
            return Ok(());
        }
        let bias = bias.map_or(KernelArg::Ptr(0), KernelArg::from); // null: no bias
        let mut a = vec![
            ptr,
            KernelArg::from(ld as i32),
            bias,
            KernelArg::from(outputs.ids),
            KernelArg::from(outputs.weights),
        ];
        a.extend(self.tail_args());
        self.module
            .launch(name, self.form.launch(self.rows, self.experts), &a)?;
        Ok(())
    }
    // ANCHOR_END: enqueue_radix
}

/// Host in, host out: `logits` [rows, experts] f32 through radix select.
pub fn route_logits_radix(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
) -> Result<Routing, DeviceRouterError> {
    route_logits_radix_in(
        device,
        config,
        rows,
        experts,
        logits,
        bias,
        RadixForm::for_rows(rows),
    )
}

/// [`route_logits_radix`] with the kernels of `form`.
pub fn route_logits_radix_in(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &[f32],
    bias: Option<&[f32]>,
    form: RadixForm,
) -> Result<Routing, DeviceRouterError> {
    let topk = RadixTopk::new(device, config, rows, experts, bias)?.with_form(form);
    route_logits_with(
        device,
        rows,
        experts,
        config.k,
        logits,
        bias,
        &|logits, bias, outputs| {
            topk.enqueue(
                Logits::F32 {
                    buf: logits,
                    ld: experts,
                },
                bias,
                outputs,
            )
        },
    )
}

// ANCHOR: literal
/// The literal loop of radix select on the host, for one row of ordered keys (0: not a
/// candidate): the pass at each digit, as the kernel runs it. Returns the selected ids in
/// selection order and the number of passes. What the book's listing and the example show; the
/// kernel's test compares the kernel with chapter 5's, not with this.
pub fn radix_select_row(ordered: &[u32], k: usize) -> (Vec<usize>, usize) {
    let id_bits = RS_ID_BITS as u32;
    let top = RS_MAX_EXPERTS as u64 - 1;
    let packed: Vec<u64> = ordered
        .iter()
        .enumerate()
        .filter(|(_, &o)| o != 0)
        .map(|(e, &o)| ((o as u64) << id_bits) | (top - e as u64))
        .collect();
    let want = k.min(packed.len());
    let (mut prefix, mut shift, mut remaining, mut passes) = (0u64, 32 + id_bits, want, 0);
    let mut done = want == packed.len();
    while !done {
        let width = shift.min(RS_DIGIT_BITS as u32);
        let next = shift - width;
        let mut hist = vec![0usize; 1 << width];
        for &p in packed.iter().filter(|&&p| p >> shift == prefix) {
            hist[((p >> next) & ((1 << width) - 1)) as usize] += 1;
        }
        // From the top bin down to the one that holds the cut.
        let mut above = 0;
        let bin = (0..hist.len())
            .rev()
            .find(|&b| {
                if above + hist[b] >= remaining {
                    true
                } else {
                    above += hist[b];
                    false
                }
            })
            .expect("the prefix's numbers hold the cut");
        remaining -= above;
        done = hist[bin] == remaining;
        prefix = (prefix << width) | bin as u64;
        shift = next;
        passes += 1;
    }
    let mut chosen: Vec<u64> = packed
        .into_iter()
        .filter(|p| p >> shift >= prefix)
        .collect();
    chosen.sort_unstable_by(|a, b| b.cmp(a));
    let ids = chosen.iter().map(|p| (top - (p & top)) as usize).collect();
    (ids, passes)
}
// ANCHOR_END: literal

/// A rank key as the kernel orders it (`rs_order`): the float's bits made monotone, -0 as +0.
pub fn order(key: f32) -> u32 {
    let u = (key + 0.0).to_bits();
    if u & 0x8000_0000 != 0 {
        !u
    } else {
        u | 0x8000_0000
    }
}
