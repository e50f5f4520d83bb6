//! `tools/plot ch01`: draws chapter 1's router timings from its benchmark CSV into an SVG for the
//! book, and prints the Markdown table the chapter quotes.
//!
//! Exit codes: 0 done, 1 a bad or missing CSV (or an unwritable figure), 2 usage error.

use clap::Parser;
use moe_tools::{plot, repo_root, user_path};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "plot",
    about = "Turn a chapter's benchmark CSV into an SVG figure and a Markdown table."
)]
struct Cli {
    /// The chapter to plot; only `ch01` has a figure so far.
    #[arg(value_parser = ["ch01"])]
    chapter: String,
    /// The measurements [default: bench/results/h200/<chapter>.csv].
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Where to write the figure [default: book/src/figures/ch01-router.svg].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where to write the Markdown table the chapter includes
    /// [default: book/src/figures/ch01-router-table.md].
    #[arg(long)]
    table: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = repo_root();
    let csv = cli
        .csv
        .map(|p| user_path(&p))
        .unwrap_or_else(|| root.join(format!("bench/results/h200/{}.csv", cli.chapter)));
    let out = cli
        .out
        .map(|p| user_path(&p))
        .unwrap_or_else(|| root.join("book/src/figures/ch01-router.svg"));
    let table = cli
        .table
        .map(|p| user_path(&p))
        .unwrap_or_else(|| root.join("book/src/figures/ch01-router-table.md"));
    match run(&csv, &out, &table) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plot: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(csv: &PathBuf, out: &PathBuf, table: &PathBuf) -> Result<(), String> {
    let text =
        std::fs::read_to_string(csv).map_err(|e| format!("cannot read {}: {e}", csv.display()))?;
    let rows = plot::parse_csv(&text, &csv.display().to_string())?;
    let svg = plot::render_svg(&rows);
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(out, svg).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    let md = plot::markdown_table(&rows);
    std::fs::write(table, &md).map_err(|e| format!("cannot write {}: {e}", table.display()))?;
    print!("{md}");
    eprintln!(
        "plot: wrote {} ({} shapes × {} impls, {} measurements from {})",
        out.display(),
        plot::shapes(&rows).len(),
        plot::impls(&rows).len(),
        rows.len(),
        csv.display()
    );
    Ok(())
}
