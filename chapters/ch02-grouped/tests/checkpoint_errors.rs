//! Every way a checkpoint can be wrong, tried as a user would meet it, each asserting the exact
//! error: no folder or no config, a config field missing or out of range, a tensor missing, of the
//! wrong shape or type, a shard or a file that is not there or not safetensors, a layer that is not
//! MoE, weights that are not finite, sizes that do not fit. What loads is in `checkpoint.rs`.
//!
//! Checkpoints are written to a fresh folder under the system's temporary folder, never into the
//! source tree (`common/mod.rs`).

use ch02_grouped::checkpoint::{load, moe_layers, CheckpointError, Family, LoadOptions, Storage};
use serde_json::{json, Value};

mod common;
use common::*;

// ---------------------------------------------------------------------------------------------
// Every way a checkpoint can be wrong

#[test]
fn not_a_folder_or_no_config() {
    let dir = TempDir::new("empty");
    assert_eq!(
        err(dir.path()),
        CheckpointError::MissingFile {
            path: dir.path().join("config.json"),
            what: "the model's config".into(),
        }
    );
    // A folder of checkpoints: the error names the subfolders that hold a config.
    for sub in ["per_expert", "fused"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        std::fs::write(dir.path().join(sub).join("config.json"), "{}").unwrap();
    }
    std::fs::create_dir_all(dir.path().join("notes")).unwrap();
    let e = err(dir.path());
    assert_eq!(
        e,
        CheckpointError::MissingFile {
            path: dir.path().join("config.json"),
            what:
                "the model's config; the checkpoints are one level down, in fused/ and per_expert/"
                    .into(),
        }
    );
    assert!(
        e.to_string()
            .ends_with("in fused/ and per_expert/) does not exist"),
        "{e}"
    );
    std::fs::write(dir.path().join("config.json"), "{\"model_type\": ").unwrap();
    assert!(
        matches!(err(dir.path()), CheckpointError::Json { path, .. } if path == dir.path().join("config.json"))
    );
    // A config but no weights.
    std::fs::write(
        dir.path().join("config.json"),
        config_json(Family::DeepseekV3).to_string(),
    )
    .unwrap();
    assert!(
        matches!(err(dir.path()), CheckpointError::MissingFile { path, .. } if path == dir.path().join("model.safetensors"))
    );
    // A file where the folder should be.
    let file = dir.path().join("config.json");
    assert!(matches!(moe_layers(&file), Err(CheckpointError::Io { path, .. }) if path == file));
}

#[test]
fn a_missing_config_field() {
    for (field, name) in [
        ("num_experts_per_tok", "num_experts_per_tok"),
        ("hidden_size", "hidden_size"),
        ("moe_intermediate_size", "moe_intermediate_size"),
        (
            "n_routed_experts",
            "n_routed_experts` or `num_local_experts",
        ),
    ] {
        let dir = with_config(|c| {
            c.remove(field);
        });
        assert_eq!(
            err(dir.path()),
            config_error(name, "a non-negative integer", "missing")
        );
    }
    // A field of the wrong type.
    let dir = with_config(|c| {
        c.insert("num_experts_per_tok".into(), json!("two"));
    });
    assert_eq!(
        err(dir.path()),
        config_error("num_experts_per_tok", "a non-negative integer", "\"two\"")
    );
    let dir = with_config(|c| {
        c.insert("norm_topk_prob".into(), json!(1));
    });
    assert_eq!(
        err(dir.path()),
        config_error("norm_topk_prob", "true or false", "1")
    );
}

const SIGMOID_ONLY: &str =
    "\"sigmoid\" (transformers' DeepSeek-V3 and GLM-4-MoE routers always use the sigmoid)";
const SILU_ONLY: &str = "\"silu\" (the SwiGLU experts this loader computes)";

#[test]
fn a_config_field_out_of_range() {
    let cases: Vec<(&str, Value, CheckpointError)> = vec![
        (
            "num_experts_per_tok",
            json!(0),
            config_error("num_experts_per_tok", "at least 1", "0"),
        ),
        (
            "num_experts_per_tok",
            json!(9),
            config_error(
                "num_experts_per_tok",
                "at most the number of experts, 8 (`n_routed_experts`)",
                "9",
            ),
        ),
        (
            "n_routed_experts",
            json!(0),
            config_error("n_routed_experts", "at least 1", "0"),
        ),
        (
            "hidden_size",
            json!(0),
            config_error("hidden_size", "at least 1", "0"),
        ),
        (
            "moe_intermediate_size",
            json!(-8),
            config_error("moe_intermediate_size", "a non-negative integer", "-8"),
        ),
        (
            "n_group",
            json!(3),
            config_error(
                "n_group",
                "a divisor of the number of experts, 8 (`n_routed_experts`)",
                "3",
            ),
        ),
        (
            "n_group",
            json!(0),
            config_error(
                "n_group",
                "a divisor of the number of experts, 8 (`n_routed_experts`)",
                "0",
            ),
        ),
        (
            "topk_group",
            json!(5),
            config_error("topk_group", "at most `n_group` = 4", "5"),
        ),
        (
            "topk_group",
            json!(0),
            config_error(
                "topk_group",
                "at least 1 (the kept groups of 2 experts must hold `num_experts_per_tok` = 2)",
                "0",
            ),
        ),
        // transformers 5.17's DeepSeek-V3 and GLM-4-MoE routers ignore `scoring_func` and always
        // use the sigmoid: a config that says otherwise is refused, softmax included.
        (
            "scoring_func",
            json!("tanh"),
            config_error("scoring_func", SIGMOID_ONLY, "\"tanh\""),
        ),
        (
            "scoring_func",
            json!("softmax"),
            config_error("scoring_func", SIGMOID_ONLY, "\"softmax\""),
        ),
        (
            "scoring_func",
            json!(1),
            config_error("scoring_func", "a string", "1"),
        ),
        // The experts are SwiGLU: SiLU only.
        (
            "hidden_act",
            json!("gelu"),
            config_error("hidden_act", SILU_ONLY, "\"gelu\""),
        ),
        (
            "hidden_act",
            json!("relu"),
            config_error("hidden_act", SILU_ONLY, "\"relu\""),
        ),
        (
            "hidden_act",
            json!(["silu"]),
            config_error("hidden_act", "a string", "[\"silu\"]"),
        ),
        (
            "topk_method",
            json!("group_limited_greedy"),
            config_error(
                "topk_method",
                "\"noaux_tc\" (DeepSeek-V3's grouped selection)",
                "\"group_limited_greedy\"",
            ),
        ),
        (
            "routed_scaling_factor",
            json!(0.0),
            config_error("routed_scaling_factor", "a finite number above 0", "0"),
        ),
        (
            "routed_scaling_factor",
            json!(-2.5),
            config_error("routed_scaling_factor", "a finite number above 0", "-2.5"),
        ),
        (
            "routed_scaling_factor",
            json!("2.5"),
            config_error("routed_scaling_factor", "a number", "\"2.5\""),
        ),
    ];
    for (field, value, want) in cases {
        let dir = with_config(|c| {
            c.insert(field.into(), value.clone());
        });
        assert_eq!(err(dir.path()), want, "{field} = {value}");
    }
}

#[test]
fn a_missing_tensor() {
    for name in [
        format!("{P}experts.3.up_proj.weight"),
        format!("{P}gate.e_score_correction_bias"),
        format!("{P}shared_experts.down_proj.weight"),
        format!("{P}gate.weight"),
    ] {
        let dir = with_tensors(|t| t.retain(|e| e.name != name));
        assert_eq!(
            err(dir.path()),
            CheckpointError::MissingTensor {
                name: name.clone(),
                looked_in: dir.path().join("model.safetensors").display().to_string(),
            }
        );
    }
    // The router without any expert.
    let dir = with_tensors(|t| t.retain(|e| !e.name.starts_with(&format!("{P}experts."))));
    assert_eq!(
        err(dir.path()),
        CheckpointError::NoExperts {
            layer: 1,
            per_expert: format!("{P}experts.0.gate_proj.weight"),
            fused: format!("{P}experts.gate_up_proj"),
        }
    );
    // Qwen2-MoE's shared expert gate.
    let (dir, _) = checkpoint(Family::Qwen2Moe, Storage::Fused, Ty::F32);
    let mut t = model_tensors(
        Family::Qwen2Moe,
        &weights(Family::Qwen2Moe),
        Storage::Fused,
        Ty::F32,
    );
    t.retain(|e| !e.name.ends_with("shared_expert_gate.weight"));
    write_checkpoint(dir.path(), &config_json(Family::Qwen2Moe), &t);
    assert!(
        matches!(err(dir.path()), CheckpointError::MissingTensor { name, .. } if name == format!("{P}shared_expert_gate.weight"))
    );
}

#[test]
fn a_tensor_of_the_wrong_shape() {
    // An expert's down projection stored transposed.
    let name = format!("{P}experts.2.down_proj.weight");
    let dir = with_tensors(|t| {
        let e = t.iter_mut().find(|e| e.name == name).unwrap();
        e.shape = vec![8, 16];
    });
    assert_eq!(
        err(dir.path()),
        CheckpointError::Shape {
            tensor: name,
            expected: vec![16, 8],
            found: vec![8, 16],
        }
    );
    // A router of 16 experts in a config of 8.
    let dir = with_tensors(|t| {
        let e = t
            .iter_mut()
            .find(|e| e.name == format!("{P}gate.weight"))
            .unwrap();
        *e = entry(e.name.clone(), Ty::F32, &[16, 16], &vec![0.0; 256]);
    });
    assert_eq!(
        err(dir.path()),
        CheckpointError::Shape {
            tensor: format!("{P}gate.weight"),
            expected: vec![8, 16],
            found: vec![16, 16],
        }
    );
    // A fused down projection stored [E, I, H] instead of [E, H, I].
    let (dir, w) = checkpoint(Family::DeepseekV3, Storage::Fused, Ty::F32);
    let mut t = model_tensors(Family::DeepseekV3, &w, Storage::Fused, Ty::F32);
    t.iter_mut()
        .find(|e| e.name.ends_with("experts.down_proj"))
        .unwrap()
        .shape = vec![8, 8, 16];
    write_checkpoint(dir.path(), &config_json(Family::DeepseekV3), &t);
    assert_eq!(
        err(dir.path()),
        CheckpointError::Shape {
            tensor: format!("{P}experts.down_proj"),
            expected: vec![8, 16, 8],
            found: vec![8, 8, 16],
        }
    );
}

#[test]
fn a_tensor_of_an_unknown_type() {
    let name = format!("{P}experts.0.gate_proj.weight");
    for (dtype, size) in [("I64", 8), ("F8_E4M3", 1), ("F64", 8), ("BOOL", 1)] {
        let dir = with_tensors(|t| {
            let e = t.iter_mut().find(|e| e.name == name).unwrap();
            e.dtype = dtype;
            e.data = vec![0; 8 * 16 * size];
        });
        assert_eq!(
            err(dir.path()),
            CheckpointError::Dtype {
                tensor: name.clone(),
                found: dtype.into(),
            }
        );
    }
}

#[test]
fn a_shard_named_in_the_index_is_missing() {
    let family = Family::DeepseekV3;
    let dir = TempDir::new("shards");
    let t = model_tensors(family, &weights(family), Storage::PerExpert, Ty::F32);
    let paths = write_sharded(
        dir.path(),
        &config_json(family),
        &[&t[..10], &t[10..20], &t[20..]],
    );
    std::fs::remove_file(&paths[2]).unwrap();
    assert!(
        matches!(err(dir.path()), CheckpointError::MissingFile { path, .. } if path == paths[2])
    );
    // An index without its weight map.
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        "{\"metadata\": {}}",
    )
    .unwrap();
    assert!(matches!(err(dir.path()), CheckpointError::Json { .. }));
    // A tensor the index does not name.
    let dir2 = TempDir::new("shards");
    let t2: Vec<Entry> = t
        .iter()
        .filter(|e| e.name != format!("{P}experts.5.down_proj.weight"))
        .cloned()
        .collect();
    write_sharded(dir2.path(), &config_json(family), &[&t2[..15], &t2[15..]]);
    assert_eq!(
        err(dir2.path()),
        CheckpointError::MissingTensor {
            name: format!("{P}experts.5.down_proj.weight"),
            looked_in: dir2
                .path()
                .join("model.safetensors.index.json")
                .display()
                .to_string(),
        }
    );
}

#[test]
fn a_file_that_is_not_safetensors() {
    let path_of = |d: &TempDir| d.path().join("model.safetensors");
    let cases: [(&[u8], &str); 3] = [
        (
            b"not safetensors, just some text that is long enough",
            "its first 8 bytes give a header of",
        ),
        (b"abc", "3 bytes, too short for a header"),
        (
            &[2, 0, 0, 0, 0, 0, 0, 0, b'[', b']'],
            "the header is not a JSON object",
        ),
    ];
    for (bytes, why) in cases {
        let dir = with_tensors(|_| {});
        std::fs::write(path_of(&dir), bytes).unwrap();
        match err(dir.path()) {
            CheckpointError::NotSafetensors { path, why: got } => {
                assert_eq!(path, path_of(&dir));
                assert!(got.starts_with(why), "{got}");
            }
            other => panic!("{other:?}"),
        }
    }
    // A header that frames right but does not parse.
    let dir = with_tensors(|_| {});
    let mut bytes = 8u64.to_le_bytes().to_vec();
    bytes.extend(b"{\"x\": 1}");
    std::fs::write(path_of(&dir), bytes).unwrap();
    assert!(matches!(
        err(dir.path()),
        CheckpointError::NotSafetensors { .. }
    ));
}

#[test]
fn a_layer_that_is_not_moe_or_not_there() {
    let (dir, _) = checkpoint(Family::DeepseekV3, Storage::PerExpert, Ty::F32);
    assert_eq!(
        err_at(dir.path(), Some(0)),
        CheckpointError::NotMoeLayer {
            layer: 0,
            moe_layers: vec![1],
        }
    );
    assert_eq!(
        err_at(dir.path(), Some(7)),
        CheckpointError::NoSuchLayer {
            layer: 7,
            layers: 2,
            moe_layers: vec![1],
        }
    );
    assert_eq!(
        load(
            dir.path(),
            &LoadOptions {
                layer: Some(1),
                progress: false
            }
        )
        .unwrap()
        .layer,
        1
    );
    // A dense model.
    let dir = with_tensors(|t| t.retain(|e| !e.name.starts_with(P)));
    assert_eq!(err(dir.path()), CheckpointError::NoMoeLayer { layers: 2 });
    assert_eq!(moe_layers(dir.path()).unwrap(), Vec::<usize>::new());
}

#[test]
fn experts_in_both_forms_or_in_two_files() {
    let family = Family::DeepseekV3;
    let w = weights(family);
    let dir = with_tensors(|t| {
        let fused = model_tensors(family, &w, Storage::Fused, Ty::F32);
        t.extend(
            fused
                .into_iter()
                .filter(|e| e.name.ends_with("gate_up_proj")),
        );
    });
    assert_eq!(err(dir.path()), CheckpointError::MixedStorage { layer: 1 });
    // Two files without an index, both holding the router.
    let dir = TempDir::new("two-files");
    let t = model_tensors(family, &w, Storage::PerExpert, Ty::F32);
    std::fs::write(
        dir.path().join("config.json"),
        config_json(family).to_string(),
    )
    .unwrap();
    write_safetensors(&dir.path().join("a.safetensors"), &t);
    write_safetensors(&dir.path().join("b.safetensors"), &t[5..6]);
    assert_eq!(
        err(dir.path()),
        CheckpointError::DuplicateTensor {
            name: t[5].name.clone(),
            first: dir.path().join("a.safetensors"),
            second: dir.path().join("b.safetensors"),
        }
    );
    // Without `model.safetensors`, every .safetensors file of the folder is the checkpoint.
    std::fs::remove_file(dir.path().join("b.safetensors")).unwrap();
    assert_eq!(
        load(dir.path(), &LoadOptions::default()).unwrap().weights,
        w
    );
}

/// A NaN or an infinity in any weight of the layer (router gate, bias, each expert's matrices in
/// either storage form, the shared expert and its gate) is refused at load, naming the tensor,
/// the first bad element and how many there are. (A NaN gate once routed every token to the
/// lowest ids and gave all-zero outputs with no error.)
#[test]
fn a_weight_that_is_not_finite() {
    let bad = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    let mut n = 0;
    for (family, storage, ty) in [
        (Family::DeepseekV3, Storage::PerExpert, Ty::F32),
        (Family::DeepseekV3, Storage::Fused, Ty::Bf16),
        (Family::Qwen2Moe, Storage::PerExpert, Ty::F16),
    ] {
        let w = weights(family);
        let tensors = model_tensors(family, &w, storage, ty);
        for (t, tensor) in tensors.iter().enumerate() {
            if !tensor.name.starts_with("model.layers.1.mlp.") {
                continue;
            }
            // Two bad values: the first at two thirds of the tensor, the second at its end.
            let len: usize = tensor.shape.iter().product();
            let (at, v) = (len * 2 / 3, bad[n % 3]);
            n += 1;
            let mut poisoned = tensors.clone();
            let e = &mut poisoned[t];
            let size = e.data.len() / len;
            for (i, x) in [(at, v), (len - 1, f32::NAN)] {
                let bytes = match e.dtype {
                    "F32" => x.to_le_bytes().to_vec(),
                    "BF16" => half::bf16::from_f32(x).to_le_bytes().to_vec(),
                    _ => half::f16::from_f32(x).to_le_bytes().to_vec(),
                };
                e.data[i * size..(i + 1) * size].copy_from_slice(&bytes);
            }
            let dir = TempDir::new("non-finite");
            write_checkpoint(dir.path(), &config_json(family), &poisoned);
            let mut index = vec![0; tensor.shape.len()];
            let mut rest = at;
            for d in (0..index.len()).rev() {
                index[d] = rest % tensor.shape[d];
                rest /= tensor.shape[d];
            }
            let err = err(dir.path());
            assert_eq!(
                err,
                CheckpointError::NonFinite {
                    tensor: tensor.name.clone(),
                    index: index.clone(),
                    value: v.to_string(),
                    count: 2,
                },
                "{family:?} {}",
                tensor.name
            );
            assert!(
                err.to_string().starts_with(&format!(
                    "tensor `{}` holds {v} at {index:?} (2 non-finite values in all): every weight \
                     must be finite",
                    tensor.name
                )),
                "{err}"
            );
        }
    }
    // Every kind of tensor was tried: 8 experts × 3 + gate, bias, 3 shared (DeepSeek-V3, one
    // tensor per expert); gate, bias, 2 fused, 3 shared; 8 × 3 + gate, 4 shared (Qwen2-MoE).
    assert_eq!(n, 29 + 7 + 29);
}

/// Sizes whose products do not fit are refused by the config, with the `config.json` fields they
/// come from, before any tensor is read.
#[test]
fn sizes_whose_products_do_not_fit() {
    let max_f32s = isize::MAX as usize / 4;
    let too_big = |what: &str| {
        format!("at most {max_f32s} elements ({what} in f32 must be at most isize::MAX bytes)")
    };
    let int = "at most 1073741823 (twice it must fit in an `int`)";
    let i31 = (1u64 << 31) - 1;
    let cases: Vec<(Value, CheckpointError)> = vec![
        (
            json!({"n_shared_experts": u64::MAX}),
            // n_shared · I overflows usize: the same message as a product that fits.
            config_error(
                "n_shared_experts x moe_intermediate_size",
                int,
                &(u64::MAX as u128 * 8).to_string(),
            ),
        ),
        (
            json!({"n_shared_experts": 1u64 << 27}),
            config_error(
                "n_shared_experts x moe_intermediate_size",
                int,
                "1073741824",
            ),
        ),
        (
            json!({"moe_intermediate_size": 1u64 << 30}),
            config_error("moe_intermediate_size", int, "1073741824"),
        ),
        (
            json!({"moe_intermediate_size": u64::MAX}),
            config_error("moe_intermediate_size", int, &u64::MAX.to_string()),
        ),
        (
            json!({"hidden_size": 1u64 << 31}),
            config_error("hidden_size", "at most 2147483647", "2147483648"),
        ),
        (
            json!({"n_routed_experts": i31, "hidden_size": i31, "n_group": 1, "topk_group": 1}),
            config_error(
                "n_routed_experts x hidden_size",
                &too_big("the router's gate [E, H]"),
                &(i31 as u128 * i31 as u128).to_string(),
            ),
        ),
        (
            // E · H fits; E · 2I · H overflows usize.
            json!({"n_routed_experts": 1u64 << 30, "hidden_size": i31, "n_group": 1, "topk_group": 1}),
            config_error(
                "n_routed_experts x 2 x moe_intermediate_size x hidden_size",
                &too_big("the packed w13 [E, 2I, H]"),
                &((1u128 << 30) * 2 * 8 * i31 as u128).to_string(),
            ),
        ),
        (
            // The shared experts: n_shared · I = 2³⁰ - 8 fits in an `int` twice over, but
            // 2 · (2³⁰ - 8) · H does not fit in memory.
            json!({"n_shared_experts": (1u64 << 27) - 1, "hidden_size": i31}),
            config_error(
                "2 x n_shared_experts x moe_intermediate_size x hidden_size",
                &too_big("the shared expert's w13 [2Is, H]"),
                &(2 * ((1u128 << 30) - 8) * i31 as u128).to_string(),
            ),
        ),
    ];
    for (fields, want) in cases {
        let dir = with_config(|c| c.extend(fields.as_object().unwrap().clone()));
        assert_eq!(err(dir.path()), want, "{fields}");
    }
}

/// A config far larger than its files (2¹⁶ experts of hidden size 2³⁰: 2⁴⁸ bytes for the router's
/// gate alone in f32) is refused by the first tensor header that disagrees, before anything is
/// allocated: a typed error, not an aborted allocation.
#[test]
fn a_config_larger_than_its_files_allocates_nothing() {
    let dir = with_config(|c| {
        c.insert("hidden_size".into(), json!(1u64 << 30));
        c.insert("n_routed_experts".into(), json!(1u64 << 16));
    });
    assert_eq!(
        err(dir.path()),
        CheckpointError::Shape {
            tensor: format!("{P}gate.weight"),
            expected: vec![1 << 16, 1 << 30],
            found: vec![8, 16],
        }
    );
    // The router agrees, the experts do not: 2³⁶ floats of w13, refused by expert 0's header.
    let dir = with_config(|c| {
        c.insert("moe_intermediate_size".into(), json!(1u64 << 28));
    });
    assert_eq!(
        err(dir.path()),
        CheckpointError::Shape {
            tensor: format!("{P}experts.0.gate_proj.weight"),
            expected: vec![1 << 28, 16],
            found: vec![8, 16],
        }
    );
    // The same in the fused form.
    let (dir, w) = checkpoint(Family::DeepseekV3, Storage::Fused, Ty::F32);
    let mut config = config_json(Family::DeepseekV3);
    config["moe_intermediate_size"] = json!(1u64 << 28);
    write_checkpoint(
        dir.path(),
        &config,
        &model_tensors(Family::DeepseekV3, &w, Storage::Fused, Ty::F32),
    );
    assert_eq!(
        err(dir.path()),
        CheckpointError::Shape {
            tensor: format!("{P}experts.gate_up_proj"),
            expected: vec![8, 1 << 29, 16],
            found: vec![8, 16, 16],
        }
    );
}

/// A tensor of the layer's MLP that the family does not read under this config is refused, named:
/// loading without it would compute another layer.
#[test]
fn a_tensor_of_the_layer_that_is_not_read() {
    let unused = |tensors: &[&str]| CheckpointError::UnusedTensors {
        layer: 1,
        family: Family::DeepseekV3,
        tensors: tensors.iter().map(|t| format!("{P}{t}")).collect(),
    };
    // Shared experts while the config says there are none.
    let dir = with_config(|c| {
        c.insert("n_shared_experts".into(), json!(0));
    });
    let e = err(dir.path());
    assert_eq!(
        e,
        unused(&[
            "shared_experts.down_proj.weight",
            "shared_experts.gate_proj.weight",
            "shared_experts.up_proj.weight",
        ])
    );
    assert_eq!(
        e.to_string(),
        format!(
            "layer 1 has 3 tensors that a DeepSeek-V3 layer of this config.json does not read: \
             `{P}shared_experts.down_proj.weight`, `{P}shared_experts.gate_proj.weight`, \
             `{P}shared_experts.up_proj.weight`; loading without them would compute another layer"
        )
    );
    // A bias of an expert's projection.
    let dir = with_tensors(|t| {
        t.push(entry(
            format!("{P}experts.0.down_proj.bias"),
            Ty::F32,
            &[16],
            &[0.5; 16],
        ))
    });
    let e = err(dir.path());
    assert_eq!(e, unused(&["experts.0.down_proj.bias"]));
    assert_eq!(
        e.to_string(),
        format!(
            "layer 1 has 1 tensor that a DeepSeek-V3 layer of this config.json does not read: \
             `{P}experts.0.down_proj.bias`; loading without it would compute another layer"
        )
    );
    // An expert beyond the config's 8.
    let dir = with_tensors(|t| {
        for proj in ["gate_proj", "up_proj"] {
            t.push(entry(
                format!("{P}experts.8.{proj}.weight"),
                Ty::F32,
                &[8, 16],
                &[0.5; 128],
            ));
        }
    });
    assert_eq!(
        err(dir.path()),
        unused(&["experts.8.gate_proj.weight", "experts.8.up_proj.weight"])
    );
    // A selection bias in a family whose router has none.
    let (dir, w) = checkpoint(Family::Qwen2Moe, Storage::Fused, Ty::F32);
    let mut t = model_tensors(Family::Qwen2Moe, &w, Storage::Fused, Ty::F32);
    t.push(entry(
        format!("{P}gate.e_score_correction_bias"),
        Ty::F32,
        &[8],
        &[0.0; 8],
    ));
    t.push(entry(
        format!("{P}experts.gate_up_proj_bias"),
        Ty::F32,
        &[8, 16],
        &[0.0; 128],
    ));
    write_checkpoint(dir.path(), &config_json(Family::Qwen2Moe), &t);
    assert_eq!(
        err(dir.path()),
        CheckpointError::UnusedTensors {
            layer: 1,
            family: Family::Qwen2Moe,
            tensors: vec![
                format!("{P}experts.gate_up_proj_bias"),
                format!("{P}gate.e_score_correction_bias"),
            ],
        }
    );
    // Other layers' tensors (layer 0's dense MLP, the embedding) are not the layer's.
    let (dir, _) = checkpoint(Family::DeepseekV3, Storage::PerExpert, Ty::F32);
    assert!(load(dir.path(), &LoadOptions::default()).is_ok());
}

/// The index may name only files inside the checkpoint's folder.
#[test]
fn an_index_that_names_a_file_outside_the_folder() {
    let family = Family::DeepseekV3;
    let dir = TempDir::new("index-paths");
    let t = model_tensors(family, &weights(family), Storage::PerExpert, Ty::F32);
    write_sharded(dir.path(), &config_json(family), &[&t[..10], &t[10..]]);
    let index_path = dir.path().join("model.safetensors.index.json");
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let name = format!("{P}gate.weight");
    let first = index["weight_map"][&name].as_str().unwrap().to_string();
    let with_entry = |file: &str| {
        let mut index = index.clone();
        index["weight_map"][&name] = json!(file);
        std::fs::write(&index_path, index.to_string()).unwrap();
    };
    let absolute = dir.path().join(&first).display().to_string();
    for file in [
        format!("../{first}"),
        format!("sub/../../{first}"),
        format!("./../{first}"),
        absolute,
        "/etc/passwd".to_string(),
        String::new(),
        ".".to_string(),
    ] {
        with_entry(&file);
        let e = err(dir.path());
        assert_eq!(
            e,
            CheckpointError::ShardPath {
                index: index_path.clone(),
                tensor: name.clone(),
                file: file.clone(),
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}: `weight_map[{name:?}]` is {file:?}, expected a file inside the checkpoint's \
                 folder (a relative path without `..`)",
                index_path.display()
            )
        );
    }
    // `./` is inside.
    with_entry(&format!("./{first}"));
    assert!(load(dir.path(), &LoadOptions::default()).is_ok());
}
