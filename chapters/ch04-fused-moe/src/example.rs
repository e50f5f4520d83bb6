//! The chapter's main, as a library: `examples/ch04/` parses the command line and calls [`run`].
//!
//! Without a checkpoint it runs chapter 2's two small layers on chapter 2's six tokens through the
//! fused layer, and prints the tiles the fused GEMMs walk, what the fused layer launches (against
//! chapter 2's grouped loop on the same routing), its error against the literal loop and against
//! chapter 2's device layer, that every BLOCK_M gives the same bits, and what one decode token
//! costs in padding. With `--checkpoint` it loads a real MoE layer, as chapter 2's example does,
//! and runs the reader's hidden states through the fused layer.
//!
//! stdout is the same on every backend except the measured errors, printed in `⟨ ⟩` (the tensor
//! cores, cuBLAS and the emulator's reference GEMM sum in different orders); the tests check those
//! against the tolerances of [`ch02_grouped::compare`].

use crate::choose::{DecodeGeometry, Fusion, Path, TileConfig, TILE_CONFIGS};
use crate::device::{BatchPlan, FusedDevice, BLOCK_MS};
use ch01_router::inputs::patterned;
use ch01_router::Routing;
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::example::{run_checkpoint_with, tour_layers};
// Chapter 2's options and error: `--dtype f32` is refused as an `ExampleError::Layer`.
pub use ch02_grouped::example::{CheckpointOptions, ExampleError};
use ch02_grouped::{Dtype, GroupedDevice, LiteralLayer, MoeError, MoeLayer};
use ch03_align::literal::align_literal;
use ch03_align::text::draw;
use moe_kernels::{record_launches, Device};
use std::fmt;
use std::io::Write;

type Out<'a> = &'a mut dyn Write;

fn w(out: Out, s: fmt::Arguments) -> Result<(), ExampleError> {
    out.write_fmt(s)
        .map_err(|e| ExampleError::Stdout(e.to_string()))
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => { w($out, format_args!("{}\n", format_args!($($t)*)))? };
}

/// Runs the example: the tour, or (with `checkpoint`) a reader's checkpoint.
pub fn run(
    checkpoint: Option<&CheckpointOptions>,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    run_with_tile(checkpoint, None, device, out)
}

/// [`run`] with the tiled path forced onto one tile configuration (`--tile NAME`: versions 1 to 3
/// anywhere, 4 to 11 on an sm_90a GPU or the emulator): the tour checks that tile's bits against
/// the default tile's; a checkpoint runs its whole batch on it.
pub fn run_with_tile(
    checkpoint: Option<&CheckpointOptions>,
    tile: Option<TileConfig>,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    match checkpoint {
        Some(opts) => run_checkpoint(opts, tile, device, out),
        None => tour(device, tile, out),
    }
}

/// `launched` as `6 router + 1 fused_to_bf16 + 1 align + … = 11 launches`: chapter 1's kernels
/// counted as one group (`router`) and chapter 3's as another (`align`), runs of the same kernel
/// counted, and `blas::linear` (chapter 2) called `GEMM`.
pub fn launch_summary(launched: &[String]) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for l in launched {
        let short = if l.starts_with("ch01_router::") {
            "router".to_string()
        } else if l.starts_with("ch03_align_block_size::") {
            "align".to_string()
        } else if l == "blas::linear" {
            "GEMM".to_string()
        } else {
            let s = l.rsplit("::").next().unwrap_or(l);
            s.trim_start_matches("ch02_").to_string()
        };
        match parts.last_mut() {
            Some((name, n)) if *name == short => *n += 1,
            _ => parts.push((short, 1)),
        }
    }
    let list: Vec<String> = parts.iter().map(|(n, c)| format!("{c} {n}")).collect();
    format!("{} = {} launches", list.join(" + "), launched.len())
}

/// The error `--dtype f32` gets, before a checkpoint is read: the one [`FusedDevice::new`] gives
/// (a test holds the two equal).
pub fn dtype_refused(dtype: Dtype) -> MoeError {
    MoeError::Config {
        field: "dtype",
        expected: "bf16 (the fused kernels multiply on bf16 tensor cores; chapter 2's layers compute in f32)".into(),
        found: dtype.to_string(),
    }
}

/// `Ok` when two outputs have the same bits, else a [`ExampleError::Check`] naming the first
/// element that differs.
fn same_bits(what: &str, want: &[f32], got: &[f32]) -> Result<(), ExampleError> {
    if want.len() != got.len() {
        return Err(ExampleError::Check(format!(
            "{what}: {} outputs against {}",
            got.len(),
            want.len()
        )));
    }
    match (0..want.len()).find(|&i| want[i].to_bits() != got[i].to_bits()) {
        None => Ok(()),
        Some(i) => Err(ExampleError::Check(format!(
            "{what}: output {i} is {} against {}",
            got[i], want[i]
        ))),
    }
}

/// `tiled path, fusion swiglu, tiles w4_k32_n1, BLOCK_M 16`, `decode path, fusion
/// swiglu_sumk, geometry w4_c1` or `decode_grouped path, fusion swiglu, geometry w4_c1, BLOCK_M
/// 8`.
pub fn plan_text(plan: &BatchPlan) -> String {
    match plan.path {
        Path::Tiled => format!(
            "tiled path, fusion {}, tiles {}, BLOCK_M {}",
            plan.fusion, plan.tile, plan.block_m
        ),
        Path::Decode => format!(
            "decode path, fusion {}, geometry {}",
            plan.fusion, plan.decode
        ),
        Path::DecodeGrouped => format!(
            "decode_grouped path, fusion {}, geometry {}, BLOCK_M {}",
            plan.fusion, plan.decode, plan.block_m
        ),
    }
}

/// What `layer` launches for the experts of `routing` (already on the device), and a check that
/// it launches the same with every pair sent to expert 0.
fn experts_launches(
    device: &'static Device,
    layer: &FusedDevice,
    hidden: &[f32],
    routing: &Routing,
) -> Result<Vec<String>, ExampleError> {
    let ws = layer.workspace(routing.rows)?;
    let x = device.upload(hidden)?;
    let weights = device.upload(&routing.weights)?;
    let out = device.alloc::<f32>(hidden.len())?;
    let mut lists = Vec::new();
    let spread: Vec<i32> = routing.ids.iter().map(|&e| e as i32).collect();
    for ids in [spread.clone(), vec![0; spread.len()]] {
        let ids = device.upload(&ids)?;
        let (res, launched) =
            record_launches(|| layer.enqueue_experts(&ws, &x, &ids, &weights, &out));
        res?;
        lists.push(launched);
    }
    if lists[0] != lists[1] {
        return Err(ExampleError::Check(format!(
            "the launches depend on the routing: {:?} against {:?}",
            lists[0], lists[1]
        )));
    }
    Ok(lists.swap_remove(0))
}

// ANCHOR: tour
fn tour(device: &'static Device, forced: Option<TileConfig>, out: Out) -> Result<(), ExampleError> {
    const TOKENS: usize = 6; // chapter 2's tokens, so its snapshot's routing reappears here
    let layers = tour_layers();
    say!(out, "Chapter 4: the fused MoE kernel");
    say!(out, "");
    for (title, weights) in &layers {
        let c = &weights.config;
        let hidden = patterned(TOKENS * c.hidden, 23, 1.0);
        let oracle = LiteralLayer::new(weights, Dtype::Bf16)?.forward(&hidden)?;
        let r = &oracle.routing;
        let pairs = TOKENS * c.router.k;
        let layer = FusedDevice::new(device, weights, Dtype::Bf16)?;
        say!(out, "== {title}");
        say!(
            out,
            "chapter 2's layer and tokens: H {} I {} E {} k {}; {TOKENS} tokens, {pairs} pairs",
            c.hidden,
            c.intermediate,
            c.experts,
            c.router.k
        );
        say!(
            out,
            "the rule's plan: {}",
            plan_text(&layer.plan_for(TOKENS)?)
        );
        // The tiled path: chapter 3's layout, exactly as its kernel leaves it, then the tiles.
        let tiled = layer.clone().with_path(Path::Tiled);
        let decode = layer.clone().with_path(Path::Decode);
        let bm = tiled.plan_for(TOKENS)?.block_m;
        let ids: Vec<i64> = r.ids.iter().map(|&e| e as i64).collect();
        let layout = align_literal(&ids, c.experts, bm);
        say!(
            out,
            "the tiled path's tiles, BLOCK_M {bm} (· is the placeholder {pairs}):"
        );
        w(out, format_args!("{}", draw(&layout, pairs, bm, 4)))?;
        // What each path launches for the experts, whatever the routing, against chapter 2.
        let unfused = tiled.clone().with_fusion(Fusion::Unfused);
        for (what, l) in [
            ("tiled", &tiled),
            ("tiled, unfused", &unfused),
            ("decode", &decode),
        ] {
            let launched = experts_launches(device, l, &hidden, r)?;
            say!(out, "{what} experts: {}", launch_summary(&launched));
        }
        let grouped = GroupedDevice::new(device, weights, Dtype::Bf16)?;
        let (gws, x) = (grouped.workspace(r)?, device.upload(&hidden)?);
        let y = device.alloc::<f32>(hidden.len())?;
        let (res, launched) = record_launches(|| grouped.enqueue_experts(&gws, &x, &y));
        res?;
        let chapter2 = y.to_vec()?;
        say!(
            out,
            "chapter 2's grouped experts: {}",
            launch_summary(&launched)
        );
        // Each path against the f64 literal loop and against chapter 2's device layer.
        let (got_tiled, got_decode) = (tiled.experts(&hidden, r)?, decode.experts(&hidden, r)?);
        let mut errors = Vec::new();
        for (want, tol) in [
            (&oracle.out, Tolerance::BF16_VS_ORACLE),
            (&chapter2, Tolerance::BF16_VS_BF16),
        ] {
            for (path, got) in [("tiled", &got_tiled), ("decode", &got_decode)] {
                let e = check_output(path, want, got, tol).map_err(ExampleError::Check)?;
                errors.push(e.relative);
            }
        }
        say!(
            out,
            "error, max |diff| / rms: against the literal loop, tiled ⟨{:.1e}⟩ decode ⟨{:.1e}⟩ (tolerance {:.0e}); against chapter 2, tiled ⟨{:.1e}⟩ decode ⟨{:.1e}⟩ (tolerance {:.0e})",
            errors[0], errors[1], Tolerance::BF16_VS_ORACLE.0,
            errors[2], errors[3], Tolerance::BF16_VS_BF16.0
        );
        // No float atomics, one order of sums: every variant of a path gives the same bits.
        same_bits("tiled, again", &got_tiled, &tiled.experts(&hidden, r)?)?;
        same_bits("tiled, unfused", &got_tiled, &unfused.experts(&hidden, r)?)?;
        for bm in BLOCK_MS {
            let l = tiled.clone().with_block_m(bm)?;
            same_bits(
                &format!("BLOCK_M {bm}"),
                &got_tiled,
                &l.experts(&hidden, r)?,
            )?;
        }
        for tile in TILE_CONFIGS {
            let l = tiled.clone().with_tile(tile)?;
            same_bits(
                &format!("tiles {tile}"),
                &got_tiled,
                &l.experts(&hidden, r)?,
            )?;
        }
        say!(
            out,
            "tiled: the same bits again, unfused, at BLOCK_M 16, 32, 64 and 128, and in tiles {}",
            TILE_CONFIGS.map(|t| t.name()).join(", ")
        );
        if let Some(t) = forced {
            let l = tiled.clone().with_tile(t)?;
            same_bits(&format!("tile {t}"), &got_tiled, &l.experts(&hidden, r)?)?;
            say!(out, "tiled, forced onto tile {t}: the same bits");
        }
        let geometries = [
            DecodeGeometry::DEFAULT,
            DecodeGeometry {
                warps: 1,
                cols_per_warp: 3,
                stream: false,
            },
        ];
        for fusion in Fusion::ALL {
            for g in geometries {
                let l = decode.clone().with_fusion(fusion).with_decode_geometry(g)?;
                let what = format!("decode, {fusion}, {g}");
                same_bits(&what, &got_decode, &l.experts(&hidden, r)?)?;
            }
        }
        say!(
            out,
            "decode: the same bits in fusions {} and geometries {}",
            Fusion::ALL.map(|f| f.name()).join(", "),
            geometries.map(|g| g.name()).join(", ")
        );
        // The whole layer as the rule plans it: chapter 1's router on the device, then the
        // experts, with no copy to the host in between.
        let (fwd, launched) = record_launches(|| layer.forward(&hidden));
        let fwd = fwd?;
        // Its f32 router must pick the oracle's experts (these tokens have no near tie).
        let set = |ids: &[u32]| {
            let mut v = ids.to_vec();
            v.sort_unstable();
            v
        };
        if (0..TOKENS).any(|t| set(fwd.routing.row_ids(t)) != set(r.row_ids(t))) {
            return Err(ExampleError::Check(
                "the device router chose other experts".into(),
            ));
        }
        let tol = Tolerance::BF16_VS_ORACLE;
        check_output("forward", &oracle.out, &fwd.out, tol).map_err(ExampleError::Check)?;
        say!(
            out,
            "the whole layer, router included: {}",
            launch_summary(&launched)
        );
        say!(out, "");
    }
    // Decode: one token of the first layer, each of its k pairs on its own expert.
    let (title, weights) = &layers[0];
    let c = &weights.config;
    let layer = FusedDevice::new(device, weights, Dtype::Bf16)?;
    let one = LiteralLayer::new(weights, Dtype::Bf16)?.forward(&patterned(c.hidden, 23, 1.0))?;
    let ids: Vec<i64> = one.routing.ids.iter().map(|&e| e as i64).collect();
    let bm = layer.block_m_for(ids.len());
    let layout = align_literal(&ids, c.experts, bm);
    let rows = layout.num_tokens_post_padded as usize;
    say!(
        out,
        "== One token of the {} layer",
        title.split(':').next().unwrap_or(title)
    );
    say!(
        out,
        "as tiles: {} pairs in {} tiles of {bm}, {rows} rows for the tensor cores, {} of them placeholders",
        ids.len(),
        layout.tiles(bm),
        rows - ids.len()
    );
    say!(out, "the rule's plan: {}", plan_text(&layer.plan_for(1)?));
    let launched = experts_launches(device, &layer, &patterned(c.hidden, 23, 1.0), &one.routing)?;
    say!(out, "experts: {}", launch_summary(&launched));
    say!(out, "");
    let refused = FusedDevice::new(device, weights, Dtype::F32).err();
    let refused = refused.ok_or_else(|| ExampleError::Check("f32 was accepted".into()))?;
    say!(out, "the fused layer refuses f32: {refused}");
    say!(
        out,
        "Numbers in ⟨…⟩ are measured on this machine: the GEMMs sum in another order on each backend, so they differ in the last digits (see --help)."
    );
    say!(out, "Run a real checkpoint: cargo run --release --example ch04 -- --checkpoint DIR (see --help).");
    Ok(())
}
// ANCHOR_END: tour

fn run_checkpoint(
    opts: &CheckpointOptions,
    tile: Option<TileConfig>,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    // Refused without reading the checkpoint, before the (possibly long) load.
    if opts.dtype != Dtype::Bf16 {
        return Err(dtype_refused(opts.dtype).into());
    }
    // Chapter 2's run, with the fused layer, which prints the plan it chose for the batch.
    run_checkpoint_with(
        opts,
        out,
        "the fused layer",
        |w| {
            let layer = FusedDevice::new(device, w, opts.dtype)?;
            match tile {
                Some(t) => layer.with_path(Path::Tiled).with_tile(t),
                None => Ok(layer),
            }
        },
        |layer, rows, launched| {
            Ok(format!(
                "{rows} tokens in bf16, {}\nlaunches: {}",
                plan_text(&layer.plan_for(rows)?),
                launch_summary(launched)
            ))
        },
    )
}
