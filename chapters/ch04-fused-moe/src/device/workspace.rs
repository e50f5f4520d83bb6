//! What one call for a batch of T tokens needs beyond the weights ([`FusedWorkspace`]), and the
//! launches it will take ([`FusedDevice::launches`], [`FusedDevice::kernel_names`]).

use super::*;

/// What one call for a batch of T tokens needs beyond the weights: its plan, the alignment and
/// its outputs (tiled path), and the intermediate buffers. It depends on T only, never on the
/// routing.
pub struct FusedWorkspace {
    pub(super) layer: u64,
    pub(super) rows: usize,
    pub(super) plan: BatchPlan,
    /// Chapter 3's bookkeeping and its outputs: the tiled and grouped decode paths.
    pub(super) align: Option<(DeviceAlign, AlignBuffers)>,
    /// `[T, H]` the hidden states in bf16: the tiled and grouped decode paths (the decode
    /// kernels round as they load; the grouped ones read each row once per column and pair,
    /// from L1, and bf16 halves those bytes).
    pub(super) xb: Option<DeviceBuffer<bf16>>,
    /// `[T·k, 2I]` bf16 gate | up: [`Fusion::Unfused`] only.
    pub(super) gateup: Option<DeviceBuffer<bf16>>,
    /// `[T·k, I]` bf16, SwiGLU of each pair
    pub(super) act: DeviceBuffer<bf16>,
    /// `[T·k, H]` f32, each pair's weighted down projection: not with [`Fusion::SwiGluSumK`].
    pub(super) y: Option<DeviceBuffer<f32>>,
    pub(super) shared: Option<SharedWorkspace>,
}

/// The shared expert's part of a workspace. On the tiled path every token is a pair of the one
/// shared expert, laid out as chapter 3 would lay out T pairs of expert 0 (the identity, padded
/// to BLOCK_M); the decode kernels give it the rows after the routed pairs, the grouped decode
/// kernels the tiles after the routed tiles (tokens in order, BLOCK_M per tile).
pub(super) struct SharedWorkspace {
    pub(super) layout: Option<SharedLayout>,
    /// `[T, 2Is]` bf16: [`Fusion::Unfused`] only.
    pub(super) gateup: Option<DeviceBuffer<bf16>>,
    /// `[T, Is]` bf16
    pub(super) act: DeviceBuffer<bf16>,
    /// `[T, H]` f32: not with [`Fusion::SwiGluSumK`].
    pub(super) y: Option<DeviceBuffer<f32>>,
    /// `[T]` f32, the gate's logit
    pub(super) gate: Option<DeviceBuffer<f32>>,
}

pub(super) struct SharedLayout {
    pub(super) block_m: usize,
    pub(super) tiles: usize,
    pub(super) sorted_ids: DeviceBuffer<i32>,
    pub(super) expert_ids: DeviceBuffer<i32>,
    pub(super) num_post: DeviceBuffer<i32>,
}

impl FusedWorkspace {
    /// The tile height of the routed experts' layout (0 on the decode path: no layout).
    pub fn block_m(&self) -> usize {
        self.plan.block_m
    }
    /// The batch size it was built for.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// What runs this batch.
    pub fn plan(&self) -> BatchPlan {
        self.plan
    }
}

impl FusedDevice {
    /// Allocates what one call for a batch of `rows` tokens needs.
    pub fn workspace(&self, rows: usize) -> Result<FusedWorkspace, MoeError> {
        let c = &self.config;
        let dev = self.device;
        let (k, h, i) = (c.router.k, c.hidden, c.intermediate);
        // The decode grids hold T·k pair rows and T shared rows: both within an i32.
        let pairs = rows
            .checked_mul(k)
            .filter(|&p| p.checked_add(rows).is_some_and(|n| n <= i32::MAX as usize));
        let Some(pairs) = pairs else {
            return Err(MoeError::Config {
                field: "tokens x k",
                expected: format!("at most {} (with the tokens added)", i32::MAX),
                found: format!("{rows} x {k}"),
            });
        };
        let plan = self.plan_for(rows)?;
        let tiled = plan.path == Path::Tiled;
        let unfused = plan.fusion == Fusion::Unfused;
        let sum_k = plan.fusion == Fusion::SwiGluSumK;
        // Chapter 3's layout and the bf16 input: the tiled and the grouped decode paths.
        let laid_out = plan.path != Path::Decode;
        let align = match laid_out {
            true => {
                let a =
                    DeviceAlign::new(dev, pairs, c.experts, plan.block_m).map_err(align_error)?;
                let out = a.alloc_outputs(dev).map_err(align_error)?;
                Some((a, out))
            }
            false => None,
        };
        let shared = match &self.weights.experts.shared {
            Some(s) => {
                let layout = match tiled {
                    true => {
                        // Versions 4 to 11's tiles are 64 rows per warpgroup, the shared expert's too.
                        let bm = plan
                            .tile
                            .required_block_m()
                            .unwrap_or_else(|| choose_block_m(rows, 1));
                        let tiles = rows.div_ceil(bm);
                        let mut sorted: Vec<i32> = (0..rows as i32).collect();
                        sorted.resize(tiles * bm, rows as i32); // the placeholder: T
                        Some(SharedLayout {
                            block_m: bm,
                            tiles,
                            sorted_ids: dev.upload(&sorted)?,
                            expert_ids: dev.upload(&vec![0i32; tiles])?,
                            num_post: dev.upload(&[(tiles * bm) as i32])?,
                        })
                    }
                    false => None,
                };
                Some(SharedWorkspace {
                    layout,
                    gateup: match unfused {
                        true => Some(dev.alloc(rows * 2 * s.inter)?),
                        false => None,
                    },
                    act: dev.alloc(rows * s.inter)?,
                    y: match sum_k {
                        true => None,
                        false => Some(dev.alloc(rows * h)?),
                    },
                    gate: match s.gate {
                        Some(_) => Some(dev.alloc(rows)?),
                        None => None,
                    },
                })
            }
            None => None,
        };
        Ok(FusedWorkspace {
            layer: self.id,
            rows,
            plan,
            align,
            xb: match laid_out {
                true => Some(dev.alloc(rows * h)?),
                false => None,
            },
            gateup: match unfused {
                true => Some(dev.alloc(pairs * 2 * i)?),
                false => None,
            },
            act: dev.alloc(pairs * i)?,
            y: match sum_k {
                true => None,
                false => Some(dev.alloc(pairs * h)?),
            },
            shared,
        })
    }

    /// The launches [`Self::enqueue_experts`] makes for `ws`: this chapter's kernels and, on the
    /// tiled and grouped decode paths, chapter 3's (1 or 2, by the number of pairs). It depends
    /// on the batch size, never on the routing.
    pub fn launches(&self, ws: &FusedWorkspace) -> usize {
        self.launches_from(ws, Dtype::F32)
    }

    /// [`Self::launches`] for hidden states handed in `input` ([`Self::enqueue_experts_from`]).
    pub fn launches_from(&self, ws: &FusedWorkspace, input: Dtype) -> usize {
        if ws.rows == 0 {
            return 0;
        }
        ws.align.as_ref().map_or(0, |(a, _)| a.launches()) + self.kernel_names_from(ws, input).len()
    }

    /// [`Self::launches_from`] with the layout made by the caller
    /// ([`Self::enqueue_experts_laid_out`]): chapter 3's launches left out.
    pub fn launches_laid_out(&self, ws: &FusedWorkspace, input: Dtype) -> usize {
        self.launches_from(ws, input) - self.align_launches(ws)
    }

    /// Chapter 3's launches among them (0 on the decode path).
    pub fn align_launches(&self, ws: &FusedWorkspace) -> usize {
        match ws.rows {
            0 => 0,
            _ => ws.align.as_ref().map_or(0, |(a, _)| a.launches()),
        }
    }

    /// This chapter's kernels among those launches, in order (`family::kernel`): on the tiled and
    /// grouped decode paths chapter 3's come between `fused_to_bf16` and the first GEMM.
    pub fn kernel_names(&self, ws: &FusedWorkspace) -> Vec<String> {
        self.kernel_names_from(ws, Dtype::F32)
    }

    /// [`Self::kernel_names`] for hidden states handed in `input`: from bf16 no `fused_to_bf16`,
    /// and the decode path's GEMM 1 `_bf16`.
    pub fn kernel_names_from(&self, ws: &FusedWorkspace, input: Dtype) -> Vec<String> {
        let mut v = self.kernel_names_f32(ws);
        if input == Dtype::Bf16 {
            v.retain(|n| n != "ch04_fused_moe::fused_to_bf16");
            for n in &mut v {
                if n.starts_with("ch04_fused_moe::decode_gemm1_") {
                    n.push_str("_bf16");
                }
            }
        }
        v
    }

    fn kernel_names_f32(&self, ws: &FusedWorkspace) -> Vec<String> {
        if ws.rows == 0 {
            return Vec::new();
        }
        let f = |n: &str| format!("ch04_fused_moe::{n}");
        let plan = ws.plan;
        let shared = self.weights.experts.shared.as_ref();
        let gated = shared.is_some_and(|s| s.gate.is_some());
        let mut v = Vec::new();
        match plan.path {
            Path::Tiled => {
                let t = |n: &str| f(&plan.tile.kernel(n));
                let expert = |v: &mut Vec<String>| match plan.fusion {
                    Fusion::Unfused => {
                        v.extend([t("fused_gemm1_gateup"), f("fused_swiglu"), t("fused_gemm2")])
                    }
                    _ => v.extend([t("fused_gemm1_swiglu"), t("fused_gemm2")]),
                };
                v.push(f("fused_to_bf16"));
                expert(&mut v);
                if shared.is_some() {
                    expert(&mut v);
                    if gated {
                        v.push(f("fused_gate_logit"));
                    }
                }
                v.push(f("fused_combine"));
            }
            Path::Decode => {
                // The geometry's entry points (`_na`: the weights streamed).
                let d = |n: &str| f(&plan.decode.kernel(n));
                match plan.fusion {
                    Fusion::Unfused => {
                        v.extend([d("decode_gemm1_gateup"), f("fused_swiglu")]);
                        if shared.is_some() {
                            v.push(f("fused_swiglu"));
                        }
                        v.extend([d("decode_gemm2"), f("fused_combine")]);
                    }
                    Fusion::SwiGlu => v.extend([
                        d("decode_gemm1_swiglu"),
                        d("decode_gemm2"),
                        f("fused_combine"),
                    ]),
                    Fusion::SwiGluSumK => {
                        v.extend([d("decode_gemm1_swiglu"), d("decode_gemm2_sum")])
                    }
                }
            }
            Path::DecodeGrouped => {
                v.push(f("fused_to_bf16"));
                match plan.fusion {
                    Fusion::Unfused => {
                        v.extend([f("decode_grouped_gemm1_gateup"), f("fused_swiglu")]);
                        if shared.is_some() {
                            v.push(f("fused_swiglu"));
                        }
                    }
                    _ => v.push(f("decode_grouped_gemm1_swiglu")),
                }
                match plan.fusion {
                    Fusion::SwiGluSumK => v.push(f("decode_gemm2_sum")),
                    _ => v.extend([f("decode_grouped_gemm2"), f("fused_combine")]),
                }
            }
        }
        v
    }
}
