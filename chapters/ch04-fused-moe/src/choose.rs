//! Which kernels run a batch: the path (tiled on tensor cores, or the decode kernels), how much
//! of the layer each kernel fuses, the tiled path's tile configuration, and the decode kernels'
//! launch geometry; the rule that picks them by shape, and the table measured on the H100
//! (`bench/results/h100/ch04_tuned.csv`, written by `bench ch04-tune`) that overrides the rule
//! for the shapes it holds.
//!
//! None of these choices changes a bit of the output within a path: every tile configuration,
//! BLOCK_M and decode geometry sums each output in the same order, and every fusion rounds at the
//! same places (`kernels/ch04_fused_moe.cu`, "Roundings"). The two paths differ in the order of
//! the fp32 sums inside the dot products only (within chapter 2's `BF16_VS_BF16`).

use std::fmt;
use std::sync::OnceLock;

use crate::geometry::{
    DECODE_MAX_THREADS, FUSED_BK, FUSED_BN1, FUSED_BN2, FUSED_THREADS, WG_SWIZZLE_ALIGN,
};

// ANCHOR: path
/// How the experts' GEMMs run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Chapter 3's layout, then tiles of BLOCK_M pairs of one expert on tensor cores.
    Tiled,
    /// No layout and no tile: each pair's expert rows streamed once, dot products on the CUDA
    /// cores with warp-shuffle sums (`decode_*` kernels). For few pairs per expert.
    Decode,
    /// The decode kernels' arithmetic, grouped by expert: chapter 3's layout with BLOCK_M =
    /// `DECODE_GROUP` (8), then a block per tile and column slice whose warps load each chunk
    /// of an expert's weight rows once and multiply it into every pair of the tile
    /// (`decode_grouped_*` kernels), so an expert chosen by n pairs is read ⌈n / 8⌉ times instead
    /// of n. The same bits as [`Path::Decode`] in every fusion; its default fusion is
    /// [`Fusion::SwiGlu`] (GEMM 2 grouped too, then the combine kernel: a tile holds pairs of one
    /// expert, never the k pairs of one token); [`Fusion::SwiGluSumK`] keeps the per-token
    /// `decode_gemm2_sum` after a grouped GEMM 1 (w2 read once per pair again, one launch and
    /// the `[T·k, H]` buffer fewer). [`choose_path`] never picks it (it costs three launches
    /// more than [`Path::Decode`], and pays only once experts are chosen by several pairs); a
    /// measured table that names it does (the committed H200 table names the tiled path at 64
    /// tokens and the decode path below), and [`crate::FusedDevice::with_path`] forces it.
    DecodeGrouped,
}

/// How much of the layer each kernel does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fusion {
    /// Upstream's layer: GEMM 1 writes gate|up `[T·k, 2I]` in bf16, a SwiGLU kernel, GEMM 2
    /// writes the weighted `[T·k, H]`, a combine kernel sums over k.
    Unfused,
    /// SwiGLU in GEMM 1's epilogue (no gate|up buffer); GEMM 2, then the combine kernel.
    SwiGlu,
    /// SwiGLU in GEMM 1, and the sum over k (and the shared expert) inside GEMM 2: no `[T·k, H]`
    /// buffer and no combine launch. Decode paths only: a tile of the tiled path holds pairs of
    /// one expert, never the k pairs of one token (the grouped decode path runs the decode
    /// path's per-token GEMM 2 for it).
    SwiGluSumK,
}

/// The decode path's default fusion is [`Fusion::SwiGluSumK`], the tiled path's
/// [`Fusion::SwiGlu`]: the most each path can fuse. The grouped decode path's is
/// [`Fusion::SwiGlu`]: its GEMM 2 grouped by expert too, which cannot sum over k.
pub fn default_fusion(path: Path) -> Fusion {
    match path {
        Path::Tiled | Path::DecodeGrouped => Fusion::SwiGlu,
        Path::Decode => Fusion::SwiGluSumK,
    }
}

/// The decode path runs while the batch has at most this many pairs per expert on average.
pub const DECODE_MAX_PAIRS_PER_EXPERT: usize = 4;

/// The rule: the decode path while `T·k ≤ 4·E` (at most four pairs per expert on average, so a
/// 16-row tile would be three-quarters padding or more), the tiled path above. Below the
/// crossover the decode kernels read each active expert's weights with no shared-memory staging,
/// no barrier and no padded rows, in two launches instead of five or six; above it they would
/// read an expert's weights once per pair (the L2 catches some of that) and do on CUDA cores
/// what a tile does on tensor cores. H and I do not enter: both paths move the same bytes per
/// pair. Where four came from: in a first run of `bench ch04-tune` on the H200 (Qwen3-30B-A3B
/// and GLM shapes) the decode path was the faster one at every batch it was timed at, up to
/// four pairs per expert, by more at fewer pairs; the tiled path won at 32. The measured table
/// ([`tuned_table`]) overrides this rule for the shapes it holds.
pub fn choose_path(tokens: usize, k: usize, experts: usize) -> Path {
    if tokens * k <= experts.max(1) * DECODE_MAX_PAIRS_PER_EXPERT {
        Path::Decode
    } else {
        Path::Tiled
    }
}
// ANCHOR_END: path

impl Path {
    pub const ALL: [Path; 3] = [Path::Tiled, Path::Decode, Path::DecodeGrouped];
    /// `tiled`, `decode` or `decode_grouped`, as the CSVs and command lines spell it.
    pub fn name(self) -> &'static str {
        match self {
            Path::Tiled => "tiled",
            Path::Decode => "decode",
            Path::DecodeGrouped => "decode_grouped",
        }
    }
    /// Whether it runs the decode kernels' arithmetic (and launches with a [`DecodeGeometry`]).
    pub fn is_decode(self) -> bool {
        self != Path::Tiled
    }
    pub fn parse(s: &str) -> Option<Path> {
        Path::ALL.into_iter().find(|p| p.name() == s)
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Fusion {
    pub const ALL: [Fusion; 3] = [Fusion::Unfused, Fusion::SwiGlu, Fusion::SwiGluSumK];
    /// `unfused`, `swiglu` or `swiglu_sumk`.
    pub fn name(self) -> &'static str {
        match self {
            Fusion::Unfused => "unfused",
            Fusion::SwiGlu => "swiglu",
            Fusion::SwiGluSumK => "swiglu_sumk",
        }
    }
    pub fn parse(s: &str) -> Option<Fusion> {
        Fusion::ALL.into_iter().find(|f| f.name() == s)
    }
    /// Whether `path` can run it: the sum over k needs the decode kernels' per-token GEMM 2.
    pub fn runs_on(self, path: Path) -> bool {
        self != Fusion::SwiGluSumK || path.is_decode()
    }
}

impl fmt::Display for Fusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ANCHOR: tile_config
/// The versions of the tiled path's main loop, one section of chapter 4 each; each adds one idea
/// to the one before. Versions 1 to 3 run `mma.sync` on any GPU since Volta (and the emulator);
/// 4 to 11 run Hopper's `wgmma`, on sm_90a GPUs and on the emulator (`kernels/emu/hopper.h`,
/// clusters included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// Stage a slice of K, wait, multiply (one stage).
    V1 = 1,
    /// The slices through `stages` buffers filled by `cp.async`, the next ones in flight.
    V2,
    /// A warp grid: `wm` rows × `warps / wm` columns of warps.
    V3,
    /// Hopper's warpgroup MMA on wgmma's flat core-matrix layout.
    V4,
    /// Its 128-byte swizzle (`_x`).
    V5,
    /// Each slice's wgmma waited for (`_w0`): a slice deeper in flight.
    V6,
    /// The weight slices by the tensor memory accelerator (`_tma`).
    V7,
    /// Warp-specialized: a producer warpgroup feeding the others (`_ws`).
    V8,
    /// Version 8 in clusters of two blocks sharing the weight slice (`_mc`).
    V9,
    /// Version 8, persistent (`_ps`).
    V10,
    /// Version 10 with its items handed out as the blocks free up (`_dy`).
    V11,
}

impl Version {
    /// Every version, in order.
    pub const ALL: [Version; 11] = [
        Version::V1,
        Version::V2,
        Version::V3,
        Version::V4,
        Version::V5,
        Version::V6,
        Version::V7,
        Version::V8,
        Version::V9,
        Version::V10,
        Version::V11,
    ];
    /// 1 to 11, as the chapter numbers them.
    pub const fn number(self) -> u8 {
        self as u8
    }
    /// Versions 4 to 11: Hopper's `wgmma`, sm_90a GPUs and the emulator.
    pub const fn is_hopper(self) -> bool {
        self as u8 >= 4
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "version {}", self.number())
    }
}

/// A tile configuration of the tiled path: one line of `kernels/ch04/configs.def`, the list the
/// kernel file stamps its entry points from ([`TILE_CONFIGS`] and [`HOPPER_CONFIGS`] are that
/// list, generated by the build). Versions 1 to 3 (`FusedCfg` in `kernels/ch04/portable.cuh`):
/// `warps` warps per block in `wm` rows, K staged `bk` at a time, `nf` fragments of 8 columns per
/// warp and projection; so [`TileConfig::bn1`] intermediate columns per block of GEMM 1 and
/// [`TileConfig::bn`] output columns per block of GEMM 2. Versions 4 to 11 (`WgCfg` in
/// `kernels/ch04/hopper.cuh`): `wg` warpgroups, one per 64 rows of the tile, `nf` fragments of 8
/// columns across the whole block (wgmma's N is `16·nf` staged rows). Each is compiled as its own
/// entry points; all give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileConfig {
    /// The main loop's version.
    pub version: Version,
    /// Warps per block (versions 8 to 11: the producer warpgroup's 4 included).
    pub warps: usize,
    pub bk: usize,
    pub nf: usize,
    pub stages: usize,
    /// Warp rows of the grid (1: versions 1 and 2).
    pub wm: usize,
    /// Versions 4 to 11: consumer warpgroups (0: versions 1 to 3).
    pub wg: usize,
    /// Versions 6 and 7: the main loop waits for each slice's wgmma before the next slice
    /// (`_w0`: none left in flight), which frees that slice's buffer one slice sooner: copies run
    /// `stages − 1` slices ahead instead of `stages − 2`.
    pub w0: bool,
}

/// The list, as the build generated it from `kernels/ch04/configs.def`.
mod list {
    use super::{TileConfig, Version};
    include!(concat!(env!("OUT_DIR"), "/ch04_configs.rs"));
}

/// The configurations of versions 1 to 3, the base (plain-named) one first: every
/// `DEFAULT_TILE` and `PORTABLE_TILE` line of `kernels/ch04/configs.def`.
pub const TILE_CONFIGS: [TileConfig; list::PORTABLE.len()] = list::PORTABLE;

/// The configurations of versions 4 to 11, for sm_90a GPUs and the emulator: every
/// `HOPPER_TILE` line of `kernels/ch04/configs.def`. [`crate::FusedDevice::plan_for`] refuses
/// them, with a typed error, on any other GPU and for layers whose H or I is not a multiple of 8.
pub const HOPPER_CONFIGS: [TileConfig; list::HOPPER.len()] = list::HOPPER;
// ANCHOR_END: tile_config

/// The listed configuration named `name`, at compile time where a constant needs it:
/// `const V5: TileConfig = tile_named("g2_k64_n16_s4_x");` (a name that is not in the list
/// stops the build).
pub const fn tile_named(name: &str) -> TileConfig {
    let mut i = 0;
    while i < list::PORTABLE.len() {
        if str_eq(list::PORTABLE_NAMES[i], name) {
            return list::PORTABLE[i];
        }
        i += 1;
    }
    let mut i = 0;
    while i < list::HOPPER.len() {
        if str_eq(list::HOPPER_NAMES[i], name) {
            return list::HOPPER[i];
        }
        i += 1;
    }
    panic!("not a tile configuration of kernels/ch04/configs.def")
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The version of the configuration a CSV's `config` column names (a tiled row's, with or
/// without the tuner's `_m{BLOCK_M}` suffix): what the figures group rows by. None for a name the
/// list does not hold (a decode geometry, or a configuration no longer built).
pub fn config_version(config: &str) -> Option<Version> {
    let base = match config.rsplit_once("_m") {
        Some((base, m)) if m.parse::<usize>().is_ok() => base,
        _ => config,
    };
    TileConfig::parse(base).map(|c| c.version)
}

/// The experiment switch `MOE_X_MC_GROUPED` (tools/gpu/run's mc-grouped-ab), read once.
fn mc_grouped() -> bool {
    static SET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SET.get_or_init(|| std::env::var_os("MOE_X_MC_GROUPED").is_some())
}

impl TileConfig {
    /// A configuration of versions 1 to 3 (`PORTABLE_TILE` in the list).
    pub const fn portable(
        version: Version,
        warps: usize,
        wm: usize,
        bk: usize,
        nf: usize,
        stages: usize,
    ) -> TileConfig {
        TileConfig {
            version,
            warps,
            bk,
            nf,
            stages,
            wm,
            wg: 0,
            w0: false,
        }
    }
    /// A configuration of versions 4 to 11 (`HOPPER_TILE` in the list): `wg` consumer
    /// warpgroups, and from version 8 one producer warpgroup more.
    pub const fn hopper(
        version: Version,
        wg: usize,
        bk: usize,
        nf: usize,
        stages: usize,
        w0: bool,
    ) -> TileConfig {
        let producer = if version as u8 >= 8 { 1 } else { 0 };
        TileConfig {
            version,
            warps: 4 * (wg + producer),
            bk,
            nf,
            stages,
            wm: 1,
            wg,
            w0,
        }
    }
    /// `w4_k32_n1`, the base configuration: the plain-named entry points (`FUSED_THREADS`,
    /// `FUSED_BK`, `FUSED_BN1`, `FUSED_BN2`). [`default_tile`] picks it for small layers.
    pub const DEFAULT: TileConfig = TILE_CONFIGS[0];
    /// Versions 5 to 11: wgmma's 128-byte swizzle (`_x`).
    pub const fn swz(&self) -> bool {
        self.version as u8 >= 5
    }
    /// Versions 7 to 11 (`_tma`, swizzled only): the weight slices through the tensor memory
    /// accelerator, one bulk copy per 64-row box, instead of every thread's `cp.async`; the
    /// launch passes the weight tensor's map ([`crate::FusedDevice`] encodes one per tensor).
    pub const fn tma(&self) -> bool {
        self.version as u8 >= 7
    }
    /// Versions 8 to 11 (`_ws`): warp-specialized, one producer warpgroup (4 more warps) copying
    /// while the `wg` consumer warpgroups only multiply, the two sides meeting on mbarriers.
    pub const fn ws(&self) -> bool {
        self.version as u8 >= 8
    }
    /// Version 9 (`_mc`): version 8 in clusters of two blocks (tiles 2j and 2j + 1) which, when
    /// both tiles are of one expert, ask the copy engine once for the weight slice and have it
    /// written into both blocks' shared memory (multicast). The grid's tile count is even.
    pub const fn mc(&self) -> bool {
        self.version as u8 == 9
    }
    /// Versions 10 and 11 (`_ps`): version 8, persistent: as many blocks as the SMs hold at once
    /// work through the tiles × column blocks of version 8's grid, a tile's column blocks one
    /// after another, the producer filling the next item's buffers while the consumers finish
    /// and store this one. The grid is one-dimensional.
    pub const fn ps(&self) -> bool {
        self.version as u8 >= 10
    }
    /// Version 11 (`_dy`): version 10 with its items handed out as the blocks free up (a counter
    /// in device memory, one atomic add per item) instead of block b taking items b, b + grid, ...
    pub const fn dy(&self) -> bool {
        self.version as u8 == 11
    }
    /// `w{warps}_k{bk}_n{nf}`, then `_s{stages}` for version 2, as the kernels' suffixes and
    /// the CSVs spell it; a warp grid (`wm` > 1) is `w{wm}x{wn}_k{bk}_n{nf}_s{stages}`;
    /// versions 4 to 11 `g{wg}_k{bk}_n{nf}_s{stages}` and a suffix a flag (`_x`, `_w0`, `_tma`,
    /// `_ws`, `_mc`, `_ps`, `_dy`). Every line of the list is so named (its test).
    pub fn name(&self) -> String {
        if self.is_hopper() {
            let flag = |on: bool, s: &'static str| if on { s } else { "" };
            return format!(
                "g{}_k{}_n{}_s{}{}{}{}{}{}{}{}",
                self.wg,
                self.bk,
                self.nf,
                self.stages,
                flag(self.swz(), "_x"),
                flag(self.w0, "_w0"),
                flag(self.tma(), "_tma"),
                flag(self.ws(), "_ws"),
                flag(self.mc(), "_mc"),
                flag(self.ps(), "_ps"),
                flag(self.dy(), "_dy"),
            );
        }
        let w = if self.wm > 1 {
            format!("{}x{}", self.wm, self.wn())
        } else {
            self.warps.to_string()
        };
        let v1 = format!("w{w}_k{}_n{}", self.bk, self.nf);
        if self.stages > 1 {
            format!("{v1}_s{}", self.stages)
        } else {
            v1
        }
    }
    /// One of [`TILE_CONFIGS`] or [`HOPPER_CONFIGS`] by its name.
    pub fn parse(s: &str) -> Option<TileConfig> {
        TILE_CONFIGS
            .into_iter()
            .chain(HOPPER_CONFIGS)
            .find(|c| c.name() == s)
    }
    /// Versions 4 to 11: Hopper's `wgmma`, sm_90a GPUs and the emulator.
    pub fn is_hopper(&self) -> bool {
        self.version.is_hopper()
    }
    /// The BLOCK_M a configuration requires (versions 4 to 11: 64 per warpgroup); None: any of chapter
    /// 3's.
    pub fn required_block_m(&self) -> Option<usize> {
        self.is_hopper().then_some(64 * self.wg)
    }
    pub fn threads(&self) -> usize {
        32 * self.warps
    }
    /// The grid's blocks along the tiles for a layout of `tiles` tiles: one per tile, and for
    /// version 9 one more when that is odd (its clusters are blocks 2j and 2j + 1; the extra block
    /// finds no tile and leaves).
    pub fn grid_tiles(&self, tiles: usize) -> usize {
        if self.mc() {
            tiles.next_multiple_of(2)
        } else {
            tiles
        }
    }
    /// The launch grid for a layout of `tiles` tiles by `col_blocks` column blocks on a device of
    /// `sms` multiprocessors: one block per tile and column block ([`Self::grid_tiles`] along
    /// the tiles); version 10, persistent, as many blocks as fit on the multiprocessors at once
    /// ([`Self::blocks_per_sm`]; no more than there are items), in one dimension.
    ///
    /// `grouped` (versions 4 to 8, [`Self::groups`]): one dimension of tiles × column
    /// blocks, which the kernels take WG_GROUP_M tiles at a time (`wg_item` in
    /// `kernels/ch04/hopper.cuh`): the engines' GROUP_SIZE_M order. The same bits.
    pub fn grid(&self, tiles: usize, col_blocks: usize, sms: usize, grouped: bool) -> (u32, u32) {
        if self.ps() {
            let resident = sms * self.blocks_per_sm();
            ((tiles * col_blocks).min(resident).max(1) as u32, 1)
        } else if grouped && self.groups() {
            ((self.grid_tiles(tiles) * col_blocks).max(1) as u32, 1)
        } else {
            (self.grid_tiles(tiles) as u32, col_blocks as u32)
        }
    }
    /// Whether the grouped order of [`Self::grid`] applies: versions 4 to 8 (version 9 pairs
    /// neighbouring tiles in clusters; versions 10 and 11 order their own items).
    ///
    /// Experiment (tools/gpu/run's mc-grouped-ab): with `MOE_X_MC_GROUPED` set, version 9 too
    /// (faster than version 9 on two dimensions, not than the tuned tiles, so off).
    /// Its clusters stay pairs of neighbouring tiles (`tile ^ 1`): its grid's tiles are even
    /// ([`Self::grid_tiles`]) and its kernels round WG_GROUP_M up to even (`wg_item`), so every
    /// group's size is even.
    pub fn groups(&self) -> bool {
        self.is_hopper() && !self.ps() && (!self.mc() || mc_grouped())
    }
    /// Versions 4 to 11: how many blocks of this configuration an H200's multiprocessor holds at
    /// once, as its shared memory allows: 228 KB, of which each block takes its buffers, 1 KB
    /// for the system and up to 1 KB of static arrays (barriers, row tables); the register file
    /// allows more of every configuration here. 1 for two warpgroups' tiles (193 KB of buffers),
    /// 2 for one warpgroup's through four buffers (97 KB). 1 for versions 1 to 3.
    pub fn blocks_per_sm(&self) -> usize {
        const SM_SHARED: usize = 228 * 1024;
        const PER_BLOCK: usize = 2 * 1024;
        match self.required_block_m() {
            Some(bm) => (SM_SHARED / (self.shared_bytes(bm) + PER_BLOCK)).max(1),
            None => 1,
        }
    }
    /// Warp columns: the block's column groups (every warp for `wm` 1).
    pub fn wn(&self) -> usize {
        self.warps / self.wm.max(1)
    }
    /// GEMM 1's intermediate columns per block (it stages as many gate and up rows).
    pub fn bn1(&self) -> usize {
        match self.is_hopper() {
            false => 8 * self.wn() * self.nf,
            true => 8 * self.nf,
        }
    }
    /// GEMM 2's (and gate|up's) output columns per block.
    pub fn bn(&self) -> usize {
        match self.is_hopper() {
            false => 16 * self.wn() * self.nf,
            true => 16 * self.nf,
        }
    }
    /// The dynamic shared memory a block of this configuration needs at `block_m` (the kernel's
    /// `fused_tile_product`): none for version 1 (its one stage is static), `stages` buffers
    /// of `block_m` A rows and `bn()` B rows of `bk + 8` bf16 for versions 2 and 3.
    /// Versions 4 to 11: `stages` buffers of `block_m` A rows and `bn()` B rows of `bk` bf16 (wgmma's
    /// core matrices, no padding).
    pub fn shared_bytes(&self, block_m: usize) -> usize {
        if self.is_hopper() {
            // The swizzled layout starts its stages on WG_SWIZZLE_ALIGN bytes: up to as many more.
            let align = if self.swz() { WG_SWIZZLE_ALIGN } else { 0 };
            self.stages * (block_m + self.bn()) * self.bk * 2 + align
        } else if self.stages > 1 {
            self.stages * (block_m + self.bn()) * (self.bk + 8) * 2
        } else {
            0
        }
    }
    /// The kernel `base` of this configuration (`fused_gemm2_w8_k32_n1`; the default's is `base`).
    pub fn kernel(&self, base: &str) -> String {
        if *self == TileConfig::DEFAULT {
            base.to_string()
        } else {
            format!("{base}_{}", self.name())
        }
    }
}

impl fmt::Display for TileConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

// ANCHOR: portable_tile
/// The tile a GPU without sm_90a gets where the measured table has no portable row: the fastest
/// portable configuration of the committed tuning run at 512 and 4096 tokens of both shapes,
/// `w2x2_k64_n4_s3` (version 3: four warps as 2 × 2, K staged 64 at a time in three `cp.async`
/// stages; compute capability 8.0 and later), when both GEMMs' K are at least 128 and the GPU
/// runs `cp.async`; else [`default_tile`] (version 1, any GPU since Volta). On the H200 the
/// bench times it forced (`fused_portable`): what a reader with an A100 or an RTX 40 runs.
/// The emulator keeps [`default_tile`]: every version gives the same bits, and version 1 is the
/// one to step through. So does an sm_90a GPU for a shape the measured table does not hold, so
/// that the examples print the same plan on the H200 as on the emulator (the table holds the
/// book's shapes; `bench ch04-tune` measures a reader's own).
pub fn portable_tile(hidden: usize, intermediate: usize, cp_async: bool) -> TileConfig {
    if cp_async && hidden.min(intermediate) >= 128 {
        tile_named("w2x2_k64_n4_s3")
    } else {
        default_tile(hidden, intermediate)
    }
}
// ANCHOR_END: portable_tile

/// The kernel file's default configuration, as its constants say.
pub fn default_matches_the_kernel_constants() -> bool {
    let d = TileConfig::DEFAULT;
    (d.threads(), d.bk, d.bn1(), d.bn()) == (FUSED_THREADS, FUSED_BK, FUSED_BN1, FUSED_BN2)
}

/// The default tile rule: K staged 64 at a time (`w4_k64_n1`: half the barriers and twice the
/// bytes in flight per stage of the base configuration) when both GEMMs' K, H and I, are at least
/// 128; the base configuration `w4_k32_n1` for smaller layers, where a 64-wide stage would be
/// mostly zeros past K. Both are version 1 of the main loop: no `cp.async` and at most 29 KB of
/// static shared memory, so they run on any GPU since Volta. On the H100 the committed run of
/// `bench ch04-tune` (`bench/results/h100/ch04_tune_all.csv`) has the Hopper versions (sm_90a)
/// win every tiled bucket, several times as fast as `w4_k64_n1`, and the tuned table picks them
/// there; on other devices the table's rows that name them are skipped and this rule applies.
pub fn default_tile(hidden: usize, intermediate: usize) -> TileConfig {
    if hidden.min(intermediate) >= 128 {
        tile_named("w4_k64_n1")
    } else {
        TileConfig::DEFAULT
    }
}

/// The decode kernels' launch: `warps` warps per block, each owning `cols_per_warp` columns one
/// after another; and whether the decode path's kernels load their weight rows without an L1
/// line (`stream`: `dec_load8_stream` in `kernels/ch04/decode.cuh`, the name's `_na`). Every
/// geometry gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
    pub warps: usize,
    pub cols_per_warp: usize,
    /// The weight rows by `ld.global.nc.L1::no_allocate`: each is read once, so an L1 line is
    /// of no use to it. On the H200 the layer's tuning run found it faster at 1 and 8 tokens of
    /// both shapes (a standalone harness had it slower at 8 GLM-like tokens); the measured table
    /// chooses per bucket. The decode path only: the grouped decode path reads
    /// a tile's rows again from L1 and refuses it.
    pub stream: bool,
}

impl DecodeGeometry {
    /// Four warps of one column each: for one token of Qwen3-30B-A3B (I 768, k 8), GEMM 1 is
    /// 8 × 192 blocks of 128 threads, a full wave of 132 SMs.
    pub const DEFAULT: DecodeGeometry = DecodeGeometry {
        warps: 4,
        cols_per_warp: 1,
        stream: false,
    };
    pub fn threads(&self) -> usize {
        32 * self.warps
    }
    /// Columns per block.
    pub fn cols(&self) -> usize {
        self.warps * self.cols_per_warp
    }
    /// `w{warps}_c{cols_per_warp}`, then `_na` when the weights are streamed.
    pub fn name(&self) -> String {
        let na = if self.stream { "_na" } else { "" };
        format!("w{}_c{}{na}", self.warps, self.cols_per_warp)
    }
    /// Parses [`DecodeGeometry::name`]; `None` unless it is a valid geometry.
    pub fn parse(s: &str) -> Option<DecodeGeometry> {
        let (s, stream) = match s.strip_suffix("_na") {
            Some(s) => (s, true),
            None => (s, false),
        };
        let (w, c) = s.strip_prefix('w')?.split_once("_c")?;
        let g = DecodeGeometry {
            warps: w.parse().ok()?,
            cols_per_warp: c.parse().ok()?,
            stream,
        };
        g.is_valid().then_some(g)
    }
    /// At least one warp and one column, at most `DECODE_MAX_THREADS` threads.
    pub fn is_valid(&self) -> bool {
        self.warps >= 1 && self.cols_per_warp >= 1 && self.threads() <= DECODE_MAX_THREADS
    }
    /// The entry point of a decode-path kernel (`decode_gemm1_*`, `decode_gemm2`,
    /// `decode_gemm2_sum`) for this geometry: its `_na` twin when the weights are streamed.
    pub fn kernel(&self, name: &str) -> String {
        if self.stream {
            format!("{name}_na")
        } else {
            name.to_string()
        }
    }
}

impl fmt::Display for DecodeGeometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

// ---------------------------------------------------------------------------------------------
// The measured table.

/// `bench/results/h100/ch04_tuned.csv`, compiled in: a build carries the table it was built
/// with, so the GPU machine (which has no Rust and no checkout) needs no file beside the binary.
/// `bench ch04-tune` rewrites it; commit it and rebuild.
pub const TUNED_CSV: &str = include_str!("../../../bench/results/h100/ch04_tuned.csv");

/// The columns of the table, in order.
pub const TUNED_HEADER: &str = "hidden,intermediate,experts,k,tokens,path,config,cold_us,warm_us,rule_path,rule_config,rule_cold_us";

/// One bucket: the fastest (path, configuration) measured for a layer shape at `tokens`, and
/// what the rule alone would have run.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedRow {
    pub hidden: usize,
    pub intermediate: usize,
    pub experts: usize,
    pub k: usize,
    /// The bucket's batch size: the row serves every T up to it (above the next smaller row's).
    pub tokens: usize,
    pub choice: Choice,
    pub cold_us: f64,
    pub warm_us: f64,
    pub rule: Choice,
    pub rule_cold_us: f64,
}

/// What runs one batch: a path, and the tile or the decode geometry it launches with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Choice {
    pub path: Path,
    /// Used on the tiled path.
    pub tile: TileConfig,
    /// Used on the decode path.
    pub decode: DecodeGeometry,
    /// How much each kernel of the path fuses ([`default_fusion`] unless measured faster).
    pub fusion: Fusion,
    /// The tiled path's BLOCK_M when it is not chapter 3's rule (`None`): a larger tile reads
    /// an expert's weights for more of its pairs at once.
    pub block_m: Option<usize>,
}

impl Choice {
    /// The configuration column: the tile's name on the tiled path (then `_m{BLOCK_M}` when it
    /// is not chapter 3's rule), the geometry's on the decode paths; then `_{fusion}` when the
    /// fusion is not the path's default (`w4_c1_swiglu`: the decode path with the sum over k in
    /// its own kernel).
    pub fn config_name(&self) -> String {
        let base = match (self.path, self.block_m) {
            (Path::Tiled, Some(m)) => format!("{}_m{m}", self.tile.name()),
            (Path::Tiled, None) => self.tile.name(),
            (Path::Decode | Path::DecodeGrouped, _) => self.decode.name(),
        };
        if self.fusion == default_fusion(self.path) {
            base
        } else {
            format!("{base}_{}", self.fusion)
        }
    }
    /// From the `path` and `config` columns.
    pub fn parse(path: &str, config: &str) -> Option<Choice> {
        let path = Path::parse(path)?;
        // The longest fusion name first: `_swiglu_sumk` also ends like no other.
        let mut fusions = Fusion::ALL;
        fusions.sort_by_key(|f| std::cmp::Reverse(f.name().len()));
        let (config, fusion) = fusions
            .into_iter()
            .find_map(|f| config.strip_suffix(&format!("_{f}")).map(|c| (c, f)))
            .unwrap_or((config, default_fusion(path)));
        if !fusion.runs_on(path) {
            return None;
        }
        Some(match path {
            Path::Tiled => {
                // `_m{BLOCK_M}` last, when the table names a BLOCK_M (one of 16, 32, 64, 128).
                let (tile, block_m) = match config.rsplit_once("_m") {
                    Some((t, m)) if !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()) => {
                        let m: usize = m.parse().ok()?;
                        if ![16, 32, 64, 128].contains(&m) {
                            return None;
                        }
                        (t, Some(m))
                    }
                    _ => (config, None),
                };
                Choice {
                    path,
                    tile: TileConfig::parse(tile)?,
                    decode: DecodeGeometry::DEFAULT,
                    fusion,
                    block_m,
                }
            }
            Path::Decode | Path::DecodeGrouped => {
                let decode = DecodeGeometry::parse(config)?;
                // Streamed weights (`_na`) are the decode path's alone (FusedDevice::plan_for
                // refuses them on the grouped path).
                if decode.stream && path == Path::DecodeGrouped {
                    return None;
                }
                Choice {
                    path,
                    tile: TileConfig::DEFAULT,
                    decode,
                    fusion,
                    block_m: None,
                }
            }
        })
    }
}

impl TunedRow {
    /// The row as a line of the CSV (no newline).
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{:.3},{:.3},{},{},{:.3}",
            self.hidden,
            self.intermediate,
            self.experts,
            self.k,
            self.tokens,
            self.choice.path,
            self.choice.config_name(),
            self.cold_us,
            self.warm_us,
            self.rule.path,
            self.rule.config_name(),
            self.rule_cold_us
        )
    }
}

/// The measured table: rows by layer shape and batch bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TunedTable {
    pub rows: Vec<TunedRow>,
}

impl TunedTable {
    /// Parses the CSV: the header [`TUNED_HEADER`], then one row per line; blank lines and lines
    /// starting with `#` are skipped. An error names the line and what is wrong.
    pub fn parse(text: &str) -> Result<TunedTable, String> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let Some((n, header)) = lines.next() else {
            return Ok(TunedTable::default());
        };
        if header != TUNED_HEADER {
            return Err(format!(
                "line {n}: header {header:?}, expected {TUNED_HEADER:?}"
            ));
        }
        let mut rows = Vec::new();
        for (n, line) in lines {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() != 12 {
                return Err(format!("line {n}: {} fields, expected 12", f.len()));
            }
            let int = |i: usize| -> Result<usize, String> {
                f[i].parse()
                    .map_err(|_| format!("line {n}: field {} is {:?}, not a count", i + 1, f[i]))
            };
            let num = |i: usize| -> Result<f64, String> {
                f[i].parse()
                    .map_err(|_| format!("line {n}: field {} is {:?}, not a number", i + 1, f[i]))
            };
            let choice = |p: usize| -> Result<Choice, String> {
                Choice::parse(f[p], f[p + 1]).ok_or_else(|| {
                    format!(
                        "line {n}: path {:?} with config {:?} is not a choice this build has",
                        f[p],
                        f[p + 1]
                    )
                })
            };
            let row = TunedRow {
                hidden: int(0)?,
                intermediate: int(1)?,
                experts: int(2)?,
                k: int(3)?,
                tokens: int(4)?,
                choice: choice(5)?,
                cold_us: num(7)?,
                warm_us: num(8)?,
                rule: choice(9)?,
                rule_cold_us: num(11)?,
            };
            if row.tokens == 0 || row.k == 0 || row.experts == 0 {
                return Err(format!("line {n}: tokens, k and experts must be positive"));
            }
            rows.push(row);
        }
        Ok(TunedTable { rows })
    }

    /// The CSV text of the table.
    pub fn to_csv(&self) -> String {
        let mut s = format!("{TUNED_HEADER}\n");
        for r in &self.rows {
            s += &r.to_csv();
            s.push('\n');
        }
        s
    }

    // ANCHOR: lookup
    /// The bucket for `tokens` tokens of a layer of this shape: among the rows of the same
    /// (H, I, E, k), the one nearest the batch on a log scale (the smallest ratio between the
    /// larger and the smaller of the two sizes; a tie goes to the larger bucket). The buckets
    /// grow by factors of 8, so a batch of 9 tokens runs as 8 did, not as 64: the winner at 64
    /// tokens (four pairs per expert at Qwen3's shape) can be the wrong path at one pair per
    /// expert. A batch past every measured size runs as the largest did. `None` when the shape
    /// was not measured: the rule decides.
    pub fn lookup(
        &self,
        hidden: usize,
        intermediate: usize,
        experts: usize,
        k: usize,
        tokens: usize,
    ) -> Option<&TunedRow> {
        let same = || {
            self.rows.iter().filter(move |r| {
                (r.hidden, r.intermediate, r.experts, r.k) == (hidden, intermediate, experts, k)
            })
        };
        let t = tokens.max(1) as u128;
        // The ratio max(b, t) / min(b, t) as a fraction, compared exactly by cross-multiplying.
        let ratio = |b: usize| (t.max(b as u128), t.min(b as u128));
        same().reduce(|best, r| {
            let ((n1, d1), (n2, d2)) = (ratio(best.tokens), ratio(r.tokens));
            match (n2 * d1).cmp(&(n1 * d2)) {
                std::cmp::Ordering::Less => r,
                std::cmp::Ordering::Equal if r.tokens > best.tokens => r,
                _ => best,
            }
        })
    }
    // ANCHOR_END: lookup
}

static TABLE: OnceLock<TunedTable> = OnceLock::new();

/// The committed table ([`TUNED_CSV`]), parsed once, unless [`use_tuned_table`] put another in
/// first. A malformed committed table (which the tests refuse) counts as empty, with one line on
/// stderr.
pub fn tuned_table() -> &'static TunedTable {
    TABLE.get_or_init(|| {
        TunedTable::parse(TUNED_CSV).unwrap_or_else(|e| {
            eprintln!("ch04: bench/results/h100/ch04_tuned.csv ignored: {e}");
            TunedTable::default()
        })
    })
}

/// Makes `table` the one every layer of this process looks up instead of the compiled-in
/// [`TUNED_CSV`]: for timing a table that `bench ch04-tune` has just written, in the same GPU
/// session, before it is committed and built in (`bench ch04 --tuned FILE`). It must come
/// before the first lookup; afterwards the table in use cannot change, and this says so.
pub fn use_tuned_table(table: TunedTable) -> Result<(), String> {
    TABLE.set(table).map_err(|_| {
        "the tuned table is already in use (set it before the first layer plans a batch)".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_without_sm90a_gets_a_portable_cp_async_tile() {
        for (h, i) in [(2048, 768), (4096, 1024), (128, 128)] {
            let t = portable_tile(h, i, true);
            assert!(!t.is_hopper(), "{t} needs sm_90a");
            assert_eq!(t.name(), "w2x2_k64_n4_s3");
            // Without cp.async (before compute capability 8.0), version 1.
            assert_eq!(portable_tile(h, i, false), default_tile(h, i));
        }
        // Small layers keep the rule's tile whatever the GPU.
        assert_eq!(portable_tile(64, 32, true), default_tile(64, 32));
    }

    #[test]
    fn the_default_is_the_kernels_plain_entry_points() {
        assert!(default_matches_the_kernel_constants());
        assert_eq!(TileConfig::DEFAULT.kernel("fused_gemm2"), "fused_gemm2");
        assert_eq!(
            tile_named("w8_k32_n1").kernel("fused_gemm2"),
            "fused_gemm2_w8_k32_n1"
        );
        for c in TILE_CONFIGS {
            assert_eq!(TileConfig::parse(&c.name()), Some(c));
        }
    }

    #[test]
    fn warp_grids_are_named_and_sized_by_their_columns() {
        // Version 1 and 2 keep the names the committed table uses; a grid spells wm × wn.
        // Every line of the list is named as name() spells it (the CSVs' names).
        let names: Vec<String> = TILE_CONFIGS.iter().map(|c| c.name()).collect();
        assert_eq!(names, list::PORTABLE_NAMES);
        assert_eq!(TILE_CONFIGS[0], TileConfig::DEFAULT);
        assert!(TILE_CONFIGS.iter().all(|c| c.version
            == if c.wm > 1 {
                Version::V3
            } else if c.stages > 1 {
                Version::V2
            } else {
                Version::V1
            }));
        let g = TileConfig::parse("w2x2_k32_n4_s4").unwrap();
        assert_eq!((g.warps, g.wm, g.wn(), g.threads()), (4, 2, 2, 128));
        // Two warp columns of 4 fragments per projection: as wide as w4_k32_n2's four of 2.
        assert_eq!((g.bn1(), g.bn()), (64, 128));
        assert_eq!(g.shared_bytes(128), 4 * (128 + 128) * 40 * 2);
        assert_eq!(
            g.kernel("fused_gemm1_swiglu"),
            "fused_gemm1_swiglu_w2x2_k32_n4_s4"
        );
        let w = TileConfig::parse("w2x4_k32_n2_s4").unwrap();
        assert_eq!((w.warps, w.wn(), w.bn1(), w.bn()), (8, 4, 64, 128));
        // The tuner's BLOCK_M suffix follows a grid's name as any other's.
        let c = Choice::parse("tiled", "w2x2_k64_n4_s3_m64").unwrap();
        assert_eq!(
            (c.tile, c.block_m),
            (tile_named("w2x2_k64_n4_s3"), Some(64))
        );
        assert_eq!(c.config_name(), "w2x2_k64_n4_s3_m64");
        // A grid the kernel file does not instantiate is not a configuration.
        assert_eq!(TileConfig::parse("w2x2_k32_n1_s4"), None);
        assert_eq!(TileConfig::parse("w1x4_k32_n1"), None);
    }

    #[test]
    fn hopper_configurations_are_named_and_sized_by_their_warpgroups() {
        let names: Vec<String> = HOPPER_CONFIGS.iter().map(|c| c.name()).collect();
        assert_eq!(names, list::HOPPER_NAMES);
        // Version 6 waits for each slice's wgmma; version 7 may keep that wait; no other does.
        assert!(HOPPER_CONFIGS
            .iter()
            .all(|c| c.w0 == (c.version == Version::V6) || (c.w0 && c.version == Version::V7)));
        for c in HOPPER_CONFIGS {
            assert_eq!(TileConfig::parse(&c.name()), Some(c));
            assert!(c.is_hopper());
            // One warpgroup per 64 rows; wgmma's N (GEMM 2's columns) is 16·nf, GEMM 1's
            // intermediate columns half of it; stages hold 64·wg A rows and N B rows of 64 bf16,
            // within the H200's 227 KB of shared memory per block.
            // (version 8: one producer warpgroup more)
            assert_eq!(c.threads(), 128 * (c.wg + c.ws() as usize));
            assert_eq!(c.required_block_m(), Some(64 * c.wg));
            assert_eq!((c.bn(), c.bn1()), (16 * c.nf, 8 * c.nf));
            let bm = 64 * c.wg;
            let align = if c.swz() { WG_SWIZZLE_ALIGN } else { 0 };
            assert_eq!(
                c.shared_bytes(bm),
                c.stages * (bm + c.bn()) * c.bk * 2 + align
            );
            assert!(c.shared_bytes(bm) <= 227 * 1024);
            // Version 7's boxes land in the swizzled layout, 64 rows each, in two halves.
            assert!(!c.tma() || (c.swz() && c.bn() % 128 == 0));
            assert!(!c.ws() || c.tma());
            assert!(!c.mc() || c.ws());
            // Version 9's clusters pair tiles 2j and 2j + 1: an even grid.
            assert_eq!(c.grid_tiles(7), if c.mc() { 8 } else { 7 });
            // Version 10: persistent, no more blocks than fit at once or than there are items.
            assert!(!c.ps() || (c.ws() && !c.mc()));
            // Version 11: version 10, its items handed out as blocks free up (the same grid).
            assert!(!c.dy() || c.ps());
            if c.ps() {
                assert_eq!(c.blocks_per_sm(), 3 - c.wg, "{c}");
            }
            let want = match (c.ps(), c.mc()) {
                (true, _) => [(21, 1), ((10 * c.blocks_per_sm()).min(21) as u32, 1)],
                (false, true) => [(8, 3), (8, 3)],
                (false, false) => [(7, 3), (7, 3)],
            };
            assert_eq!([c.grid(7, 3, 132, false), c.grid(7, 3, 10, false)], want);
            // The grouped order: one dimension for versions 4 to 8 (and 9 under the experiment's
            // switch, its tiles rounded to whole clusters), the others unchanged.
            let grouped = if c.groups() {
                ((c.grid_tiles(7) * 3) as u32, 1)
            } else {
                want[0]
            };
            assert_eq!(c.grid(7, 3, 132, true), grouped, "{c}");
            let mc_grouped = c.mc() && mc_grouped();
            assert_eq!(
                c.groups(),
                (4..=8).contains(&(c.version as u8)) || mc_grouped,
                "{c}"
            );
        }
        let g = TileConfig::parse("g2_k64_n16_s4").unwrap();
        assert_eq!(g.kernel("fused_gemm2"), "fused_gemm2_g2_k64_n16_s4");
        assert!(TILE_CONFIGS
            .iter()
            .all(|c| !c.is_hopper() && c.required_block_m().is_none()));
        assert_eq!(TileConfig::parse("g3_k64_n8_s4"), None);
        // The figures' grouping: a config column's version, BLOCK_M suffix or not.
        assert_eq!(
            config_version("g2_k64_n16_s4_x_tma_ws_m128"),
            Some(Version::V8)
        );
        assert_eq!(config_version("w4_k64_n1_s3"), Some(Version::V2));
        assert_eq!(config_version("w2x2_k64_n4_s3_m64"), Some(Version::V3));
        assert_eq!(config_version("w4_c1_na_swiglu"), None);
        for v in Version::ALL {
            let listed = TILE_CONFIGS
                .iter()
                .chain(&HOPPER_CONFIGS)
                .filter(|c| c.version == v);
            assert!(listed.count() > 0, "{v} has no configuration in the list");
        }
    }

    #[test]
    fn the_rule_switches_paths_at_four_pairs_per_expert() {
        assert_eq!(choose_path(1, 8, 128), Path::Decode);
        assert_eq!(choose_path(64, 8, 128), Path::Decode);
        assert_eq!(choose_path(65, 8, 128), Path::Tiled);
        assert_eq!(choose_path(16, 2, 8), Path::Decode);
        assert_eq!(choose_path(17, 2, 8), Path::Tiled);
        assert_eq!(default_tile(2048, 768), tile_named("w4_k64_n1"));
        assert_eq!(default_tile(64, 40), TileConfig::DEFAULT);
    }

    #[test]
    fn paths_parse_and_the_rule_never_groups() {
        for p in Path::ALL {
            assert_eq!(Path::parse(p.name()), Some(p));
        }
        assert_eq!(Path::parse("decode_grouped"), Some(Path::DecodeGrouped));
        assert_eq!(default_fusion(Path::DecodeGrouped), Fusion::SwiGlu);
        assert!(Fusion::SwiGluSumK.runs_on(Path::DecodeGrouped));
        assert!(!Fusion::SwiGluSumK.runs_on(Path::Tiled));
        let c = Choice::parse("decode_grouped", "w8_c1").unwrap();
        assert_eq!((c.path, c.decode.warps), (Path::DecodeGrouped, 8));
        assert_eq!(c.config_name(), "w8_c1");
        // A fusion other than the path's default is a suffix of the configuration.
        for (path, config, fusion) in [
            ("decode", "w4_c1", Fusion::SwiGluSumK),
            ("decode", "w4_c1_swiglu", Fusion::SwiGlu),
            ("decode", "w2_c1_unfused", Fusion::Unfused),
            ("decode_grouped", "w8_c1_swiglu_sumk", Fusion::SwiGluSumK),
            ("tiled", "w4_k64_n1_s3", Fusion::SwiGlu),
            ("tiled", "w4_k64_n1_unfused", Fusion::Unfused),
            ("tiled", "w8_k64_n1_s3_m64", Fusion::SwiGlu),
            ("tiled", "w4_k32_n1_m128_unfused", Fusion::Unfused),
        ] {
            let c = Choice::parse(path, config).unwrap();
            assert_eq!(c.fusion, fusion, "{path} {config}");
            assert_eq!(c.config_name(), config);
        }
        assert_eq!(Choice::parse("tiled", "w4_k64_n1_swiglu_sumk"), None);
        assert_eq!(
            Choice::parse("tiled", "w8_k64_n1_s3_m64").unwrap().block_m,
            Some(64)
        );
        assert_eq!(Choice::parse("tiled", "w4_k64_n1").unwrap().block_m, None);
        assert_eq!(Choice::parse("tiled", "w4_k64_n1_m48"), None);
        assert_eq!(Choice::parse("tiled", "w4_k64_n1_m"), None);
        assert_eq!(Choice::parse("decode", "w4_c1_fast"), None);
        assert!(
            Choice::parse("decode", "w4_c1_na_swiglu")
                .unwrap()
                .decode
                .stream
        );
        assert_eq!(Choice::parse("decode_grouped", "w4_c1_na"), None);
        // Never chosen by the rule; a table row that names it is what a batch in its bucket runs.
        for tokens in [1, 8, 64, 65, 512, 4096] {
            assert_ne!(choose_path(tokens, 8, 128), Path::DecodeGrouped);
        }
        let t = TunedTable::parse(
            "hidden,intermediate,experts,k,tokens,path,config,cold_us,warm_us,rule_path,rule_config,rule_cold_us\n\
             64,48,8,2,4,decode,w4_c1,1.0,1.0,decode,w4_c1,1.0\n\
             64,48,8,2,16,decode_grouped,w8_c1,1.0,1.0,decode,w4_c1,2.0\n",
        )
        .unwrap();
        let path = |tokens| t.lookup(64, 48, 8, 2, tokens).map(|r| r.choice.path);
        assert_eq!(path(4), Some(Path::Decode));
        assert_eq!(path(7), Some(Path::Decode)); // 1.75× from 4, 2.3× from 16
        assert_eq!(path(8), Some(Path::DecodeGrouped)); // 2× from both: the larger
        assert_eq!(path(16), Some(Path::DecodeGrouped));
    }

    #[test]
    fn decode_geometry_names_round_trip() {
        for g in [
            DecodeGeometry::DEFAULT,
            DecodeGeometry {
                warps: 8,
                cols_per_warp: 3,
                stream: false,
            },
        ] {
            assert_eq!(DecodeGeometry::parse(&g.name()), Some(g));
        }
        let streamed = DecodeGeometry {
            stream: true,
            ..DecodeGeometry::DEFAULT
        };
        assert_eq!(streamed.name(), "w4_c1_na");
        assert_eq!(DecodeGeometry::parse("w4_c1_na"), Some(streamed));
        assert_eq!(DecodeGeometry::parse("w4_c1_na_na"), None);
        assert_eq!(DecodeGeometry::parse("w4_c1_nb"), None);
        assert_eq!(DecodeGeometry::parse("w0_c1"), None);
        assert_eq!(DecodeGeometry::parse("w64_c1"), None); // 2048 threads
        assert_eq!(DecodeGeometry::parse("w4"), None);
    }

    const TABLE: &str = "# a comment\n\
hidden,intermediate,experts,k,tokens,path,config,cold_us,warm_us,rule_path,rule_config,rule_cold_us\n\
2048,768,128,8,1,decode,w8_c1,20.5,9.1,decode,w4_c1,21.0\n\
2048,768,128,8,64,tiled,w8_k32_n1,80.0,60.0,tiled,w4_k32_n1,90.0\n\
\n\
2048,768,128,8,16,tiled,w4_k64_n1,40.0,30.0,decode,w4_c1,45.0\n";

    #[test]
    fn the_table_parses_and_looks_up_by_bucket() {
        let t = TunedTable::parse(TABLE).unwrap();
        assert_eq!(t.rows.len(), 3);
        let at = |tokens| t.lookup(2048, 768, 128, 8, tokens).map(|r| r.choice);
        assert_eq!(at(1).unwrap().path, Path::Decode);
        assert_eq!(
            at(1).unwrap().decode,
            DecodeGeometry {
                warps: 8,
                cols_per_warp: 1,
                stream: false,
            }
        );
        // The nearest bucket on a log scale: 3 is 3× from 1 and 5.3× from 16.
        assert_eq!(at(3).unwrap().path, Path::Decode);
        assert_eq!(at(4).unwrap().tile, tile_named("w4_k64_n1")); // 4× from both: the larger, 16
        assert_eq!(at(16).unwrap().tile, tile_named("w4_k64_n1"));
        assert_eq!(at(31).unwrap().tile, tile_named("w4_k64_n1")); // 1.9× from 16, 2.1× from 64
        assert_eq!(at(33).unwrap().tile, tile_named("w8_k32_n1"));
        assert_eq!(at(5000).unwrap().tile, tile_named("w8_k32_n1")); // past the largest
        assert_eq!(at(0).unwrap().path, Path::Decode); // an empty batch: as one token
        assert_eq!(t.lookup(2048, 768, 64, 8, 1), None); // another shape
                                                         // It writes what it reads.
        assert_eq!(TunedTable::parse(&t.to_csv()).unwrap(), t);
    }

    #[test]
    fn a_bad_table_is_an_error_naming_the_line() {
        let bad_header = "hidden,inter\n";
        assert!(TunedTable::parse(bad_header)
            .unwrap_err()
            .contains("line 1"));
        let bad = format!("{TUNED_HEADER}\n2048,768,128,8,1,decode,w4_k32_n1,1,1,decode,w4_c1,1\n");
        let e = TunedTable::parse(&bad).unwrap_err();
        assert!(e.contains("line 2") && e.contains("w4_k32_n1"), "{e}");
        let short = format!("{TUNED_HEADER}\n2048,768\n");
        assert!(TunedTable::parse(&short).unwrap_err().contains("2 fields"));
        let zero = format!("{TUNED_HEADER}\n2048,768,128,8,0,decode,w4_c1,1,1,decode,w4_c1,1\n");
        assert!(TunedTable::parse(&zero).is_err());
        assert_eq!(TunedTable::parse("").unwrap(), TunedTable::default());
    }

    #[test]
    fn the_committed_table_parses() {
        TunedTable::parse(TUNED_CSV).unwrap();
    }
}
