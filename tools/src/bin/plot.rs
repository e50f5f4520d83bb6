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
    // The per-kernel breakdown, when tools/bench wrote one beside the CSV.
    let steps_csv = csv.with_file_name("ch01_steps.csv");
    if steps_csv.is_file() {
        let text = std::fs::read_to_string(&steps_csv)
            .map_err(|e| format!("cannot read {}: {e}", steps_csv.display()))?;
        let md = steps_table(&text, &steps_csv.display().to_string())?;
        let path = table.with_file_name("ch01-router-steps.md");
        std::fs::write(&path, &md).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("plot: wrote {}", path.display());
    }
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

/// The chain's per-kernel breakdown as Markdown: for each shape, one line per kernel and one
/// column per row count, each cell `cold / warm` µs (the difference between the timings of the
/// chain stopped after this kernel and after the one before), and the whole chain last.
fn steps_table(text: &str, name: &str) -> Result<String, String> {
    use std::fmt::Write as _;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or(format!("{name}: empty"))?
        .split(',')
        .collect();
    let col = |c: &str| {
        header
            .iter()
            .position(|h| *h == c)
            .ok_or(format!("{name}: no column {c}"))
    };
    let (shape_c, rows_c, step_c, kernel_c) =
        (col("shape")?, col("rows")?, col("step")?, col("kernel")?);
    let (cold_c, warm_c, pc_c, pw_c) = (
        col("cold_us")?,
        col("warm_us")?,
        col("prefix_cold_us")?,
        col("prefix_warm_us")?,
    );
    let mut recs: Vec<Vec<String>> = Vec::new();
    for (i, l) in lines.enumerate() {
        let f: Vec<String> = l.split(',').map(|s| s.trim().to_string()).collect();
        if f.len() != header.len() {
            return Err(format!(
                "{name}:{}: expected {} fields, found {}",
                i + 2,
                header.len(),
                f.len()
            ));
        }
        recs.push(f);
    }
    let mut shapes: Vec<String> = Vec::new();
    for r in &recs {
        if !shapes.contains(&r[shape_c]) {
            shapes.push(r[shape_c].clone());
        }
    }
    let mut out = String::new();
    for shape in &shapes {
        let of_shape: Vec<&Vec<String>> = recs.iter().filter(|r| &r[shape_c] == shape).collect();
        let mut rows: Vec<u64> = of_shape
            .iter()
            .filter_map(|r| r[rows_c].parse().ok())
            .collect();
        rows.sort_unstable();
        rows.dedup();
        let mut kernels: Vec<(u32, String)> = of_shape
            .iter()
            .filter_map(|r| Some((r[step_c].parse().ok()?, r[kernel_c].clone())))
            .collect();
        kernels.sort();
        kernels.dedup();
        let _ = writeln!(out, "**{shape}** — µs per kernel, cold / warm\n");
        let _ = writeln!(
            out,
            "| kernel | {} |",
            rows.iter()
                .map(|r| format!("{r} rows"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(out, "|---|{}", "---:|".repeat(rows.len()));
        let num = |v: &str| {
            v.parse::<f64>()
                .map(|x| format!("{x:.2}"))
                .unwrap_or_else(|_| v.to_string())
        };
        let cell = |step: u32, kernel: Option<&str>, rows_v: u64, c: usize, w: usize| -> String {
            of_shape
                .iter()
                .find(|r| {
                    r[step_c].parse::<u32>().ok() == Some(step)
                        && r[rows_c].parse::<u64>().ok() == Some(rows_v)
                        && kernel.is_none_or(|k| r[kernel_c] == k)
                })
                .map(|r| format!("{} / {}", num(&r[c]), num(&r[w])))
                .unwrap_or_default()
        };
        for (step, kernel) in &kernels {
            let cells: Vec<String> = rows
                .iter()
                .map(|&n| cell(*step, Some(kernel), n, cold_c, warm_c))
                .collect();
            let _ = writeln!(out, "| {step}. `{kernel}` | {} |", cells.join(" | "));
        }
        let last = kernels.last().map(|k| k.0).unwrap_or(0);
        let cells: Vec<String> = rows
            .iter()
            .map(|&n| {
                // The last step of this row count (the chain may differ in length by shape only).
                let last_here = of_shape
                    .iter()
                    .filter(|r| r[rows_c].parse::<u64>().ok() == Some(n))
                    .filter_map(|r| r[step_c].parse::<u32>().ok())
                    .max()
                    .unwrap_or(last);
                cell(last_here, None, n, pc_c, pw_c)
            })
            .collect();
        let _ = writeln!(out, "| the whole chain | {} |\n", cells.join(" | "));
    }
    Ok(out)
}
