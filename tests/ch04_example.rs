//! Chapter 4's example, as the book shows it: its stdout is a snapshot (the same on the GPU and
//! on the emulator, except the measured errors in `⟨ ⟩`, which the tests check against the
//! tolerances instead), `--checkpoint` runs a real Hugging Face layer through the fused layer,
//! and every bad input is a typed error.

#[path = "../examples/ch04/cli.rs"]
mod cli;
#[path = "support/poison.rs"]
mod poison;

#[path = "support/files.rs"]
mod files;
use ch02_grouped::checkpoint::CheckpointError;
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::hf_fixture;
use ch02_grouped::{Dtype, MoeError};
use ch04_fused_moe::example::{dtype_refused, run, run_with_tile, ExampleError};
use ch04_fused_moe::FusedDevice;
use clap::Parser;
use cli::Args;
use files::{load_f32, s};
use moe_kernels::testing::device;
use moe_tools::snap::{mask_measured, measured};
use poison::poisoned_fixture;
use std::path::PathBuf;

fn try_run(argv: &[&str]) -> Result<String, ExampleError> {
    let args = Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let mut out = Vec::new();
    run(args.checkpoint_options().as_ref(), device(), &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

/// The launch count at the end of each line that starts with `prefix` (`… = 27 launches`).
fn launches(text: &str, prefix: &str) -> Vec<usize> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let n = l.rsplit("= ").next().unwrap();
            n.trim_end_matches(" launches").parse().unwrap()
        })
        .collect()
}

#[test]
fn example_stdout() {
    let text = try_run(&["ch04"]).unwrap_or_else(|e| panic!("{e}"));
    // The first line names the chapter, as every example's does.
    assert!(
        text.starts_with("Chapter 4: the fused MoE kernel\n\n"),
        "{text}"
    );
    // Per layer, tiled and decode: against the oracle within the bf16 tolerance (and not 0: the
    // oracle does not round where the layer does), against chapter 2 within the bf16-vs-bf16 one.
    let e = measured(&text, "error, max |diff| / rms");
    assert_eq!(e.len(), 8, "{text}");
    for layer in e.chunks(4) {
        assert!(layer[..2].iter().all(|&x| x > 0.0 && x <= 4e-2), "{e:?}");
        assert!(layer[2..].iter().all(|&x| x <= 2e-3), "{e:?}");
    }
    // The tiled experts: conversion, chapter 3's one launch at this size, two GEMMs, the
    // combine; the shared expert's two GEMMs in the second layer; unfused, one SwiGLU kernel
    // more per expert group. The decode experts: two launches, the shared expert included.
    // Chapter 2's grouped loop: 3 + 2 per active expert, and 4 more for the shared expert.
    assert_eq!(launches(&text, "tiled experts"), vec![5, 7], "{text}");
    assert_eq!(
        launches(&text, "tiled, unfused experts"),
        vec![6, 9],
        "{text}"
    );
    assert_eq!(launches(&text, "decode experts"), vec![2, 2], "{text}");
    let active: Vec<usize> = text
        .lines()
        .filter_map(|l| l.split(" slots in ").nth(1))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(active.len(), 2, "{text}");
    assert_eq!(
        launches(&text, "chapter 2's grouped experts"),
        vec![3 + 2 * active[0], 3 + 2 * active[1] + 4],
        "{text}"
    );
    // The rule (`choose_path`): decode up to 4 pairs per expert (T·k ≤ 4·E), tiled above. The
    // example's batches are all decode-sized: 24 pairs over 16 experts, 24 over 32, one token's 4
    // over 16; its tiled lines force the tiled path.
    let plans: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("the rule's plan: "))
        .collect();
    assert_eq!(plans.len(), 3, "{text}");
    assert!(
        plans.iter().all(|p| p.starts_with("decode path")),
        "{plans:?}"
    );
    for (pairs, experts) in [(24, 16), (24, 32), (4, 16)] {
        assert_eq!(
            ch04_fused_moe::choose::choose_path(pairs / 4, 4, experts),
            ch04_fused_moe::choose::Path::Decode
        );
    }
    for line in [
        "tiled: the same bits again, unfused, at BLOCK_M 16, 32, 64 and 128",
        "decode: the same bits in fusions unfused, swiglu, swiglu_sumk",
        "the fused layer refuses f32: config field `dtype` is f32, expected bf16",
    ] {
        assert_eq!(
            text.matches(line).count(),
            if line.starts_with("the fused") { 1 } else { 2 },
            "{line}\n{text}"
        );
    }
    insta::assert_snapshot!("ch04_example", mask_measured(&text));
}

/// `--tile NAME` forces the tiled path onto any configuration: a Hopper one (version 8) where the
/// device runs them (an sm_90a GPU, the emulator) and a portable one (version 3), each giving the
/// default tile's bits in the tour; a name that is no configuration is clap's error, naming the
/// configurations.
#[test]
fn a_forced_tile_gives_the_default_tiles_bits() {
    let mut names = vec!["w2x2_k64_n4_s3"];
    if device().runs_hopper() {
        names.push("g2_k64_n16_s4_x_tma_ws");
    }
    for name in names {
        let args = Args::try_parse_from(["ch04", "--tile", name]).unwrap();
        assert_eq!(args.tile.map(|t| t.name()), Some(name.to_string()));
        let mut out = Vec::new();
        run_with_tile(None, args.tile, device(), &mut out)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = String::from_utf8(out).unwrap();
        let line = format!("tiled, forced onto tile {name}: the same bits");
        assert!(text.contains(&line), "{name}: {text}");
    }
    let err = Args::try_parse_from(["ch04", "--tile", "g9_nope"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("no tile configuration \"g9_nope\"") && msg.contains("g2_k64_n16_s4_x_tma_ws"),
        "{msg}"
    );
}

#[test]
fn checkpoint_options_without_a_checkpoint_are_refused() {
    cli::ch02::check_options_need_a_checkpoint("ch04", |argv| {
        Args::try_parse_from(argv).map(|a| a.checkpoint_options().is_some())
    });
}

/// A fresh folder for one of this file's tests.
fn temp_dir(test: &str) -> PathBuf {
    files::temp_dir("ch04", test)
}

#[test]
fn runs_a_hugging_face_checkpoint_from_the_command_line() {
    let dir = temp_dir("checkpoint");
    let output = dir.join("out.safetensors");
    for (name, layer) in [("deepseek_v3", 1), ("qwen2_moe", 0)] {
        let fx = hf_fixture(name);
        let (ckpt, input) = (fx.join("per_expert"), fx.join("inputs.safetensors"));
        let text = try_run(&[
            "ch04",
            "--checkpoint",
            s(&ckpt),
            "--input",
            s(&input),
            "--output",
            s(&output),
        ])
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        // The default layer is the first MoE layer (DeepSeek-V3's layer 0 is dense).
        assert!(text.contains(&format!(": layer {layer}, ")), "{text}");
        let rows = load_f32(&input, "hidden").len() / 32;
        let tokens = format!("{rows} tokens in bf16, ");
        assert!(text.contains(&tokens), "{text}");
        let e = measured(&text, "error against the literal loop");
        assert!(e.len() == 1 && e[0] > 0.0 && e[0] <= 1.0 / 64.0, "{text}");
        // The file it wrote holds transformers' own output, within the bf16 tolerance.
        let want = load_f32(&input, &format!("out.{layer}"));
        check_output(
            &format!("{name}: example vs transformers"),
            &want,
            &load_f32(&output, "out"),
            Tolerance::BF16_VS_HF,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // --layer picks another MoE layer; --no-check skips the literal loop.
    let ckpt = hf_fixture("deepseek_v3").join("per_expert");
    let text = try_run(&[
        "ch04",
        "--checkpoint",
        s(&ckpt),
        "--layer",
        "2",
        "--no-check",
    ])
    .unwrap();
    assert!(text.contains(": layer 2, DeepSeek-V3"), "{text}");
    assert!(!text.contains("error against"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_bad_input_is_a_typed_error() {
    let dir = temp_dir("bad");
    let fx = hf_fixture("deepseek_v3");
    let (ckpt, input) = (fx.join("per_expert"), fx.join("inputs.safetensors"));
    let with = |extra: &[&str]| {
        let argv = [&["ch04", "--checkpoint", s(&ckpt)][..], extra].concat();
        try_run(&argv).unwrap_err()
    };
    // --help lists bf16 alone for --dtype, and the command line refuses f32 as any value it
    // does not list (it once listed f32 and then refused it as a "config field").
    let help = Args::try_parse_from(["ch04", "--help"])
        .unwrap_err()
        .to_string();
    assert!(help.contains("[possible values: bf16]"), "{help}");
    assert!(!help.contains("f32]"), "{help}");
    let err =
        Args::try_parse_from(["ch04", "--checkpoint", s(&ckpt), "--dtype", "f32"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue, "{err}");
    assert!(
        err.to_string()
            .contains("invalid value 'f32' for '--dtype <DTYPE>'")
            && err.to_string().contains("[possible values: bf16]"),
        "{err}"
    );
    assert!(try_run(&[
        "ch04",
        "--checkpoint",
        s(&ckpt),
        "--dtype",
        "bf16",
        "--no-check"
    ])
    .is_ok());
    // The library refuses f32 before the checkpoint is read, with the error the fused layer
    // gives.
    let opts = ch04_fused_moe::example::CheckpointOptions {
        dtype: Dtype::F32,
        ..Args::try_parse_from(["ch04", "--checkpoint", s(&ckpt)])
            .unwrap()
            .checkpoint_options()
            .unwrap()
    };
    let err = run(Some(&opts), device(), &mut Vec::new()).unwrap_err();
    assert_eq!(err, ExampleError::Layer(dtype_refused(Dtype::F32)));
    let r = ch02_grouped::regimes::regime("spec_decode_6rows").unwrap();
    let layer_says = FusedDevice::new(device(), &r.weights, Dtype::F32).err();
    assert_eq!(Some(dtype_refused(Dtype::F32)), layer_says);
    assert!(matches!(
        err,
        ExampleError::Layer(MoeError::Config { field: "dtype", .. })
    ));
    // A dense layer, a layer past the last: the MoE layers are named.
    for layer in ["0", "7"] {
        let err = with(&["--layer", layer]);
        assert!(
            matches!(
                &err,
                ExampleError::Checkpoint(
                    CheckpointError::NotMoeLayer { moe_layers, .. }
                        | CheckpointError::NoSuchLayer { moe_layers, .. }
                ) if *moe_layers == vec![1, 2]
            ),
            "--layer {layer}: {err}"
        );
    }
    // No --input file; an input that is not safetensors; an input of another hidden size.
    let none = dir.join("none.safetensors");
    assert_eq!(
        with(&["--input", s(&none)]),
        ExampleError::NoInput(none.clone())
    );
    assert_eq!(
        with(&["--input", s(&none)]).to_string(),
        format!("{}: no such file (--input)", none.display())
    );
    // A folder where the input file should be.
    assert_eq!(
        with(&["--input", s(&dir)]).to_string(),
        format!("{}: is a folder, not a file (--input)", dir.display())
    );
    // A negative layer reaches the parser's own message, not "unexpected argument".
    let err =
        Args::try_parse_from(["ch04", "--checkpoint", s(&ckpt), "--layer", "-1"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
    assert!(
        err.to_string()
            .contains("invalid value '-1' for '--layer <N>'"),
        "{err}"
    );
    let text_file = dir.join("hidden.txt");
    std::fs::write(&text_file, "T, H\n1, 2\n").unwrap();
    assert!(matches!(
        with(&["--input", s(&text_file)]),
        ExampleError::Checkpoint(CheckpointError::NotSafetensors { .. })
    ));
    let wrong = dir.join("wrong.safetensors");
    let cpu = candle_core::Device::Cpu;
    let t = candle_core::Tensor::zeros((2, 48), candle_core::DType::F32, &cpu).unwrap();
    candle_core::safetensors::save(&[("hidden".to_string(), t)].into_iter().collect(), &wrong)
        .unwrap();
    let err = with(&["--input", s(&wrong)]);
    assert_eq!(
        err,
        ExampleError::HiddenSize {
            path: wrong.clone(),
            found: 48,
            expected: 32
        }
    );
    assert!(
        err.to_string()
            .ends_with("`hidden` has 48 columns, but the layer's hidden size is 32"),
        "{err}"
    );
    // An output folder that does not exist, an output that is a folder; a folder without a
    // checkpoint.
    let err = with(&["--output", "/nonexistent-folder/out.safetensors"]);
    assert_eq!(
        err.to_string(),
        "/nonexistent-folder/out.safetensors: its folder does not exist"
    );
    assert!(matches!(
        with(&["--output", s(&dir)]),
        ExampleError::Checkpoint(CheckpointError::Io { .. })
    ));
    let err = try_run(&["ch04", "--checkpoint", s(&dir)]).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
    // No tokens: nothing to run, an empty output written.
    let empty = dir.join("empty.safetensors");
    let t = candle_core::Tensor::zeros((0, 32), candle_core::DType::F32, &cpu).unwrap();
    candle_core::safetensors::save(&[("hidden".to_string(), t)].into_iter().collect(), &empty)
        .unwrap();
    let text = try_run(&["ch04", "--checkpoint", s(&ckpt), "--input", s(&empty)]).unwrap();
    assert!(
        text.contains("no tokens in the input: nothing to run"),
        "{text}"
    );
    assert!(text.contains("nothing to check: no outputs"), "{text}");
    assert!(!text.contains("error against the literal loop"), "{text}");
    // A NaN in the checkpoint's router gate: refused at load, naming the tensor (it once routed
    // every token to the lowest ids and wrote zeros, with exit 0).
    let poisoned = poisoned_fixture("qwen3_moe", &dir, "layers.1.mlp.gate.weight", 40, f32::NAN);
    let err = try_run(&["ch04", "--checkpoint", s(&poisoned)]).unwrap_err();
    assert_eq!(
        err,
        ExampleError::Checkpoint(CheckpointError::NonFinite {
            tensor: "model.layers.1.mlp.gate.weight".into(),
            index: vec![1, 8],
            value: "NaN".into(),
            count: 1
        }),
        "{err}"
    );
    // A NaN in the input: that row is NaN, and the run says so.
    let mut h = load_f32(&input, "hidden");
    h[5] = f32::NAN;
    let nan_in = dir.join("nan.safetensors");
    let t = candle_core::Tensor::from_vec(h, (13, 32), &cpu).unwrap();
    candle_core::safetensors::save(&[("hidden".to_string(), t)].into_iter().collect(), &nan_in)
        .unwrap();
    let text = try_run(&["ch04", "--checkpoint", s(&ckpt), "--input", s(&nan_in)])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.contains("32 outputs are NaN or infinite: the input holds 1 non-finite value"),
        "{text}"
    );
    // The error is taken over the finite rows, and says so.
    assert!(
        text.contains("at the worst row over the 12 finite rows"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
