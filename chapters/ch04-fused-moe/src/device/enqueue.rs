//! The launches: [`FusedDevice::enqueue_experts`] and the tiled and decode paths' kernels, each
//! a safe wrapper that checks its buffers and queues one kernel.

use super::*;

/// The hidden states `[T, H]` as a layer is handed them: f32 (each value rounded to bf16 where it
/// is read), or bf16 already (an engine's activations; chapter 6's router reads the same copy).
/// The same values either way, so the same bits.
#[derive(Clone, Copy)]
pub enum Hidden<'a> {
    F32(&'a DeviceBuffer<f32>),
    Bf16(&'a DeviceBuffer<bf16>),
}

impl Hidden<'_> {
    fn len(&self) -> usize {
        match self {
            Hidden::F32(b) => b.len(),
            Hidden::Bf16(b) => b.len(),
        }
    }
    fn arg(&self) -> KernelArg {
        match self {
            Hidden::F32(b) => KernelArg::from(*b),
            Hidden::Bf16(b) => KernelArg::from(*b),
        }
    }
    /// The input's type.
    pub fn dtype(&self) -> Dtype {
        match self {
            Hidden::F32(_) => Dtype::F32,
            Hidden::Bf16(_) => Dtype::Bf16,
        }
    }
}

/// Chapter 3's layout of a batch made before the experts' call (by chapter 8's routing stage):
/// the pairs sorted by expert and padded to the workspace's BLOCK_M, the expert of each tile, the
/// padded total. [`FusedDevice::enqueue_experts_laid_out`] reads it instead of running chapter
/// 3's align.
#[derive(Clone, Copy)]
pub struct Layout<'a> {
    /// `[capacity]` i32
    pub sorted_ids: &'a DeviceBuffer<i32>,
    /// `[max_tiles]` i32
    pub expert_ids: &'a DeviceBuffer<i32>,
    /// `[1]` i32
    pub num_post: &'a DeviceBuffer<i32>,
}

/// What one [`FusedDevice::enqueue_experts`] works on: its buffers, and the batch's sizes T, k,
/// H, I, E and P = T·k.
#[derive(Clone, Copy)]
pub(super) struct Batch<'a> {
    pub(super) hidden: Hidden<'a>,
    pub(super) ids: &'a DeviceBuffer<i32>,
    /// The layout made by the caller, or None: chapter 3's align makes it here.
    pub(super) layout: Option<Layout<'a>>,
    pub(super) weights: &'a DeviceBuffer<f32>,
    pub(super) out: &'a DeviceBuffer<f32>,
    pub(super) rows: usize,
    pub(super) k: usize,
    pub(super) h: usize,
    pub(super) i: usize,
    pub(super) e: usize,
    pub(super) pairs: usize,
}

impl FusedDevice {
    // ANCHOR: gemm_launches
    /// `act [P, I] = SwiGLU(x[p / k] · w13[e]ᵀ)` for the pairs of every tile of a layout
    /// ([`Fusion::Unfused`]: `gateup [P, 2I] = x[p / k] · w13[e]ᵀ`, no SwiGLU).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm1(
        &self,
        plan: &BatchPlan,
        x: &DeviceBuffer<bf16>,
        w13: &DeviceBuffer<bf16>,
        layout: (&DeviceBuffer<i32>, &DeviceBuffer<i32>, &DeviceBuffer<i32>),
        tiles: usize,
        out: &DeviceBuffer<bf16>,
        (pairs, k, inter, experts, block_m): (usize, usize, usize, usize, usize),
        map: TensorMap,
    ) -> Result<(), MoeError> {
        let h = self.config.hidden;
        let tile = plan.tile;
        let (col_blocks, name) = match plan.fusion {
            Fusion::Unfused => (
                (2 * inter).div_ceil(tile.bn()),
                tile.kernel("fused_gemm1_gateup"),
            ),
            _ => (
                inter.div_ceil(tile.bn1()),
                tile.kernel("fused_gemm1_swiglu"),
            ),
        };
        let mut cfg = LaunchConfig::blocks(1, tile.threads() as u32)
            .with_shared(tile.shared_bytes(block_m) as u32);
        (cfg.grid.0, cfg.grid.1) =
            tile.grid(tiles, col_blocks, self.multiprocessors(), self.grouped);
        let (sorted, expert_ids, num_post) = layout;
        self.module.launch(
            &name,
            cfg,
            &args![
                x,
                w13,
                sorted,
                expert_ids,
                num_post,
                out,
                int(pairs),
                int(k),
                int(h),
                int(inter),
                int(experts),
                int(block_m)
            ]
            .into_iter()
            .chain(self.map_arg(tile, map)?)
            .collect::<Vec<_>>(),
        )?;
        Ok(())
    }

    /// `y [P, H] = weight[p] · (act[p] · w2[e]ᵀ)` (no weight: null) for every tile of a layout;
    /// `y_bf16`: each value rounded to bf16, written into the first half of `y`'s bytes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm2(
        &self,
        tile: TileConfig,
        act: &DeviceBuffer<bf16>,
        w2: &DeviceBuffer<bf16>,
        layout: (&DeviceBuffer<i32>, &DeviceBuffer<i32>, &DeviceBuffer<i32>),
        tiles: usize,
        weight: KernelArg,
        y: &DeviceBuffer<f32>,
        (pairs, inter, experts, block_m): (usize, usize, usize, usize),
        y_bf16: bool,
        map: TensorMap,
    ) -> Result<(), MoeError> {
        let h = self.config.hidden;
        let mut cfg = LaunchConfig::blocks(1, tile.threads() as u32)
            .with_shared(tile.shared_bytes(block_m) as u32);
        (cfg.grid.0, cfg.grid.1) = tile.grid(
            tiles,
            h.div_ceil(tile.bn()),
            self.multiprocessors(),
            self.grouped,
        );
        // Versions 8, 10 and 11: a dependent launch of GEMM 1, whose producer asks for its first
        // weight slices before it waits for act (kernels/ch04/hopper.cuh, `ws_producer`).
        // Version 9's clusters stay plain launches.
        cfg.dependent = tile.ws() && !tile.mc();
        let (sorted, expert_ids, num_post) = layout;
        self.module.launch(
            &tile.kernel("fused_gemm2"),
            cfg,
            &args![
                act,
                w2,
                sorted,
                expert_ids,
                num_post,
                weight,
                y,
                int(pairs),
                int(h),
                int(inter),
                int(experts),
                int(block_m),
                int(y_bf16 as usize)
            ]
            .into_iter()
            .chain(self.map_arg(tile, map)?)
            .collect::<Vec<_>>(),
        )?;
        Ok(())
    }
    // ANCHOR_END: gemm_launches

    /// Version 7's last argument: the address of `map` in device memory (other versions: none).
    /// The device's multiprocessors: version 10's grid (1 on the emulator, which runs no
    /// version 10).
    pub(super) fn multiprocessors(&self) -> usize {
        self.device.multiprocessors().unwrap_or(1)
    }

    pub(super) fn map_arg(
        &self,
        tile: TileConfig,
        map: TensorMap,
    ) -> Result<Option<KernelArg>, MoeError> {
        if !tile.tma() {
            return Ok(None);
        }
        let maps = self.weights.maps.as_ref().ok_or_else(|| MoeError::Config {
            field: "tile configuration",
            expected: "an sm_90a GPU and H and I multiples of 8 (the tensor maps of version 7)"
                .into(),
            found: tile.name(),
        })?;
        Ok(Some(KernelArg::Ptr(maps.device_ptr() + 128 * map as u64)))
    }

    /// `act [rows, I] = SwiGLU(gateup [rows, 2I])`: the unfused layer's elementwise kernel.
    pub(super) fn swiglu(
        &self,
        gateup: &DeviceBuffer<bf16>,
        act: &DeviceBuffer<bf16>,
        rows: usize,
        inter: usize,
    ) -> Result<(), MoeError> {
        self.module.launch(
            "fused_swiglu",
            LaunchConfig::for_elements(rows * inter, FUSED_ELEMENTWISE_THREADS as u32),
            &args![gateup, act, rows as i64, int(inter)],
        )?;
        Ok(())
    }

    /// `xb = bf16(hidden)`, `n` values: [`FUSED_TO_BF16_VALUES`] a thread.
    pub(super) fn to_bf16(
        &self,
        hidden: &DeviceBuffer<f32>,
        xb: &DeviceBuffer<bf16>,
        n: usize,
    ) -> Result<(), MoeError> {
        self.module.launch(
            "fused_to_bf16",
            LaunchConfig::for_elements(
                n.div_ceil(FUSED_TO_BF16_VALUES),
                FUSED_ELEMENTWISE_THREADS as u32,
            ),
            &args![hidden, xb, n as i64],
        )?;
        Ok(())
    }

    /// `out[t] = Σⱼ y[t·k + j]` (+ the shared expert's `shared_y[t]`, times the sigmoid of
    /// `shared_gate[t]` when gated), j in order: the last kernel of both paths but a fused sum.
    /// `y_bf16`: `y` holds bf16 values (the tiled path's GEMM 2 with [`FusedDevice::with_bf16_y`]).
    pub(super) fn combine(
        &self,
        b: Batch,
        y: &DeviceBuffer<f32>,
        y_bf16: bool,
        shared_y: KernelArg,
        shared_gate: KernelArg,
    ) -> Result<(), MoeError> {
        let (rows, h) = (b.rows, b.h);
        self.module.launch(
            "fused_combine",
            // A dependent launch: it waits for the down projection's y in the kernel.
            LaunchConfig::for_elements(rows * h, FUSED_ELEMENTWISE_THREADS as u32).dependent(),
            &args![
                y,
                int(y_bf16 as usize),
                shared_y,
                shared_gate,
                b.out,
                int(rows),
                int(h),
                int(b.k)
            ],
        )?;
        Ok(())
    }

    // ANCHOR: enqueue_experts
    /// Queues the experts: `hidden` [T, H] f32 and the routing on the device (`ids` [T, k] i32,
    /// each in `0..E`, and `weights` [T, k] f32) in, `out` [T, H] f32 out. Only launches: no
    /// allocation, no copy, no synchronisation. Ids outside `0..E` are skipped by the kernels
    /// (never read or written out of bounds); [`MoeLayer::experts`] refuses them first.
    pub fn enqueue_experts(
        &self,
        ws: &FusedWorkspace,
        hidden: &DeviceBuffer<f32>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        self.enqueue_experts_from(ws, Hidden::F32(hidden), ids, weights, out)
    }

    // ANCHOR: enqueue_experts_from
    /// [`Self::enqueue_experts`] with the hidden states in f32 or already in bf16
    /// ([`Hidden`]): the same bits. From bf16 the tiled and grouped decode paths read the input
    /// as it is (no `fused_to_bf16`), and the decode path runs GEMM 1's `_bf16` entry points:
    /// one launch fewer on the laid-out paths, none on the decode path.
    pub fn enqueue_experts_from(
        &self,
        ws: &FusedWorkspace,
        hidden: Hidden<'_>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        self.enqueue_batch(ws, hidden, ids, weights, None, out)
    }
    // ANCHOR_END: enqueue_experts_from

    /// [`Self::enqueue_experts_from`] with chapter 3's layout of `ids` already made (chapter 8's
    /// routing stage makes it with the routing): the tiled and grouped decode paths read `layout`
    /// and launch no align; the decode path, which has no layout, reads `ids` as always. The
    /// layout must be of this batch's pairs at the workspace's BLOCK_M ([`FusedWorkspace::block_m`]);
    /// buffers of other sizes are a typed error.
    pub fn enqueue_experts_laid_out(
        &self,
        ws: &FusedWorkspace,
        hidden: Hidden<'_>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
        layout: Layout<'_>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        if ws.align.is_some() && ws.rows > 0 {
            let (pairs, e, bm) = (
                ws.rows * self.config.router.k,
                self.config.experts,
                ws.plan.block_m,
            );
            expect_len(
                "sorted_ids [capacity]",
                layout.sorted_ids.len(),
                capacity(pairs, e, bm),
            )?;
            expect_len(
                "expert_ids [max_tiles]",
                layout.expert_ids.len(),
                max_tiles(pairs, e, bm),
            )?;
            expect_len("num_tokens_post_padded", layout.num_post.len(), 1)?;
        }
        self.enqueue_batch(ws, hidden, ids, weights, Some(layout), out)
    }

    fn enqueue_batch(
        &self,
        ws: &FusedWorkspace,
        hidden: Hidden<'_>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
        layout: Option<Layout<'_>>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        if ws.layer != self.id {
            return Err(MoeError::Config {
                field: "workspace",
                expected: "one built by this layer's FusedDevice::workspace".into(),
                found: "a workspace built by another layer".into(),
            });
        }
        let c = &self.config;
        let (rows, k, h) = (ws.rows, c.router.k, c.hidden);
        let pairs = rows * k;
        expect_len("hidden [T, H]", hidden.len(), rows * h)?;
        expect_len("ids [T, k]", ids.len(), pairs)?;
        expect_len("weights [T, k]", weights.len(), pairs)?;
        expect_len("out [T, H]", out.len(), rows * h)?;
        if rows == 0 {
            return Ok(());
        }
        let (i, e) = (c.intermediate, c.experts);
        let b = Batch {
            hidden,
            ids,
            layout,
            weights,
            out,
            rows,
            k,
            h,
            i,
            e,
            pairs,
        };
        match ws.plan.path {
            Path::Tiled => self.enqueue_tiled(ws, b),
            Path::Decode | Path::DecodeGrouped => self.enqueue_decode(ws, b),
        }
    }

    /// The input in bf16 for the tiled and grouped decode paths: the caller's when it is bf16,
    /// else `xb` after a `fused_to_bf16` launch.
    fn bf16_input<'a>(
        &self,
        b: &Batch<'a>,
        xb: Option<&'a DeviceBuffer<bf16>>,
        missing: impl Fn(&str) -> MoeError,
    ) -> Result<&'a DeviceBuffer<bf16>, MoeError> {
        match b.hidden {
            Hidden::Bf16(x) => Ok(x),
            Hidden::F32(x) => {
                let xb = xb.ok_or_else(|| missing("xb"))?;
                self.to_bf16(x, xb, b.rows * b.h)?;
                Ok(xb)
            }
        }
    }

    /// The tiled path: chapter 3's layout, then one launch per GEMM for every expert at once.
    pub(super) fn enqueue_tiled(&self, ws: &FusedWorkspace, b: Batch) -> Result<(), MoeError> {
        let (rows, k, h, i, e, pairs) = (b.rows, b.k, b.h, b.i, b.e, b.pairs);
        let (m, plan, w) = (&self.module, &ws.plan, &self.weights.experts);
        let missing = |what: &str| no_buffer(format!("{what} (a workspace of the tiled path)"));
        let (align, a) = ws.align.as_ref().ok_or_else(|| missing("a layout"))?;
        let y = ws.y.as_ref().ok_or_else(|| missing("y"))?;
        // 1. The hidden states in bf16, once for every expert that reads them (given in bf16:
        //    nothing to do).
        let xb = self.bf16_input(&b, ws.xb.as_ref(), missing)?;
        // 2. Chapter 3: the pairs sorted by expert, each expert's run padded to BLOCK_M (unless
        //    the caller made that layout already).
        let layout = match b.layout {
            Some(l) => (l.sorted_ids, l.expert_ids, l.num_post),
            None => {
                align.enqueue(b.ids, a).map_err(align_error)?;
                (&a.sorted_ids, &a.expert_ids, &a.num_post)
            }
        };
        let tiles = max_tiles(pairs, e, plan.block_m);
        // 3. Every expert's SwiGLU(x · w13ᵀ) (unfused: gate|up, then SwiGLU), then its weighted
        //    down projection, one launch each.
        let first = ws.gateup.as_ref().unwrap_or(&ws.act);
        self.gemm1(
            plan,
            xb,
            &w.w13,
            layout,
            tiles,
            first,
            (pairs, k, i, e, plan.block_m),
            TensorMap::W13,
        )?;
        if let Some(g) = &ws.gateup {
            self.swiglu(g, &ws.act, pairs, i)?;
        }
        let wt = KernelArg::from(b.weights);
        self.gemm2(
            plan.tile,
            &ws.act,
            &w.w2,
            layout,
            tiles,
            wt,
            y,
            (pairs, i, e, plan.block_m),
            self.bf16_y,
            TensorMap::W2,
        )?;
        // 4. The shared expert: the same kernels, every token a pair of the one expert.
        let (mut shared_y, mut shared_gate) = (KernelArg::Ptr(0), KernelArg::Ptr(0));
        if let (Some(s), Some(sw)) = (&w.shared, &ws.shared) {
            let l = sw
                .layout
                .as_ref()
                .ok_or_else(|| missing("a shared layout"))?;
            let sy = sw.y.as_ref().ok_or_else(|| missing("the shared y"))?;
            let layout = (&l.sorted_ids, &l.expert_ids, &l.num_post);
            let first = sw.gateup.as_ref().unwrap_or(&sw.act);
            self.gemm1(
                plan,
                xb,
                &s.w13,
                layout,
                l.tiles,
                first,
                (rows, 1, s.inter, 1, l.block_m),
                TensorMap::SharedW13,
            )?;
            if let Some(g) = &sw.gateup {
                self.swiglu(g, &sw.act, rows, s.inter)?;
            }
            let none = KernelArg::Ptr(0);
            self.gemm2(
                plan.tile,
                &sw.act,
                &s.w2,
                layout,
                l.tiles,
                none,
                sy,
                (rows, s.inter, 1, l.block_m),
                false, // the shared expert's y: read as f32 by the combine
                TensorMap::SharedW2,
            )?;
            shared_y = KernelArg::from(sy);
            if let (Some(g), Some(logit)) = (&s.gate, &sw.gate) {
                m.launch(
                    "fused_gate_logit",
                    LaunchConfig::blocks(rows.div_ceil(FUSED_WARPS) as u32, FUSED_THREADS as u32),
                    &args![xb, g, logit, int(rows), int(h)],
                )?;
                shared_gate = KernelArg::from(logit);
            }
        }
        // 5. out[t] = Σⱼ y[t·k + j] (+ shared), j in order.
        self.combine(b, y, self.bf16_y, shared_y, shared_gate)
    }
    // ANCHOR_END: enqueue_experts

    // ANCHOR: enqueue_decode
    /// The decode path: the pairs indexed directly (no layout), each pair's expert rows read
    /// once; by default two launches in all, the shared expert included. The grouped decode path:
    /// the input in bf16 and chapter 3's layout first, then the same arithmetic a tile of pairs
    /// of one expert per block (the shared expert's tokens in tiles after the routed ones).
    pub(super) fn enqueue_decode(&self, ws: &FusedWorkspace, b: Batch) -> Result<(), MoeError> {
        let (rows, k, h, i, e, pairs) = (b.rows, b.k, b.h, b.i, b.e, b.pairs);
        let (m, plan, w) = (&self.module, &ws.plan, &self.weights.experts);
        let g = plan.decode;
        let sw = ws.shared.as_ref();
        let s = w.shared.as_ref().filter(|_| sw.is_some());
        let (is, shared_rows) = s.map_or((0, 0), |s| (s.inter, rows));
        let logit = sw.and_then(|sw| sw.gate.as_ref());
        // Every decode GEMM: one block per row of `blocks` (pairs, tokens, or tiles) and slice of
        // `cols` columns; its buffers, then the same sizes (and the grouped kernels' BLOCK_M
        // and routed tiles).
        let sizes = [rows, k, h, i, e, is, g.cols_per_warp].map(int);
        // `dependent`: a programmatic dependent launch (the down projections: scheduled while
        // GEMM 1 runs, they wait for its act). The kernel is the geometry's (`_na`: the weights
        // streamed).
        let launch_as =
            |name: &str, blocks: usize, cols: usize, buffers: &[KernelArg], dependent| {
                let mut cfg = LaunchConfig::blocks(blocks as u32, g.threads() as u32);
                cfg.grid.1 = cols.div_ceil(g.cols()) as u32;
                cfg.dependent = dependent;
                // GEMM 1 from bf16: the geometry's entry point, then `_bf16`.
                let kernel = match name.strip_suffix("_bf16") {
                    Some(base) => format!("{}_bf16", g.kernel(base)),
                    None => g.kernel(name),
                };
                m.launch(&kernel, cfg, &[buffers, &sizes[..]].concat())
            };
        let launch = |name: &str, blocks: usize, cols: usize, buffers: &[KernelArg]| {
            launch_as(name, blocks, cols, buffers, false)
        };
        // The grouped path: x in bf16 and the layout, then its tiles (routed, then shared).
        let grouped = match plan.path {
            Path::DecodeGrouped => {
                let missing = |what: &str| {
                    no_buffer(format!("{what} (a workspace of the decode_grouped path)"))
                };
                let (align, a) = ws.align.as_ref().ok_or_else(|| missing("a layout"))?;
                let xb = self.bf16_input(&b, ws.xb.as_ref(), missing)?;
                let layout = match b.layout {
                    Some(l) => args![l.sorted_ids, l.expert_ids, l.num_post],
                    None => {
                        align.enqueue(b.ids, a).map_err(align_error)?;
                        args![&a.sorted_ids, &a.expert_ids, &a.num_post]
                    }
                };
                let tiles = max_tiles(pairs, e, plan.block_m);
                let blocks = tiles + shared_rows.div_ceil(plan.block_m);
                Some((xb, layout, blocks, [int(plan.block_m), int(tiles)]))
            }
            _ => None,
        };
        let launch_grouped = |name: &str, cols: usize, buffers: &[KernelArg]| {
            let (_, _, blocks, extra) = grouped.as_ref().expect("the grouped path");
            let mut cfg = LaunchConfig::blocks(*blocks as u32, g.threads() as u32);
            cfg.grid.1 = cols.div_ceil(g.cols()) as u32;
            m.launch(name, cfg, &[buffers, &sizes[..], &extra[..]].concat())
        };
        // 1. SwiGLU(bf16(x) · w13ᵀ) of every pair, then of every token through the shared expert
        //    (unfused: gate|up, then SwiGLU).
        let unfused = plan.fusion == Fusion::Unfused;
        let (first, shared_first) = match unfused {
            true => (ws.gateup.as_ref(), sw.and_then(|sw| sw.gateup.as_ref())),
            false => (Some(&ws.act), sw.map(|sw| &sw.act)),
        };
        let gemm1_out = args![
            opt(s.map(|s| &s.w13)),
            opt(s.and_then(|s| s.gate.as_ref())),
            opt(logit),
            opt(first),
            opt(shared_first)
        ];
        match &grouped {
            None => launch(
                &decode_gemm1_name(unfused, b.hidden.dtype()),
                pairs + shared_rows,
                i.max(is),
                &[
                    &[b.hidden.arg()][..],
                    &args![b.ids, &w.w13][..],
                    &gemm1_out[..],
                ]
                .concat(),
            )?,
            Some((xb, layout, _, _)) => launch_grouped(
                if unfused {
                    "decode_grouped_gemm1_gateup"
                } else {
                    "decode_grouped_gemm1_swiglu"
                },
                i.max(is),
                &[
                    &args![*xb][..],
                    &layout[..],
                    &args![&w.w13][..],
                    &gemm1_out[..],
                ]
                .concat(),
            )?,
        }
        if unfused {
            if let Some(gu) = &ws.gateup {
                self.swiglu(gu, &ws.act, pairs, i)?;
            }
            if let (Some(s), Some(sw)) = (s, sw) {
                if let Some(gu) = &sw.gateup {
                    self.swiglu(gu, &sw.act, rows, s.inter)?;
                }
            }
        }
        let down_in = args![
            &ws.act,
            b.ids,
            b.weights,
            &w.w2,
            opt(sw.map(|sw| &sw.act)),
            opt(s.map(|s| &s.w2))
        ];
        // 2. The down projection: with the sum over k (and the shared expert) fused, one block
        //    per token and slice of H (on both decode paths); else one per pair, or per tile,
        //    then fused_combine.
        if plan.fusion == Fusion::SwiGluSumK {
            launch_as(
                "decode_gemm2_sum",
                rows,
                h,
                &[&down_in[..], &args![opt(logit), b.out]].concat(),
                true,
            )?;
            return Ok(());
        }
        let y =
            ws.y.as_ref()
                .ok_or_else(|| no_buffer("y (a workspace of an unfused sum)".into()))?;
        let shared_y = opt(sw.and_then(|sw| sw.y.as_ref()));
        match &grouped {
            None => launch_as(
                "decode_gemm2",
                pairs + shared_rows,
                h,
                &[&down_in[..], &args![y, shared_y]].concat(),
                true,
            )?,
            Some((_, layout, _, _)) => launch_grouped(
                "decode_grouped_gemm2",
                h,
                &[
                    &args![&ws.act][..],
                    &layout[..],
                    &args![
                        b.weights,
                        &w.w2,
                        opt(sw.map(|sw| &sw.act)),
                        opt(s.map(|s| &s.w2))
                    ],
                    &args![y, shared_y],
                ]
                .concat(),
            )?,
        }
        self.combine(b, y, false, shared_y, opt(logit))
    }
    // ANCHOR_END: enqueue_decode
}

/// The decode path's GEMM 1 for an input of type `input` (before the geometry's `_na`): `_bf16`
/// for bf16 input.
pub(super) fn decode_gemm1_name(unfused: bool, input: Dtype) -> String {
    let base = if unfused {
        "decode_gemm1_gateup"
    } else {
        "decode_gemm1_swiglu"
    };
    match input {
        Dtype::Bf16 => format!("{base}_bf16"),
        Dtype::F32 => base.to_string(),
    }
}
