//! The fused layer on every regime (chapter 2's list and this chapter's), every path (tiled,
//! decode and grouped decode) and every backend (the emulator always, the GPU with
//! `--include-ignored` on a GPU machine): against the f64 oracle and against chapter 2's grouped
//! device layer in bf16; every BLOCK_M, tile configuration, fusion and decode geometry giving the
//! same bits within a path, and the grouped decode path the decode path's bits;
//! the path rule at its crossover; the emulator's bits on the GPU; launches that do not depend
//! on the routing; the kernels on layouts with placeholders, garbage ids and foreign experts;
//! weights filled on the device; and every error a user can provoke.

use ch01_router::{RouterConfig, RouterError, Routing};
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::{check_layer, oracle};
use ch02_grouped::regimes::{regime, MoeRegime, REGIMES};
use ch02_grouped::{Dtype, GroupedDevice, MoeError, MoeLayer};
use ch03_align::device::DeviceAlign;
use ch03_align::max_tiles;
use ch04_fused_moe::choose::{choose_path, HOPPER_CONFIGS, TILE_CONFIGS};
use ch04_fused_moe::device::{geometry, BLOCK_MS, KERNELS};
use ch04_fused_moe::fill::{fill_device, fill_value, host_weights};
use ch04_fused_moe::regimes::{fused_regime, FUSED_REGIMES};
use ch04_fused_moe::{DecodeGeometry, FusedDevice, Fusion, Path, TileConfig};
use half::bf16;
use moe_kernels::testing::assert_same_bits;
use moe_kernels::{
    args, record_launches, BackendKind, Device, DeviceBuffer, KernelArg, LaunchConfig,
};

/// Chapter 2's regimes, then this chapter's.
fn every_regime() -> impl Iterator<Item = MoeRegime> {
    REGIMES
        .iter()
        .chain(FUSED_REGIMES)
        .map(|n| regime(n).or_else(|| fused_regime(n)).unwrap())
}

/// Chapter 2's [`Tolerance::BF16_VS_BF16`] for every regime and path but one: `large_prefill`
/// forced down the decode path (the rule tiles it: 2048 pairs over 64 experts), where the
/// decode kernels' fp32 order tips a few more bf16 roundings of gate, up and SwiGLU than the
/// tensor cores' does, some of them in the shared expert (weight 1) under a routed scaling of
/// 2.5: 2.73e-3 measured on the emulator against chapter 2's device loop, the same against the
/// tiled path. It is luck of the draw, not a trend: on four other inputs of the same layer the
/// tiled path reaches 1.38e-3 and the decode path 8.5e-4. So twice the tolerance there, and
/// nowhere else.
fn vs_chapter_2(regime: &str, path: Path) -> Tolerance {
    match (regime, path) {
        ("large_prefill", Path::Decode | Path::DecodeGrouped) => {
            Tolerance(2.0 * Tolerance::BF16_VS_BF16.0)
        }
        _ => Tolerance::BF16_VS_BF16,
    }
}

// ANCHOR: every_regime
/// The one test body: on every regime and every path, the fused layer's experts (on the
/// oracle's routing) and its whole forward pass against the f64 oracle on the same bf16 values
/// ([`Tolerance::BF16_VS_ORACLE`]), and its experts against chapter 2's grouped device layer,
/// which rounds at the same places and sums in another order ([`Tolerance::BF16_VS_BF16`]); the
/// grouped decode path's experts with the decode path's bits.
fn fused_layer_matches_the_oracle_and_chapter_2_on_every_regime(dev: &'static Device) {
    let mut worst: Vec<(f64, &str, &str, Path)> = Vec::new();
    for r in every_regime() {
        let o = oracle(&r, Dtype::Bf16);
        let grouped = GroupedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
        let want = grouped.experts(&r.hidden, &o.routing).unwrap();
        let base = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
        let mut decode_bits = None;
        for path in Path::ALL {
            let fused = base.clone().with_path(path);
            let (e, f) = check_layer(&r, &o, &fused)
                .unwrap_or_else(|e| panic!("{} ({path} path): {e}", r.name));
            let got = fused.experts(&r.hidden, &o.routing).unwrap();
            match path {
                Path::Decode => decode_bits = Some(got.clone()),
                Path::DecodeGrouped => assert_same_bits(
                    &format!("{}: decode_grouped vs decode", r.name),
                    &got,
                    decode_bits.as_ref().unwrap(),
                ),
                Path::Tiled => {}
            }
            let g = check_output(
                &format!("{} ({path} path): fused vs grouped device", r.name),
                &want,
                &got,
                vs_chapter_2(r.name, path),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            eprintln!(
                "{:<30} {path:<6} vs oracle: experts {:.2e} forward {:.2e}; vs grouped device {:.2e}",
                r.name, e.relative, f.relative, g.relative
            );
            worst.push((e.relative.max(f.relative), r.name, "oracle", path));
            worst.push((g.relative, r.name, "grouped-device", path));
        }
    }
    for path in Path::ALL {
        for what in ["oracle", "grouped-device"] {
            let w = worst
                .iter()
                .filter(|w| w.2 == what && w.3 == path)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap();
            let tol = match what {
                "oracle" => Tolerance::BF16_VS_ORACLE,
                _ => vs_chapter_2(w.1, path),
            };
            eprintln!(
                "{path} path: largest relative error against {what}: {:.2e} ({}), tolerance {:.0e}",
                w.0, w.1, tol.0
            );
        }
    }
}
// ANCHOR_END: every_regime

/// A row's sums do not depend on where in a tile it sits, nor on how many rows the tile has, nor
/// on the tile configuration: on the tiled path every BLOCK_M and every configuration gives the
/// same bits, and so does every run (no float atomics). On the grouped decode path every BLOCK_M
/// (its own 8, and 16 to 128: tiles of several passes of 8 pairs) gives the decode path's bits.
fn every_block_m_and_every_run_gives_the_same_bits(dev: &'static Device) {
    for name in [
        "mini_sglang",
        "large_prefill",
        "unaligned_sizes",
        "odd_sizes_60_experts",
        "gated_shared_expert",
    ] {
        let r = regime(name).or_else(|| fused_regime(name)).unwrap();
        let o = oracle(&r, Dtype::Bf16);
        let base = FusedDevice::new(dev, &r.weights, Dtype::Bf16)
            .unwrap()
            .with_path(Path::Tiled);
        let first = base.forward(&r.hidden).unwrap();
        for _ in 0..2 {
            let again = base.forward(&r.hidden).unwrap();
            assert_eq!(again.routing, first.routing, "{name}");
            assert_same_bits(&format!("{name}: forward again"), &again.out, &first.out);
        }
        let want = base.experts(&r.hidden, &o.routing).unwrap();
        for bm in BLOCK_MS {
            let layer = base.clone().with_block_m(bm).unwrap();
            let got = layer.experts(&r.hidden, &o.routing).unwrap();
            assert_same_bits(&format!("{name}: BLOCK_M {bm}"), &got, &want);
        }
        for tile in TILE_CONFIGS {
            let layer = base.clone().with_tile(tile).unwrap();
            assert_eq!(layer.plan_for(r.rows).unwrap().tile, tile);
            let got = layer.experts(&r.hidden, &o.routing).unwrap();
            assert_same_bits(&format!("{name}: tiles {tile}"), &got, &want);
        }
        // Versions 2 and 3 size their stages by BLOCK_M, and a thread's copies by the tile's
        // rows; version 3 leaves a warp row without a sub-tile at BLOCK_M 16: every BLOCK_M
        // through one pipelined tile and through a warp grid.
        let v2 = TILE_CONFIGS.into_iter().find(|t| t.stages > 1).unwrap();
        let v3 = TILE_CONFIGS.into_iter().find(|t| t.wm > 1).unwrap();
        for tile in [v2, v3] {
            for bm in BLOCK_MS {
                let layer = base
                    .clone()
                    .with_tile(tile)
                    .unwrap()
                    .with_block_m(bm)
                    .unwrap();
                let got = layer.experts(&r.hidden, &o.routing).unwrap();
                assert_same_bits(&format!("{name}: tiles {tile}, BLOCK_M {bm}"), &got, &want);
            }
        }
        let decode = base
            .clone()
            .with_path(Path::Decode)
            .experts(&r.hidden, &o.routing)
            .unwrap();
        let grouped = base.clone().with_path(Path::DecodeGrouped);
        assert_eq!(
            grouped.plan_for(r.rows).unwrap().block_m,
            geometry::DECODE_GROUP
        );
        let got = grouped.experts(&r.hidden, &o.routing).unwrap();
        assert_same_bits(&format!("{name}: decode_grouped vs decode"), &got, &decode);
        for bm in BLOCK_MS {
            let layer = grouped.clone().with_block_m(bm).unwrap();
            assert_eq!(layer.workspace(r.rows).unwrap().block_m(), bm);
            let got = layer.experts(&r.hidden, &o.routing).unwrap();
            let what = format!("{name}: decode_grouped, BLOCK_M {bm}, vs decode");
            assert_same_bits(&what, &got, &decode);
        }
    }
}

// ANCHOR: fusions_same_bits
/// Within a path every fusion rounds at the same places, in the same order: unfused (gate|up in
/// bf16, a SwiGLU kernel, the combine kernel), SwiGLU in GEMM 1, and (decode) the sum over k in
/// GEMM 2 give the same bits; so does every decode geometry, and every tile configuration with
/// the unfused GEMM 1. Every run too: the decode kernels use no atomics either. The grouped
/// decode path gives the decode path's bits in every fusion and geometry.
fn every_fusion_and_geometry_gives_the_same_bits(dev: &'static Device) {
    let geometries = [
        DecodeGeometry::DEFAULT,
        DecodeGeometry {
            warps: 1,
            cols_per_warp: 1,
            stream: false,
        },
        DecodeGeometry {
            warps: 8,
            cols_per_warp: 3,
            stream: false,
        },
        DecodeGeometry {
            warps: 3,
            cols_per_warp: 7,
            stream: false,
        },
    ];
    // The weights loaded without an L1 line (`_na`; the decode path only).
    let streamed = DecodeGeometry {
        warps: 2,
        cols_per_warp: 3,
        stream: true,
    };
    for name in [
        "spec_decode_6rows",
        "gated_shared_expert",
        "shared_expert",
        "unaligned_sizes",
        "odd_sizes_60_experts",
    ] {
        let r = regime(name).or_else(|| fused_regime(name)).unwrap();
        let o = oracle(&r, Dtype::Bf16);
        let base = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
        let run = |l: &FusedDevice| l.experts(&r.hidden, &o.routing).unwrap();
        // The tiled path: SwiGLU fused (the default) against unfused, default and largest tiles.
        let tiled = base.clone().with_path(Path::Tiled);
        let want = run(&tiled);
        for tile in [TileConfig::DEFAULT, ch04_fused_moe::tile_named("w4_k32_n2")] {
            let l = tiled
                .clone()
                .with_fusion(Fusion::Unfused)
                .with_tile(tile)
                .unwrap();
            assert_same_bits(&format!("{name}: tiled, unfused, {tile}"), &run(&l), &want);
        }
        // The decode path: every fusion, every geometry, twice.
        let decode = base.clone().with_path(Path::Decode);
        assert_eq!(decode.plan_for(r.rows).unwrap().fusion, Fusion::SwiGluSumK);
        let want = run(&decode);
        assert_same_bits(&format!("{name}: decode again"), &run(&decode), &want);
        for fusion in Fusion::ALL {
            for g in geometries.into_iter().chain([streamed]) {
                let l = decode
                    .clone()
                    .with_fusion(fusion)
                    .with_decode_geometry(g)
                    .unwrap();
                let what = format!("{name}: decode, {fusion}, {g}");
                assert_same_bits(&what, &run(&l), &want);
            }
        }
        // The grouped decode path: SwiGLU fused by default (GEMM 2 grouped, then the combine).
        let grouped = base.clone().with_path(Path::DecodeGrouped);
        assert_eq!(grouped.plan_for(r.rows).unwrap().fusion, Fusion::SwiGlu);
        assert_same_bits(&format!("{name}: decode_grouped"), &run(&grouped), &want);
        for fusion in Fusion::ALL {
            for g in geometries {
                let l = grouped
                    .clone()
                    .with_fusion(fusion)
                    .with_decode_geometry(g)
                    .unwrap();
                let what = format!("{name}: decode_grouped, {fusion}, {g}, vs decode");
                assert_same_bits(&what, &run(&l), &want);
            }
        }
    }
}
// ANCHOR_END: fusions_same_bits

// ANCHOR: crossover
/// The rule sends `crossover_last_decode` (T·k = 4E) down the decode path and
/// `crossover_first_tiled` (T·k = 4E + 4) to tiles; the layer left to choose gives the bits of
/// the path the rule names; and both paths agree within `BF16_VS_BF16` on both batches.
fn the_path_rule_holds_at_the_crossover(dev: &'static Device) {
    for (name, want) in [
        ("crossover_last_decode", Path::Decode),
        ("crossover_first_tiled", Path::Tiled),
    ] {
        let r = fused_regime(name).unwrap();
        let c = &r.weights.config;
        assert_eq!(choose_path(r.rows, c.router.k, c.experts), want, "{name}");
        let o = oracle(&r, Dtype::Bf16);
        let auto = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
        let ws = auto.workspace(r.rows).unwrap();
        assert_eq!(ws.plan().path, want, "{name}");
        let got = auto.experts(&r.hidden, &o.routing).unwrap();
        let forced = auto.clone().with_path(want);
        assert_same_bits(
            &format!("{name}: chosen vs {want}"),
            &got,
            &forced.experts(&r.hidden, &o.routing).unwrap(),
        );
        let other = if want == Path::Tiled {
            Path::Decode
        } else {
            Path::Tiled
        };
        let theirs = auto
            .clone()
            .with_path(other)
            .experts(&r.hidden, &o.routing)
            .unwrap();
        check_output(
            &format!("{name}: {want} vs {other}"),
            &got,
            &theirs,
            Tolerance::BF16_VS_BF16,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}
// ANCHOR_END: crossover

/// The emulator models the H200's tensor core bit for bit, and every other operation of the
/// kernels rounds the same way on both backends: the GPU must give the emulator's bits, on both
/// paths (on the emulator this compares the emulator with itself).
fn fused_layer_gives_the_emulators_bits(dev: &'static Device) {
    for name in [
        "large_prefill",
        "gated_shared_expert",
        "odd_sizes_60_experts",
        "unaligned_sizes",
    ] {
        let r = regime(name).or_else(|| fused_regime(name)).unwrap();
        let o = oracle(&r, Dtype::Bf16);
        for path in Path::ALL {
            let run = |d: &'static Device| {
                FusedDevice::new(d, &r.weights, Dtype::Bf16)
                    .unwrap()
                    .with_path(path)
                    .experts(&r.hidden, &o.routing)
                    .unwrap()
            };
            let mine = run(dev);
            // On the emulator itself, once is enough (every run is compared with the next in
            // the tests of determinism).
            let emu = match dev.kind() {
                BackendKind::Emu => mine.clone(),
                _ => run(Device::emu()),
            };
            assert_same_bits(
                &format!("{name} ({path} path): this backend vs the emulator"),
                &mine,
                &emu,
            );
        }
    }
}

/// This chapter's kernels for a plan, as `device.rs`'s tables list them: (tiled path) the
/// conversion, the GEMMs (unfused: GEMM 1 without epilogue, then SwiGLU), the shared expert's
/// and its gate, the combine; (decode path) GEMM 1 (with the shared expert's rows), the unfused
/// SwiGLU, GEMM 2, the combine unless GEMM 2 sums over k; (grouped decode path) the conversion,
/// then the decode path's list.
fn expected_kernels(path: Path, fusion: Fusion, shared: bool, gated: bool) -> usize {
    match (path, fusion) {
        (Path::Tiled, Fusion::Unfused) => 5 + usize::from(shared) * 3 + usize::from(gated),
        (Path::Tiled, _) => 4 + usize::from(shared) * 2 + usize::from(gated),
        (Path::Decode, Fusion::Unfused) => 4 + usize::from(shared),
        (Path::Decode, Fusion::SwiGlu) => 3,
        (Path::Decode, Fusion::SwiGluSumK) => 2,
        (Path::DecodeGrouped, _) => 1 + expected_kernels(Path::Decode, fusion, shared, gated),
    }
}

/// The launches are the tables of `device.rs`, whatever the routing: the same list for a batch
/// spread over every expert and for one sent to a single expert, on every path and fusion;
/// nothing for an empty batch. Chapter 3 runs on the tiled and grouped decode paths only.
fn launches_do_not_depend_on_the_routing(dev: &'static Device) {
    let variants = [
        (Path::Tiled, Fusion::SwiGlu),
        (Path::Tiled, Fusion::Unfused),
        (Path::Decode, Fusion::SwiGluSumK),
        (Path::Decode, Fusion::SwiGlu),
        (Path::Decode, Fusion::Unfused),
        (Path::DecodeGrouped, Fusion::SwiGlu),
        (Path::DecodeGrouped, Fusion::SwiGluSumK),
        (Path::DecodeGrouped, Fusion::Unfused),
    ];
    for name in [
        "tiny_batch_many_empty_experts",
        "all_to_one_expert",
        "gated_shared_expert",
        "large_prefill",
        "block_m_128_multi_block_align",
        "empty_batch",
    ] {
        let r = regime(name).or_else(|| fused_regime(name)).unwrap();
        let base = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
        let o = oracle(&r, Dtype::Bf16);
        let x = dev.upload(&r.hidden).unwrap();
        let out = dev.alloc::<f32>(r.hidden.len()).unwrap();
        let w = dev.upload(&o.routing.weights).unwrap();
        // The oracle's routing, and every pair on expert 0.
        let spread: Vec<i32> = o.routing.ids.iter().map(|&e| e as i32).collect();
        let one = vec![0i32; spread.len()];
        let shared = r.weights.config.shared;
        let gated = shared.is_some_and(|s| s.gated);
        // The large batches with each path's default only: the emulator's time goes elsewhere.
        let large = r.rows * r.weights.config.router.k > 1000;
        for (path, fusion) in variants {
            if large && fusion != ch04_fused_moe::choose::default_fusion(path) {
                continue;
            }
            let layer = base.clone().with_path(path).with_fusion(fusion);
            let at = format!("{name} ({path}, {fusion})");
            let ws = layer.workspace(r.rows).unwrap();
            let mut lists = Vec::new();
            for ids in [&spread, &one] {
                let ids = dev.upload(ids).unwrap();
                let (res, launched) =
                    record_launches(|| layer.enqueue_experts(&ws, &x, &ids, &w, &out));
                res.unwrap();
                lists.push(launched);
            }
            assert_eq!(lists[0], lists[1], "{at}");
            let ours = |v: &[String]| -> Vec<String> {
                v.iter()
                    .filter(|l| l.starts_with("ch04_fused_moe::"))
                    .cloned()
                    .collect()
            };
            assert_eq!(ours(&lists[0]), layer.kernel_names(&ws), "{at}");
            assert_eq!(lists[0].len(), layer.launches(&ws), "{at}");
            let align = lists[0].len() - layer.kernel_names(&ws).len();
            if path != Path::Decode && r.rows > 0 {
                // Chapter 3's launches come right after the conversion, before the first GEMM.
                assert!(align >= 1, "{at}");
                assert!(
                    lists[0]
                        .iter()
                        .skip(1)
                        .take(align)
                        .all(|l| l.starts_with("ch03_align_block_size::")),
                    "{at}: {:?}",
                    lists[0]
                );
            } else {
                assert_eq!(align, 0, "{at}: the decode path needs no layout");
            }
            let (res, launched) = record_launches(|| layer.forward(&r.hidden));
            res.unwrap();
            assert_eq!(
                launched.len(),
                layer.forward_launches(r.rows).unwrap(),
                "{at}"
            );
            assert!(
                launched[..launched.len() - lists[0].len()]
                    .iter()
                    .all(|l| l.starts_with("ch01_router::")),
                "{at}: {launched:?}"
            );
            assert_eq!(&launched[launched.len() - lists[0].len()..], &lists[0][..]);
            let want = if r.rows == 0 {
                0
            } else {
                expected_kernels(path, fusion, shared.is_some(), gated)
            };
            assert_eq!(layer.kernel_names(&ws).len(), want, "{at}");
        }
    }
}

fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The two GEMM kernels on a hand-made layout: a tile of a foreign expert (-1), a tile of an
/// expert past E, garbage pair ids (negative, ≥ P) among real ones, a pair left out, and a
/// padded total that ends before the last tile. Rows of pairs the layout does not name keep
/// their sentinel (never written); named rows match f64 arithmetic on the same bf16 values
/// within a bf16 rounding; nothing is read or written out of bounds (the emulator faults on
/// any access past a buffer). Then the same layout at every BLOCK_M through every tile
/// configuration: the same bits, the same rows untouched (from BLOCK_M 32 on, tile 2's last
/// pair sits in its last sub-tile, behind sub-tiles of placeholders only).
fn kernels_skip_placeholders_garbage_and_foreign_tiles(dev: &'static Device) {
    let (t, k, h, i, e) = (6usize, 2usize, 72usize, 40usize, 3usize);
    let p = t * k;
    let q = |v: Vec<f32>| -> Vec<f32> { v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect() };
    let x = q(ch01_router::inputs::patterned(t * h, 41, 1.0));
    let w13 = q(ch01_router::inputs::patterned(e * 2 * i * h, 42, 0.3));
    let w2 = q(ch01_router::inputs::patterned(e * h * i, 43, 0.3));
    let weight = ch01_router::inputs::patterned(p, 44, 1.0);
    let pl = p as i32; // the placeholder
                       // Tile 0: expert 2, pairs 0, 5, 7 and garbage; tile 1: expert -1 (pairs 1, 2 must stay
                       // untouched); tile 2: expert 1, pairs 3, 11 and, in its last slot, 10; tile 3: expert 7 ≥ E
                       // (pair 4 untouched); tile 4: past num_post (pair 6 untouched). Pairs 8 and 9 appear nowhere.
    let sorted = |bm: usize| -> Vec<i32> {
        let mut s = vec![pl; 5 * bm];
        s[..6].copy_from_slice(&[0, 5, -3, 7, pl + 9, pl]);
        s[bm..bm + 2].copy_from_slice(&[1, 2]);
        s[2 * bm..2 * bm + 2].copy_from_slice(&[3, 11]);
        s[3 * bm - 1] = 10;
        s[3 * bm] = 4;
        s[4 * bm] = 6;
        s
    };
    let expert_ids = [2, -1, 1, 7, 0];
    let layout: [(usize, usize); 6] = [(0, 2), (5, 2), (7, 2), (3, 1), (11, 1), (10, 1)];
    let untouched = [1usize, 2, 4, 6, 8, 9];
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let up = |v: &[f32]| -> Vec<bf16> { v.iter().map(|&v| bf16::from_f32(v)).collect() };
    let sentinel = bf16::from_f32(-12345.0);
    // act [P, I] and y [P, H] from both kernels of tile configuration `tile` at BLOCK_M `bm` on
    // device `d`, both pre-filled with the sentinel.
    let run = |d: &'static Device, tile: TileConfig, bm: usize| -> (Vec<bf16>, Vec<f32>) {
        let m = d.load(&KERNELS).unwrap();
        let (xd, w13d, w2d) = (
            d.upload(&xb).unwrap(),
            d.upload(&up(&w13)).unwrap(),
            d.upload(&up(&w2)).unwrap(),
        );
        let (sd, ed, nd, wd) = (
            d.upload(&sorted(bm)).unwrap(),
            d.upload(&expert_ids).unwrap(),
            d.upload(&[(4 * bm) as i32]).unwrap(),
            d.upload(&weight).unwrap(),
        );
        let act = d.upload(&vec![sentinel; p * i]).unwrap();
        let y = d.upload(&vec![-12345.0f32; p * h]).unwrap();
        let mut cfg = LaunchConfig::blocks(tile.grid_tiles(5) as u32, tile.threads() as u32)
            .with_shared(tile.shared_bytes(bm) as u32);
        cfg.grid.1 = i.div_ceil(tile.bn1()) as u32;
        let int = |v: usize| KernelArg::I32(v as i32);
        let sizes = [int(p), int(k), int(h), int(i), int(e), int(bm)];
        // Versions 7 to 10 also take their weight tensor's map (the kernel's boxes).
        let map = |w: &DeviceBuffer<bf16>, rows: usize, cols: usize| -> Option<DeviceBuffer<u64>> {
            tile.tma()
                .then(|| {
                    let b = geometry::WG_TMA_BOX as u32;
                    d.upload(&d.tensor_map_bf16(w, rows, cols, b, b).unwrap()[..])
                })
                .map(Result::unwrap)
        };
        let (map13, map2) = (map(&w13d, e * 2 * i, h), map(&w2d, e * h, i));
        let m13: Vec<KernelArg> = map13.iter().map(KernelArg::from).collect();
        let m2: Vec<KernelArg> = map2.iter().map(KernelArg::from).collect();
        let a = args![&xd, &w13d, &sd, &ed, &nd, &act];
        m.launch(
            &tile.kernel("fused_gemm1_swiglu"),
            cfg,
            &[&a[..], &sizes[..], &m13[..]].concat(),
        )
        .unwrap();
        cfg.grid.1 = h.div_ceil(tile.bn()) as u32;
        let a = args![&act, &w2d, &sd, &ed, &nd, &wd, &y];
        let sizes = [int(p), int(h), int(i), int(e), int(bm), int(0)];
        m.launch(
            &tile.kernel("fused_gemm2"),
            cfg,
            &[&a[..], &sizes[..], &m2[..]].concat(),
        )
        .unwrap();
        (act.to_vec().unwrap(), y.to_vec().unwrap())
    };
    let base = TileConfig::DEFAULT;
    assert_eq!(
        (base.threads(), base.bn1(), base.bn()),
        (
            geometry::FUSED_THREADS,
            geometry::FUSED_BN1,
            geometry::FUSED_BN2
        )
    );
    let (act, y) = run(dev, base, 16);
    // The same bits as the emulator (on the GPU: the H200's tensor cores against their model).
    let (emu_act, emu_y) = run(Device::emu(), base, 16);
    assert_same_bits(
        "act, this backend vs the emulator",
        &bits(&act),
        &bits(&emu_act),
    );
    assert_same_bits("y, this backend vs the emulator", &y, &emu_y);
    let untouched_rows = |act: &[bf16], y: &[f32], what: &str| {
        for &pair in &untouched {
            assert!(
                act[pair * i..(pair + 1) * i].iter().all(|v| *v == sentinel),
                "{what}: act row of pair {pair} was written"
            );
            assert!(
                y[pair * h..(pair + 1) * h].iter().all(|v| *v == -12345.0),
                "{what}: y row of pair {pair} was written"
            );
        }
    };
    untouched_rows(&act, &y, "w4_k32_n1, BLOCK_M 16");
    for bm in BLOCK_MS {
        for tile in TILE_CONFIGS {
            let what = format!("{tile}, BLOCK_M {bm}");
            let (a, yy) = run(dev, tile, bm);
            untouched_rows(&a, &yy, &what);
            assert_same_bits(&format!("act, {what}"), &bits(&a), &bits(&act));
            assert_same_bits(&format!("y, {what}"), &yy, &y);
        }
    }
    // Versions 4 to 11 (sm_90a GPUs and the emulator) at the BLOCK_M it is built for: the same
    // rows untouched and the same bits (here K = 72 and 40: the last slice of 64 mostly
    // zero-filled).
    if dev.runs_hopper() {
        for tile in HOPPER_CONFIGS {
            let bm = tile.required_block_m().unwrap();
            let what = format!("{tile}, BLOCK_M {bm}");
            let (a, yy) = run(dev, tile, bm);
            untouched_rows(&a, &yy, &what);
            assert_same_bits(&format!("act, {what}"), &bits(&a), &bits(&act));
            assert_same_bits(&format!("y, {what}"), &yy, &y);
        }
    }
    // f64 on the same bf16 values: act rounded to bf16 as the kernel stores it, y from the
    // kernel's own act (so only GEMM 2's sums are compared there).
    let (mut want_act, mut got_act, mut want_y, mut got_y) = (vec![], vec![], vec![], vec![]);
    for &(pair, ex) in &layout {
        let ar: Vec<f32> = act[pair * i..(pair + 1) * i]
            .iter()
            .map(|v| v.to_f32())
            .collect();
        let xr = &x[pair / k * h..(pair / k + 1) * h];
        let (a, down) = pair_oracle(xr, &ar, &w13, &w2, ex, (h, i));
        want_act.extend(a.iter().map(|&v| v as f32));
        got_act.extend_from_slice(&ar);
        want_y.extend(down.iter().map(|&d| (weight[pair] as f64 * d) as f32));
        got_y.extend_from_slice(&y[pair * h..(pair + 1) * h]);
    }
    check_output("gemm1 act", &want_act, &got_act, Tolerance::BF16_VS_ORACLE).unwrap();
    // GEMM 2 alone: fp32 sums of bf16 products, no bf16 rounding on the way.
    check_output("gemm2 y", &want_y, &got_y, Tolerance::F32).unwrap();
    grouped_kernels_on_a_hand_made_layout(dev, &x, &w13, &w2, &weight);
}

/// The f64 oracle of one pair on the kernels' own bf16 values: its `act` row (SwiGLU of
/// x_row · w13[e]ᵀ, unrounded) and its unweighted down projection from `act_row` (the kernel's
/// own act, so only GEMM 2's sums are compared). w13 [E, 2I, H], w2 [E, H, I], flattened.
fn pair_oracle(
    x_row: &[f32],
    act_row: &[f32],
    w13: &[f32],
    w2: &[f32],
    e: usize,
    (h, i): (usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let dot =
        |a: &[f32], b: &[f32]| -> f64 { a.iter().zip(b).map(|(&u, &v)| u as f64 * v as f64).sum() };
    let w = &w13[e * 2 * i * h..(e + 1) * 2 * i * h];
    let act = (0..i)
        .map(|c| {
            let g = dot(x_row, &w[c * h..(c + 1) * h]);
            let u = dot(x_row, &w[(i + c) * h..(i + c + 1) * h]);
            g / (1.0 + (-g).exp()) * u
        })
        .collect();
    let w = &w2[e * h * i..(e + 1) * h * i];
    let down = (0..h)
        .map(|c| dot(act_row, &w[c * i..(c + 1) * i]))
        .collect();
    (act, down)
}

/// The grouped decode kernels on a layout of their own (BLOCK_M 64, so two ballots per tile):
/// tile 0 of expert 2 holds nine real pairs (two passes of 8) among garbage ids (negative,
/// ≥ P) and placeholders in both halves; tile 1 is of expert -1 (pair 1), tile 2 of expert 0
/// (pair 10), tile 3 lies past num_post (pair 4). act and y must be the per-pair decode kernels'
/// bits on the same pairs (ids: each tile's expert, -1 for pairs 1 and 4), sentinels included;
/// the same on the emulator. x, w13, w2 and weight as the caller made them (bf16 values).
fn grouped_kernels_on_a_hand_made_layout(
    dev: &'static Device,
    x: &[f32],
    w13: &[f32],
    w2: &[f32],
    weight: &[f32],
) {
    let (t, k, h, i, e, bm) = (6usize, 2usize, 72usize, 40usize, 3usize, 64usize);
    let p = t * k;
    let pl = p as i32;
    let mut sorted = vec![pl; 4 * bm];
    for (slot, v) in [
        (0, 0),
        (1, -3),
        (2, 5),
        (3, 7),
        (4, pl + 9),
        (10, 2),
        (20, 3),
        (31, 6),
        (32, 8),
        (33, -1),
        (40, 9),
        (63, 11),
    ] {
        sorted[slot] = v;
    }
    sorted[bm] = 1;
    sorted[2 * bm] = 10;
    sorted[3 * bm] = 4;
    let expert_ids = [2, -1, 0, 1];
    let ids: Vec<i32> = (0..p)
        .map(|q| match q {
            1 | 4 => -1,
            10 => 0,
            _ => 2,
        })
        .collect();
    let up = |v: &[f32]| -> Vec<bf16> { v.iter().map(|&v| bf16::from_f32(v)).collect() };
    let sentinel = bf16::from_f32(-12345.0);
    let int = |v: usize| KernelArg::I32(v as i32);
    // act [P, I] and y [P, H] from the grouped kernels (or the per-pair ones) on device `d`.
    let run = |d: &'static Device, grouped: bool| -> (Vec<bf16>, Vec<f32>) {
        let m = d.load(&KERNELS).unwrap();
        let (w13d, w2d, wd) = (
            d.upload(&up(w13)).unwrap(),
            d.upload(&up(w2)).unwrap(),
            d.upload(weight).unwrap(),
        );
        let act = d.upload(&vec![sentinel; p * i]).unwrap();
        let y = d.upload(&vec![-12345.0f32; p * h]).unwrap();
        let null = KernelArg::Ptr(0);
        let sizes = [int(t), int(k), int(h), int(i), int(e), int(0), int(2)];
        let blocks = if grouped { expert_ids.len() } else { p };
        let mut cfg = LaunchConfig::blocks(blocks as u32, 64);
        cfg.grid.1 = i.div_ceil(4) as u32;
        let mut cfg2 = cfg;
        cfg2.grid.1 = h.div_ceil(4) as u32;
        if grouped {
            let (xd, sd, ed, nd) = (
                d.upload(&up(x)).unwrap(),
                d.upload(&sorted).unwrap(),
                d.upload(&expert_ids).unwrap(),
                d.upload(&[(3 * bm) as i32]).unwrap(),
            );
            let extra = [int(bm), int(expert_ids.len())];
            let a = args![&xd, &sd, &ed, &nd, &w13d, null, null, null, &act, null];
            let all = [&a[..], &sizes[..], &extra[..]].concat();
            m.launch("decode_grouped_gemm1_swiglu", cfg, &all).unwrap();
            let a = args![&act, &sd, &ed, &nd, &wd, &w2d, null, null, &y, null];
            let all = [&a[..], &sizes[..], &extra[..]].concat();
            m.launch("decode_grouped_gemm2", cfg2, &all).unwrap();
        } else {
            let (xd, idd) = (d.upload(x).unwrap(), d.upload(&ids).unwrap());
            // The twins that stream the weights (the `_na` geometries): the same bits.
            let a = args![&xd, &idd, &w13d, null, null, null, &act, null];
            let all = [&a[..], &sizes[..]].concat();
            m.launch("decode_gemm1_swiglu_na", cfg, &all).unwrap();
            let a = args![&act, &idd, &wd, &w2d, null, null, &y, null];
            let all = [&a[..], &sizes[..]].concat();
            m.launch("decode_gemm2_na", cfg2, &all).unwrap();
        }
        (act.to_vec().unwrap(), y.to_vec().unwrap())
    };
    let (act, y) = run(dev, true);
    let (want_act, want_y) = run(dev, false);
    assert_same_bits("grouped act vs per-pair act", &bits(&act), &bits(&want_act));
    assert_same_bits("grouped y vs per-pair y", &y, &want_y);
    let (emu_act, emu_y) = run(Device::emu(), true);
    assert_same_bits(
        "grouped act, this backend vs the emulator",
        &bits(&act),
        &bits(&emu_act),
    );
    assert_same_bits("grouped y, this backend vs the emulator", &y, &emu_y);
    for pair in 0..p {
        let named = !matches!(pair, 1 | 4);
        let a = &act[pair * i..(pair + 1) * i];
        assert_eq!(
            a.iter().all(|v| *v == sentinel),
            !named,
            "grouped act row of pair {pair}"
        );
        let yr = &y[pair * h..(pair + 1) * h];
        assert_eq!(
            yr.iter().all(|v| *v == -12345.0),
            !named,
            "grouped y row of pair {pair}"
        );
    }
}

/// The decode kernels on a routing with ids outside `0..E` (-1, E, a large id): those pairs'
/// rows keep their sentinel (never written) and add nothing to their token's sum; every other
/// row matches f64 arithmetic on the same bf16 values. H 70 is no multiple of 8 (GEMM 1 loads
/// one value at a time), I 40 is (GEMM 2 loads 16 bytes). The grouped decode kernels, on
/// chapter 3's layout of the same ids (BLOCK_M 8, which leaves the foreign ids out), write the
/// per-pair kernels' act and y bits, sentinels included.
fn decode_kernels_skip_foreign_ids(dev: &'static Device) {
    let (t, k, h, i, e) = (3usize, 4usize, 70usize, 40usize, 5usize);
    let p = t * k;
    let q = |v: Vec<f32>| -> Vec<f32> { v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect() };
    let up = |v: &[f32]| -> Vec<bf16> { v.iter().map(|&v| bf16::from_f32(v)).collect() };
    // x stays f32: the kernels round it as they load.
    let x = ch01_router::inputs::patterned(t * h, 51, 1.0);
    let xq = q(x.clone());
    let w13 = q(ch01_router::inputs::patterned(e * 2 * i * h, 52, 0.3));
    let w2 = q(ch01_router::inputs::patterned(e * h * i, 53, 0.3));
    let weight = ch01_router::inputs::patterned(p, 54, 1.0);
    let ids: Vec<i32> = vec![4, -1, 0, 2, 5, 1, 3, 3, 1_000_000, 0, 4, -7];
    let sentinel = bf16::from_f32(-12345.0);
    let int = |v: usize| KernelArg::I32(v as i32);
    // act, y and out of the decode kernels, then act and y of the grouped ones.
    type Outputs = (Vec<bf16>, Vec<f32>, Vec<f32>, Vec<bf16>, Vec<f32>);
    let run = |d: &'static Device| -> Outputs {
        let m = d.load(&KERNELS).unwrap();
        let (xd, idd, w13d, w2d, wd) = (
            d.upload(&x).unwrap(),
            d.upload(&ids).unwrap(),
            d.upload(&up(&w13)).unwrap(),
            d.upload(&up(&w2)).unwrap(),
            d.upload(&weight).unwrap(),
        );
        let act = d.upload(&vec![sentinel; p * i]).unwrap();
        let y = d.upload(&vec![-12345.0f32; p * h]).unwrap();
        let out = d.upload(&vec![-12345.0f32; t * h]).unwrap();
        let null = KernelArg::Ptr(0);
        let sizes = [int(t), int(k), int(h), int(i), int(e), int(0), int(2)];
        let mut cfg = LaunchConfig::blocks(p as u32, 64);
        cfg.grid.1 = i.div_ceil(4) as u32;
        // GEMM 1 and the summing GEMM 2 by their twins that stream the weights (the `_na`
        // geometries), the plain GEMM 2 not: the same bits either way.
        let a = args![&xd, &idd, &w13d, null, null, null, &act, null];
        m.launch(
            "decode_gemm1_swiglu_na",
            cfg,
            &[&a[..], &sizes[..]].concat(),
        )
        .unwrap();
        cfg.grid.1 = h.div_ceil(4) as u32;
        let a = args![&act, &idd, &wd, &w2d, null, null, &y, null];
        m.launch("decode_gemm2", cfg, &[&a[..], &sizes[..]].concat())
            .unwrap();
        let mut cfg = LaunchConfig::blocks(t as u32, 64);
        cfg.grid.1 = h.div_ceil(4) as u32;
        let a = args![&act, &idd, &wd, &w2d, null, null, null, &out];
        m.launch("decode_gemm2_sum_na", cfg, &[&a[..], &sizes[..]].concat())
            .unwrap();
        // The grouped kernels on chapter 3's layout of the same ids.
        let bm = geometry::DECODE_GROUP;
        let align = DeviceAlign::new(d, p, e, bm).unwrap();
        let layout = align.alloc_outputs(d).unwrap();
        align.enqueue(&idd, &layout).unwrap();
        let tiles = max_tiles(p, e, bm);
        let xb = d.upload(&up(&x)).unwrap();
        let act2 = d.upload(&vec![sentinel; p * i]).unwrap();
        let y2 = d.upload(&vec![-12345.0f32; p * h]).unwrap();
        let extra = [int(bm), int(tiles)];
        let l = args![&layout.sorted_ids, &layout.expert_ids, &layout.num_post];
        let mut cfg = LaunchConfig::blocks(tiles as u32, 64);
        cfg.grid.1 = i.div_ceil(4) as u32;
        let a = args![&xb];
        let b = args![&w13d, null, null, null, &act2, null];
        let all = [&a[..], &l[..], &b[..], &sizes[..], &extra[..]].concat();
        m.launch("decode_grouped_gemm1_swiglu", cfg, &all).unwrap();
        cfg.grid.1 = h.div_ceil(4) as u32;
        let a = args![&act2];
        let b = args![&wd, &w2d, null, null, &y2, null];
        let all = [&a[..], &l[..], &b[..], &sizes[..], &extra[..]].concat();
        m.launch("decode_grouped_gemm2", cfg, &all).unwrap();
        (
            act.to_vec().unwrap(),
            y.to_vec().unwrap(),
            out.to_vec().unwrap(),
            act2.to_vec().unwrap(),
            y2.to_vec().unwrap(),
        )
    };
    let (act, y, out, act2, y2) = run(dev);
    let (emu_act, emu_y, emu_out, _, _) = run(Device::emu());
    assert_same_bits("grouped act vs decode act", &bits(&act2), &bits(&act));
    assert_same_bits("grouped y vs decode y", &y2, &y);
    assert_same_bits(
        "act, this backend vs the emulator",
        &bits(&act),
        &bits(&emu_act),
    );
    assert_same_bits("y, this backend vs the emulator", &y, &emu_y);
    assert_same_bits("out, this backend vs the emulator", &out, &emu_out);
    let (mut want_act, mut got_act, mut want_out) = (vec![], vec![], vec![0f64; t * h]);
    let mut combined = vec![0f32; t * h];
    for pair in 0..p {
        let ex = ids[pair];
        if !(0..e as i32).contains(&ex) {
            assert!(
                act[pair * i..(pair + 1) * i].iter().all(|v| *v == sentinel),
                "act row of foreign pair {pair} was written"
            );
            assert!(
                y[pair * h..(pair + 1) * h].iter().all(|v| *v == -12345.0),
                "y row of foreign pair {pair} was written"
            );
            continue;
        }
        let ar: Vec<f32> = act[pair * i..(pair + 1) * i]
            .iter()
            .map(|v| v.to_f32())
            .collect();
        let xr = &xq[pair / k * h..(pair / k + 1) * h];
        let (a, down) = pair_oracle(xr, &ar, &w13, &w2, ex as usize, (h, i));
        want_act.extend(a.iter().map(|&v| v as f32));
        got_act.extend_from_slice(&ar);
        for c in 0..h {
            want_out[pair / k * h + c] += weight[pair] as f64 * down[c];
            // fused_combine's order on the kernel's own y: j in order, skipped pairs adding nothing.
            combined[pair / k * h + c] += y[pair * h + c];
        }
    }
    check_output("decode act", &want_act, &got_act, Tolerance::BF16_VS_ORACLE).unwrap();
    let want_out: Vec<f32> = want_out.iter().map(|&v| v as f32).collect();
    check_output("decode out", &want_out, &out, Tolerance::F32).unwrap();
    // The fused sum is the unfused y summed j in order: the same bits.
    assert_same_bits("decode_gemm2_sum vs y summed in order", &out, &combined);
}

// ANCHOR: fill_and_last_experts
/// Weights filled on the device (`fused_fill_bf16`) are the host twin's bits; and a layer filled
/// there, run on a routing that only reaches its last experts, matches chapter 2's device loop
/// built from the host's copy of those experts (zeros elsewhere) on every path (the grouped
/// decode path with the decode path's bits). The emulator
/// runs it at a small shape; [`glm_sized_layer_indexes_past_2_to_the_31`] at GLM's, where an
/// expert's offset passes 2³¹.
fn last_experts_match_chapter_2(
    dev: &'static Device,
    config: &ch02_grouped::MoeConfig,
    tokens: usize,
    seed: u64,
) {
    let e = config.experts;
    let k = config.router.k;
    let t0 = std::time::Instant::now();
    let fused = FusedDevice::patterned_on_device(dev, config, seed).unwrap();
    dev.synchronize().unwrap();
    let t1 = std::time::Instant::now();
    let last = e - k.max(8).min(e);
    let host = host_weights(config, seed, last..e);
    let t2 = std::time::Instant::now();
    let grouped = GroupedDevice::new(dev, &host, Dtype::Bf16).unwrap();
    drop(host);
    let t3 = std::time::Instant::now();
    // Token r: the last experts, rotated by r; weights 1/k spread a little.
    let mut ids = Vec::new();
    let mut weights = Vec::new();
    for r in 0..tokens {
        for j in 0..k {
            ids.push((last + (r + j) % (e - last)) as u32);
            weights.push((1.0 + 0.1 * j as f32) / k as f32);
        }
    }
    let routing = Routing {
        rows: tokens,
        k,
        ids,
        weights,
    };
    let hidden = ch01_router::inputs::patterned(tokens * config.hidden, seed + 1, 1.0);
    let want = grouped.experts(&hidden, &routing).unwrap();
    let mut decode_bits = None;
    for path in Path::ALL {
        let got = fused
            .clone()
            .with_path(path)
            .experts(&hidden, &routing)
            .unwrap();
        match path {
            Path::Decode => decode_bits = Some(got.clone()),
            Path::DecodeGrouped => assert_same_bits(
                &format!("experts {last}..{e}: decode_grouped vs decode"),
                &got,
                decode_bits.as_ref().unwrap(),
            ),
            Path::Tiled => {}
        }
        let err = check_output(
            &format!("experts {last}..{e}, {path} path: fused vs grouped device"),
            &want,
            &got,
            Tolerance::BF16_VS_BF16,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "E {e}, H {}, I {}: experts {last}..{e}, {path} path vs chapter 2: {:.2e}",
            config.hidden, config.intermediate, err.relative
        );
    }
    eprintln!(
        "filled on the device in {:.2} s; host copy of {} experts in {:.2} s; chapter 2's upload in {:.2} s",
        (t1 - t0).as_secs_f64(),
        e - last,
        (t2 - t1).as_secs_f64(),
        (t3 - t2).as_secs_f64()
    );
}
// ANCHOR_END: fill_and_last_experts

/// The fill kernel gives the host twin's bits (an offset and a tail included), and a small layer
/// filled on the device passes [`last_experts_match_chapter_2`].
fn weights_filled_on_the_device_match_the_host(dev: &'static Device) {
    let m = dev.load(&KERNELS).unwrap();
    let n = 1000;
    let buf = dev.alloc::<bf16>(n).unwrap();
    fill_device(&m, &buf, 12_345, 77, 0.25).unwrap();
    let want: Vec<bf16> = (0..n)
        .map(|i| fill_value(77, 12_345 + i as u64, 0.25))
        .collect();
    assert_same_bits("fill", &bits(&buf.to_vec().unwrap()), &bits(&want));
    let config = ch02_grouped::MoeConfig {
        hidden: 64,
        intermediate: 40,
        experts: 40,
        router: RouterConfig::qwen3(4),
        shared: None,
    };
    last_experts_match_chapter_2(dev, &config, 3, 9);
}

// ANCHOR: glm_64bit
/// 64-bit indexing at GLM's shape: 288 experts, H 4096, I 1024, k 8. w13 holds 288 × 2048 × 4096
/// = 2.4 G elements, so the offset of expert 280 (2.35 G) passes 2³¹ and a 32-bit product would
/// wrap to another expert's rows; every kernel takes it in 64 bits. A few tokens routed to
/// experts 280..287 through every path against chapter 2's device loop (cuBLAS per expert,
/// offsets from Rust's usize). Needs a GPU (7.2 GB of bf16 weights for this layer, 7.2 GB more
/// for chapter 2's, and 14.5 GB of mostly untouched f32 on the host); the emulator runs the same
/// body at a small shape in `weights_filled_on_the_device_match_the_host`.
#[test]
#[ignore = "needs a GPU"]
fn glm_sized_layer_indexes_past_2_to_the_31() {
    let config = ch02_grouped::MoeConfig {
        hidden: 4096,
        intermediate: 1024,
        experts: 288,
        router: RouterConfig::glm5(8),
        shared: None,
    };
    assert!(280 * 2 * 1024 * 4096 > i32::MAX as usize);
    last_experts_match_chapter_2(moe_kernels::testing::cuda(), &config, 4, 31);
}
// ANCHOR_END: glm_64bit

/// Every error a user can provoke is a typed error naming what is wrong.
fn bad_inputs_are_typed_errors(dev: &'static Device) {
    let r = regime("spec_decode_6rows").unwrap();
    let o = oracle(&r, Dtype::Bf16);
    let e = FusedDevice::new(dev, &r.weights, Dtype::F32).err().unwrap();
    assert!(matches!(e, MoeError::Config { field: "dtype", .. }), "{e}");
    let l = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
    let e = l.forward(&r.hidden[..r.hidden.len() - 1]).unwrap_err();
    assert!(matches!(e, MoeError::Shape { .. }), "{e}");
    let e = l.experts(&r.hidden[..128], &o.routing).unwrap_err();
    assert!(matches!(e, MoeError::Shape { .. }), "{e}");
    let mut bad = o.routing.clone();
    bad.ids[9] = 64;
    assert_eq!(
        l.experts(&r.hidden, &bad).unwrap_err(),
        MoeError::IdOutOfRange {
            row: 1,
            slot: 1,
            id: 64,
            experts: 64
        }
    );
    let empty = l.forward(&[]).unwrap();
    assert_eq!((empty.routing.rows, empty.out.len()), (0, 0));
    assert!(l.experts(&[], &Routing::empty(8)).unwrap().is_empty());
    let e = FusedDevice::new(dev, &r.weights, Dtype::Bf16)
        .unwrap()
        .with_block_m(8)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            MoeError::Config {
                field: "BLOCK_M",
                ..
            }
        ),
        "{e}"
    );
    // The sum over k inside GEMM 2 needs the decode path; a geometry or tile that does not exist.
    let e = l
        .clone()
        .with_path(Path::Tiled)
        .with_fusion(Fusion::SwiGluSumK)
        .workspace(r.rows)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            MoeError::Config {
                field: "fusion",
                ..
            }
        ),
        "{e}"
    );
    let bad_geometry = DecodeGeometry {
        warps: 33,
        cols_per_warp: 1,
        stream: false,
    };
    let e = l.clone().with_decode_geometry(bad_geometry).err().unwrap();
    assert!(
        matches!(
            e,
            MoeError::Config {
                field: "decode geometry",
                ..
            }
        ),
        "{e}"
    );
    // A geometry the decode path runs and the grouped path refuses, by a typed error naming it.
    let grouped_refuses = |g: DecodeGeometry| {
        let e = l
            .clone()
            .with_path(Path::DecodeGrouped)
            .with_decode_geometry(g)
            .unwrap()
            .workspace(r.rows)
            .err()
            .unwrap();
        assert!(
            matches!(
                &e,
                MoeError::Config {
                    field: "decode geometry",
                    found,
                    ..
                } if *found == g.name()
            ),
            "{e}"
        );
        assert!(l
            .clone()
            .with_path(Path::Decode)
            .with_decode_geometry(g)
            .unwrap()
            .workspace(r.rows)
            .is_ok());
    };
    // 32 warps: past the grouped kernels' launch bounds (16 warps).
    grouped_refuses(DecodeGeometry {
        warps: 32,
        cols_per_warp: 1,
        stream: false,
    });
    // Streamed weights (`_na`): the grouped kernels read a tile's rows again from L1.
    grouped_refuses(DecodeGeometry {
        stream: true,
        ..DecodeGeometry::DEFAULT
    });
    let bad_tile = TileConfig::portable(ch04_fused_moe::Version::V1, 3, 1, 32, 1, 1);
    // Version 7's bulk copies on an mma.sync tile (whose name cannot say so) are no configuration.
    let tma_on_v1 = TileConfig {
        version: ch04_fused_moe::Version::V7,
        ..TileConfig::DEFAULT
    };
    assert!(
        matches!(
            l.clone().with_tile(tma_on_v1).err(),
            Some(MoeError::Config {
                field: "tile configuration",
                ..
            })
        ),
        "w4_k32_n1 with tma set was not refused"
    );
    let e = l.clone().with_tile(bad_tile).err().unwrap();
    assert!(
        matches!(
            e,
            MoeError::Config {
                field: "tile configuration",
                ..
            }
        ),
        "{e}"
    );
    let mut w = r.weights.clone();
    w.config.router = RouterConfig::glm5(65);
    assert_eq!(
        FusedDevice::new(dev, &w, Dtype::Bf16).err().unwrap(),
        MoeError::Router(RouterError::KTooLarge { k: 65, experts: 64 })
    );
    // A workspace of another layer.
    let other = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
    let ws = other.workspace(r.rows).unwrap();
    let (x, ids, wts, out) = (
        dev.upload(&r.hidden).unwrap(),
        dev.upload(&vec![0i32; r.rows * 8]).unwrap(),
        dev.upload(&vec![0f32; r.rows * 8]).unwrap(),
        dev.alloc::<f32>(r.hidden.len()).unwrap(),
    );
    let e = l.enqueue_experts(&ws, &x, &ids, &wts, &out).unwrap_err();
    assert!(
        matches!(
            e,
            MoeError::Config {
                field: "workspace",
                ..
            }
        ),
        "{e}"
    );
}

/// The added regimes send their pairs where their names say.
fn regimes_do_what_their_names_say(dev: &'static Device) {
    let layer = |name: &str| {
        let r = fused_regime(name).unwrap();
        let l = FusedDevice::new(dev, &r.weights, Dtype::Bf16).unwrap();
        let ws = l.workspace(r.rows).unwrap();
        (r, l, ws)
    };
    let (r, _, ws) = layer("mini_sglang");
    let c = &r.weights.config;
    assert_eq!(
        (r.rows, c.hidden, c.intermediate, c.experts, c.router.k),
        (37, 64, 48, 8, 2)
    );
    assert_eq!(layer("block_m_64").2.block_m(), 64);
    let (_, l, ws128) = layer("block_m_128_multi_block_align");
    assert_eq!(ws128.block_m(), 128);
    assert!(
        l.launches(&ws128) - l.kernel_names(&ws128).len() > 1,
        "chapter 3's multi-block path"
    );
    assert_eq!(ws.block_m(), 16);
    let (r, _, _) = layer("odd_sizes_60_experts");
    let c = &r.weights.config;
    for (n, tile) in [
        (c.hidden, geometry::FUSED_BN2),
        (c.intermediate, geometry::FUSED_BN1),
    ] {
        assert!(
            n % tile != 0 && n % geometry::FUSED_BK != 0 && n % 16 != 0,
            "{n}"
        );
    }
    assert_eq!(c.experts, 60);
    // The rule's paths: few pairs per expert decode, the rest tile.
    assert_eq!(layer("odd_sizes_60_experts").2.plan().path, Path::Decode);
    assert_eq!(
        layer("gpt_oss_sizes_few_tokens").2.plan().path,
        Path::Decode
    );
    assert_eq!(ws.plan().path, Path::Tiled);
    assert_eq!(layer("crossover_last_decode").2.plan().path, Path::Decode);
    assert_eq!(layer("crossover_first_tiled").2.plan().path, Path::Tiled);
}

moe_kernels::backend_tests!(
    regimes_do_what_their_names_say,
    fused_layer_matches_the_oracle_and_chapter_2_on_every_regime,
    every_block_m_and_every_run_gives_the_same_bits,
    every_fusion_and_geometry_gives_the_same_bits,
    the_path_rule_holds_at_the_crossover,
    fused_layer_gives_the_emulators_bits,
    launches_do_not_depend_on_the_routing,
    kernels_skip_placeholders_garbage_and_foreign_tiles,
    decode_kernels_skip_foreign_ids,
    weights_filled_on_the_device_match_the_host,
    bad_inputs_are_typed_errors,
    to_bf16_rounds_every_value_on_both_of_its_paths,
    bf16_y_rounds_each_term_then_sums_them_in_slot_order,
);

// ANCHOR: bf16_y_bits
/// [`FusedDevice::with_bf16_y`] on the tiled path: every output is the f32 layer's k terms, each
/// rounded to bf16, added in slot order in fp32 from zero. The terms come from the f32 layer
/// itself, on the same routing with every weight but slot j's set to zero: the other slots' y
/// are then zeros and adding a zero is exact, so that output is slot j's weighted term alone
/// (the GEMMs' sums do not depend on the weights). The sum is made here, on the host. Regimes
/// without a shared expert (whose term is f32 in either mode); the default tile on all of them,
/// and on a device that runs Hopper's instructions versions 8 and 11 on three regimes of many
/// pairs.
fn bf16_y_rounds_each_term_then_sums_them_in_slot_order(dev: &'static Device) {
    let mut tiles = vec![TileConfig::DEFAULT];
    if dev.runs_hopper() {
        tiles.extend(
            ["g2_k64_n16_s4_x_tma_ws", "g1_k64_n8_s4_x_tma_ws_ps_dy"]
                .map(ch04_fused_moe::tile_named),
        );
    }
    let mut used = Vec::new();
    for r in every_regime()
        .filter(|r| r.weights.config.shared.is_none() && r.weights.config.router.k > 1)
    {
        let o = oracle(&r, Dtype::Bf16);
        let k = o.routing.k;
        for &tile in &tiles {
            // The emulator runs Hopper's tiles slowly: three regimes of many pairs are enough.
            const HOPPER_ON: [&str; 3] = [
                "imbalanced_routing",
                "block_m_128_multi_block_align",
                "mini_sglang",
            ];
            if tile.is_hopper() && !HOPPER_ON.contains(&r.name) {
                continue;
            }
            // A Hopper tile needs H and I multiples of 8 (a typed refusal otherwise).
            let Ok(layer) = FusedDevice::new(dev, &r.weights, Dtype::Bf16)
                .unwrap()
                .with_path(Path::Tiled)
                .with_tile(tile)
            else {
                assert!(tile.is_hopper(), "{}: {tile} refused", r.name);
                continue;
            };
            let got = layer
                .clone()
                .with_bf16_y(true)
                .experts(&r.hidden, &o.routing)
                .unwrap();
            let mut want = vec![0.0f32; got.len()];
            let mut largest = 0.0f64;
            for j in 0..k {
                let mut alone = o.routing.clone();
                for (i, w) in alone.weights.iter_mut().enumerate() {
                    if i % k != j {
                        *w = 0.0;
                    }
                }
                let term = layer.experts(&r.hidden, &alone).unwrap();
                for (a, t) in want.iter_mut().zip(&term) {
                    let rounded = bf16::from_f32(*t).to_f32();
                    largest =
                        largest.max(((rounded - t) as f64).abs() / (t.abs() as f64).max(1e-30));
                    *a += rounded;
                }
            }
            assert_same_bits(&format!("{} {tile}: bf16 y", r.name), &got, &want);
            assert!(
                largest <= 2f64.powi(-8),
                "{}: a term moved by {largest:e} of itself",
                r.name
            );
            used.push((r.name, tile));
        }
    }
    assert!(
        used.len() >= 3,
        "only {used:?} have k > 1 and no shared expert"
    );
    for &tile in &tiles {
        let names: Vec<_> = used.iter().filter(|u| u.1 == tile).map(|u| u.0).collect();
        println!("bf16 y, {tile}: the host's sum's bits on {names:?}");
    }
}
// ANCHOR_END: bf16_y_bits

/// `fused_to_bf16`, the tiled path's first kernel, converts eight values a thread where both
/// buffers are 16-byte aligned and the rest one at a time: on both paths every value is rounded
/// to nearest even as `half` rounds it (an independent conversion), NaN stays NaN, nothing past
/// `n` is written. The aligned call has 8·37 + 5 values (the last 5 one at a time); the unaligned
/// one starts both buffers one element in (all one at a time). Halfway cases, ±0, ±inf,
/// subnormals, the largest finite values and a NaN are among them.
fn to_bf16_rounds_every_value_on_both_of_its_paths(dev: &'static Device) {
    let n = 8 * 37 + 5;
    let mut x = ch01_router::inputs::patterned(n, 47, 3.0);
    let special = [
        f32::from_bits(0x3f80_8000), // 1 + 2^-8: halfway, rounds down to even
        f32::from_bits(0x3f81_8000), // halfway, rounds up to even
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x0000_0001),
        f32::from_bits(0x8000_8000),
        f32::MAX,
        f32::NAN,
    ];
    for (j, &v) in special.iter().enumerate() {
        x[37 * j % n] = v;
        x[n - 1 - j] = v;
    }
    let m = dev.load(&KERNELS).unwrap();
    let xd = dev.upload(&x).unwrap();
    let sentinel = bf16::from_bits(0x1234);
    for skip in [0usize, 1] {
        let xb = dev.upload(&vec![sentinel; n]).unwrap();
        let count = n - skip;
        let (xp, bp) = (
            xd.device_ptr() + 4 * skip as u64,
            xb.device_ptr() + 2 * skip as u64,
        );
        m.launch(
            "fused_to_bf16",
            LaunchConfig::for_elements(
                count.div_ceil(geometry::FUSED_TO_BF16_VALUES),
                geometry::FUSED_ELEMENTWISE_THREADS as u32,
            ),
            &[
                KernelArg::Ptr(xp),
                KernelArg::Ptr(bp),
                KernelArg::I64(count as i64),
            ],
        )
        .unwrap();
        let got = xb.to_vec().unwrap();
        for (i, g) in got.iter().enumerate() {
            let want = if i < skip {
                sentinel
            } else {
                bf16::from_f32(x[i])
            };
            let same = if want.is_nan() {
                g.is_nan()
            } else {
                g.to_bits() == want.to_bits()
            };
            assert!(
                same,
                "{}: value {i} ({:e}): got {:#06x}, want {:#06x} (skip {skip})",
                dev.kind(),
                x[i],
                g.to_bits(),
                want.to_bits()
            );
        }
    }
}
