//! Bad checkpoints and bad prompts: each is a typed error whose message names the tensor, the
//! field or the token. The checkpoints are the committed fixtures, copied into a temporary folder
//! and changed there (tests never write into the source tree).

use ch02_grouped::checkpoint::files;
use ch02_grouped::checkpoint::CheckpointError;
use ch02_grouped::conformance::hf_fixture;
use ch02_grouped::Dtype;
use ch07_model::fixtures::fixture_dir;
use ch07_model::{load, parse_model_config, Model, ModelError};
use moe_kernels::safetensors::SafetensorsWriter;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// A config change, and what the refusal's message must say.
type ConfigCase = (&'static str, fn(&mut Value), &'static str);

/// The fixture `name`'s model, copied into a fresh folder with its tensors and its config changed
/// by `edit`.
fn changed(name: &str, case: &str, edit: impl FnOnce(&mut Tensors, &mut Value)) -> PathBuf {
    let src = fixture_dir(name).join("model");
    let dir = std::env::temp_dir().join(format!("ch07-load-{}-{name}-{case}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = src.join("model.safetensors");
    let st = files::map(&path).unwrap();
    let mut tensors: Tensors = st
        .tensors()
        .into_iter()
        .map(|(n, _)| {
            let raw = files::raw(&st, &n, &path).unwrap();
            (n, (raw.shape.clone(), raw.to_f32()))
        })
        .collect();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut tensors, &mut config);
    let mut w = SafetensorsWriter::new();
    for (n, (shape, values)) in &tensors {
        w.f32(n, shape, values);
    }
    w.write(&dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

fn refused(name: &str, case: &str, edit: impl FnOnce(&mut Tensors, &mut Value)) -> ModelError {
    let dir = changed(name, case, edit);
    let e = match load(&dir, false) {
        Ok(_) => panic!("{name} {case}: loaded"),
        Err(e) => e,
    };
    std::fs::remove_dir_all(&dir).unwrap();
    e
}

#[test]
fn the_fixtures_load_unchanged() {
    for name in ["qwen3_moe", "glm4_moe"] {
        let dir = changed(name, "unchanged", |_, _| {});
        let w = load(&dir, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(w.moe_layers(), vec![1, 2], "{name}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// transformers 5.x's own form (`state_dict()`: each MoE layer's experts fused into
/// `gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I]) loads to the same model as the Hub's
/// form: chapter 2's packer reads both.
#[test]
fn the_fused_form_loads_to_the_same_model() {
    let hub = load(&fixture_dir("glm4_moe").join("model"), false).unwrap();
    let dir = changed("glm4_moe", "fused", |t, _| {
        for l in [1, 2] {
            let p = format!("model.layers.{l}.mlp.experts.");
            let take = |t: &mut Tensors, e: usize, proj: &str| {
                t.remove(&format!("{p}{e}.{proj}.weight")).unwrap()
            };
            let (mut gate_up, mut down) = (Vec::new(), Vec::new());
            for e in 0..8 {
                gate_up.extend(take(t, e, "gate_proj").1); // [I, H]
                gate_up.extend(take(t, e, "up_proj").1); // [I, H]
                down.extend(take(t, e, "down_proj").1); // [H, I]
            }
            t.insert(format!("{p}gate_up_proj"), (vec![8, 32, 32], gate_up));
            t.insert(format!("{p}down_proj"), (vec![8, 32, 16], down));
        }
    });
    let fused = load(&dir, false).unwrap_or_else(|e| panic!("{e}"));
    assert!(fused == hub, "the fused form loaded to another model");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The Hub's configs (and transformers 4.x) put `rope_theta` and `partial_rotary_factor` at the
/// top, with `rope_scaling: null`, where transformers 5.x writes `rope_parameters`: the same
/// model either way.
#[test]
fn rope_fields_at_the_top_load_the_same_model() {
    let five = load(&fixture_dir("glm4_moe").join("model"), false).unwrap();
    let dir = changed("glm4_moe", "rope-top", |_, c| {
        let c = c.as_object_mut().unwrap();
        c.remove("rope_parameters");
        c.insert("rope_scaling".into(), Value::Null);
        c.insert("rope_theta".into(), 10000.0.into());
        c.insert("partial_rotary_factor".into(), 0.5.into());
    });
    let hub = load(&dir, false).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        hub == five,
        "the top-level rope fields loaded to another model"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    // A different theta is read, not defaulted.
    let dir = changed("glm4_moe", "rope-theta", |_, c| {
        c["rope_parameters"]["rope_theta"] = 5e5.into();
    });
    assert_eq!(load(&dir, false).unwrap().config.rope_theta, 5e5);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `tie_word_embeddings` the LM head is the embedding, and a checkpoint that still has an
/// `lm_head.weight` is refused (which of the two would be meant is not clear).
#[test]
fn tied_embeddings() {
    let dir = changed("qwen3_moe", "tied", |t, c| {
        t.remove("lm_head.weight");
        c["tie_word_embeddings"] = true.into();
    });
    let w = load(&dir, false).unwrap_or_else(|e| panic!("{e}"));
    assert!(w.lm_head == w.embed);
    std::fs::remove_dir_all(&dir).unwrap();
    let e = refused("qwen3_moe", "tied-and-head", |_, c| {
        c["tie_word_embeddings"] = true.into();
    });
    assert_eq!(
        e,
        ModelError::UnusedTensors {
            tensors: vec!["lm_head.weight".into()]
        }
    );
    assert_eq!(
        e.to_string(),
        "the checkpoint has 1 tensor that this config.json does not read: `lm_head.weight`; \
         running without it would compute another model"
    );
}

// ANCHOR: bad_checkpoints
#[test]
fn a_missing_tensor_is_named() {
    let name = "model.layers.1.self_attn.k_proj.weight";
    let e = refused("qwen3_moe", "missing", |t, _| {
        t.remove(name);
    });
    assert!(
        matches!(&e, ModelError::Checkpoint(CheckpointError::MissingTensor { name: n, .. }) if n == name),
        "{e}"
    );
    assert!(e.to_string().contains(name), "{e}");
}

#[test]
fn a_missing_layer_names_its_first_tensor() {
    let e = refused("glm4_moe", "missing-layer", |t, _| {
        t.retain(|n, _| !n.starts_with("model.layers.2."));
    });
    assert!(
        e.to_string()
            .contains("tensor `model.layers.2.input_layernorm.weight` is missing"),
        "{e}"
    );
}

#[test]
fn a_wrong_shape_is_named_with_both_shapes() {
    let name = "model.layers.0.self_attn.q_proj.weight";
    let e = refused("glm4_moe", "shape", |t, _| {
        t.insert(name.into(), (vec![16, 32], vec![0.5; 16 * 32]));
    });
    assert_eq!(
        e,
        ModelError::Checkpoint(CheckpointError::Shape {
            tensor: name.into(),
            expected: vec![32, 32],
            found: vec![16, 32],
        })
    );
    assert!(e.to_string().contains(name), "{e}");
}

#[test]
fn an_unknown_family_is_refused() {
    let e = refused("qwen3_moe", "family", |_, c| {
        c["model_type"] = "llama".into();
        c["architectures"] = serde_json::json!(["LlamaForCausalLM"]);
    });
    assert!(
        matches!(
            e,
            ModelError::Checkpoint(CheckpointError::UnknownFamily { .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("\"llama\""), "{e}");
}

#[test]
fn deepseek_v3_loads_in_chapter_2_but_does_not_run_here() {
    // Chapter 2's tiny DeepSeek-V3 model: its MoE layer loads there, its MLA attention is not
    // this chapter's.
    let dir = hf_fixture("deepseek_v3").join("per_expert");
    assert!(ch02_grouped::checkpoint::load(&dir, &Default::default()).is_ok());
    let Err(e) = load(&dir, false) else {
        panic!("DeepSeek-V3 loaded")
    };
    assert!(matches!(e, ModelError::UnsupportedFamily { .. }), "{e}");
    assert!(e.to_string().contains("MLA"), "{e}");
}
// ANCHOR_END: bad_checkpoints

#[test]
fn a_tensor_the_config_does_not_read_is_refused() {
    // Qwen3-MoE's o_proj has a bias only with attention_bias.
    let name = "model.layers.0.self_attn.o_proj.bias";
    let e = refused("qwen3_moe", "unused", |t, _| {
        t.insert(name.into(), (vec![32], vec![0.1; 32]));
    });
    assert_eq!(
        e,
        ModelError::UnusedTensors {
            tensors: vec![name.into()]
        }
    );
    // With attention_bias, the biases are read: then q_proj's is missing.
    let e = refused("qwen3_moe", "biased", |t, c| {
        t.insert(name.into(), (vec![32], vec![0.1; 32]));
        c["attention_bias"] = true.into();
    });
    assert!(
        e.to_string()
            .contains("`model.layers.0.self_attn.q_proj.bias` is missing"),
        "{e}"
    );
}

#[test]
fn bad_config_fields_are_named() {
    let cases: [ConfigCase; 6] = [
        (
            "sliding",
            |c| c["use_sliding_window"] = true.into(),
            "`use_sliding_window` is true",
        ),
        (
            "yarn",
            |c| c["rope_parameters"]["rope_type"] = "yarn".into(),
            "`rope_parameters.rope_type` is \"yarn\"",
        ),
        (
            "heads",
            |c| c["num_key_value_heads"] = 3.into(),
            "`num_key_value_heads` is 3, expected a divisor of num_attention_heads = 4",
        ),
        (
            "vocab",
            |c| c["vocab_size"] = Value::Null,
            "`vocab_size` is missing",
        ),
        (
            "rotary",
            |c| c["rope_parameters"]["partial_rotary_factor"] = 0.1.into(),
            "`partial_rotary_factor` is 0.1",
        ),
        (
            "positions",
            |c| c["max_position_embeddings"] = 0.into(),
            "`max_position_embeddings` is 0, expected a positive integer",
        ),
    ];
    for (case, edit, want) in cases {
        let family = if case == "sliding" {
            "qwen3_moe"
        } else {
            "glm4_moe"
        };
        let e = refused(family, case, |_, c| edit(c));
        assert!(e.to_string().contains(want), "{case}: {e}");
    }
}

/// `max_position_embeddings` is read as given (the fixtures': 64), and a config without it gets
/// the family's default in transformers, marked as not given.
#[test]
fn max_position_embeddings_is_read_or_the_familys_default() {
    for (name, default) in [("qwen3_moe", 32_768), ("glm4_moe", 131_072)] {
        let path = fixture_dir(name).join("model").join("config.json");
        let mut json: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let c = parse_model_config(&json).unwrap();
        assert_eq!(
            (c.max_positions, c.max_positions_given),
            (64, true),
            "{name}"
        );
        json.as_object_mut()
            .unwrap()
            .remove("max_position_embeddings");
        let c = parse_model_config(&json).unwrap();
        assert_eq!(
            (c.max_positions, c.max_positions_given),
            (default, false),
            "{name}"
        );
    }
}

#[test]
fn a_non_finite_weight_is_named() {
    let name = "model.layers.2.post_attention_layernorm.weight";
    let e = refused("glm4_moe", "nan", |t, _| {
        t.get_mut(name).unwrap().1[5] = f32::NAN;
    });
    assert!(
        matches!(&e, ModelError::Checkpoint(CheckpointError::NonFinite { tensor, index, .. }) if tensor == name && index == &[5]),
        "{e}"
    );
}

#[test]
fn bad_prompts_are_typed_errors() {
    let w = load(&fixture_dir("qwen3_moe").join("model"), false).unwrap();
    let model = Model::new(moe_kernels::testing::emu(), w, Dtype::F32).unwrap();
    let mut cache = model.cache();
    assert_eq!(
        model.forward(&[], &mut cache).unwrap_err(),
        ModelError::EmptyPrompt
    );
    let e = model.forward(&[3, 128], &mut cache).unwrap_err();
    assert_eq!(
        e,
        ModelError::Token {
            token: 128,
            vocab: 128
        }
    );
    assert!(e.to_string().contains("ids 0 to 127"), "{e}");
    // Nothing was cached by the refused calls.
    assert!(cache.is_empty());
}
