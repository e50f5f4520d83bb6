//! Chapter 2's example, as the book shows it: its stdout is a snapshot (the same on the GPU and
//! on the emulator, except the measured errors in `⟨ ⟩`, which the tests check against the
//! tolerances instead), `--checkpoint` runs a real Hugging Face layer, and the command line
//! refuses what it cannot use.

#[path = "../examples/ch02/cli.rs"]
mod cli;

use ch02_grouped::conformance::hf_fixture;
use ch02_grouped::example::run;
use clap::Parser;
use cli::Args;
use moe_kernels::testing::device;
use moe_tools::snap::{mask_measured, measured};

fn try_run(argv: &[&str]) -> Result<String, String> {
    let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    run(args.checkpoint_options().as_ref(), device(), &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn example_stdout() {
    let text = try_run(&["ch02"]).unwrap_or_else(|e| panic!("{e}"));
    // The measured errors are within the stated tolerances (and not zero: an error of exactly 0
    // in bf16 would mean the oracle rounds where it must not).
    let bf16 = measured(&text, "bf16:");
    let f32 = measured(&text, "f32:");
    assert_eq!((bf16.len(), f32.len()), (4, 4), "{text}");
    assert!(bf16.iter().all(|&e| e > 0.0 && e <= 4e-2), "{bf16:?}");
    assert!(f32.iter().all(|&e| e <= 1e-5), "{f32:?}");
    // Launches: 3 + 2 per active expert, plus the shared expert's GEMM, SwiGLU, GEMM (and, in
    // bf16, the gather that converts the tokens) in the second layer.
    let active: Vec<usize> = text
        .lines()
        .filter(|l| l.contains("pairs grouped by expert"))
        .map(|l| l.rsplit(": ").next().unwrap().split(' ').count())
        .collect();
    let launches: Vec<usize> = text
        .lines()
        .filter(|l| l.contains("device launches"))
        .map(|l| {
            let n = l.rsplit("= ").next().unwrap();
            n.trim_end_matches(" launches").parse().unwrap()
        })
        .collect();
    assert_eq!(active.len(), 2, "{text}");
    assert_eq!(
        launches,
        vec![
            3 + 2 * active[0],
            3 + 2 * active[0],
            3 + 2 * active[1] + 4,
            3 + 2 * active[1] + 3
        ],
        "{text}"
    );
    insta::assert_snapshot!("ch02_example", mask_measured(&text));
}

#[test]
fn checkpoint_options_without_a_checkpoint_are_refused() {
    cli::check_options_need_a_checkpoint("ch02", |argv| {
        Args::try_parse_from(argv).map(|a| a.checkpoint_options().is_some())
    });
}

#[test]
fn runs_a_hugging_face_checkpoint_from_the_command_line() {
    let dir = std::env::temp_dir().join(format!("ch02-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("out.safetensors");
    let fx = hf_fixture("deepseek_v3");
    let (ckpt, input) = (fx.join("per_expert"), fx.join("inputs.safetensors"));
    let text = try_run(&[
        "ch02",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--dtype",
        "f32",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    // The default layer is the first MoE layer (layer 0 of this model is dense).
    assert!(text.contains(": layer 1, DeepSeek-V3"), "{text}");
    assert!(text.contains("13 tokens in f32"), "{text}");
    let e = measured(&text, "error against the literal loop");
    assert!(e.len() == 1 && e[0] <= 1e-5, "{text}");
    // The file it wrote holds transformers' own output for layer 1, within the f32 tolerance.
    let cpu = candle_core::Device::Cpu;
    let got = candle_core::safetensors::load(&output, &cpu).unwrap()["out"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let want = candle_core::safetensors::load(&input, &cpu).unwrap()["out.1"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    ch02_grouped::compare::check_output(
        "example vs transformers",
        &want,
        &got,
        ch02_grouped::compare::Tolerance::F32,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // --layer picks another MoE layer; a dense or missing layer is a typed error naming the MoE ones.
    let text = try_run(&[
        "ch02",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--layer",
        "2",
        "--no-check",
    ])
    .unwrap();
    assert!(text.contains(": layer 2, DeepSeek-V3"), "{text}");
    for layer in ["0", "7"] {
        let err = try_run(&[
            "ch02",
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--layer",
            layer,
        ])
        .unwrap_err();
        assert!(
            err.contains("1, 2") || err.contains("[1, 2]"),
            "--layer {layer}: {err}"
        );
    }
    // An input of another hidden size, a folder without a checkpoint: errors that say so.
    let wrong = dir.join("wrong.safetensors");
    let t = candle_core::Tensor::zeros((2, 48), candle_core::DType::F32, &cpu).unwrap();
    candle_core::safetensors::save(&[("hidden".to_string(), t)].into_iter().collect(), &wrong)
        .unwrap();
    let err = try_run(&[
        "ch02",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--input",
        wrong.to_str().unwrap(),
    ])
    .unwrap_err();
    assert!(
        err.contains("`hidden` has 48 columns, but the layer's hidden size is 32"),
        "{err}"
    );
    let err = try_run(&["ch02", "--checkpoint", dir.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("config.json"), "{err}");
    // An output folder that does not exist is refused before the checkpoint is read.
    let err = try_run(&[
        "ch02",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--output",
        "/nonexistent-folder/out.safetensors",
    ])
    .unwrap_err();
    assert_eq!(
        err,
        "/nonexistent-folder/out.safetensors: its folder does not exist"
    );
    // A NaN in the input: that row is NaN in every implementation, and the run says so (the
    // check against the literal loop compares the finite rows).
    let mut h = candle_core::safetensors::load(&input, &cpu).unwrap()["hidden"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    h[5] = f32::NAN;
    let nan_in = dir.join("nan.safetensors");
    let t = candle_core::Tensor::from_vec(h, (13, 32), &cpu).unwrap();
    candle_core::safetensors::save(&[("hidden".to_string(), t)].into_iter().collect(), &nan_in)
        .unwrap();
    let text = try_run(&[
        "ch02",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--input",
        nan_in.to_str().unwrap(),
        "--dtype",
        "f32",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.contains(
            "32 outputs are NaN or infinite: the input or the weights hold non-finite values"
        ),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
