//! Chapter 1's example, as the book shows it: its stdout is a snapshot (the same on the GPU and
//! on the emulator), and `--input`/`--output` route a reader's own file; its command line
//! refuses what it cannot use.

#[path = "../examples/ch01/cli.rs"]
mod cli;
#[path = "support/example_bin.rs"]
mod example_bin;

use ch01_router::example::run;
use ch01_router::literal::LiteralRouter;
use ch01_router::regimes::regime;
use clap::Parser;
use cli::Args;
use moe_kernels::testing::device;

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

/// stdout and the notes (stderr) of a run.
fn run_with_notes(argv: &[&str]) -> (String, String) {
    let args = Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"));
    let file = args.file_options();
    let (mut out, mut notes) = (Vec::new(), Vec::new());
    ch01_router::example::run_with_notes(
        file.as_ref().map(|(p, o)| (p.as_path(), o)),
        device(),
        &mut out,
        &mut notes,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(notes).unwrap(),
    )
}

fn run_to_string(argv: &[&str]) -> String {
    try_run(argv).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn example_stdout() {
    let text = run_to_string(&["ch01"]);
    // The article's numbers, checked here by value before the snapshot freezes the layout.
    assert!(
        text.contains("selected:  experts 2 5 with weights 0.503 0.497"),
        "{text}"
    );
    assert!(
        text.contains("selected:  experts 5 0 with weights 0.531 0.469"),
        "{text}"
    );
    assert!(
        text.contains("first rejected expert 2 (8.881), gap 0.018"),
        "{text}"
    );
    assert!(
        text.contains("selected:  experts 0 2 with weights"),
        "{text}"
    );
    insta::assert_snapshot!("ch01_example", text);
}

#[test]
fn routes_a_readers_file_and_writes_the_result() {
    let r = regime("spec_decode_6rows").unwrap();
    let dir = std::env::temp_dir().join(format!("ch01-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.safetensors");
    let output = dir.join("out.safetensors");
    let cpu = candle_core::Device::Cpu;
    let logits =
        candle_core::Tensor::from_slice(&r.logits_f32(), (r.rows, r.experts), &cpu).unwrap();
    let bias = candle_core::Tensor::from_slice(r.bias.as_ref().unwrap(), r.experts, &cpu).unwrap();
    candle_core::safetensors::save(
        &[("logits", logits), ("bias", bias)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        &input,
    )
    .unwrap();
    let text = run_to_string(&[
        "ch01",
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--k",
        "8",
    ]);
    assert!(text.contains("6 rows of 96 logits, with a bias"), "{text}");
    let back = candle_core::safetensors::load(&output, &cpu).unwrap();
    let ids: Vec<Vec<i32>> = back["ids"].to_vec2().unwrap();
    let weights: Vec<Vec<f32>> = back["weights"].to_vec2().unwrap();
    let oracle = LiteralRouter {
        config: ch01_router::RouterConfig::glm5(8),
    }
    .route_rows(&r.logits_f32(), r.rows, r.experts, r.bias.as_deref())
    .unwrap();
    for (row, d) in oracle.iter().enumerate() {
        assert_eq!(
            ids[row].iter().map(|&i| i as u32).collect::<Vec<_>>(),
            d.ids,
            "row {row}"
        );
        for (a, b) in weights[row].iter().zip(&d.weights) {
            assert!((*a as f64 - b).abs() < 2e-6, "row {row}: {a} vs {b}");
        }
    }
    // --bias-bf16 counts the rows that change experts (independently: route both ways here).
    let text = run_to_string(&[
        "ch01",
        "--input",
        input.to_str().unwrap(),
        "--k",
        "8",
        "--bias-bf16",
    ]);
    let b16: Vec<f32> = r
        .bias
        .as_ref()
        .unwrap()
        .iter()
        .map(|&b| half::bf16::from_f32(b).to_f32())
        .collect();
    let lit = LiteralRouter {
        config: ch01_router::RouterConfig::glm5(8),
    };
    let a = lit
        .route_rows(&r.logits_f32(), r.rows, r.experts, r.bias.as_deref())
        .unwrap();
    let b = lit
        .route_rows(&r.logits_f32(), r.rows, r.experts, Some(&b16))
        .unwrap();
    let set = |d: &ch01_router::RowDetail| {
        let mut v = d.ids.clone();
        v.sort_unstable();
        v
    };
    let changed = a.iter().zip(&b).filter(|(x, y)| set(x) != set(y)).count();
    let verb = if changed == 1 { "selects" } else { "select" };
    assert!(
        text.contains(&format!("{changed} of 6 rows {verb} a different set")),
        "{changed}: {text}"
    );
    // Non-finite logits are routed by chapter 1's rule (they rank last), and the run says so on
    // stderr with the counts; a finite file gets no note.
    let (_, notes) = run_with_notes(&["ch01", "--input", input.to_str().unwrap()]);
    assert_eq!(notes, "");
    let mut bad = r.logits_f32();
    let e = r.experts;
    bad[e + 3] = f32::NAN;
    bad[e + 5] = f32::INFINITY;
    bad[4 * e] = f32::NEG_INFINITY;
    let nan_input = dir.join("nan.safetensors");
    let t = candle_core::Tensor::from_slice(&bad, (r.rows, e), &cpu).unwrap();
    candle_core::safetensors::save(
        &[("logits".to_string(), t)].into_iter().collect(),
        &nan_input,
    )
    .unwrap();
    let (text, notes) = run_with_notes(&["ch01", "--input", nan_input.to_str().unwrap()]);
    assert_eq!(
        notes,
        "note: 3 of the 576 logits, in 2 of the 6 rows, are NaN or infinite: each scores 0 and \
         ranks last, after every finite logit (chapter 1's rule for non-finite logits)\n"
    );
    let row1 = text.lines().find(|l| l.starts_with("  row 1:")).unwrap();
    assert!(!row1.contains(" 3 ") && !row1.contains(" 5 "), "{row1}");
    // A bad k, a bad scale: typed errors that name the problem.
    let inp = input.to_str().unwrap();
    let err = try_run(&["ch01", "--input", inp, "--k", "0"]).unwrap_err();
    assert!(err.contains("k = 0"), "{err}");
    // The message names the option (it once said only "the routed scaling factor"), and `-inf`
    // is read as a value (it was once taken for an option `-i`).
    for bad in ["nan", "inf", "-inf", "-1", "0", "-0"] {
        let err = try_run(&["ch01", "--input", inp, "--scale", bad]).unwrap_err();
        assert!(
            err.contains(&format!("invalid value '{bad}' for '--scale <SCALE>'"))
                && err.contains("the routed scaling factor must be a finite number above 0"),
            "--scale {bad}: {err}"
        );
    }
    // A number past f32's range is refused as such, not as the infinity it parses to.
    let err = try_run(&["ch01", "--input", inp, "--scale", "1e40"]).unwrap_err();
    assert!(
        err.contains("1e40 is past the largest f32 (3.4028235e38)"),
        "--scale 1e40: {err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn router_options_without_an_input_are_refused() {
    // The tour routes fixed regimes: an option that would change nothing is an error, not ignored.
    for argv in [
        &["ch01", "--k", "4"][..],
        &["ch01", "--scale", "2"],
        &["ch01", "--scoring", "softmax"],
        &["ch01", "--bias-bf16"],
        &["ch01", "--output", "out.safetensors"],
    ] {
        let err = Args::try_parse_from(argv).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{argv:?}"
        );
        assert!(err.to_string().contains("--input"), "{argv:?}: {err}");
    }
    // Defaults alone do not count as given.
    assert!(Args::try_parse_from(["ch01"])
        .unwrap()
        .file_options()
        .is_none());
    // --help says which options need --input: every one of them, under their own heading.
    let help = Args::try_parse_from(["ch01", "--help"])
        .unwrap_err()
        .to_string();
    assert!(
        help.contains("a NaN or infinite logit in the file scores 0 and ranks last"),
        "{help}"
    );
    let heading = help.find(cli::INPUT_OPTIONS).expect(&help);
    for option in [
        "--output",
        "--k",
        "--scoring",
        "--no-renormalize",
        "--groups",
        "--scale",
        "--bias-bf16",
        "--show",
    ] {
        assert!(help[heading..].contains(option), "{option}: {help}");
    }
}

#[test]
fn a_file_that_is_not_safetensors_says_so() {
    let dir = std::env::temp_dir().join(format!("ch01-example-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notes.txt");
    std::fs::write(&path, "these are notes, not tensors").unwrap();
    let err = try_run(&["ch01", "--input", path.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("notes.txt is not a safetensors file"), "{err}");
    // --bias-bf16 on a file without a bias is an error, not an option silently ignored.
    let plain = dir.join("no_bias.safetensors");
    let t = candle_core::Tensor::zeros((2, 16), candle_core::DType::F32, &candle_core::Device::Cpu)
        .unwrap();
    candle_core::safetensors::save(&[("logits".to_string(), t)].into_iter().collect(), &plain)
        .unwrap();
    let err = try_run(&["ch01", "--input", plain.to_str().unwrap(), "--bias-bf16"]).unwrap_err();
    assert!(
        err.contains("--bias-bf16") && err.contains("has no `bias` to round"),
        "{err}"
    );
    // A tensor it does not read (a bias under another name) is refused, not ignored; a file cut
    // short names the file.
    let extra = dir.join("extra.safetensors");
    let m = |n: usize| {
        candle_core::Tensor::zeros(n, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap()
    };
    let t2 =
        candle_core::Tensor::zeros((2, 16), candle_core::DType::F32, &candle_core::Device::Cpu)
            .unwrap();
    let tensors = [("logits".to_string(), t2), ("gate_bias".to_string(), m(16))];
    candle_core::safetensors::save(&tensors.into_iter().collect(), &extra).unwrap();
    let err = try_run(&["ch01", "--input", extra.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("unexpected tensors [\"gate_bias\"]"), "{err}");
    // A file this example wrote with --output beside its logits routes again.
    let routed = dir.join("routed.safetensors");
    let t2 =
        candle_core::Tensor::zeros((2, 16), candle_core::DType::F32, &candle_core::Device::Cpu)
            .unwrap();
    let tensors = [
        ("logits".to_string(), t2),
        ("ids".to_string(), m(16)),
        ("weights".to_string(), m(16)),
    ];
    candle_core::safetensors::save(&tensors.into_iter().collect(), &routed).unwrap();
    try_run(&["ch01", "--input", routed.to_str().unwrap(), "--k", "4"]).unwrap();
    let bytes = std::fs::read(&plain).unwrap();
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 8]).unwrap();
    let err = try_run(&["ch01", "--input", cut.to_str().unwrap()]).unwrap_err();
    assert!(
        err.contains("cut.safetensors is not a safetensors file"),
        "{err}"
    );
    // Negative counts reach the value parser: its message names the option.
    for (opt, v) in [("--k", "-1"), ("--show", "-1"), ("--groups", "-4:2")] {
        let err = try_run(&["ch01", "--input", plain.to_str().unwrap(), opt, v]).unwrap_err();
        assert!(
            err.contains(v) && !err.contains("unexpected argument"),
            "{opt} {v}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `--output` naming the `--input` file is refused before any work, as a user sees it (it once
/// overwrote the logits with the routing, exit 0); through a `./` or a symbolic link too.
#[test]
fn an_output_that_is_the_input_is_refused() {
    let dir = std::env::temp_dir().join(format!("ch01-example-same-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.safetensors");
    moe_kernels::safetensors::SafetensorsWriter::new()
        .f32(
            "logits",
            &[2, 4],
            &[0.5, 1.0, -1.0, 2.0, 0.0, 0.25, 3.0, -2.0],
        )
        .write(&input)
        .unwrap();
    let before = std::fs::read(&input).unwrap();
    let link = dir.join("link.safetensors");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let dotted = dir.join(".").join("in.safetensors");
    let inp = input.to_str().unwrap();
    for out in [inp, dotted.to_str().unwrap(), link.to_str().unwrap()] {
        let ran =
            example_bin::run_example("ch01", &["--input", inp, "--output", out, "--k", "2"], &[]);
        ran.assert_refused(&[
            &format!("--output {out}: is the file the run reads"),
            "overwrite",
        ]);
        assert_eq!(ran.code, Some(1), "{ran:#?}");
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input was written"
    );
    // Another name is written as before.
    let other = dir.join("out.safetensors");
    let ran = example_bin::run_example(
        "ch01",
        &[
            "--input",
            inp,
            "--output",
            other.to_str().unwrap(),
            "--k",
            "2",
        ],
        &[],
    );
    assert_eq!(ran.code, Some(0), "{ran:#?}");
    assert!(other.is_file());
    std::fs::remove_dir_all(&dir).ok();
}
