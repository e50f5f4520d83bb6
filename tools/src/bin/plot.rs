//! `tools/plot`: generates the book's figures, tables and quoted numbers from what is committed
//! (the CSVs under `bench/results/`, an example's snapshot, the tree of files) into
//! `book/src/figures/`, or with `--out-dir` into another folder; with `--check`, writes nothing
//! and fails when a committed file differs from what it would write.
//!
//! Exit codes: 0 done (or up to date), 1 a bad or missing input or a stale file, 2 usage error.

use clap::Parser;
use moe_tools::figures::{self, GROUPS};
use moe_tools::{repo_root, user_path};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "plot",
    about = "Generate the book's figures, tables and quoted numbers from the committed CSVs."
)]
struct Cli {
    /// Which pages' files: `ch01`, `runtime` [default: all].
    #[arg(value_parser = GROUPS)]
    groups: Vec<String>,
    /// Write under this folder instead of the repository (paths inside stay book/src/figures/…).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Write nothing; fail when a committed file differs from its regeneration.
    #[arg(long, conflicts_with = "out_dir")]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = repo_root();
    let groups: Vec<&str> = if cli.groups.is_empty() {
        GROUPS.to_vec()
    } else {
        cli.groups.iter().map(String::as_str).collect()
    };
    let mut files = Vec::new();
    for g in &groups {
        match figures::generate(&root, g) {
            Ok(f) => files.extend(f),
            Err(e) => {
                eprintln!("plot: error: {e}");
                return ExitCode::from(1);
            }
        }
    }
    if cli.check {
        let stale = figures::stale(&root, &files);
        for (path, diff) in &stale {
            eprintln!("plot: {path} differs from its regeneration:\n{diff}");
        }
        if stale.is_empty() {
            println!("plot: {} generated files up to date", files.len());
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "plot: {} of {} generated files are stale; run tools/plot",
            stale.len(),
            files.len()
        );
        return ExitCode::from(1);
    }
    let dir = cli
        .out_dir
        .map(|d| user_path(&d))
        .unwrap_or_else(|| root.clone());
    match figures::write_all(&dir, &files) {
        Ok(written) => {
            for p in &written {
                println!(
                    "plot: wrote {}",
                    p.strip_prefix(&root).unwrap_or(p).display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("plot: error: {e}");
            ExitCode::from(1)
        }
    }
}
