//! Loading checkpoints: both storage forms to the same weights (our own checkpoints and the
//! Hugging Face fixtures of `tools/fixtures/ch02-hf/`), bf16 and f16 converted exactly, a sharded
//! checkpoint read through its index, the family and the expert count under each of their names.
//! Every way a checkpoint can be wrong is in `checkpoint_errors.rs`.
//!
//! Checkpoints are written to a fresh folder under the system's temporary folder, never into the
//! source tree (`common/mod.rs`).

use ch02_grouped::checkpoint::{load, moe_layers, CheckpointError, Family, LoadOptions, Storage};
use ch02_grouped::{MoeConfig, MoeWeights};
use serde_json::{json, Value};
use std::path::Path;

mod common;
use common::*;

// ---------------------------------------------------------------------------------------------
// What loads

/// Both storage forms, f32, load to exactly the weights written; layer 0 is dense, so the
/// default is layer 1.
#[test]
fn both_storage_forms_load_the_weights_written() {
    for family in [Family::DeepseekV3, Family::Qwen2Moe] {
        for storage in [Storage::PerExpert, Storage::Fused] {
            let (dir, w) = checkpoint(family, storage, Ty::F32);
            let l = load(dir.path(), &LoadOptions::default()).unwrap();
            assert_eq!((l.layer, l.family, l.storage), (1, family, storage));
            assert_eq!(l.file_dtype, "f32");
            assert_eq!(l.weights, w, "{family} {storage:?}");
            assert_eq!(moe_layers(dir.path()).unwrap(), vec![1]);
        }
    }
}

/// bf16 and f16 files hold values that f32 holds exactly: the loaded weights are the written
/// ones rounded to the file's type (the bias, stored in f32, unrounded).
#[test]
fn bf16_and_f16_files_convert_exactly() {
    for ty in [Ty::Bf16, Ty::F16] {
        for storage in [Storage::PerExpert, Storage::Fused] {
            let (dir, w) = checkpoint(Family::DeepseekV3, storage, ty);
            let l = load(dir.path(), &LoadOptions::default()).unwrap();
            let r = |v: &[f32]| v.iter().map(|&x| ty.round(x)).collect::<Vec<_>>();
            let s = w.shared.as_ref().unwrap();
            let want = MoeWeights {
                gate: r(&w.gate),
                w13: r(&w.w13),
                w2: r(&w.w2),
                shared: Some(ch02_grouped::SharedWeights {
                    w13: r(&s.w13),
                    w2: r(&s.w2),
                    gate: None,
                }),
                ..w.clone()
            };
            assert_eq!(l.weights, want);
            assert_eq!(l.file_dtype, if ty == Ty::Bf16 { "bf16" } else { "f16" });
        }
    }
}

/// A sharded checkpoint loads through its index; a shard that holds nothing of the layer need
/// not be there (a folder with only some shards downloaded loads the layers they hold), and
/// `moe_layers` reads the index alone.
#[test]
fn a_sharded_checkpoint_loads_through_its_index() {
    let family = Family::DeepseekV3;
    let dir = TempDir::new("sharded");
    let w = weights(family);
    let t = model_tensors(family, &w, Storage::PerExpert, Ty::F32);
    // The first shard holds only other layers' tensors; the layer spans the other two.
    let (moe, other): (Vec<Entry>, Vec<Entry>) = t.into_iter().partition(|e| e.name.starts_with(P));
    let paths = write_sharded(
        dir.path(),
        &config_json(family),
        &[&other, &moe[..10], &moe[10..]],
    );
    let l = load(dir.path(), &LoadOptions::default()).unwrap();
    assert_eq!(l.weights, w);
    std::fs::remove_file(&paths[0]).unwrap();
    assert_eq!(
        load(dir.path(), &LoadOptions::default()).unwrap().weights,
        w
    );
    assert_eq!(moe_layers(dir.path()).unwrap(), vec![1]);
}

/// The Hugging Face fixtures: every MoE layer loads to the same weights from the Hub's form
/// (`save_pretrained`, sharded for deepseek_v3) and from transformers 5.x's fused `state_dict()`.
#[test]
fn hf_fixtures_load_the_same_weights_in_both_forms() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/ch02-hf");
    let mut seen = 0;
    for (name, family) in [
        ("qwen3_moe", Family::Qwen3Moe),
        ("deepseek_v3", Family::DeepseekV3),
        ("glm4_moe", Family::Glm4Moe),
        ("qwen2_moe", Family::Qwen2Moe),
    ] {
        let dir = root.join(name);
        let about: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("fixture.json")).unwrap())
                .unwrap();
        let layers: Vec<usize> = serde_json::from_value(about["moe_layers"].clone()).unwrap();
        for form in ["per_expert", "fused"] {
            assert_eq!(
                moe_layers(&dir.join(form)).unwrap(),
                layers,
                "{name} {form}"
            );
        }
        for &layer in &layers {
            let opts = LoadOptions {
                layer: Some(layer),
                progress: true,
            };
            let a = load(&dir.join("per_expert"), &opts).unwrap();
            let b = load(&dir.join("fused"), &opts).unwrap();
            assert_eq!(
                (a.family, a.storage, a.layer),
                (family, Storage::PerExpert, layer)
            );
            assert_eq!(
                (b.family, b.storage, b.layer),
                (family, Storage::Fused, layer)
            );
            assert_eq!(a.weights, b.weights, "{name} layer {layer}");
            seen += 1;
        }
        let first = load(&dir.join("fused"), &LoadOptions::default()).unwrap();
        assert_eq!(first.layer, layers[0]);
    }
    assert_eq!(seen, 7);
}

/// transformers 5.x writes Qwen3-MoE's `num_experts` as `num_local_experts`; either is read, and
/// both must agree.
#[test]
fn the_number_of_experts_under_either_name() {
    let q3 = |dir: &Path, fields: Value| {
        let w = weights(Family::Qwen2Moe);
        let w = MoeWeights {
            config: MoeConfig {
                shared: None,
                ..w.config.clone()
            },
            shared: None,
            ..w
        };
        let mut config = json!({"model_type": "qwen3_moe", "hidden_size": 16, "moe_intermediate_size": 8,
            "num_experts_per_tok": 3});
        config
            .as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        write_checkpoint(
            dir,
            &config,
            &model_tensors(Family::Qwen3Moe, &w, Storage::Fused, Ty::F32),
        );
        w
    };
    for fields in [
        json!({"num_experts": 8}),
        json!({"num_local_experts": 8}),
        json!({"num_experts": 8, "num_local_experts": 8}),
    ] {
        let dir = TempDir::new("qwen3");
        let w = q3(dir.path(), fields);
        let l = load(dir.path(), &LoadOptions::default()).unwrap();
        assert_eq!((l.family, l.weights), (Family::Qwen3Moe, w));
    }
    let dir = TempDir::new("qwen3");
    q3(
        dir.path(),
        json!({"num_experts": 8, "num_local_experts": 16}),
    );
    assert_eq!(
        err(dir.path()),
        config_error("num_local_experts", "8, as `num_experts` says", "16")
    );
}

/// The family comes from a known `model_type`, else from a known class in `architectures`
/// (Kimi-K2 says `kimi_k2` and `DeepseekV3ForCausalLM`); never from the fields alone.
#[test]
fn the_family_from_model_type_or_architectures() {
    let family_of = |change: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let dir = with_config(change);
        let family = load(dir.path(), &LoadOptions::default()).unwrap().family;
        family
    };
    assert_eq!(
        family_of(&|c| {
            c.remove("architectures");
        }),
        Family::DeepseekV3
    );
    assert_eq!(
        family_of(&|c| {
            c.remove("model_type");
        }),
        Family::DeepseekV3
    );
    assert_eq!(
        family_of(&|c| {
            c.insert("model_type".into(), json!("kimi_k2"));
        }),
        Family::DeepseekV3
    );
    // A known class anywhere in the list.
    assert_eq!(
        family_of(&|c| {
            c.insert("model_type".into(), json!("kimi_k2"));
            c.insert(
                "architectures".into(),
                json!(["KimiK2ForCausalLM", "DeepseekV3ForCausalLM"]),
            );
        }),
        Family::DeepseekV3
    );
}

/// An unknown `model_type` without a known class in `architectures` is refused, even when its
/// fields are those of a known family: Ling's `bailing_moe` has Qwen3-MoE's `num_experts` and
/// `moe_intermediate_size` but another layer.
#[test]
fn an_unknown_family_is_refused() {
    let dir = with_config(|c| {
        c.insert("model_type".into(), json!("bailing_moe"));
        c.insert("architectures".into(), json!(["BailingMoeForCausalLM"]));
        c.remove("n_routed_experts");
        c.insert("num_experts".into(), json!(8));
    });
    let e = err(dir.path());
    assert_eq!(
        e,
        CheckpointError::UnknownFamily {
            model_type: Some("bailing_moe".into()),
            architectures: vec!["BailingMoeForCausalLM".into()],
        }
    );
    assert_eq!(
        e.to_string(),
        "config.json: model_type \"bailing_moe\" and architectures [\"BailingMoeForCausalLM\"] \
         name no family this loader knows: the model_type must be one of qwen3_moe, qwen2_moe, \
         deepseek_v3, glm4_moe, or the architectures name one of Qwen3MoeForCausalLM, \
         Qwen2MoeForCausalLM, DeepseekV3ForCausalLM, Glm4MoeForCausalLM"
    );
    // Neither field: DeepSeek-V3's fields alone do not say DeepSeek-V3.
    let dir = with_config(|c| {
        c.remove("model_type");
        c.remove("architectures");
    });
    assert_eq!(
        err(dir.path()),
        CheckpointError::UnknownFamily {
            model_type: None,
            architectures: vec![],
        }
    );
    let dir = with_config(|c| {
        c.insert("model_type".into(), json!("mixtral"));
        c.insert("architectures".into(), json!(["MixtralForCausalLM"]));
        c.remove("n_routed_experts");
    });
    assert_eq!(
        err(dir.path()),
        CheckpointError::UnknownFamily {
            model_type: Some("mixtral".into()),
            architectures: vec!["MixtralForCausalLM".into()],
        }
    );
}
