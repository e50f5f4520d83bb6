//! Chapter 4's Hopper versions on the emulator (CPU only): every configuration of versions 4 to
//! 11 on one small layer, timed by the wall clock beside the portable path at the same BLOCK_M
//! (version 3's tile, what a GPU without sm_90a runs, and version 1's, the emulator's default).
//! These are times of the emulator on this CPU, not of any GPU: they say what stepping through a
//! version costs a reader without one, and how the emulator's Hopper machinery (queued wgmma on
//! `tc_model.h`, TMA boxes, mbarrier waits, clusters taking turns) compares with the plain
//! `mma.sync` path it emulates. Each configuration's output is checked against the portable
//! path's bits before it is timed.
//!
//! ```text
//! tools/bench/run emu-hopper [--out bench/results/emu/ch04_versions.csv] [--repeats 2]
//! ```

use ch01_router::{RouterConfig, Routing};
use ch02_grouped::{Dtype, MoeConfig, MoeLayer, MoeWeights};
use ch04_fused_moe::choose::{default_tile, portable_tile, HOPPER_CONFIGS};
use ch04_fused_moe::{FusedDevice, Path, TileConfig};
use moe_kernels::Device;
use std::time::Instant;

/// The layer: H 512 and I 256 (8 and 4 slices of K of 64), 8 experts, 128 tokens of top-2 whose
/// pairs fall 40, 24, 48, 16, 32, 32, 24 and 40 to the experts (tiles of one expert side by side,
/// so version 9's clusters share some slices and not others).
pub const HIDDEN: usize = 512;
pub const INTERMEDIATE: usize = 256;
pub const COUNTS: [usize; 8] = [40, 24, 48, 16, 32, 32, 24, 40];

pub const HEADER: &str =
    "impl,config,version,block_m,hidden,intermediate,experts,tokens,k,seconds,portable_seconds,vs_portable,threads,host";

/// One row of `bench/results/emu/ch04_versions.csv`.
pub struct Timing {
    /// `hopper` (a configuration of versions 4 to 11), `portable` (version 3's tile, the
    /// reference at that BLOCK_M) or `default` (version 1's, the emulator's own choice).
    pub imp: &'static str,
    pub config: TileConfig,
    pub block_m: usize,
    pub seconds: f64,
    /// The portable path's time at the same BLOCK_M.
    pub portable_seconds: f64,
}

/// Two pairs a token, dealt so that expert e gets `COUNTS[e]` pairs (each expert's pairs in a run,
/// token t taking pairs t and t + T).
fn routing() -> Routing {
    let sorted: Vec<u32> = (0..COUNTS.len())
        .flat_map(|e| std::iter::repeat_n(e as u32, COUNTS[e]))
        .collect();
    let rows = sorted.len() / 2;
    Routing {
        rows,
        k: 2,
        weights: (0..rows).flat_map(|_| [0.625f32, 0.375]).collect(),
        ids: (0..rows)
            .flat_map(|t| [sorted[t], sorted[t + rows]])
            .collect(),
    }
}

/// Times every Hopper configuration and the portable path `repeats` times each on the emulator
/// (the fastest counts), after checking each one's bits against the portable path's.
pub fn measure(repeats: usize) -> Result<Vec<Timing>, String> {
    let dev = Device::emu();
    let e = |e: ch02_grouped::MoeError| e.to_string();
    let config = MoeConfig {
        hidden: HIDDEN,
        intermediate: INTERMEDIATE,
        experts: COUNTS.len(),
        router: RouterConfig::qwen3(2),
        shared: None,
    };
    let weights = MoeWeights::patterned(&config, 96, 2.0 / (HIDDEN as f32).sqrt(), false);
    let routing = routing();
    let hidden = ch01_router::inputs::patterned(routing.rows * HIDDEN, 9100, 1.0);
    let base = FusedDevice::new(dev, &weights, Dtype::Bf16)
        .map_err(e)?
        .with_path(Path::Tiled);
    let time = |layer: &FusedDevice| -> Result<(f64, Vec<f32>), String> {
        let mut best = f64::INFINITY;
        let mut out = Vec::new();
        for _ in 0..repeats.max(1) {
            let t = Instant::now();
            out = layer.experts(&hidden, &routing).map_err(e)?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok((best, out))
    };
    let mut rows = Vec::new();
    for bm in [64usize, 128] {
        let portable = portable_tile(HIDDEN, INTERMEDIATE, true);
        let (p_secs, want) = time(
            &base
                .clone()
                .with_tile(portable)
                .map_err(e)?
                .with_block_m(bm)
                .map_err(e)?,
        )?;
        eprintln!("bench emu-hopper: BLOCK_M {bm}: portable {portable}: {p_secs:.3} s");
        rows.push(Timing {
            imp: "portable",
            config: portable,
            block_m: bm,
            seconds: p_secs,
            portable_seconds: p_secs,
        });
        let default = default_tile(HIDDEN, INTERMEDIATE);
        let (d_secs, got) = time(
            &base
                .clone()
                .with_tile(default)
                .map_err(e)?
                .with_block_m(bm)
                .map_err(e)?,
        )?;
        same_bits(&got, &want, &format!("{default} at BLOCK_M {bm}"))?;
        rows.push(Timing {
            imp: "default",
            config: default,
            block_m: bm,
            seconds: d_secs,
            portable_seconds: p_secs,
        });
        for tile in HOPPER_CONFIGS
            .into_iter()
            .filter(|t| t.required_block_m() == Some(bm))
        {
            let (secs, got) = time(&base.clone().with_tile(tile).map_err(e)?)?;
            same_bits(&got, &want, &format!("{tile}"))?;
            eprintln!(
                "bench emu-hopper: {tile} (version {}): {secs:.3} s, {:.2} of the portable path's",
                tile.version.number(),
                secs / p_secs
            );
            rows.push(Timing {
                imp: "hopper",
                config: tile,
                block_m: bm,
                seconds: secs,
                portable_seconds: p_secs,
            });
        }
    }
    Ok(rows)
}

/// Every output bit for bit (the Hopper versions give the portable path's bits on the emulator).
fn same_bits(got: &[f32], want: &[f32], what: &str) -> Result<(), String> {
    let differ = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    if got.len() != want.len() || differ > 0 {
        return Err(format!(
            "{what}: {differ} of {} outputs differ from the portable path's",
            want.len()
        ));
    }
    Ok(())
}

/// CSV lines for `rows`.
pub fn csv_lines(rows: &[Timing]) -> Vec<String> {
    let host = crate::common::host();
    let threads = Device::emu().worker_threads().unwrap_or(1);
    let tokens: usize = COUNTS.iter().sum::<usize>() / 2;
    rows.iter()
        .map(|r| {
            format!(
                "{},{},{},{},{HIDDEN},{INTERMEDIATE},{},{tokens},2,{:.4},{:.4},{:.3},{threads},{host}",
                r.imp,
                r.config,
                r.config.version.number(),
                r.block_m,
                COUNTS.len(),
                r.seconds,
                r.portable_seconds,
                r.seconds / r.portable_seconds
            )
        })
        .collect()
}
