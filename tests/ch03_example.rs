//! Chapter 3's example, as the book shows it: its stdout is a snapshot (the same on the GPU and on
//! the emulator: integers and launch counts only), `--input` aligns a reader's own ids and
//! `--output` writes the three buffers; the command line refuses what it cannot use, each with a
//! typed error.

#[path = "../examples/ch03/cli.rs"]
mod cli;

use ch03_align::example::{run, ExampleError};
use ch03_align::layout::choose_block_m;
use ch03_align::literal::align_literal;
use ch03_align::AlignError;
use clap::Parser;
use cli::Args;
use moe_kernels::testing::device;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn try_run(argv: &[&str]) -> Result<String, ExampleError> {
    let args = Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let mut out = Vec::new();
    run(args.input_options().as_ref(), device(), &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn example_stdout() {
    let text = try_run(&["ch03"]).unwrap_or_else(|e| panic!("{e}"));
    // The first line names the chapter, as every example's does.
    assert!(
        text.starts_with("Chapter 3: sorting pairs by expert (moe_align_block_size)\n\n"),
        "{text}"
    );
    // The worked example's layout, checked here by value before the snapshot freezes the text.
    for line in [
        "tile   0 expert   0 | 3 · · · |",
        "tile   1 expert   2 | 0 5 8 · |",
        "tile   2 expert   5 | 1 2 4 7 |",
        "tile   3 expert   5 | 9 · · · |",
        "tile   4 expert   7 | 6 · · · |",
        "expert_ids (tile → expert): 0 2 5 5 7",
        "literal sort = CPU reference = kernel (1 launch: align_one_block): same bits",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    // One line per regime, every one the same bits.
    let regimes = text.lines().filter(|l| l.ends_with("same bits")).count();
    assert_eq!(regimes, 1 + ch03_align::regimes::REGIMES.len(), "{text}");
    insta::assert_snapshot!("ch03_example", text);
}

/// A fresh folder under the system's temporary folder, for one test.
fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ch03-example-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn save(path: &Path, name: &str, t: candle_core::Tensor) {
    candle_core::safetensors::save(&HashMap::from([(name, t)]), path).unwrap();
}

fn save_ids(path: &Path, name: &str, ids: &[i32], shape: &[usize]) {
    let t = candle_core::Tensor::from_slice(ids, shape, &candle_core::Device::Cpu).unwrap();
    save(path, name, t);
}

fn read_i32(path: &Path) -> HashMap<String, (Vec<usize>, Vec<i32>)> {
    candle_core::safetensors::load(path, &candle_core::Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, t)| {
            let v = t.flatten_all().unwrap().to_vec1::<i32>().unwrap();
            (k, (t.dims().to_vec(), v))
        })
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn aligns_a_readers_file_and_writes_the_three_buffers() {
    let dir = temp_dir("round-trip");
    let (input, output) = (dir.join("ids.safetensors"), dir.join("out.safetensors"));
    let r = ch03_align::regimes::regime("spec_decode_6rows").unwrap();
    let ids: Vec<i32> = r.ids.iter().map(|&e| e as i32).collect();
    save_ids(&input, "topk_ids", &ids, &[r.tokens, r.k]);
    let experts = r.experts.to_string();
    let text = try_run(&[
        "ch03",
        "--input",
        s(&input),
        "--experts",
        &experts,
        "--output",
        s(&output),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    // Without --block-m, the chapter's rule picks the tile.
    let bm = choose_block_m(ids.len(), r.experts);
    assert!(
        text.contains(&format!(
            "`topk_ids` [6, 8] i32, 48 pairs over 288 experts; BLOCK_M {bm} (the chapter's rule)"
        )),
        "{text}"
    );
    assert!(
        text.contains("checked: the same bits as the literal sort"),
        "{text}"
    );
    let want = align_literal(&r.ids, r.experts, bm);
    let got = read_i32(&output);
    assert_eq!(
        got["sorted_ids"],
        (vec![want.sorted_ids.len()], want.sorted_ids.clone())
    );
    assert_eq!(
        got["expert_ids"],
        (vec![want.expert_ids.len()], want.expert_ids.clone())
    );
    assert_eq!(
        got["num_tokens_post_padded"],
        (vec![1], vec![want.num_tokens_post_padded])
    );
    // --block-m chooses the tile; chapter 1's output (`ids`) is read as well.
    save_ids(&input, "ids", &ids, &[r.tokens, r.k]);
    let text = try_run(&[
        "ch03",
        "--input",
        s(&input),
        "--experts",
        &experts,
        "--block-m",
        "64",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.contains("`ids` [6, 8] i32") && text.contains("BLOCK_M 64 (--block-m)"),
        "{text}"
    );
    // No tokens: empty buffers, nothing launched.
    save_ids(&input, "topk_ids", &[], &[0, 8]);
    let text = try_run(&[
        "ch03",
        "--input",
        s(&input),
        "--experts",
        "8",
        "--output",
        s(&output),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.contains(
            "0 slots in 0 tiles: 0 padding (0.0% of the slots); the kernel took 0 launches"
        ),
        "{text}"
    );
    let got = read_i32(&output);
    assert_eq!(got["sorted_ids"], (vec![0], vec![]));
    assert_eq!(got["num_tokens_post_padded"], (vec![1], vec![0]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_bad_input_is_a_typed_error() {
    let dir = temp_dir("bad");
    let path = dir.join("ids.safetensors");
    let p = || path.clone();
    let run_with = |experts: &str, extra: &[&str]| {
        let mut argv = vec!["ch03", "--input", s(&path), "--experts", experts];
        argv.extend_from_slice(extra);
        try_run(&argv).unwrap_err()
    };
    // Ids out of range, above and below, named by token and slot.
    save_ids(&path, "topk_ids", &[1, 2, 3, 8], &[2, 2]);
    assert_eq!(
        run_with("8", &[]),
        ExampleError::IdOutOfRange {
            path: p(),
            token: 1,
            slot: 1,
            id: 8,
            experts: 8
        }
    );
    save_ids(&path, "topk_ids", &[1, -1, 3, 4], &[2, 2]);
    let err = run_with("8", &[]);
    assert_eq!(
        err,
        ExampleError::IdOutOfRange {
            path: p(),
            token: 0,
            slot: 1,
            id: -1,
            experts: 8
        }
    );
    assert!(
        err.to_string()
            .ends_with("topk_ids[0, 1] is -1, outside 0..8 (--experts 8)"),
        "{err}"
    );
    // BLOCK_M not a power of two, no experts, more experts than the kernel takes.
    save_ids(&path, "topk_ids", &[1, 2, 3, 4], &[2, 2]);
    assert_eq!(
        run_with("8", &["--block-m", "24"]),
        ExampleError::Align(AlignError::BlockM { value: 24 })
    );
    assert_eq!(
        run_with("0", &[]),
        ExampleError::Align(AlignError::NoExperts)
    );
    assert!(matches!(
        run_with("100000", &[]),
        ExampleError::Align(AlignError::Limit {
            what: "experts",
            ..
        })
    ));
    // An expert count no i32 id can reach (once wrapped to a negative i64, and every id was
    // "outside 0..E"): the same limit, with the count as given.
    for e in ["9223372036854775808", "18446744073709551615", "2147483648"] {
        let err = run_with(e, &[]);
        assert_eq!(
            err.to_string(),
            format!("experts is {e}, more than the kernels support (2147483647)"),
            "--experts {e}"
        );
    }
    // Wrong dtype, wrong rank, no such tensor.
    let cpu = candle_core::Device::Cpu;
    for dtype in [
        candle_core::DType::I64,
        candle_core::DType::F32,
        candle_core::DType::U32,
    ] {
        save(
            &path,
            "topk_ids",
            candle_core::Tensor::zeros((2, 2), dtype, &cpu).unwrap(),
        );
        let found = format!("{dtype:?}").to_uppercase();
        assert_eq!(
            run_with("8", &[]),
            ExampleError::Dtype {
                path: p(),
                tensor: "topk_ids".into(),
                found
            },
            "{dtype:?}"
        );
    }
    save_ids(&path, "topk_ids", &[1, 2, 3, 4], &[4]);
    assert_eq!(
        run_with("8", &[]),
        ExampleError::Rank {
            path: p(),
            tensor: "topk_ids".into(),
            shape: vec![4]
        }
    );
    save_ids(&path, "topk_ids", &[1, 2, 3, 4], &[2, 2, 1]);
    assert!(matches!(run_with("8", &[]), ExampleError::Rank { .. }));
    save_ids(&path, "weights", &[1, 2], &[1, 2]);
    assert_eq!(
        run_with("8", &[]),
        ExampleError::MissingTensor {
            path: p(),
            found: vec!["weights".into()]
        }
    );
    // Not a safetensors file, no file, an output folder that does not exist.
    std::fs::write(&path, "T, k\n1, 2\n").unwrap();
    assert!(matches!(
        run_with("8", &[]),
        ExampleError::NotSafetensors { .. }
    ));
    let none = dir.join("none.safetensors");
    let err = try_run(&["ch03", "--input", s(&none), "--experts", "8"]).unwrap_err();
    assert!(
        matches!(&err, ExampleError::Io { path, .. } if *path == none),
        "{err}"
    );
    let err = run_with("8", &["--output", "/nonexistent-folder/out.safetensors"]);
    assert_eq!(
        err.to_string(),
        "/nonexistent-folder/out.safetensors: its folder does not exist"
    );
    // A file with both `topk_ids` and `ids` is ambiguous (it once aligned `topk_ids` and said
    // nothing of `ids`).
    save(
        &path,
        "topk_ids",
        candle_core::Tensor::new(&[[1i32, 2], [3, 4]], &cpu).unwrap(),
    );
    let mut both = candle_core::safetensors::load(&path, &cpu).unwrap();
    both.insert(
        "ids".into(),
        candle_core::Tensor::new(&[[0i32, 0], [0, 0]], &cpu).unwrap(),
    );
    candle_core::safetensors::save(&both, &path).unwrap();
    assert_eq!(
        run_with("8", &[]).to_string(),
        format!(
            "{}: holds both `topk_ids` and `ids`: keep the one to align (it reads either)",
            path.display()
        )
    );
    // --output naming the --input file is refused before any work (it once overwrote the ids
    // with the three buffers, exit 0).
    let before = std::fs::read(&path).unwrap();
    save_ids(&path, "topk_ids", &[1, 2, 3, 4], &[2, 2]);
    let before_ids = std::fs::read(&path).unwrap();
    assert_ne!(before, before_ids);
    let err = run_with("8", &["--output", s(&path)]).to_string();
    assert!(
        err.contains("is the file the run reads") && err.contains("overwrite"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before_ids);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn options_without_input_are_refused() {
    for argv in [
        &["ch03", "--experts", "8"][..],
        &["ch03", "--block-m", "16"],
        &["ch03", "--output", "out.safetensors"],
        &["ch03", "--input", "ids.safetensors"],
    ] {
        let err = Args::try_parse_from(argv).unwrap_err();
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{argv:?}: {err}"
        );
    }
    // A negative count or tile is a bad value of its option, named as such (clap once took `-3`
    // for an unknown option `-3`, and `-16` for `-1`).
    for (option, value) in [("--experts", "-3"), ("--block-m", "-16")] {
        let mut argv = vec!["ch03", "--input", "x", "--experts", "8"];
        if option == "--experts" {
            argv.truncate(3);
        }
        argv.extend([option, value]);
        let err = Args::try_parse_from(&argv).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
        assert!(
            err.to_string()
                .contains(&format!("invalid value '{value}' for '{option} <")),
            "{err}"
        );
    }
    assert!(Args::try_parse_from(["ch03"])
        .unwrap()
        .input_options()
        .is_none());
    // --help says which options need --input, and that --input needs --experts.
    let help = Args::try_parse_from(["ch03", "--help"])
        .unwrap_err()
        .to_string();
    let heading = help.find(cli::INPUT_OPTIONS).expect(&help);
    for option in ["--experts", "--block-m", "--output"] {
        assert!(help[heading..].contains(option), "{option}: {help}");
    }
    assert!(help.contains("Needs --experts"), "{help}");
}
