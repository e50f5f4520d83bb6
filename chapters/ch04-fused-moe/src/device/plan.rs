//! What runs a batch: [`BatchPlan`] and [`FusedDevice::plan_for`], which reads the caller's
//! overrides, the measured table and the rules (`crate::choose`).

use super::*;

// ANCHOR: batch_plan
/// What runs a batch of T tokens: the path, the fusion, and the launch shapes. It depends on T
/// and the layer's shape (and the layer's overrides), never on the routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPlan {
    pub path: Path,
    pub fusion: Fusion,
    /// The tiled path's tile configuration.
    pub tile: TileConfig,
    /// The tile height of chapter 3's layout: the tiled path's tiles, or the grouped decode
    /// path's groups (`DECODE_GROUP`, 8, unless [`FusedDevice::with_block_m`] says otherwise);
    /// 0 on the decode path (no layout).
    pub block_m: usize,
    /// The decode path's launch geometry.
    pub decode: DecodeGeometry,
}
// ANCHOR_END: batch_plan

impl FusedDevice {
    /// The tile height for `pairs` pairs: the caller's, else chapter 3's rule.
    pub fn block_m_for(&self, pairs: usize) -> usize {
        self.block_m
            .unwrap_or_else(|| choose_block_m(pairs, self.config.experts))
    }

    // ANCHOR: plan_for
    /// What runs a batch of `rows` tokens: each of the caller's overrides, else the measured
    /// table's bucket for this shape ([`tuned_table`]: path, fusion, tile, BLOCK_M where it names
    /// one, decode geometry), else the rules ([`choose_path`], [`default_fusion`], chapter 3's
    /// BLOCK_M, [`portable_tile`] on a GPU without sm_90a, else [`default_tile`],
    /// [`DecodeGeometry::DEFAULT`]).
    pub fn plan_for(&self, rows: usize) -> Result<BatchPlan, MoeError> {
        let c = &self.config;
        let (k, h, i, e) = (c.router.k, c.hidden, c.intermediate, c.experts);
        let tuned = self
            .tuned
            .then(|| tuned_table().lookup(h, i, e, k, rows))
            .flatten()
            .map(|r| r.choice);
        let path = self
            .path
            .or(tuned.map(|t| t.path))
            .unwrap_or_else(|| choose_path(rows, k, e));
        let tuned_for = |p: Path| tuned.filter(|t| t.path == p);
        let fusion = self
            .fusion
            .or(tuned_for(path).map(|t| t.fusion))
            .unwrap_or(default_fusion(path));
        if !fusion.runs_on(path) {
            return Err(MoeError::Config {
                field: "fusion",
                expected: format!(
                    "unfused or swiglu on the {path} path (a tile holds pairs of one expert, never the k pairs of one token)"
                ),
                found: fusion.to_string(),
            });
        }
        let pairs = rows * k;
        let (block_m, tile) = match path {
            Path::Tiled => {
                // A measured row naming a version 4 to 11 configuration counts only where it can run.
                let tuned_tile = tuned_for(Path::Tiled).filter(|t| self.hopper_ok(t.tile).is_ok());
                let tile = self.tile.or(tuned_tile.map(|t| t.tile)).unwrap_or_else(|| {
                    match self.device.gpu_has_cp_async() {
                        Some(cp_async) if !self.device.has_sm90a() => portable_tile(h, i, cp_async),
                        _ => default_tile(h, i),
                    }
                });
                let block_m = match tile.required_block_m() {
                    Some(need) => {
                        if let Some(asked) = self.block_m.filter(|&b| b != need) {
                            return Err(MoeError::Config {
                                field: "BLOCK_M",
                                expected: format!("{need} for {tile} (64 rows per warpgroup)"),
                                found: asked.to_string(),
                            });
                        }
                        need
                    }
                    None => self
                        .block_m
                        .or(tuned_tile.and_then(|t| t.block_m))
                        .unwrap_or_else(|| self.block_m_for(pairs)),
                };
                (block_m, tile)
            }
            Path::Decode => (0, self.tile.unwrap_or(TileConfig::DEFAULT)),
            Path::DecodeGrouped => (
                self.block_m.unwrap_or(DECODE_GROUP),
                self.tile.unwrap_or(TileConfig::DEFAULT),
            ),
        };
        let decode_path = if path.is_decode() { path } else { Path::Decode };
        let mut decode = self
            .decode
            .or(tuned_for(decode_path).map(|t| t.decode))
            .unwrap_or(DecodeGeometry::DEFAULT);
        if path == Path::DecodeGrouped && decode.stream {
            return Err(MoeError::Config {
                field: "decode geometry",
                expected: "no streamed weights (_na) on the decode_grouped path: its warps read a tile's weight rows again from L1".into(),
                found: decode.name(),
            });
        }
        if path == Path::DecodeGrouped && decode.threads() > DECODE_GROUP_MAX_THREADS {
            return Err(MoeError::Config {
                field: "decode geometry",
                expected: format!(
                    "at most {} warps on the decode_grouped path (its kernels' launch bounds)",
                    DECODE_GROUP_MAX_THREADS / 32
                ),
                found: decode.name(),
            });
        }
        // Keep every decode grid within CUDA's gridDim.y (the bits do not depend on it).
        let widest = [h, i, c.shared.map_or(0, |s| s.intermediate)]
            .into_iter()
            .max()
            .unwrap_or(0);
        decode.cols_per_warp = decode
            .cols_per_warp
            .max(widest.div_ceil(decode.warps * MAX_GRID_Y));
        Ok(BatchPlan {
            path,
            fusion,
            tile,
            block_m,
            decode,
        })
    }
    // ANCHOR_END: plan_for
}
