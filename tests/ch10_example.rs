//! Chapter 10's example, as the book shows it: its stdout is a snapshot (CPU only, the same on
//! every run), with its counts checked by value first.

#[path = "support/example_bin.rs"]
mod example_bin;

use ch10_precision::example::{run, EXAMPLE_ROWS};
use example_bin::{assert_no_options, run_example};

#[test]
fn example_stdout() {
    let mut out = Vec::new();
    run(&mut out).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("Chapter 10: precision"), "{text}");
    // GLM-5.3-Flash's range keeps 7 bf16 values at 288 experts, as the article's Figure 4.
    assert!(
        text.contains(
            "GLM-like     GLM-5.3-Flash's bias range  [11.54, 11.96], 288 experts: 7 in bf16"
        ),
        "{text}"
    );
    // One line per shape and bias, each count at most the rows; fp32 (both orders) flips no row
    // of these, a bf16 bias over GLM's range flips more than half of them.
    let rows: Vec<Vec<String>> = text
        .lines()
        .filter(|l| l.starts_with("  ") && l.split_whitespace().count() >= 5)
        .filter(|l| l.contains("glm53") || l.contains("kimi_k3") || l.contains("none"))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 5, "{text}");
    for r in &rows {
        let n = r.len();
        let counts = &r[n - 5..];
        assert_eq!(
            (counts[0].as_str(), counts[1].as_str()),
            ("0", "0"),
            "{r:?}"
        );
        if r.contains(&"glm53".to_string()) {
            let b: usize = counts[3].parse().unwrap();
            assert!(b * 2 > EXAMPLE_ROWS, "{r:?}");
        }
    }
    insta::assert_snapshot!("ch10_example", text);
}

/// ch10 takes no options: `--help` says what it is instead of running, and any argument is
/// clap's usage error with status 2 (it once ignored its arguments, ran the whole tour and
/// exited 0 on `--bogus`).
#[test]
fn ch10_refuses_arguments_and_has_a_help() {
    assert_no_options(
        "ch10",
        "Chapter 10: precision",
        "Synthetic biases",
        &[&["--bogus"], &["stray"], &["--tokens", "5"]],
    );
}

/// The tour has no device code: MOE_BACKEND, which picks the device of every other example,
/// changes nothing here, and the example says so instead of ignoring it silently.
#[test]
fn ch10_says_that_moe_backend_changes_nothing() {
    let ran = run_example("ch10", &[], &[("MOE_BACKEND", "cuda")]);
    assert_eq!(ran.code, Some(0), "{ran:#?}");
    assert!(
        ran.stderr
            .contains("chapter 10's tour runs on the CPU whatever MOE_BACKEND says"),
        "{ran:#?}"
    );
    assert!(ran.stdout.starts_with("Chapter 10: precision"), "{ran:#?}");
    let ran = run_example("ch10", &[], &[("MOE_BACKEND", "")]);
    assert_eq!(ran.code, Some(0), "{ran:#?}");
    assert!(!ran.stderr.contains("MOE_BACKEND"), "{ran:#?}");
}
