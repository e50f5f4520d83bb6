//! Chapter 7's example, as the book shows it: its stdout is a snapshot (the same on the GPU and
//! on the emulator, except the measured values in `⟨ ⟩`: times, logit differences, and how many
//! bf16 tokens follow transformers', which the tests check against bounds instead),
//! `--checkpoint` generates from a reader's model, and every bad input is a typed error
//! (`examples/shared` turns it into `error: …` and a non-zero exit).

#[path = "../examples/ch07/cli.rs"]
mod cli;
#[path = "support/example_bin.rs"]
mod example_bin;

use ch02_grouped::checkpoint::CheckpointError;
use ch02_grouped::conformance::hf_fixture;
use ch07_model::example::{run, ExampleError, FIXTURE_TOKENS};
use ch07_model::fixtures::{fixture_dir, Greedy};
use ch07_model::ModelError;
use clap::Parser;
use cli::Args;
use moe_kernels::testing::device;
use moe_tools::snap::{mask_measured, measured};

fn try_run(argv: &[&str]) -> Result<String, ExampleError> {
    let args = Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let mut out = Vec::new();
    run(args.generate_run().as_ref(), device(), &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn example_stdout() {
    let text = try_run(&["ch07"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.starts_with("Chapter 7: a whole model on our MoE layer\n\n"),
        "{text}"
    );
    // Every f32 run is transformers' (the example fails otherwise), on both families.
    assert_eq!(text.matches("= transformers'").count(), 6, "{text}");
    // The bf16 runs: how many tokens follow transformers' (at least the prefill's), out of 32.
    let bf16: String = text
        .lines()
        .filter(|l| l.ends_with("tokens as transformers'"))
        .map(|l| format!("{l}\n"))
        .collect();
    let agree = measured(&bf16, "  prompt ");
    assert_eq!(agree.len(), 6, "{text}");
    assert!(
        agree.iter().all(|&n| (1.0..=32.0).contains(&n)),
        "{agree:?}"
    );
    // The first prompt's logits: per family, the f32 run within float noise, the bf16 run within
    // bf16's reach (a routing flip at a near tie may move one step further).
    let logits = measured(&text, "  prompt 1's logits");
    assert_eq!(logits.len(), 4, "{text}");
    for pair in logits.chunks(2) {
        assert!(pair[0] <= 1e-4, "{pair:?}");
        assert!(pair[1] > pair[0] && pair[1] <= 2.0, "{pair:?}");
    }
    assert_eq!(measured(&text, "  one token: ").len(), 4, "{text}");
    insta::assert_snapshot!("ch07_example", mask_measured(&text));
}

#[test]
fn generates_from_a_checkpoint_given_on_the_command_line() {
    for name in ["qwen3_moe", "glm4_moe"] {
        let fx = Greedy::read(&fixture_dir(name)).unwrap();
        let ids: Vec<String> = fx.prompts[2].iter().map(u32::to_string).collect();
        let ids = ids.join(",");
        let want: Vec<String> = fx.tokens[2].iter().map(u32::to_string).collect();
        let text = try_run(&[
            "ch07",
            "--checkpoint",
            s(&fx.model),
            "--prompt-ids",
            &ids,
            "--tokens",
            "32",
            "--dtype",
            "f32",
        ])
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            text.contains(&format!("generated: {}\n", want.join(" "))),
            "{name}\n{text}"
        );
        // One line per token as it comes, each with its time.
        assert_eq!(
            measured(&text, "token ").len(),
            2 * FIXTURE_TOKENS,
            "{text}"
        );
        assert!(text.contains("token 1: "), "{text}");
        // The default is chapter 6's layer in bf16.
        let text = try_run(&["ch07", "--checkpoint", s(&fx.model), "--prompt-ids", &ids])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            text.contains("in bf16 (chapter 6's assembled layer"),
            "{text}"
        );
        assert!(text.contains(&format!("token 1: {} ", want[0])), "{text}");
    }
    // No tokens asked: none generated.
    let model = fixture_dir("qwen3_moe").join("model");
    let text = try_run(&[
        "ch07",
        "--checkpoint",
        s(&model),
        "--prompt-ids",
        "1",
        "--tokens",
        "0",
    ])
    .unwrap();
    assert!(text.ends_with("generated: \n"), "{text}");
}

#[test]
fn every_bad_input_is_a_typed_error() {
    let model = fixture_dir("qwen3_moe").join("model");
    let with = |extra: &[&str]| {
        let argv = [&["ch07", "--checkpoint", s(&model)][..], extra].concat();
        try_run(&argv).unwrap_err()
    };
    assert_eq!(
        with(&["--prompt-ids", "3,128"]),
        ExampleError::Model(ModelError::Token {
            token: 128,
            vocab: 128
        })
    );
    let nowhere = fixture_dir("qwen3_moe").join("nowhere");
    let e = try_run(&["ch07", "--checkpoint", s(&nowhere), "--prompt-ids", "1"]).unwrap_err();
    assert!(
        matches!(
            e,
            ExampleError::Model(ModelError::Checkpoint(CheckpointError::Io { .. }))
        ),
        "{e}"
    );
    let deepseek = hf_fixture("deepseek_v3").join("per_expert");
    let e = try_run(&["ch07", "--checkpoint", s(&deepseek), "--prompt-ids", "1"]).unwrap_err();
    assert!(e.to_string().contains("MLA"), "{e}");
    // clap's usage errors: options without --checkpoint, a checkpoint without a prompt, bad
    // values.
    for argv in [
        &["ch07", "--prompt-ids", "1,2"][..],
        &["ch07", "--tokens", "3"],
        &["ch07", "--dtype", "f32"],
        &["ch07", "--checkpoint", "d"],
    ] {
        let err = Args::try_parse_from(argv).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{argv:?}"
        );
    }
    for bad in [
        &["--prompt-ids", "1,x"][..],
        &["--prompt-ids", "-1"],
        &["--prompt-ids", ""],
        &["--tokens", "-1"],
        &["--dtype", "f16"],
    ] {
        let argv = [&["ch07", "--checkpoint", "d", "--prompt-ids", "1"][..], bad].concat();
        let err = Args::try_parse_from(&argv).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                clap::error::ErrorKind::InvalidValue | clap::error::ErrorKind::ValueValidation
            ),
            "{argv:?}: {err}"
        );
    }
    let help = Args::try_parse_from(["ch07", "--help"])
        .unwrap_err()
        .to_string();
    assert!(help.contains(cli::CHECKPOINT_OPTIONS), "{help}");
    assert!(help.contains(cli::MEASURED_HELP), "{help}");
    assert!(Args::try_parse_from(["ch07"])
        .unwrap()
        .generate_run()
        .is_none());
}

/// A prompt and `--tokens` past the model's `max_position_embeddings` (64 in the fixtures'
/// config.json) are refused before anything runs (`--tokens 1000000000` once generated on and
/// on, far past the positions the model was made for, with no error).
#[test]
fn a_request_past_max_position_embeddings_is_refused_before_it_runs() {
    let model = fixture_dir("glm4_moe").join("model");
    let config = model.join("config.json");
    let ask = |ids: &str, tokens: &str| {
        try_run(&[
            "ch07",
            "--checkpoint",
            s(&model),
            "--prompt-ids",
            ids,
            "--tokens",
            tokens,
        ])
    };
    let e = ask("1", "1000000000").unwrap_err();
    assert_eq!(
        e,
        ExampleError::TooLong {
            prompt: 1,
            tokens: 1_000_000_000,
            max: 64,
            given: true,
            config: config.clone(),
        }
    );
    let msg = e.to_string();
    for words in [
        "--tokens 1000000000 after a prompt of 1 id (--prompt-ids)",
        "more than the model's 64 (max_position_embeddings in ",
        "ask for at most --tokens 63",
    ] {
        assert!(msg.contains(words), "{words:?} not in {msg}");
    }
    // At the limit it runs; one past, it is refused; no overflow at the largest count.
    let text = ask("1,2,3", "61").unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("token 61: "), "{text}");
    let e = ask("1,2,3", "62").unwrap_err().to_string();
    assert!(e.contains("ask for at most --tokens 61"), "{e}");
    let e = ask("1", &usize::MAX.to_string()).unwrap_err();
    assert!(matches!(e, ExampleError::TooLong { max: 64, .. }), "{e}");
    // A prompt longer than the model: no room for a token.
    let long = vec!["1"; 65].join(",");
    let e = ask(&long, "0").unwrap_err().to_string();
    assert!(e.contains("give a prompt of at most 63 ids"), "{e}");
    // As a user sees it: exit code 1, the message, no token printed, at once.
    let ran = example_bin::run_example(
        "ch07",
        &[
            "--checkpoint",
            s(&model),
            "--prompt-ids",
            "1",
            "--tokens",
            "1000000000",
        ],
        &[("MOE_BACKEND", "emu")],
    );
    ran.assert_refused(&["--tokens 1000000000", "max_position_embeddings", "64"]);
    assert_eq!(ran.code, Some(1), "{ran:#?}");
    assert!(ran.stdout.is_empty(), "{ran:#?}");
}
