//! `tools/bookcheck`: builds the book into a temporary directory, checks its internal links and
//! anchors and the sources' `{{#include …}}` links (`links`), and renders every chapter page to
//! a PNG with headless Chromium (`shots`) so that a person can look at the book as a reader sees
//! it. With no subcommand: both.
//!
//! Exit codes: 0 all good, 1 problems found, 2 usage error, 3 a required program (mdbook,
//! Chromium) is missing, so that a caller can report "skipped" rather than "passed".

use clap::{Args, Parser, Subcommand};
use moe_tools::bookcheck::links::Site;
use moe_tools::bookcheck::shots::{self, Chromium};
use moe_tools::bookcheck::{build_book, find_mdbook, program_version, Error, TempDir};
use moe_tools::{includes, repo_root, user_path};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "bookcheck",
    about = "Build the book, check its internal links and anchors, and render every page to a PNG.",
    after_help = "Exit codes: 0 all good, 1 problems found, 2 usage error, 3 mdbook or Chromium missing."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    opts: Options,
}

#[derive(Subcommand)]
enum Cmd {
    /// Fail on any internal link to a missing file or to a missing `#anchor`, and on any
    /// `{{#include …}}` that would render nothing (a missing file, anchor or line range).
    Links,
    /// Render every chapter page to `DIR/<page>.png` with headless Chromium, the whole page.
    Shots,
}

#[derive(Args)]
struct Options {
    /// The mdbook to check [default: book/ in the repository].
    #[arg(long, value_name = "DIR", global = true)]
    book: Option<PathBuf>,
    /// Where the PNGs go [default: target/book-shots/ in the repository].
    #[arg(long, value_name = "DIR", global = true)]
    out: Option<PathBuf>,
    /// Window width in CSS pixels (mdbook shows the sidebar from 1080 up).
    #[arg(long, default_value_t = 1280, value_parser = clap::value_parser!(u32).range(320..=4000), global = true)]
    width: u32,
    /// The tallest PNG; a longer page is cut there (and says so).
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u32).range(100..=100_000), global = true)]
    max_height: u32,
    /// Seconds one Chromium run may take before it is killed.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(5..=3600), global = true)]
    timeout: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse(); // exits with 2 on a usage error
    let root = repo_root();
    let start = Instant::now();
    let result = run(&root, cli.cmd, &cli.opts);
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bookcheck: {e}");
            if let Error::Missing { .. } = e {
                eprintln!("bookcheck: skipped ({})", secs(start.elapsed()));
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(root: &Path, cmd: Option<Cmd>, args: &Options) -> Result<bool, Error> {
    // mdbook first, as every mode needs it. `shots` looks for Chromium before building; the
    // default mode only after the link check, so that the links are checked without it.
    let mdbook = find_mdbook()?;
    let tmp = TempDir::new("bookcheck")?;
    let site_dir = tmp.path().join("book");
    let book = args
        .book
        .as_deref()
        .map(user_path)
        .unwrap_or_else(|| root.join("book"));
    let book = book.as_path();
    match cmd {
        Some(Cmd::Links) => {
            build(&mdbook, book, &site_dir)?;
            links(book, &site_dir)
        }
        Some(Cmd::Shots) => {
            let chromium = shots::find_chromium()?;
            build(&mdbook, book, &site_dir)?;
            shoot(root, &site_dir, &chromium, tmp.path(), args)
        }
        None => {
            build(&mdbook, book, &site_dir)?;
            let links_ok = links(book, &site_dir)?;
            let shots_ok = match shots::find_chromium() {
                Ok(chromium) => shoot(root, &site_dir, &chromium, tmp.path(), args)?,
                // Broken links outrank a skipped step: exit 1, not 3.
                Err(e @ Error::Missing { .. }) if !links_ok => {
                    eprintln!("bookcheck: shots skipped: {e}");
                    true
                }
                Err(e) => return Err(e),
            };
            Ok(links_ok && shots_ok)
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn shown(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// `mdbook build BOOK --dest-dir DEST`, with mdbook's warnings passed on.
fn build(mdbook: &Path, book: &Path, dest: &Path) -> Result<(), Error> {
    let t = Instant::now();
    let warnings = build_book(mdbook, book, dest)?;
    let version = program_version(mdbook).unwrap_or_else(|| "mdbook".to_string());
    eprintln!(
        "bookcheck: built the book with {version} into {} [{}]",
        dest.display(),
        secs(t.elapsed())
    );
    for w in warnings {
        eprintln!("bookcheck: mdbook said: {}", w.trim());
    }
    Ok(())
}

fn links(book: &Path, site_dir: &Path) -> Result<bool, Error> {
    let t = Instant::now();
    let site = Site::from_dir(site_dir)?;
    let (links, stats) = site.check();
    let mut problems: Vec<String> = links.iter().map(|p| p.to_string()).collect();
    // mdbook renders an include whose anchor or lines are missing as nothing, without a word:
    // the built site cannot show what is absent, so the sources are read instead.
    let (included, bad_includes) = includes::check_book(book).map_err(Error::Failed)?;
    problems.extend(bad_includes);
    for p in &problems {
        println!("{p}");
    }
    let counts = format!(
        "{} pages, {} internal links to {} files, {} external links not followed, {included} includes",
        stats.pages, stats.internal, stats.targets, stats.external
    );
    if problems.is_empty() {
        println!(
            "✔ bookcheck links: no broken links — {counts} [{}]",
            secs(t.elapsed())
        );
    } else {
        println!(
            "✘ bookcheck links: {} broken link(s) or include(s) — {counts} [{}]",
            problems.len(),
            secs(t.elapsed())
        );
    }
    Ok(problems.is_empty())
}

/// `  (wider than the column, cut in the PNG: 3 code blocks, 1 table)`, or nothing: what a
/// reader must scroll sideways to read, and the PNG does not show.
fn wide_note(code: u32, tables: u32) -> String {
    let mut parts = Vec::new();
    if code > 0 {
        parts.push(format!(
            "{code} code block{}",
            if code == 1 { "" } else { "s" }
        ));
    }
    if tables > 0 {
        parts.push(format!(
            "{tables} table{}",
            if tables == 1 { "" } else { "s" }
        ));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(
            "  (wider than the column, cut in the PNG: {})",
            parts.join(", ")
        )
    }
}

fn shoot(
    root: &Path,
    site_dir: &Path,
    exe: &Path,
    work: &Path,
    args: &Options,
) -> Result<bool, Error> {
    let t = Instant::now();
    let out_dir = args
        .out
        .as_deref()
        .map(user_path)
        .unwrap_or_else(|| root.join("target/book-shots"));
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Error::Failed(format!("cannot create {}: {e}", out_dir.display())))?;
    let site = Site::from_dir(site_dir)?;
    let pages = shots::pages_to_render(&site);
    let version = program_version(exe).unwrap_or_else(|| exe.display().to_string());
    eprintln!(
        "bookcheck: rendering {} page(s) with {version} at {} px wide",
        pages.len(),
        args.width
    );
    let profiles = work.join("chromium");
    std::fs::create_dir_all(&profiles)
        .map_err(|e| Error::Failed(format!("cannot create {}: {e}", profiles.display())))?;
    let chromium = Chromium::new(
        exe.to_path_buf(),
        profiles,
        Duration::from_secs(args.timeout),
    );
    let mut failed = 0;
    for page in &pages {
        let tp = Instant::now();
        match shots::render_page(
            &chromium,
            site_dir,
            page,
            &out_dir,
            args.width,
            args.max_height,
        ) {
            Ok(shot) => {
                let clipped = shot
                    .clipped_from
                    .map(|full| format!("  CUT: the page is {full} px tall (--max-height)"))
                    .unwrap_or_default();
                if shot.clipped_from.is_some() {
                    failed += 1;
                }
                let wide = wide_note(shot.wide_code, shot.wide_tables);
                println!(
                    "{}  {}×{}{clipped}{wide}  [{}]",
                    shown(root, &shot.png),
                    shot.width,
                    shot.height,
                    secs(tp.elapsed())
                );
            }
            Err(e) => {
                failed += 1;
                println!("{page}: not rendered: {e}");
            }
        }
    }
    let dir = shown(root, &out_dir);
    if failed == 0 {
        println!(
            "✔ bookcheck shots: {} page(s) rendered to {dir}/ [{}]",
            pages.len(),
            secs(t.elapsed())
        );
    } else {
        println!(
            "✘ bookcheck shots: {failed} of {} page(s) not rendered whole (see above); PNGs in {dir}/ [{}]",
            pages.len(),
            secs(t.elapsed())
        );
    }
    Ok(failed == 0)
}
