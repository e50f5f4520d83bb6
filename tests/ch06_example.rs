//! Chapter 6's example, as the book shows it: its stdout is a snapshot (the same on the GPU and
//! on the emulator, except the measured values in `⟨ ⟩`, which the tests check against the
//! tolerances instead), `--checkpoint` runs a real Hugging Face layer through the assembled layer
//! at any number of tokens, and every bad input is a typed error (`examples/shared` turns it into
//! `error: …` and a non-zero exit).

#[path = "../examples/ch06/cli.rs"]
mod cli;

#[path = "support/files.rs"]
mod files;
use ch02_grouped::checkpoint::CheckpointError;
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::hf_fixture;
use ch06_layer::example::{run, ExampleError, TOUR_TOKENS};
use ch06_layer::{DEFAULT_SWITCH_ROWS, SWITCH_POINTS};
use clap::Parser;
use cli::Args;
use files::{load_f32, s};
use moe_kernels::testing::device;
use moe_tools::snap::{mask_measured, measured};
use std::path::PathBuf;

fn try_run(argv: &[&str]) -> Result<String, ExampleError> {
    let args = Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let mut out = Vec::new();
    run(args.checkpoint_run().as_ref(), device(), &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

/// The launch count of each `  N launches: …` line.
fn launches(text: &str) -> Vec<usize> {
    text.lines()
        .filter_map(|l| l.trim_start().split_once(" launches: "))
        .map(|(n, _)| n.parse().unwrap())
        .collect()
}

#[test]
fn example_stdout() {
    let text = try_run(&["ch06"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.starts_with("Chapter 6: the MoE layer assembled\n\n"),
        "{text}"
    );
    // The switch points, as the constants hold them.
    for p in SWITCH_POINTS {
        let line = format!(
            "  {} (H {}, E {}): the tiny GEMM up to {} rows",
            p.shape, p.hidden, p.experts, p.rows
        );
        assert!(text.contains(&line), "{line}\n{text}");
    }
    assert!(text.contains(&format!("any other gate: up to {DEFAULT_SWITCH_ROWS} rows")));
    // Four launches at every decode size (the shared expert inside the two decode GEMMs); at the
    // prefill size cuBLAS, the router, chapter 3's two launches, two GEMMs (four with the shared
    // expert) and the combine.
    assert_eq!(launches(&text), vec![4, 4, 4, 7, 4, 4, 4, 9], "{text}");
    let logits: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("T = "))
        .map(|l| {
            l.split(": ")
                .nth(1)
                .unwrap()
                .split(" logits")
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(
        logits,
        ["tiny GEMM", "tiny GEMM", "tiny GEMM", "cuBLAS"].repeat(2),
        "{text}"
    );
    // Against the literal loop: (same experts, error) per batch; the error within the bf16
    // tolerance and not 0 (the loop does not round where the layer does), and the routing the
    // same for at least 90% of the tokens (a near tie may go the other way on another backend).
    let m = measured(&text, "  against the literal loop");
    assert_eq!(m.len(), 2 * 2 * TOUR_TOKENS.len(), "{text}");
    for (i, pair) in m.chunks(2).enumerate() {
        let rows = TOUR_TOKENS[i % TOUR_TOKENS.len()] as f64;
        assert!(pair[0] * 10.0 >= rows * 9.0 && pair[0] <= rows, "{pair:?}");
        assert!(pair[1] > 0.0 && pair[1] <= 4e-2, "{pair:?}");
    }
    insta::assert_snapshot!("ch06_example", mask_measured(&text));
}

/// A fresh folder for one of this file's tests.
fn temp_dir(test: &str) -> PathBuf {
    files::temp_dir("ch06", test)
}

#[test]
fn runs_a_hugging_face_checkpoint_from_the_command_line() {
    let dir = temp_dir("checkpoint");
    let output = dir.join("out.safetensors");
    for (name, layer) in [("qwen3_moe", 1), ("glm4_moe", 1), ("qwen2_moe", 0)] {
        let fx = hf_fixture(name);
        let (ckpt, input) = (fx.join("per_expert"), fx.join("inputs.safetensors"));
        let text = try_run(&[
            "ch06",
            "--checkpoint",
            s(&ckpt),
            "--input",
            s(&input),
            "--output",
            s(&output),
        ])
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains(&format!(": layer {layer}, ")), "{text}");
        assert!(
            text.contains("switch point of this gate: the tiny GEMM up to 64 rows"),
            "{text}"
        );
        let e = measured(&text, "error against the literal loop");
        assert!(e.len() == 1 && e[0] > 0.0 && e[0] <= 1.0 / 64.0, "{text}");
        // transformers' output, from hidden states rounded to bf16 and a bf16 router: within
        // chapter 2's bf16 tolerance wherever the routing agrees (it does on these fixtures).
        check_output(
            &format!("{name}: example vs transformers"),
            &load_f32(&input, &format!("out.{layer}")),
            &load_f32(&output, "out"),
            Tolerance::BF16_VS_HF,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // Patterned tokens, both logits GEMMs forced, and a prefill size past the switch point.
    let ckpt = hf_fixture("deepseek_v3").join("per_expert");
    for (tokens, logits, want) in [
        ("1", None, "T = 1: tiny GEMM logits; decode path"),
        ("1", Some("blas"), "T = 1: cuBLAS logits; decode path"),
        ("200", None, "T = 200: cuBLAS logits; tiled path"),
        ("200", Some("tiny"), "T = 200: tiny GEMM logits; tiled path"),
    ] {
        let mut argv = vec!["ch06", "--checkpoint", s(&ckpt), "--tokens", tokens];
        if let Some(l) = logits {
            argv.extend(["--logits", l]);
        }
        let text = try_run(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert!(text.contains(want), "{want}\n{text}");
    }
    let text = try_run(&[
        "ch06",
        "--checkpoint",
        s(&ckpt),
        "--layer",
        "2",
        "--no-check",
    ])
    .unwrap();
    assert!(text.contains(": layer 2, DeepSeek-V3"), "{text}");
    assert!(!text.contains("error against"), "{text}");
    // No tokens: nothing runs, and --output still gets its (empty) tensor.
    let empty = temp_dir("empty").join("out.safetensors");
    let text = try_run(&[
        "ch06",
        "--checkpoint",
        s(&ckpt),
        "--tokens",
        "0",
        "--output",
        s(&empty),
    ])
    .unwrap();
    assert!(text.contains("no tokens: nothing to run"), "{text}");
    assert!(load_f32(&empty, "out").is_empty(), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_bad_input_is_a_typed_error() {
    let dir = temp_dir("bad");
    let fx = hf_fixture("deepseek_v3");
    let ckpt = fx.join("per_expert");
    let with = |extra: &[&str]| {
        let argv = [&["ch06", "--checkpoint", s(&ckpt)][..], extra].concat();
        try_run(&argv).unwrap_err()
    };
    // Files that are not there, or not what they should be.
    let missing = dir.join("missing.safetensors");
    assert_eq!(
        with(&["--input", s(&missing)]),
        ExampleError::NoInput(missing.clone())
    );
    assert_eq!(
        with(&["--input", s(&dir)]),
        ExampleError::InputIsFolder(dir.clone())
    );
    let e = with(&["--output", s(&dir)]);
    assert!(matches!(e, ExampleError::Checkpoint(_)), "{e}");
    let e = try_run(&["ch06", "--checkpoint", s(&dir.join("nowhere"))]).unwrap_err();
    assert!(matches!(e, ExampleError::Checkpoint(_)), "{e}");
    // A bad --input is refused before the checkpoint is read (a real model's load is long):
    // with no checkpoint there at all, the error names the input.
    let text_file = dir.join("not-safetensors.safetensors");
    std::fs::write(&text_file, "not a safetensors file").unwrap();
    let e = try_run(&[
        "ch06",
        "--checkpoint",
        s(&dir.join("nowhere")),
        "--input",
        s(&text_file),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("not-safetensors"), "{e}");
    // Hidden states of another width.
    let narrow = dir.join("narrow.safetensors");
    moe_kernels::safetensors::SafetensorsWriter::new()
        .f32("hidden", &[2, 8], &[0.5; 16])
        .write(&narrow)
        .unwrap();
    assert!(matches!(
        with(&["--input", s(&narrow)]),
        ExampleError::HiddenSize {
            found: 8,
            expected: 32,
            ..
        }
    ));
    // A NaN hidden state: the run says which outputs it made non-finite, and checks the others
    // (the output is still written).
    let nan = dir.join("nan.safetensors");
    let mut values = vec![0.25f32; 3 * 32];
    values[40] = f32::NAN;
    moe_kernels::safetensors::SafetensorsWriter::new()
        .f32("hidden", &[3, 32], &values)
        .write(&nan)
        .unwrap();
    let text = try_run(&["ch06", "--checkpoint", s(&ckpt), "--input", s(&nan)]).unwrap();
    assert!(
        text.contains("outputs are NaN or infinite: the input holds 1 non-finite value"),
        "{text}"
    );
    assert!(text.contains("over the 2 finite rows"), "{text}");
    // More tokens than the host buffers take (or than a usize holds once times H): refused
    // before anything is allocated.
    for tokens in ["18446744073709551615", "100000000000"] {
        let e = with(&["--tokens", tokens]);
        assert!(
            matches!(&e, ExampleError::Check(m) if m.contains("too many tokens")),
            "--tokens {tokens}: {e}"
        );
    }
    // A negative count is clap's invalid value, naming the option.
    for (opt, v) in [("--tokens", "-3"), ("--layer", "-1")] {
        let err = Args::try_parse_from(["ch06", "--checkpoint", "d", opt, v]).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::ValueValidation,
            "{opt} {v}"
        );
        assert!(err.to_string().contains(opt), "{opt} {v}: {err}");
    }
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
    // Options that need a checkpoint, conflicting options, bad values: clap's usage errors.
    for argv in [
        &["ch06", "--tokens", "8"][..],
        &["ch06", "--input", "x.safetensors"],
        &["ch06", "--output", "out.safetensors"],
        &["ch06", "--layer", "3"],
        &["ch06", "--logits", "tiny"],
        &["ch06", "--no-check"],
    ] {
        let err = Args::try_parse_from(argv).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{argv:?}"
        );
        assert!(err.to_string().contains("--checkpoint"), "{argv:?}: {err}");
    }
    let err = Args::try_parse_from([
        "ch06",
        "--checkpoint",
        "d",
        "--tokens",
        "2",
        "--input",
        "x.safetensors",
    ])
    .unwrap_err();
    assert_eq!(
        err.kind(),
        clap::error::ErrorKind::ArgumentConflict,
        "{err}"
    );
    for bad in [
        &["--tokens", "-1"][..],
        &["--tokens", "x"],
        &["--logits", "gpu"],
        &["--layer", "x"],
    ] {
        let argv = [&["ch06", "--checkpoint", "d"][..], bad].concat();
        let err = Args::try_parse_from(&argv).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                clap::error::ErrorKind::InvalidValue
                    | clap::error::ErrorKind::ValueValidation
                    | clap::error::ErrorKind::UnknownArgument
            ),
            "{argv:?}: {err}"
        );
    }
    let help = Args::try_parse_from(["ch06", "--help"])
        .unwrap_err()
        .to_string();
    assert!(help.contains(cli::CHECKPOINT_OPTIONS), "{help}");
    assert!(help.contains(cli::MEASURED_HELP), "{help}");
    assert!(Args::try_parse_from(["ch06"])
        .unwrap()
        .checkpoint_run()
        .is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}
