//! Chapter 5's example, as the book shows it: its stdout is a snapshot (the same on the GPU and
//! on the emulator), `--input`/`--output` route a reader's own hidden states through the reader's
//! gate weight, and every bad input is a typed error.

#[path = "../examples/ch05/cli.rs"]
mod cli;

use ch01_router::literal::LiteralRouter;
use ch01_router::regimes::regime;
use ch01_router::RouterConfig;
use ch05_fused_router::example::run;
use clap::Parser;
use cli::Args;
use moe_kernels::safetensors::SafetensorsWriter;
use moe_kernels::testing::device;
use std::path::{Path, PathBuf};

/// `--help` states the pair's limits, as the kernels define them.
#[test]
fn help_states_the_limits() {
    use ch05_fused_router::fused::geometry::{FR_MAX_EXPERTS, FR_MAX_GROUPS, FR_MAX_K};
    use ch05_fused_router::tiny_gemm::SLICE;
    let help = Args::try_parse_from(["ch05", "--help"])
        .unwrap_err()
        .to_string();
    let want = format!(
        "Limits of the pair: H a multiple of {SLICE} and not 0 (the tiny GEMM reads 16-byte \
         slices), E at most {FR_MAX_EXPERTS}, k at most {FR_MAX_K}, at most {FR_MAX_GROUPS} \
         groups (the fused router's lanes); past them, a typed error."
    );
    assert!(help.contains(&want), "{help}");
}

fn try_run(argv: &[&str]) -> Result<String, String> {
    let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
    let file = args.file_options();
    let mut out = Vec::new();
    run(
        file.as_ref().map(|(p, o)| (p.as_path(), o)),
        device(),
        &mut out,
    )?;
    Ok(String::from_utf8(out).unwrap())
}

fn run_to_string(argv: &[&str]) -> String {
    try_run(argv).unwrap_or_else(|e| panic!("{e}"))
}

/// A folder of its own under the system's temporary folder (tests never write into the tree).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ch05-example-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn example_stdout() {
    let text = run_to_string(&["ch05"]);
    // The article's toy numbers and the launch counts, checked by value before the snapshot
    // freezes the layout.
    assert!(
        text.contains("bias in fp32:         experts 5 0 with weights 0.531 0.469"),
        "{text}"
    );
    assert!(
        text.contains("bias rounded to bf16: experts 0 2 with weights"),
        "{text}"
    );
    assert!(
        text.contains("the fused pair launches 2: tiny_gemm_r8 fused_router_screen_e128"),
        "{text}"
    );
    assert!(text.contains("chapter 1's chain launches 7:"), "{text}");
    assert!(
        text.contains("the same ids on 6 of 6 rows, weights within 1e-6"),
        "{text}"
    );
    assert_eq!(text.matches(" ok\n").count(), 9, "{text}");
    insta::assert_snapshot!("ch05_example", text);
}

/// `hidden` and `gate` of the regime, bf16 or f32, and its bias, written as a reader's file.
fn write_input(
    path: &Path,
    name: &str,
    bf16: bool,
    bias: bool,
) -> ch01_router::regimes::RegimeInput {
    let r = regime(name).unwrap();
    let shape_h = [r.rows, r.hidden];
    let shape_g = [r.experts, r.hidden];
    if bf16 {
        // The writer has no bf16 method: candle writes these two.
        let cpu = candle_core::Device::Cpu;
        let t = |v: &[f32], s: [usize; 2]| {
            candle_core::Tensor::from_slice(v, (s[0], s[1]), &cpu)
                .unwrap()
                .to_dtype(candle_core::DType::BF16)
                .unwrap()
        };
        let mut m = vec![
            ("hidden".to_string(), t(&r.hidden_states, shape_h)),
            ("gate".to_string(), t(&r.gate_weight, shape_g)),
        ];
        if bias {
            m.push((
                "bias".to_string(),
                candle_core::Tensor::from_slice(r.bias.as_ref().unwrap(), r.experts, &cpu).unwrap(),
            ));
        }
        candle_core::safetensors::save(&m.into_iter().collect(), path).unwrap();
    } else {
        let mut w = SafetensorsWriter::new();
        w.f32("hidden", &shape_h, &r.hidden_states)
            .f32("gate", &shape_g, &r.gate_weight);
        if bias {
            w.f32("bias", &[r.experts], r.bias.as_ref().unwrap());
        }
        w.write(path).unwrap();
    }
    r
}

#[test]
fn routes_a_readers_file_and_writes_the_result() {
    let dir = scratch("io");
    let input = dir.join("in.safetensors");
    let output = dir.join("out.safetensors");
    for bf16 in [true, false] {
        let r = write_input(&input, "spec_decode_6rows", bf16, true);
        let text = run_to_string(&[
            "ch05",
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--k",
            "8",
        ]);
        assert!(
            text.contains("6 rows of hidden size 128, 96 experts, with a bias"),
            "{text}"
        );
        assert_eq!(
            text.contains("hidden and gate were f32 in the file: rounded to bf16"),
            !bf16,
            "{text}"
        );
        // The written logits are the f64 dot products of the bf16 inputs within fp32 rounding,
        // and the ids and weights are the oracle's on those logits.
        let cpu = candle_core::Device::Cpu;
        let back = candle_core::safetensors::load(&output, &cpu).unwrap();
        let logits: Vec<Vec<f32>> = back["logits"].to_vec2().unwrap();
        let ids: Vec<Vec<i32>> = back["ids"].to_vec2().unwrap();
        let weights: Vec<Vec<f32>> = back["weights"].to_vec2().unwrap();
        let round = |x: f32| half::bf16::from_f32(x).to_f64();
        for (t, row) in logits.iter().enumerate() {
            for (e, &got) in row.iter().enumerate() {
                let exact: f64 = (0..r.hidden)
                    .map(|j| {
                        round(r.hidden_states[t * r.hidden + j])
                            * round(r.gate_weight[e * r.hidden + j])
                    })
                    .sum();
                assert!((got as f64 - exact).abs() < 1e-5, "{t} {e}");
            }
        }
        let flat: Vec<f32> = logits.concat();
        let oracle = LiteralRouter {
            config: RouterConfig::glm5(8),
        }
        .route_rows(&flat, r.rows, r.experts, r.bias.as_deref())
        .unwrap();
        for (row, d) in oracle.iter().enumerate() {
            let got: Vec<u32> = ids[row].iter().map(|&i| i as u32).collect();
            assert_eq!(got, d.ids, "row {row}");
            for (a, b) in weights[row].iter().zip(&d.weights) {
                assert!((*a as f64 - b).abs() < 2e-6, "row {row}: {a} vs {b}");
            }
        }
    }
    // --bias-bf16: the count of rows that change experts, computed here with the oracle.
    let r = write_input(&input, "large_prefill", true, true);
    let text = run_to_string(&["ch05", "--input", input.to_str().unwrap(), "--bias-bf16"]);
    let logits = run_logits(&input, &output);
    let b16: Vec<f32> = r
        .bias
        .as_ref()
        .unwrap()
        .iter()
        .map(|&b| half::bf16::from_f32(b).to_f32())
        .collect();
    let lit = LiteralRouter {
        config: RouterConfig::glm5(8),
    };
    let a = lit
        .route_rows(&logits, r.rows, r.experts, r.bias.as_deref())
        .unwrap();
    let b = lit
        .route_rows(&logits, r.rows, r.experts, Some(&b16))
        .unwrap();
    let set = |d: &ch01_router::RowDetail| {
        let mut v = d.ids.clone();
        v.sort_unstable();
        v
    };
    let changed = a.iter().zip(&b).filter(|(x, y)| set(x) != set(y)).count();
    assert!(changed > 0);
    assert!(
        text.contains(&format!("{changed} of 512 rows select a different set")),
        "{changed}: {text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A NaN hidden state gives a row of NaN logits: the pair routes it by chapter 1's rule (a
/// non-finite logit scores 0 and ranks last), `--help` states the rule, and the run says on
/// stderr how many logits and rows it applied to (none: no note).
#[test]
fn non_finite_logits_are_ranked_last_and_noted() {
    let help = Args::try_parse_from(["ch05", "--help"])
        .unwrap_err()
        .to_string();
    assert!(
        help.contains("a NaN or infinite logit (from a NaN or infinite hidden state or gate weight) scores 0 and ranks last"),
        "{help}"
    );
    let dir = scratch("non-finite");
    let input = dir.join("in.safetensors");
    let run_notes = |input: &Path| {
        let args = Args::try_parse_from(["ch05", "--input", input.to_str().unwrap()]).unwrap();
        let file = args.file_options();
        let (mut out, mut notes) = (Vec::new(), Vec::new());
        ch05_fused_router::example::run_with_notes(
            file.as_ref().map(|(p, o)| (p.as_path(), o)),
            device(),
            &mut out,
            &mut notes,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8(notes).unwrap()
    };
    let r = write_input(&input, "spec_decode_6rows", false, true);
    assert_eq!(run_notes(&input), "");
    let mut hidden = r.hidden_states.clone();
    hidden[2 * r.hidden..3 * r.hidden].fill(f32::NAN);
    let mut w = SafetensorsWriter::new();
    w.f32("hidden", &[r.rows, r.hidden], &hidden)
        .f32("gate", &[r.experts, r.hidden], &r.gate_weight)
        .f32("bias", &[r.experts], r.bias.as_ref().unwrap());
    w.write(&input).unwrap();
    assert_eq!(
        run_notes(&input),
        format!(
            "note: {} of the {} logits, in 1 of the {} rows, are NaN or infinite (from NaN or \
             infinite hidden states or gate weights): each scores 0 and ranks last, after every \
             finite logit (chapter 1's rule for non-finite logits)\n",
            r.experts,
            r.rows * r.experts,
            r.rows
        )
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The pair's logits of a file, as `--output` writes them.
fn run_logits(input: &Path, output: &Path) -> Vec<f32> {
    run_to_string(&[
        "ch05",
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    let back = candle_core::safetensors::load(output, &candle_core::Device::Cpu).unwrap();
    back["logits"].flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn bad_inputs_are_typed_errors() {
    let dir = scratch("bad");
    let path = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let good = path("good.safetensors");
    write_input(Path::new(&good), "decode_1tok", true, false);
    let err = |argv: &[&str]| try_run(argv).unwrap_err();
    // A file that is missing, not safetensors, or lacks a tensor.
    let e = err(&["ch05", "--input", &path("missing.safetensors")]);
    assert!(e.contains("missing.safetensors"), "{e}");
    std::fs::write(path("notes.txt"), "notes, not tensors").unwrap();
    let e = err(&["ch05", "--input", &path("notes.txt")]);
    assert!(e.contains("notes.txt is not a safetensors file"), "{e}");
    let only = path("only_hidden.safetensors");
    SafetensorsWriter::new()
        .f32("hidden", &[1, 8], &[0.5; 8])
        .write(Path::new(&only))
        .unwrap();
    let e = err(&["ch05", "--input", &only]);
    assert!(e.contains("no tensor named \"gate\""), "{e}");
    // A tensor it does not read (a bias under another name) is refused, not ignored.
    let extra = path("extra.safetensors");
    SafetensorsWriter::new()
        .f32("hidden", &[1, 8], &[0.5; 8])
        .f32("gate", &[4, 8], &[0.5; 32])
        .f32("gate_bias", &[4], &[0.0; 4])
        .write(Path::new(&extra))
        .unwrap();
    let e = err(&["ch05", "--input", &extra]);
    assert!(e.contains("unexpected tensors [\"gate_bias\"]"), "{e}");
    // A file cut short: its header promises bytes that are not there.
    let bytes = std::fs::read(&good).unwrap();
    let cut = path("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 16]).unwrap();
    let e = err(&["ch05", "--input", &cut]);
    assert!(
        e.contains("cut.safetensors is not a safetensors file"),
        "{e}"
    );
    // Shapes and types.
    type Fill = Box<dyn Fn(&mut SafetensorsWriter)>;
    let cases: [(&str, Fill, &str); 6] = [
        (
            "h_mismatch",
            Box::new(|w| {
                w.f32("hidden", &[1, 8], &[0.5; 8])
                    .f32("gate", &[4, 16], &[0.5; 64]);
            }),
            "`hidden` has 8 columns but `gate` has 16",
        ),
        (
            "ids_as_gate",
            Box::new(|w| {
                w.f32("hidden", &[1, 8], &[0.5; 8])
                    .i32("gate", &[4, 8], &[1; 32]);
            }),
            "`gate` must be bf16 or f32, got I32",
        ),
        (
            "bias_length",
            Box::new(|w| {
                w.f32("hidden", &[1, 8], &[0.5; 8])
                    .f32("gate", &[4, 8], &[0.5; 32])
                    .f32("bias", &[3], &[8.0; 3]);
            }),
            "bias has 3 values but there are 4 experts",
        ),
        (
            "hidden_odd",
            Box::new(|w| {
                w.f32("hidden", &[1, 12], &[0.5; 12])
                    .f32("gate", &[4, 12], &[0.5; 48]);
            }),
            "the hidden size must be a multiple of 8 (the tiny GEMM loads whole 16-byte slices of bf16), got 12",
        ),
        (
            "hidden_empty",
            Box::new(|w| {
                w.f32("hidden", &[2, 0], &[]).f32("gate", &[4, 0], &[]);
            }),
            "the hidden size is 0: every logit would be 0, and every row routed to the lowest ids",
        ),
        (
            "too_many_experts",
            Box::new(|w| {
                w.f32("hidden", &[1, 8], &[0.5; 8])
                    .f32("gate", &[1025, 8], &vec![0.5; 1025 * 8]);
            }),
            "experts (the fused router keeps 32 per lane) is 1025, more than the kernels support (1024)",
        ),
    ];
    for (name, fill, want) in cases {
        let p = path(&format!("{name}.safetensors"));
        let mut w = SafetensorsWriter::new();
        fill(&mut w);
        w.write(Path::new(&p)).unwrap();
        let e = err(&["ch05", "--input", &p, "--k", "2"]);
        assert!(e.contains(want), "{name}: {e}");
    }
    // The router's options.
    let e = err(&["ch05", "--input", &good, "--k", "0"]);
    assert!(e.contains("k = 0"), "{e}");
    let e = err(&[
        "ch05",
        "--input",
        &good,
        "--k",
        "33",
        "--scoring",
        "softmax",
    ]);
    assert!(
        e.contains("k (the fused router keeps one pick per lane) is 33"),
        "{e}"
    );
    let e = err(&["ch05", "--input", &good, "--groups", "64:32"]);
    assert!(
        e.contains("n_group (the fused router keeps one group per lane) is 64"),
        "{e}"
    );
    let e = err(&["ch05", "--input", &good, "--groups", "3:2"]);
    assert!(
        e.contains("128 experts cannot be split into 3 equal groups"),
        "{e}"
    );
    let plain = path("no_bias.safetensors");
    SafetensorsWriter::new()
        .f32("hidden", &[1, 8], &[0.5; 8])
        .f32("gate", &[4, 8], &[0.5; 32])
        .write(Path::new(&plain))
        .unwrap();
    let e = err(&["ch05", "--input", &plain, "--bias-bf16"]);
    assert!(
        e.contains("--bias-bf16") && e.contains("has no `bias` to round"),
        "{e}"
    );
    let e = err(&["ch05", "--input", &good, "--k", "-2"]);
    assert!(e.contains("invalid value '-2' for '--k <K>'"), "{e}");
    let e = err(&["ch05", "--input", &good, "--scale", "-1"]);
    assert!(
        e.contains("invalid value '-1' for '--scale <SCALE>': the routed scaling factor must be"),
        "{e}"
    );
    // --output naming the --input file is refused before any work (it once overwrote the hidden
    // states and the gate with the routing, exit 0).
    let before = std::fs::read(&good).unwrap();
    let e = err(&["ch05", "--input", &good, "--output", &good]);
    assert!(
        e.contains("is the file the run reads") && e.contains("overwrite"),
        "{e}"
    );
    assert_eq!(std::fs::read(&good).unwrap(), before);
    // An output path that cannot be written is refused before anything runs.
    let e = err(&["ch05", "--input", &good, "--output", dir.to_str().unwrap()]);
    assert!(e.contains("is a folder"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn router_options_without_an_input_are_refused() {
    for argv in [
        &["ch05", "--k", "4"][..],
        &["ch05", "--groups", "8:4"],
        &["ch05", "--output", "out.safetensors"],
    ] {
        let err = Args::try_parse_from(argv).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{argv:?}"
        );
        assert!(err.to_string().contains("--input"), "{argv:?}: {err}");
    }
    assert!(Args::try_parse_from(["ch05"])
        .unwrap()
        .file_options()
        .is_none());
}
