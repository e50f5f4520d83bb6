//! Chapter 4's tiled path on Hopper (versions 4 to 11: sm_90a GPUs and the emulator) against the
//! portable path: every configuration of theirs gives versions 1 to 3's bits on every regime it
//! takes, and version 8's on layouts made by hand for clusters (version 9) and persistent blocks
//! (10 and 11), and in the grouped order (versions 4 to 8); a GPU without sm_90a refuses them
//! with a typed error. Those four run on the GPU with `--include-ignored` on an H100 or H200; on
//! the emulator, the clusters' layer runs too (its blocks of a cluster take turns on two worker
//! threads, `kernels/emu/hopper.h`), and the other three would take hours: the emulator runs every
//! configuration on one small layer made by hand instead
//! (`every_configuration_gives_version_8s_bits_on_a_small_layer`).

use ch01_router::{RouterConfig, Routing};
use ch02_grouped::conformance::oracle;
use ch02_grouped::regimes::{regime, MoeRegime, REGIMES};
use ch02_grouped::{Dtype, MoeConfig, MoeError, MoeLayer, MoeWeights};
use ch04_fused_moe::choose::HOPPER_CONFIGS;
use ch04_fused_moe::geometry::WG_GROUP_M;
use ch04_fused_moe::regimes::{fused_regime, FUSED_REGIMES};
use ch04_fused_moe::{FusedDevice, Fusion, Path, TileConfig};
use moe_kernels::testing::assert_same_bits;
use moe_kernels::Device;

/// Chapter 2's regimes, then this chapter's.
fn every_regime() -> impl Iterator<Item = MoeRegime> {
    REGIMES
        .iter()
        .chain(FUSED_REGIMES)
        .map(|n| regime(n).or_else(|| fused_regime(n)).unwrap())
}

// ANCHOR: hopper_bits
/// Versions 4 to 11 (Hopper's `wgmma`: sm_90a GPUs, and the emulator) against versions 1 to 3: on
/// every regime whose H and I are multiples of 8, every configuration of theirs gives the portable tiled path's bits
/// at the same BLOCK_M, fused and unfused (each output the same k-steps of 16 into one fp32
/// accumulator; this is where that is checked, not assumed), and asking it for another BLOCK_M
/// is a typed error. Regimes of other widths, and every GPU without sm_90a, refuse
/// every one of those configurations with a typed error.
fn hopper_tiles_give_the_portable_bits(dev: &'static Device) {
    let mut compared = 0;
    for r in every_regime() {
        let o = oracle(&r, Dtype::Bf16);
        let c = &r.weights.config;
        let aligned = c.hidden % 8 == 0
            && c.intermediate % 8 == 0
            && c.shared.is_none_or(|s| s.intermediate % 8 == 0);
        let base = FusedDevice::new(dev, &r.weights, Dtype::Bf16)
            .unwrap()
            .with_path(Path::Tiled);
        for tile in HOPPER_CONFIGS {
            let what = format!("{}: {tile}", r.name);
            let layer = base.clone().with_tile(tile);
            if !dev.runs_hopper() || !aligned {
                let e = layer.err().unwrap_or_else(|| panic!("{what}: not refused"));
                assert!(
                    matches!(
                        e,
                        MoeError::Config {
                            field: "tile configuration",
                            ..
                        }
                    ),
                    "{what}: {e}"
                );
                continue;
            }
            let layer = layer.unwrap();
            let bm = tile.required_block_m().unwrap();
            assert_eq!(layer.plan_for(r.rows).unwrap().block_m, bm, "{what}");
            let other = if bm == 64 { 128 } else { 64 };
            let e = layer.clone().with_block_m(other).unwrap().plan_for(r.rows);
            assert!(
                matches!(
                    e,
                    Err(MoeError::Config {
                        field: "BLOCK_M",
                        ..
                    })
                ),
                "{what}: BLOCK_M {other} gave {e:?}"
            );
            for fusion in [Fusion::SwiGlu, Fusion::Unfused] {
                let portable = base.clone().with_fusion(fusion).with_block_m(bm).unwrap();
                let want = portable.experts(&r.hidden, &o.routing).unwrap();
                let got = layer
                    .clone()
                    .with_fusion(fusion)
                    .experts(&r.hidden, &o.routing)
                    .unwrap();
                assert_same_bits(
                    &format!("{what}, {fusion}, vs the portable path"),
                    &got,
                    &want,
                );
                compared += 1;
            }
        }
    }
    if dev.runs_hopper() {
        assert!(compared > 0, "no regime ran versions 4 to 11");
    }
}
// ANCHOR_END: hopper_bits

/// A routing of two pairs a row that gives expert e exactly counts[e] pairs: every expert's
/// pairs in a run, dealt so that row t takes pairs t and t + T, two experts apart (the counts
/// sum to an even 2T and no run is longer than T).
fn routing_of_counts(counts: &[usize]) -> Routing {
    let sorted: Vec<u32> = (0..counts.len())
        .flat_map(|e| std::iter::repeat_n(e as u32, counts[e]))
        .collect();
    let rows = sorted.len() / 2;
    assert!(
        sorted.len().is_multiple_of(2) && counts.iter().all(|&c| c <= rows),
        "{counts:?}"
    );
    let ids: Vec<u32> = (0..rows)
        .flat_map(|t| [sorted[t], sorted[t + rows]])
        .collect();
    Routing {
        rows,
        k: 2,
        weights: (0..rows).flat_map(|_| [0.625f32, 0.375]).collect(),
        ids,
    }
}

/// A layer of H 512 and I 320 (8 slices of K in GEMM 1, 5 in GEMM 2) whose expert e gets
/// counts[e] pairs (weights and hidden states from `seeds`), on the tiled path, with its routing
/// and hidden states; and the Hopper
/// configurations `version` picks out. Where they cannot run (no sm_90a), checks that each is
/// refused with a typed error and returns none.
fn hand_made_layer(
    dev: &'static Device,
    counts: &[usize],
    seeds: (u64, u64),
    version: impl Fn(&TileConfig) -> bool,
) -> (FusedDevice, Routing, Vec<f32>, Vec<TileConfig>) {
    hand_made_layer_of(dev, (512, 320), counts, seeds, version)
}

/// [`hand_made_layer`] of any H and I.
fn hand_made_layer_of(
    dev: &'static Device,
    dims: (usize, usize),
    counts: &[usize],
    seeds: (u64, u64),
    version: impl Fn(&TileConfig) -> bool,
) -> (FusedDevice, Routing, Vec<f32>, Vec<TileConfig>) {
    let (base, routing, hidden_states, tiles, _) =
        hand_made_layer_scaled(dev, dims, counts, seeds, 1.0, version);
    (base, routing, hidden_states, tiles)
}

/// [`hand_made_layer_of`] with every gate and up weight `w13_scale` times the usual; and those
/// weights (`[E, 2I, H]`).
fn hand_made_layer_scaled(
    dev: &'static Device,
    (hidden, intermediate): (usize, usize),
    counts: &[usize],
    seeds: (u64, u64),
    w13_scale: f32,
    version: impl Fn(&TileConfig) -> bool,
) -> (FusedDevice, Routing, Vec<f32>, Vec<TileConfig>, Vec<f32>) {
    let config = MoeConfig {
        hidden,
        intermediate,
        experts: counts.len(),
        router: RouterConfig::qwen3(2),
        shared: None,
    };
    let mut weights = MoeWeights::patterned(&config, seeds.0, 2.0 / (hidden as f32).sqrt(), false);
    weights.w13.iter_mut().for_each(|w| *w *= w13_scale);
    let base = FusedDevice::new(dev, &weights, Dtype::Bf16)
        .unwrap()
        .with_path(Path::Tiled);
    let tiles: Vec<TileConfig> = HOPPER_CONFIGS.into_iter().filter(|c| version(c)).collect();
    assert!(!tiles.is_empty(), "no configuration of the version");
    let routing = routing_of_counts(counts);
    let hidden_states = ch01_router::inputs::patterned(routing.rows * hidden, seeds.1, 1.0);
    if dev.runs_hopper() {
        return (base, routing, hidden_states, tiles, weights.w13);
    }
    for tile in tiles {
        let e = base.clone().with_tile(tile).err();
        assert!(
            matches!(
                e,
                Some(MoeError::Config {
                    field: "tile configuration",
                    ..
                })
            ),
            "{tile}: {e:?}"
        );
    }
    (base, routing, hidden_states, Vec::new(), weights.w13)
}

/// `tile` gives the bits of `v8`, its version-8 twin, and of the portable path at its BLOCK_M,
/// with either fusion.
fn same_bits_as_version_8_and_portable(
    base: &FusedDevice,
    routing: &Routing,
    hidden_states: &[f32],
    tile: TileConfig,
    v8: TileConfig,
    about: &str,
) {
    let bm = tile.required_block_m().unwrap();
    for fusion in [Fusion::SwiGlu, Fusion::Unfused] {
        let what = format!("{tile}, {fusion} ({about})");
        let run = |t: TileConfig| {
            base.clone()
                .with_tile(t)
                .unwrap()
                .with_fusion(fusion)
                .experts(hidden_states, routing)
                .unwrap()
        };
        let got = run(tile);
        assert_same_bits(&format!("{what} vs version 8"), &got, &run(v8));
        let portable = base
            .clone()
            .with_fusion(fusion)
            .with_block_m(bm)
            .unwrap()
            .experts(hidden_states, routing)
            .unwrap();
        assert_same_bits(&format!("{what} vs the portable path"), &got, &portable);
        println!("{what}: the same bits as version 8 and the portable path");
    }
}

/// GEMM 1's epilogue where its gates lie far out on both sides: the gate and up weights 300 times
/// the usual scale, so that the gates (checked here on the host) reach past ±100. A pass of
/// values with a gate below −87.3 takes the division (1 + e^−gate ≥ 2^126, outside
/// moe_rcp_rn_fast's range), the others the fast reciprocal; either way version 8, one and two
/// warpgroups, gives the portable path's bits (which divides every value), with either fusion.
fn far_gates_give_the_portable_bits(dev: &'static Device) {
    let counts = [40usize, 64, 2, 50];
    let (hidden, intermediate) = (288, 160);
    let (base, routing, hidden_states, v8, w13) = hand_made_layer_scaled(
        dev,
        (hidden, intermediate),
        &counts,
        (95, 9090),
        300.0,
        |c| c.version == ch04_fused_moe::Version::V8,
    );
    if v8.is_empty() {
        return; // no sm_90a: hand_made_layer_scaled checked the refusals
    }
    // The gates on the host, in f64 from the bf16 operands the GPU multiplies.
    let bf = |v: f32| half::bf16::from_f32(v).to_f64();
    let (mut below, mut inside) = (0usize, 0usize);
    for (pair, &e) in routing.ids.iter().enumerate() {
        let x = &hidden_states[(pair / routing.k) * hidden..][..hidden];
        for n in 0..intermediate {
            let w = &w13[(e as usize * 2 * intermediate + n) * hidden..][..hidden];
            let gate: f64 = x.iter().zip(w).map(|(&a, &b)| bf(a) * bf(b)).sum();
            below += (gate < -100.0) as usize;
            inside += (gate.abs() < 80.0) as usize;
        }
    }
    assert!(
        below > 0 && inside > 0,
        "gates below −100: {below}, inside ±80: {inside}"
    );
    for tile in v8 {
        same_bits_as_version_8_and_portable(
            &base,
            &routing,
            &hidden_states,
            tile,
            tile,
            "far gates",
        );
    }
}

// ANCHOR: cluster_bits
/// Version 9 where its clusters share and where they do not: a routing made by hand, 256, 130,
/// 100 and 200 pairs for experts 0 to 3, so that at BLOCK_M 64 (4, 3, 2 and 4 tiles) and at 128
/// (2, 2, 1 and 2) some clusters (tiles 2j and 2j + 1) are two tiles of one expert, whose blocks
/// take one copy of the weight slice between them, and others are not (tiles of two experts, or
/// a last tile alone); H 512 and I 320 make 8 slices of K in GEMM 1 and 5 in GEMM 2, so every
/// buffer is refilled, each time after both blocks released it. Version 9 gives version 8's
/// bits and the portable path's, with either fusion. A GPU without sm_90a refuses it.
fn clusters_give_version_8s_bits(dev: &'static Device) {
    let counts = [256usize, 130, 100, 200];
    let (base, routing, hidden_states, v9) = hand_made_layer(dev, &counts, (90, 9050), |c| c.mc());
    for tile in v9 {
        let bm = tile.required_block_m().unwrap();
        // Chapter 3's layout: each expert's tiles in a run, in expert order.
        let owners: Vec<usize> = (0..counts.len())
            .flat_map(|e| std::iter::repeat_n(e, counts[e].div_ceil(bm)))
            .collect();
        let clusters = owners.len().div_ceil(2);
        let shared = owners
            .chunks(2)
            .filter(|c| c.len() == 2 && c[0] == c[1])
            .count();
        assert!(
            shared > 0 && shared < clusters,
            "{tile}: {shared} of {clusters} clusters share"
        );
        let v8 = TileConfig {
            version: ch04_fused_moe::Version::V8,
            ..tile
        };
        let about = format!("{shared} of {clusters} clusters sharing");
        same_bits_as_version_8_and_portable(&base, &routing, &hidden_states, tile, v8, &about);
    }
}
// ANCHOR_END: cluster_bits

// ANCHOR: persistent_bits
/// Version 10 where its blocks take many items: a routing made by hand, 3,000, 2,500, 1, 64, 65,
/// 4,000, 129 and 2,001 pairs for 8 experts (189 tiles at BLOCK_M 64, 97 at 128: a one-pair
/// tile, a 64-pair tile, tiles one pair over), H 512 and I 320. On the H200 (132
/// multiprocessors: 264 blocks of BLOCK_M 64, 132 of 128) its blocks take 945 and 756 items
/// (BLOCK_M 64) or 291 and 194 (128) between them, up to four each, so their buffers are
/// refilled across items, at parities counted on from the items before. Versions 10 and 11 give
/// version 8's bits and the portable path's, with either fusion; version 11, whose blocks take
/// their items from counters that each launch must leave at zero, gives version 8's bits on
/// three runs of one layer in a row. A GPU without sm_90a refuses them.
fn persistent_blocks_give_version_8s_bits(dev: &'static Device) {
    let counts = [3000usize, 2500, 1, 64, 65, 4000, 129, 2001];
    let (base, routing, hidden_states, persistent) =
        hand_made_layer(dev, &counts, (91, 9060), |c| c.ps());
    for tile in persistent {
        let bm = tile.required_block_m().unwrap();
        let tiles: usize = counts.iter().map(|c| c.div_ceil(bm)).sum();
        let items = tiles * 320usize.div_ceil(tile.bn1());
        assert!(items > 2 * 132, "{tile}: {items} items");
        let v8 = TileConfig {
            version: ch04_fused_moe::Version::V8,
            ..tile
        };
        let about = format!("{tiles} tiles, {items} items of GEMM 1");
        same_bits_as_version_8_and_portable(&base, &routing, &hidden_states, tile, v8, &about);
        if tile.dy() {
            // Three runs of one layer, each against version 8: a launch that left counter[0]
            // anywhere but zero would make the next skip items (its outputs the workspace's
            // poison, not version 8's bits), and one that left counter[1] would make the one
            // after that.
            let want = base
                .clone()
                .with_tile(v8)
                .unwrap()
                .experts(&hidden_states, &routing)
                .unwrap();
            let layer = base.clone().with_tile(tile).unwrap();
            for run in 1..=3 {
                let got = layer.experts(&hidden_states, &routing).unwrap();
                assert_same_bits(&format!("{tile}, run {run} of one layer"), &got, &want);
            }
        }
    }
}
// ANCHOR_END: persistent_bits

// ANCHOR: grouped_bits
/// Versions 4 to 8 in the grouped order (a grid of one dimension, WG_GROUP_M tiles at a time,
/// every column block of them): the same bits as on the grid of two dimensions, with either
/// fusion, on a routing of more tiles than one group and a last group smaller than the others
/// (a single tile at both BLOCK_M with the source's WG_GROUP_M of 4), and GEMM 2's output an odd
/// number of column blocks past one.
fn grouped_order_gives_the_same_bits(dev: &'static Device) {
    let counts = [3000usize, 2500, 1, 64, 65, 4000, 129, 2001];
    let (base, routing, hidden_states, tiles) =
        hand_made_layer(dev, &counts, (93, 9070), TileConfig::groups);
    for tile in tiles {
        let bm = tile.required_block_m().unwrap();
        let n: usize = counts.iter().map(|c| c.div_ceil(bm)).sum();
        assert!(n > WG_GROUP_M, "{tile}: {n} tiles, one group");
        for fusion in [Fusion::SwiGlu, Fusion::Unfused] {
            let run = |grouped: bool| {
                base.clone()
                    .with_tile(tile)
                    .unwrap()
                    .with_fusion(fusion)
                    .with_grouped_order(grouped)
                    .experts(&hidden_states, &routing)
                    .unwrap()
            };
            let what = format!("{tile}, {fusion}, {n} tiles in groups of {WG_GROUP_M}");
            assert_same_bits(&format!("{what}: grouped vs not"), &run(true), &run(false));
            println!("{what}: the same bits in either order");
        }
    }
}
// ANCHOR_END: grouped_bits

// ANCHOR: emulator_bits
/// The emulator runs every Hopper configuration on one small layer made by hand: H 288 and I 160
/// (GEMM 1: 5 slices of K, the last one half past H, so TMA and cp.async fill zeros; GEMM 2: 3,
/// the last half), 40, 64, 2 and 50 pairs for 4 experts (4 tiles at either BLOCK_M, one expert
/// each, so version 9's clusters share nothing and run as version 8 does; versions 10 and 11:
/// one or two blocks, each taking many items, their buffers refilled across them). Version 8
/// gives the portable path's bits, and every configuration version 8's, with either fusion;
/// version 11 on three runs of one layer in a row (its counters back at zero after each).
fn every_configuration_gives_version_8s_bits_on_a_small_layer(dev: &'static Device) {
    let counts = [40usize, 64, 2, 50];
    let (base, routing, hidden_states, tiles) =
        hand_made_layer_of(dev, (288, 160), &counts, (94, 9080), TileConfig::is_hopper);
    let run = |layer: FusedDevice, fusion: Fusion| {
        layer
            .with_fusion(fusion)
            .experts(&hidden_states, &routing)
            .unwrap()
    };
    for fusion in [Fusion::SwiGlu, Fusion::Unfused] {
        // Version 8's bits at either BLOCK_M, each checked against the portable path's once.
        let mut want = Vec::new();
        for v8 in tiles
            .iter()
            .filter(|c| c.version == ch04_fused_moe::Version::V8)
        {
            let bm = v8.required_block_m().unwrap();
            let got = run(base.clone().with_tile(*v8).unwrap(), fusion);
            let portable = run(base.clone().with_block_m(bm).unwrap(), fusion);
            assert_same_bits(
                &format!("{v8}, {fusion}: vs the portable path"),
                &got,
                &portable,
            );
            want.push((v8.wg, got));
        }
        assert_eq!(want.len(), 2, "version 8 of one and of two warpgroups");
        for tile in &tiles {
            let (_, v8) = want.iter().find(|(wg, _)| *wg == tile.wg).unwrap();
            let layer = base.clone().with_tile(*tile).unwrap();
            // Version 11: three runs of one layer, as its counters must be back at zero.
            for run_number in 1..=if tile.dy() { 3 } else { 1 } {
                let got = run(layer.clone(), fusion);
                let what = format!("{tile}, {fusion}, run {run_number} (small layer)");
                assert_same_bits(&format!("{what}: vs version 8"), &got, v8);
            }
            println!(
                "{tile}, {fusion} (small layer): the same bits as version 8 and the portable path"
            );
        }
    }
}

// ANCHOR_END: emulator_bits

/// The GPU's tests: every regime, and the layers made by hand for clusters, persistent blocks and
/// the grouped order (on an sm_90a GPU they run; on another they check the refusals).
mod cuda {
    #[test]
    #[ignore = "needs a GPU"]
    fn far_gates_give_the_portable_bits() {
        super::far_gates_give_the_portable_bits(moe_kernels::testing::cuda())
    }
    #[test]
    #[ignore = "needs a GPU"]
    fn hopper_tiles_give_the_portable_bits() {
        super::hopper_tiles_give_the_portable_bits(moe_kernels::testing::cuda())
    }
    #[test]
    #[ignore = "needs a GPU"]
    fn clusters_give_version_8s_bits() {
        super::clusters_give_version_8s_bits(moe_kernels::testing::cuda())
    }
    #[test]
    #[ignore = "needs a GPU"]
    fn persistent_blocks_give_version_8s_bits() {
        super::persistent_blocks_give_version_8s_bits(moe_kernels::testing::cuda())
    }
    #[test]
    #[ignore = "needs a GPU"]
    fn grouped_order_gives_the_same_bits() {
        super::grouped_order_gives_the_same_bits(moe_kernels::testing::cuda())
    }
    #[test]
    #[ignore = "needs a GPU"]
    fn every_configuration_gives_version_8s_bits_on_a_small_layer() {
        super::every_configuration_gives_version_8s_bits_on_a_small_layer(
            moe_kernels::testing::cuda(),
        )
    }
}

/// The emulator's: the small layer, and the clusters' layer (version 9 sharing its weight slices
/// through TMA multicast and arrivals on the other block's barriers).
mod emu {
    #[test]
    fn far_gates_give_the_portable_bits() {
        super::far_gates_give_the_portable_bits(moe_kernels::testing::emu())
    }
    #[test]
    fn every_configuration_gives_version_8s_bits_on_a_small_layer() {
        super::every_configuration_gives_version_8s_bits_on_a_small_layer(
            moe_kernels::testing::emu(),
        )
    }
    #[test]
    fn clusters_give_version_8s_bits() {
        super::clusters_give_version_8s_bits(moe_kernels::testing::emu())
    }
}
