//! What the loader's tests share: checkpoints written into a temporary folder (both storage
//! forms, any dtype, sharded or not, with a config or a tensor changed), and the error a load of
//! one of them must give.
#![allow(dead_code)] // each test file uses its part

use ch02_grouped::checkpoint::{load, CheckpointError, Family, LoadOptions, Storage};
use ch02_grouped::{MoeConfig, MoeWeights, SharedExpert};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------------------------------------------------------------------------------------------
// Writing checkpoints

/// A folder under the system's temporary folder, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ch02-checkpoint-{}-{n}-{what}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One tensor as a file holds it: safetensors' name of its type, its shape and its bytes.
#[derive(Clone)]
pub struct Entry {
    pub name: String,
    pub dtype: &'static str,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// How the test writes floats.
#[derive(Clone, Copy, PartialEq)]
pub enum Ty {
    F32,
    Bf16,
    F16,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::F32 => "F32",
            Ty::Bf16 => "BF16",
            Ty::F16 => "F16",
        }
    }
    pub fn round(self, x: f32) -> f32 {
        match self {
            Ty::F32 => x,
            Ty::Bf16 => half::bf16::from_f32(x).to_f32(),
            Ty::F16 => half::f16::from_f32(x).to_f32(),
        }
    }
    fn bytes(self, v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match self {
                Ty::F32 => x.to_le_bytes().to_vec(),
                Ty::Bf16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
                Ty::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
            })
            .collect()
    }
}

pub fn entry(name: impl Into<String>, ty: Ty, shape: &[usize], v: &[f32]) -> Entry {
    assert_eq!(shape.iter().product::<usize>(), v.len());
    Entry {
        name: name.into(),
        dtype: ty.name(),
        shape: shape.to_vec(),
        data: ty.bytes(v),
    }
}

/// Writes a safetensors file: 8 bytes of header length, the JSON header (padded with spaces to
/// a multiple of 8), the data.
pub fn write_safetensors(path: &Path, entries: &[Entry]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for e in entries {
        header.insert(
            e.name.clone(),
            json!({"dtype": e.dtype, "shape": e.shape, "data_offsets": [offset, offset + e.data.len()]}),
        );
        offset += e.data.len();
    }
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut text = Value::Object(header).to_string().into_bytes();
    let pad = (8 - text.len() % 8) % 8;
    text.extend(std::iter::repeat_n(b' ', pad));
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend(text);
    for e in entries {
        bytes.extend(&e.data);
    }
    std::fs::write(path, bytes).unwrap();
}

/// The test layer's config: DeepSeek-V3-like (every feature: bias, groups, scaling, a shared
/// expert of two) or Qwen2-MoE-like (a gated shared expert).
pub fn config_json(family: Family) -> Value {
    match family {
        Family::DeepseekV3 => json!({
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "hidden_size": 16,
            "moe_intermediate_size": 8,
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "n_group": 4,
            "topk_group": 2,
            "routed_scaling_factor": 2.5,
            "n_shared_experts": 2,
            "norm_topk_prob": true,
            "scoring_func": "sigmoid",
            "topk_method": "noaux_tc",
            "first_k_dense_replace": 1,
            "num_hidden_layers": 2,
        }),
        Family::Qwen2Moe => json!({
            "architectures": ["Qwen2MoeForCausalLM"],
            "model_type": "qwen2_moe",
            "hidden_size": 16,
            "moe_intermediate_size": 8,
            "shared_expert_intermediate_size": 24,
            "num_experts": 8,
            "num_experts_per_tok": 3,
            "norm_topk_prob": false,
            "num_hidden_layers": 2,
        }),
        _ => unreachable!("the tests write DeepSeek-V3 and Qwen2-MoE layers"),
    }
}

/// What `config_json(family)` describes.
pub fn expected_config(family: Family) -> MoeConfig {
    match family {
        Family::DeepseekV3 => MoeConfig {
            hidden: 16,
            intermediate: 8,
            experts: 8,
            router: ch01_router::RouterConfig {
                k: 2,
                grouping: Some(ch01_router::Grouping {
                    n_group: 4,
                    topk_group: 2,
                }),
                routed_scaling: 2.5,
                ..ch01_router::RouterConfig::deepseek_v3()
            },
            shared: Some(SharedExpert {
                intermediate: 16,
                gated: false,
            }),
        },
        Family::Qwen2Moe => MoeConfig {
            hidden: 16,
            intermediate: 8,
            experts: 8,
            router: ch01_router::RouterConfig {
                renormalize: false,
                ..ch01_router::RouterConfig::qwen3(3)
            },
            shared: Some(SharedExpert {
                intermediate: 24,
                gated: true,
            }),
        },
        _ => unreachable!(),
    }
}

pub fn weights(family: Family) -> MoeWeights {
    let w = MoeWeights::patterned(
        &expected_config(family),
        7,
        1.0,
        family == Family::DeepseekV3,
    );
    w.validate().unwrap();
    w
}

/// The tensors of a two-layer model: layer 0 dense, layer 1 the MoE layer `w`, in `storage`,
/// everything of type `ty`; plus the embedding and a norm so the names look like a model's.
pub fn model_tensors(family: Family, w: &MoeWeights, storage: Storage, ty: Ty) -> Vec<Entry> {
    let c = &w.config;
    let (h, i, e) = (c.hidden, c.intermediate, c.experts);
    let p = "model.layers.1.mlp.";
    let mut t = vec![
        entry("model.embed_tokens.weight", ty, &[4, h], &vec![0.5; 4 * h]),
        entry(
            "model.layers.0.mlp.gate_proj.weight",
            ty,
            &[32, h],
            &vec![0.25; 32 * h],
        ),
        entry(
            "model.layers.0.mlp.up_proj.weight",
            ty,
            &[32, h],
            &vec![0.25; 32 * h],
        ),
        entry(
            "model.layers.0.mlp.down_proj.weight",
            ty,
            &[h, 32],
            &vec![0.25; 32 * h],
        ),
        entry(
            "model.layers.1.input_layernorm.weight",
            ty,
            &[h],
            &vec![1.0; h],
        ),
        entry(format!("{p}gate.weight"), ty, &[e, h], &w.gate),
    ];
    if let Some(b) = &w.bias {
        // DeepSeek-V3 keeps its bias in f32 whatever the weights are.
        t.push(entry(
            format!("{p}gate.e_score_correction_bias"),
            Ty::F32,
            &[e],
            b,
        ));
    }
    match storage {
        Storage::PerExpert => {
            for x in 0..e {
                let w13 = w.w13_of(x);
                t.push(entry(
                    format!("{p}experts.{x}.gate_proj.weight"),
                    ty,
                    &[i, h],
                    &w13[..i * h],
                ));
                t.push(entry(
                    format!("{p}experts.{x}.up_proj.weight"),
                    ty,
                    &[i, h],
                    &w13[i * h..],
                ));
                t.push(entry(
                    format!("{p}experts.{x}.down_proj.weight"),
                    ty,
                    &[h, i],
                    w.w2_of(x),
                ));
            }
        }
        Storage::Fused => {
            t.push(entry(
                format!("{p}experts.gate_up_proj"),
                ty,
                &[e, 2 * i, h],
                &w.w13,
            ));
            t.push(entry(
                format!("{p}experts.down_proj"),
                ty,
                &[e, h, i],
                &w.w2,
            ));
        }
    }
    if let (Some(s), Some(sw)) = (c.shared, &w.shared) {
        let is = s.intermediate;
        let module = if family == Family::Qwen2Moe {
            "shared_expert"
        } else {
            "shared_experts"
        };
        t.push(entry(
            format!("{p}{module}.gate_proj.weight"),
            ty,
            &[is, h],
            &sw.w13[..is * h],
        ));
        t.push(entry(
            format!("{p}{module}.up_proj.weight"),
            ty,
            &[is, h],
            &sw.w13[is * h..],
        ));
        t.push(entry(
            format!("{p}{module}.down_proj.weight"),
            ty,
            &[h, is],
            &sw.w2,
        ));
        if let Some(g) = &sw.gate {
            t.push(entry(
                format!("{p}shared_expert_gate.weight"),
                ty,
                &[1, h],
                g,
            ));
        }
    }
    t
}

/// A checkpoint folder: `config.json` and `model.safetensors`.
pub fn write_checkpoint(dir: &Path, config: &Value, tensors: &[Entry]) {
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(config).unwrap(),
    )
    .unwrap();
    write_safetensors(&dir.join("model.safetensors"), tensors);
}

/// A whole test checkpoint of `family` in a new temporary folder.
pub fn checkpoint(family: Family, storage: Storage, ty: Ty) -> (TempDir, MoeWeights) {
    let dir = TempDir::new("ckpt");
    let w = weights(family);
    write_checkpoint(
        dir.path(),
        &config_json(family),
        &model_tensors(family, &w, storage, ty),
    );
    (dir, w)
}

/// The same checkpoint with one change to its config.
pub fn with_config(change: impl FnOnce(&mut serde_json::Map<String, Value>)) -> TempDir {
    let family = Family::DeepseekV3;
    let dir = TempDir::new("config");
    let mut config = config_json(family);
    change(config.as_object_mut().unwrap());
    let w = weights(family);
    write_checkpoint(
        dir.path(),
        &config,
        &model_tensors(family, &w, Storage::PerExpert, Ty::F32),
    );
    dir
}

/// The same checkpoint with its tensors changed.
pub fn with_tensors(change: impl FnOnce(&mut Vec<Entry>)) -> TempDir {
    let family = Family::DeepseekV3;
    let dir = TempDir::new("tensors");
    let w = weights(family);
    let mut t = model_tensors(family, &w, Storage::PerExpert, Ty::F32);
    change(&mut t);
    write_checkpoint(dir.path(), &config_json(family), &t);
    dir
}

pub fn err(dir: &Path) -> CheckpointError {
    err_at(dir, None)
}

pub fn err_at(dir: &Path, layer: Option<usize>) -> CheckpointError {
    match load(
        dir,
        &LoadOptions {
            layer,
            progress: false,
        },
    ) {
        Ok(l) => panic!(
            "loaded layer {} of {}; expected an error",
            l.layer,
            dir.display()
        ),
        Err(e) => {
            // Every error says something (and is an std::error::Error).
            let boxed: Box<dyn std::error::Error> = Box::new(e.clone());
            assert!(!boxed.to_string().is_empty());
            e
        }
    }
}

pub fn config_error(field: &str, expected: &str, found: &str) -> CheckpointError {
    CheckpointError::Config {
        field: field.into(),
        expected: expected.into(),
        found: found.into(),
    }
}

pub const P: &str = "model.layers.1.mlp.";

/// Writes each of `shards` as one file, with an index, as `save_pretrained` shards.
pub fn write_sharded(dir: &Path, config: &Value, shards: &[&[Entry]]) -> Vec<PathBuf> {
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut map = serde_json::Map::new();
    let mut paths = Vec::new();
    let n = shards.len();
    for (s, chunk) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{n:05}.safetensors", s + 1);
        write_safetensors(&dir.join(&file), chunk);
        for t in chunk.iter() {
            map.insert(t.name.clone(), json!(file));
        }
        paths.push(dir.join(file));
    }
    let index = json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    paths
}
