//! `bench ch04`'s inputs: the weights and hidden states, made by chapter 1's generator on every
//! core (value for value), and the safetensors file the PyTorch peers read (the routings, and the
//! generator's ends to check it by) with the outputs they write back.

use crate::ch02::{self, Shape};
use crate::ch04::{CHECK_VALUES, GATE_SCALE, HIDDEN_SALT, TINY, WEIGHT_SEED};
use ch01_router::inputs::patterned;
use ch02_grouped::MoeWeights;
use moe_kernels::safetensors::SafetensorsWriter;
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// The book's generator, in parallel: chapter 1's `patterned`, value for value.

/// splitmix64, as `ch01_router::inputs` computes it.
fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Value `i` of `patterned(_, salt, scale)`.
pub fn patterned_at(salt: u64, i: usize, scale: f32) -> f32 {
    let h = splitmix64(splitmix64(salt) ^ i as u64);
    let u = (h >> 40) as f32 / (1u32 << 24) as f32;
    (2.0 * u - 1.0) * scale
}

/// `patterned(len, salt, scale)` on every core: GLM's layer holds 3.6 G expert weights, a
/// minute on one core.
pub fn patterned_par(len: usize, salt: u64, scale: f32) -> Vec<f32> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut v = vec![0f32; len];
    let chunk = len.div_ceil(threads).max(1 << 16);
    std::thread::scope(|s| {
        for (c, part) in v.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                for (j, x) in part.iter_mut().enumerate() {
                    *x = patterned_at(salt, c * chunk + j, scale);
                }
            });
        }
    });
    v
}

/// The salts and scales of a shape's generated tensors: `(name, salt, scale, len)`, as
/// [`MoeWeights::patterned`] makes `w13` and `w2` from [`WEIGHT_SEED`].
fn generated(shape: &Shape) -> [(&'static str, u64, f32, usize); 2] {
    let (h, i, e) = (shape.hidden, shape.intermediate, shape.experts);
    [
        (
            "w13",
            WEIGHT_SEED * 100 + 3,
            1.0 / (h as f32).sqrt(),
            e * 2 * i * h,
        ),
        (
            "w2",
            WEIGHT_SEED * 100 + 4,
            1.0 / (i as f32).sqrt(),
            e * h * i,
        ),
    ]
}

/// The benchmarked layer's weights: exactly `MoeWeights::patterned(config, WEIGHT_SEED, 0.02,
/// false)` (f32 values; each layer rounds them to bf16), its expert matrices made on every core.
pub fn weights(shape: &Shape) -> MoeWeights {
    let config = shape.config();
    let [w13, w2] = generated(shape).map(|(_, salt, scale, len)| patterned_par(len, salt, scale));
    MoeWeights {
        gate: patterned(
            shape.experts * shape.hidden,
            WEIGHT_SEED * 100 + 1,
            GATE_SCALE,
        ),
        config,
        bias: None,
        w13,
        w2,
        shared: None,
    }
}

/// `[T, H]` f32 hidden states in ±1 (chapter 2's).
pub fn hidden(shape: &Shape, tokens: usize) -> Vec<f32> {
    ch02::hidden(shape, tokens)
}

// ---------------------------------------------------------------------------------------------
// The file the peers read.

/// The first and last [`CHECK_VALUES`] values of `patterned(len, salt, scale)`.
fn ends(len: usize, salt: u64, scale: f32) -> Vec<f32> {
    let n = CHECK_VALUES.min(len);
    (0..n)
        .chain(len - n..len)
        .map(|i| patterned_at(salt, i, scale))
        .collect()
}

/// The routings of `shapes` at `tokens`, and how to make our weights and hidden states, as a
/// safetensors file (written with `moe_kernels::safetensors`, as chapters 2 and 3's):
///
/// - for each shape S and token count T: `topk_ids.S.T` i32 [T, k], `topk_weights.S.T` f32
///   [T, k] (chapter 2's routings: Qwen3's router on patterned logits);
/// - metadata: `chapter`, `shapes`, `tokens`, and per shape `S.hidden`, `S.intermediate`,
///   `S.experts`, `S.k`; the generator: chapter 1's `patterned` (value i of a tensor of salt s
///   and scale c is `(2·(splitmix64(splitmix64(s) ^ i) >> 40) / 2²⁴ − 1) · c` in f32), with
///   `S.w13_salt`, `S.w13_scale_bits` (the f32 scale's bits, hex), the same for `w2`, and
///   `hidden_salt` (the hidden states of T tokens: salt `hidden_salt + T`, scale 1); the values
///   are rounded to bf16 (to nearest even) by our layers and by the peers;
/// - `check.S.w13`, `check.S.w2` f32 [2·64]: the first and last 64 values of each weight
///   tensor (before rounding), and `check.S.hidden.T` the same of each hidden state, so a peer
///   proves it generated ours.
pub fn routing_file(shapes: &[Shape], tokens: &[usize]) -> Result<Vec<u8>, String> {
    let list = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(",");
    let mut w = SafetensorsWriter::new();
    w.metadata("chapter", "ch04")
        .metadata(
            "shapes",
            &list(&mut shapes.iter().map(|s| s.name.to_string())),
        )
        .metadata("tokens", &list(&mut tokens.iter().map(|t| t.to_string())))
        .metadata("hidden_salt", &HIDDEN_SALT.to_string())
        .metadata("dtype", "bf16");
    for s in shapes {
        let n = s.name;
        w.metadata(&format!("{n}.hidden"), &s.hidden.to_string())
            .metadata(&format!("{n}.intermediate"), &s.intermediate.to_string())
            .metadata(&format!("{n}.experts"), &s.experts.to_string())
            .metadata(&format!("{n}.k"), &s.k.to_string());
        for (name, salt, scale, len) in generated(s) {
            w.metadata(&format!("{n}.{name}_salt"), &salt.to_string())
                .metadata(
                    &format!("{n}.{name}_scale_bits"),
                    &format!("{:08x}", scale.to_bits()),
                )
                .f32(
                    &format!("check.{n}.{name}"),
                    &[2 * CHECK_VALUES.min(len)],
                    &ends(len, salt, scale),
                );
        }
        for &t in tokens {
            let r = ch02::routing(s, t)?;
            // Ids are below E ≤ 2³¹ (MoeConfig::validate), so i32 holds them.
            let ids: Vec<i32> = r.ids.iter().map(|&i| i as i32).collect();
            let len = t * s.hidden;
            w.i32(&format!("topk_ids.{n}.{t}"), &[t, r.k], &ids)
                .f32(&format!("topk_weights.{n}.{t}"), &[t, r.k], &r.weights)
                .f32(
                    &format!("check.{n}.hidden.{t}"),
                    &[2 * CHECK_VALUES.min(len)],
                    &ends(len, HIDDEN_SALT + t as u64, 1.0),
                );
        }
    }
    Ok(w.to_bytes())
}

/// Checks that the file at `path` is exactly [`routing_file`] of `shapes` and `tokens`.
pub fn check_routing_file(path: &Path, shapes: &[Shape], tokens: &[usize]) -> Result<(), String> {
    let file = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if file != routing_file(shapes, tokens)? {
        return Err(format!(
            "{} is not the routing file of this build (bench ch04 --export-routing{}): the peers measured other routings or other weights",
            path.display(),
            if shapes[0].name == TINY[0].name { " --tiny" } else { "" }
        ));
    }
    eprintln!(
        "bench ch04: {} holds exactly the routings and generator measured here",
        path.display()
    );
    Ok(())
}

/// The peers' outputs: `out.{impl}.{shape}.{T}` [T, H] (bf16 or f32), as f32, by (impl, shape,
/// T).
pub struct PeerOutputs {
    pub name: String,
    pub outputs: Vec<(String, String, usize, Vec<f32>)>,
}

impl PeerOutputs {
    pub fn read(path: &Path) -> Result<PeerOutputs, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&bytes, &path.display().to_string())
    }

    pub fn parse(bytes: &[u8], name: &str) -> Result<PeerOutputs, String> {
        let tensors = candle_core::safetensors::load_buffer(bytes, &candle_core::Device::Cpu)
            .map_err(|e| format!("{name}: {e}"))?;
        let mut outputs = Vec::new();
        for (key, t) in tensors {
            let parts: Vec<&str> = key.split('.').collect();
            let [out, imp, shape, tokens] = parts[..] else {
                return Err(format!("{name}: `{key}` is not out.IMPL.SHAPE.T"));
            };
            let tokens: usize = tokens
                .parse()
                .map_err(|_| format!("{name}: `{key}`: `{tokens}` is not a token count"))?;
            if out != "out" {
                return Err(format!("{name}: `{key}` is not out.IMPL.SHAPE.T"));
            }
            let v: Vec<f32> = t
                .to_dtype(candle_core::DType::F32)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .map_err(|e| format!("{name}: `{key}`: {e}"))?;
            outputs.push((imp.to_string(), shape.to_string(), tokens, v));
        }
        outputs.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
        Ok(PeerOutputs {
            name: name.to_string(),
            outputs,
        })
    }

    /// The peers that wrote an output at `shape` and `tokens`, with it.
    pub fn at<'a>(
        &'a self,
        shape: &'a str,
        tokens: usize,
    ) -> impl Iterator<Item = (&'a str, &'a [f32])> + 'a {
        self.outputs
            .iter()
            .filter(move |o| o.1 == shape && o.2 == tokens)
            .map(|o| (o.0.as_str(), o.3.as_slice()))
    }
}
