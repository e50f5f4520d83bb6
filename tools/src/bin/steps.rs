//! `tools/steps`: checks the chapters one by one (`check`), runs a chapter's exercises on your
//! code (`exercises N`) and prints the tree of files as it stands after a chapter (`tree N`).
//!
//! Exit codes: 0 all green, 1 a check failed, 2 usage error.

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use moe_tools::{chapter_number, deps, diff, figures, includes, repo_root, snap, tree};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "steps",
    about = "Check the book's chapters one by one, or print the tree of files after a chapter."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The foundation's tests, then per chapter: the dependency rule, its tests, its example
    /// against its snapshot, its exercises (failing as stubs, passing answered), its book page
    /// and includes; then the prose of every page (no typed measurement, no project history, at
    /// most 6,500 words); then every generated figure, table and quoted number regenerated from the
    /// committed CSVs and compared, `mdbook build`, the book's links, and screenshots of every
    /// page when Chromium is installed.
    Check {
        /// Check only this chapter (the foundation and the book still run).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=99))]
        chapter: Option<u32>,
        /// Skip `mdbook build`, the link check and the screenshots (the include and
        /// generated-file checks still run).
        #[arg(long)]
        no_book: bool,
        /// Build the foundation's and each chapter's tests alone but do not run them (reported
        /// as skipped): for CI, which runs `cargo test --workspace` just before, the same test
        /// binaries (kernels/Cargo.toml gives a chapter built alone the workspace's features).
        #[arg(long)]
        no_test_runs: bool,
    },
    /// Run chapter N's exercises on your code: each test says whether your answer passes.
    Exercises {
        #[arg(value_parser = clap::value_parser!(u32).range(1..=99))]
        chapter: u32,
    },
    /// Print the files as they stand after chapter N, chapter N's own files marked.
    Tree {
        #[arg(value_parser = clap::value_parser!(u32).range(1..=99))]
        chapter: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse(); // exits with 2 on a usage error
    let root = repo_root();
    let result = match cli.cmd {
        Cmd::Check {
            chapter,
            no_book,
            no_test_runs,
        } => check(&root, chapter, no_book, no_test_runs),
        Cmd::Exercises { chapter } => run_exercises(&root, chapter),
        Cmd::Tree { chapter } => print_tree(&root, chapter),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("steps: error: {e}");
            ExitCode::from(1)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tree

fn print_tree(root: &Path, n: u32) -> Result<bool, String> {
    let have = chapters(root)?;
    if !have.iter().any(|c| c.n == n) {
        let names: Vec<&str> = have.iter().map(|c| c.name.as_str()).collect();
        return Err(format!(
            "there is no chapter {n} yet (chapters/ has: {})",
            names.join(", ")
        ));
    }
    let files = tree::git_files(root)?;
    print!("{}", tree::render(&files, n, "moe-from-scratch"));
    Ok(true)
}

/// The chapter crate's exercise tests (`tests/exercises.rs`), run on the code as it is: the
/// reader's way to check an answer.
fn run_exercises(root: &Path, n: u32) -> Result<bool, String> {
    let all = chapters(root)?;
    let ch = all
        .iter()
        .find(|c| c.n == n)
        .ok_or_else(|| format!("there is no chapter {n} yet"))?;
    if !ch.dir.join("tests/exercises.rs").is_file() {
        return Err(format!("{} has no exercises (tests/exercises.rs)", ch.name));
    }
    println!(
        "steps exercises {n}: building and running {}'s exercise tests on your code",
        ch.name
    );
    let mut args = exercise_test_args(&ch.name, false);
    args.insert(1, "-q");
    let status = Command::new(cargo())
        .args(args)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    Ok(status.success())
}

// ---------------------------------------------------------------------------------------------
// check

/// One chapter crate: `chapters/ch01-router` → (1, "ch01-router").
struct Chapter {
    n: u32,
    name: String,
    dir: PathBuf,
}

fn chapters(root: &Path) -> Result<Vec<Chapter>, String> {
    let dir = root.join("chapters");
    let mut v = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        let name = e.file_name().to_string_lossy().to_string();
        if !e.path().is_dir() {
            continue;
        }
        let Some(n) = chapter_number(&name) else {
            continue;
        };
        if !name.starts_with(&format!("ch{n:02}-")) {
            continue;
        }
        v.push(Chapter {
            n,
            name,
            dir: e.path(),
        });
    }
    v.sort_by_key(|c| c.n);
    Ok(v)
}

/// What a finished step reports.
enum Outcome {
    Ok(String),
    Fail(String, Vec<String>),
    Skip(String),
}

struct Report {
    failures: Vec<String>,
    skipped: Vec<String>,
}

impl Report {
    /// Prints `label  step ok · step FAILED …` and the details of the failed steps.
    fn line(&mut self, label: &str, steps: Vec<(&str, Outcome)>, took: Duration) {
        let mut parts = Vec::new();
        let mut details = Vec::new();
        for (name, o) in steps {
            match o {
                Outcome::Ok(note) if note.is_empty() => parts.push(format!("{name} ok")),
                Outcome::Ok(note) => parts.push(format!("{name} ok ({note})")),
                Outcome::Skip(why) => {
                    parts.push(format!("{name} SKIPPED ({why})"));
                    self.skipped.push(format!("{label} {name} ({why})"));
                }
                Outcome::Fail(what, lines) => {
                    parts.push(format!("{name} FAILED"));
                    self.failures.push(format!("{label} {name}"));
                    details.push(format!("  ✘ {name}: {what}"));
                    details.extend(lines.into_iter().map(|l| format!("      {l}")));
                }
            }
        }
        println!("{label:<22} {}  [{}]", parts.join(" · "), secs(took));
        for d in details {
            println!("{d}");
        }
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    }
}

fn spinner(msg: String) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}").expect("a valid template"),
    );
    pb.set_message(msg);
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// The last `n` non-empty-trailing lines of a text.
fn tail(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let from = lines.len().saturating_sub(n);
    let mut out: Vec<String> = lines[from..].iter().map(|l| format!("| {l}")).collect();
    if from > 0 {
        out.insert(0, format!("| … ({from} lines above)"));
    }
    out
}

/// Runs a command from the repository root with stdout and stderr interleaved into one capture.
fn run_combined(
    root: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
    label: &str,
) -> Result<(bool, String, i32), String> {
    let log = std::env::temp_dir().join(format!(
        "moe-steps-{}-{}.log",
        std::process::id(),
        label.replace(' ', "_")
    ));
    let file =
        std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let pb = spinner(format!("{label}: cargo {}", args.join(" ")));
    let status = Command::new(cargo())
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .status();
    pb.finish_and_clear();
    let status = status.map_err(|e| format!("cannot run cargo: {e}"))?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    Ok((status.success(), text, status.code().unwrap_or(-1)))
}

fn cargo_step(root: &Path, args: &[&str], label: &str) -> Outcome {
    match run_combined(root, args, &[], label) {
        Ok((true, _, _)) => Outcome::Ok(String::new()),
        Ok((false, out, code)) => Outcome::Fail(
            format!("`cargo {}` failed (exit {code})", args.join(" ")),
            tail(&out, 30),
        ),
        Err(e) => Outcome::Fail(e, vec![]),
    }
}

fn check_deps(root: &Path, ws: &toml::Table, ch: &Chapter) -> Outcome {
    let path = ch.dir.join("Cargo.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return Outcome::Fail(format!("cannot read {}: {e}", rel(root, &path)), vec![]),
    };
    let manifest = match deps::parse(&text, &rel(root, &path)) {
        Ok(m) => m,
        Err(e) => return Outcome::Fail(e, vec![]),
    };
    let pkg = manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("");
    if pkg != ch.name {
        return Outcome::Fail(
            format!(
                "{}: package name is `{pkg}`, expected `{}` (the directory's name)",
                rel(root, &path),
                ch.name
            ),
            vec![],
        );
    }
    let errs = deps::check_chapter(&manifest, ws, ch.n);
    if errs.is_empty() {
        let local = deps::local_deps(&manifest, ws)
            .into_iter()
            .map(|d| d.name)
            .collect::<Vec<_>>();
        Outcome::Ok(local.join(", "))
    } else {
        Outcome::Fail(
            format!("{} breaks the dependency rule", rel(root, &path)),
            errs,
        )
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// `tests/chNN_*.rs` of the root package, as test target names.
fn root_tests(root: &Path, n: u32) -> Vec<String> {
    let prefix = format!("ch{n:02}_");
    let mut v: Vec<String> = std::fs::read_dir(root.join("tests"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let stem = name.strip_suffix(".rs")?;
            (stem.starts_with(&prefix) && e.path().is_file()).then(|| stem.to_string())
        })
        .collect();
    v.sort();
    v
}

/// `cargo test` with `args`, or with `--no-test-runs` only built (`--no-run`).
fn test_step(root: &Path, args: &[&str], label: &str, runs: bool) -> Outcome {
    let mut a = args.to_vec();
    if !runs {
        a.push("--no-run");
    }
    cargo_step(root, &a, label)
}

/// What a step that built its tests but did not run them reports.
fn not_run(what: String) -> Outcome {
    Outcome::Skip(format!(
        "{what}: built alone, run by cargo test --workspace (--no-test-runs)"
    ))
}

fn check_tests(root: &Path, ch: &Chapter, runs: bool) -> Outcome {
    let label = format!("ch{:02}", ch.n);
    if let o @ Outcome::Fail(..) = test_step(root, &["test", "-p", &ch.name], &label, runs) {
        return o;
    }
    let stems = root_tests(root, ch.n);
    let what = if stems.is_empty() {
        ch.name.clone()
    } else {
        let mut args = vec!["test", "-p", "moe-from-scratch"];
        for s in &stems {
            args.push("--test");
            args.push(s);
        }
        if let o @ Outcome::Fail(..) = test_step(root, &args, &label, runs) {
            return o;
        }
        format!("{} + {}", ch.name, stems.join(", "))
    };
    match (runs, stems.is_empty()) {
        (false, _) => not_run(what),
        (true, true) => Outcome::Ok(format!("no tests/ch{:02}_*.rs", ch.n)),
        (true, false) => Outcome::Ok(what),
    }
}

fn check_example(root: &Path, ch: &Chapter) -> Outcome {
    let ex = format!("ch{:02}", ch.n);
    let snap_rel = format!("tests/snapshots/{ex}_example__{ex}_example.snap");
    // An example is one file, examples/chNN.rs, or a folder, examples/chNN/main.rs.
    if !root.join(format!("examples/{ex}.rs")).is_file()
        && !root.join(format!("examples/{ex}/main.rs")).is_file()
    {
        return Outcome::Fail(
            format!("neither examples/{ex}.rs nor examples/{ex}/main.rs exists"),
            vec![],
        );
    }
    let pb = spinner(format!("{ex}: MOE_BACKEND=emu cargo run -q --example {ex}"));
    let t = Instant::now();
    let out = Command::new(cargo())
        .args(["run", "-q", "--example", &ex])
        .env("MOE_BACKEND", "emu")
        .current_dir(root)
        .stdin(Stdio::null())
        .output();
    pb.finish_and_clear();
    let took = t.elapsed();
    let out = match out {
        Ok(o) => o,
        Err(e) => return Outcome::Fail(format!("cannot run cargo: {e}"), vec![]),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let mut lines = tail(&String::from_utf8_lossy(&out.stderr), 20);
        lines.extend(tail(&stdout, 10));
        return Outcome::Fail(
            format!(
                "`cargo run --example {ex}` failed (exit {})",
                out.status.code().unwrap_or(-1)
            ),
            lines,
        );
    }
    let snap_text = match std::fs::read_to_string(root.join(&snap_rel)) {
        Ok(t) => t,
        Err(_) => {
            return Outcome::Fail(
                format!("{snap_rel} does not exist (the example's stdout must be snapshotted by tests/{ex}_example.rs)"),
                vec![],
            )
        }
    };
    let body = match snap::strip_header(&snap_text) {
        Ok(b) => b,
        Err(e) => return Outcome::Fail(format!("{snap_rel}: {e}"), vec![]),
    };
    if snap::same_output(&stdout, &body) {
        Outcome::Ok(format!("stdout = snapshot, {}", secs(took)))
    } else {
        let d = diff::unified(
            &body,
            &stdout,
            &format!("{snap_rel} (snapshot)"),
            &format!("cargo run --example {ex} (stdout)"),
            40,
        );
        Outcome::Fail(
            "stdout differs from the snapshot".to_string(),
            d.lines().map(str::to_string).collect(),
        )
    }
}

/// Book pages (`book/src/**/*.md`), relative to the repository root.
fn book_pages(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut v = Vec::new();
    walk(&root.join("book/src"), &mut v);
    v.sort();
    v
}

/// The chapter a page belongs to, from its file name (`ch01-router.md` → 1).
fn page_chapter(p: &Path) -> Option<u32> {
    chapter_number(&p.file_name()?.to_string_lossy())
}

/// Link targets in SUMMARY.md, normalised (`./ch01-router.md` → `ch01-router.md`).
fn summary_links(root: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(root.join("book/src/SUMMARY.md"))
        .map_err(|e| format!("cannot read book/src/SUMMARY.md: {e}"))?;
    let mut v = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(j) = rest.find(')') {
            v.push(rest[..j].trim().trim_start_matches("./").to_string());
            rest = &rest[j..];
        }
    }
    Ok(v)
}

/// Include problems of one page, as lines for the report; empty when all its includes are good.
fn page_problems(root: &Path, page: &Path) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let count = includes::find_includes(&text).len();
    match includes::check_page(page) {
        Ok(bad) => (
            count,
            bad.into_iter()
                .map(|(line, link, why)| format!("{}:{line}: {link}: {why}", rel(root, page)))
                .collect(),
        ),
        Err(e) => (count, vec![e]),
    }
}

fn check_book_page(root: &Path, ch: &Chapter, summary: &Result<Vec<String>, String>) -> Outcome {
    let pages: Vec<PathBuf> = book_pages(root)
        .into_iter()
        .filter(|p| p.parent() == Some(&root.join("book/src")) && page_chapter(p) == Some(ch.n))
        .collect();
    if pages.is_empty() {
        return Outcome::Fail(format!("no book page book/src/ch{:02}-*.md", ch.n), vec![]);
    }
    let mut problems = Vec::new();
    let mut includes = 0;
    for p in &pages {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        match summary {
            Ok(links) if links.contains(&name) => {}
            Ok(_) => problems.push(format!(
                "book/src/{name} is not listed in book/src/SUMMARY.md"
            )),
            Err(e) => problems.push(e.clone()),
        }
        let (n, bad) = page_problems(root, p);
        includes += n;
        problems.extend(bad);
    }
    if problems.is_empty() {
        Outcome::Ok(format!("{includes} includes"))
    } else {
        Outcome::Fail(
            format!("{} problem(s) in the chapter's page", problems.len()),
            problems,
        )
    }
}

/// The prose rules ([`moe_tools::bookcheck::prose`]) on every page outside `book/src/figures/`
/// (with `--chapter N`: the pages of no chapter and chapter N's), and each page's word count.
fn check_prose(root: &Path, only: Option<u32>) -> Outcome {
    use moe_tools::bookcheck::prose;
    let thousands = |n: usize| figures::facts::thousands(n as u64);
    let mut problems = Vec::new();
    let mut words = Vec::new();
    let (mut findings, mut long) = (0, 0);
    for p in book_pages(root) {
        let rel = p.strip_prefix(root).unwrap_or(&p).to_path_buf();
        if !prose::is_checked(&rel) {
            continue;
        }
        let chapter = rel
            .components()
            .find_map(|c| chapter_number(&c.as_os_str().to_string_lossy()));
        if chapter.is_some_and(|n| only.is_some_and(|o| o != n)) {
            continue;
        }
        let page = match prose::check_file(&p, &rel) {
            Ok(page) => page,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let name = rel
            .strip_prefix("book/src")
            .unwrap_or(&rel)
            .with_extension("")
            .display()
            .to_string();
        words.push(format!("{name} {}", thousands(page.words)));
        if page.words > prose::MAX_WORDS {
            long += 1;
            problems.push(format!(
                "{}: {} words of prose, above {} (make sub-pages)",
                rel.display(),
                thousands(page.words),
                thousands(prose::MAX_WORDS)
            ));
        }
        findings += page.findings.len();
        for f in page.findings {
            problems.push(format!(
                "{}:{}: {}: {}",
                rel.display(),
                f.line,
                f.what,
                f.text
            ));
        }
    }
    let words = format!("words of prose: {}", words.join(", "));
    if problems.is_empty() {
        Outcome::Ok(words)
    } else {
        problems.push(words);
        Outcome::Fail(
            format!(
                "{findings} typed measurement(s) or history mark(s), {long} page(s) over {} words",
                thousands(prose::MAX_WORDS)
            ),
            problems,
        )
    }
}

/// True when running under CI (`CI=true`): a tool the check needs but cannot find is then a
/// failure, not a skipped step.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `mdbook build` into a temporary directory, then the book's internal links and anchors, then
/// (when Chromium is installed) a screenshot of every page into `target/book-shots/`.
fn book_build(root: &Path) -> Vec<(&'static str, Outcome)> {
    use moe_tools::bookcheck::{self, links::Site, shots, Error};
    let missing = |what: &str, hint: String| {
        if in_ci() {
            Outcome::Fail(
                format!("{what} is not installed (CI=true: required)"),
                vec![hint],
            )
        } else {
            Outcome::Skip(format!("{what} not installed: {hint}"))
        }
    };
    let mdbook = match bookcheck::find_mdbook() {
        Ok(m) => m,
        Err(Error::Missing { hint, .. }) => {
            return vec![
                ("mdbook build", missing("mdbook", hint)),
                ("links", Outcome::Skip("no book built".into())),
                ("screenshots", Outcome::Skip("no book built".into())),
            ]
        }
        Err(e) => return vec![("mdbook build", Outcome::Fail(e.to_string(), vec![]))],
    };
    let tmp = match bookcheck::TempDir::new("steps-book") {
        Ok(t) => t,
        Err(e) => return vec![("mdbook build", Outcome::Fail(e.to_string(), vec![]))],
    };
    let site_dir = tmp.path().join("book");
    let pb = spinner("mdbook build book".to_string());
    let built = bookcheck::build_book(&mdbook, &root.join("book"), &site_dir);
    pb.finish_and_clear();
    let version = bookcheck::program_version(&mdbook).unwrap_or_default();
    let build = match built {
        Ok(warnings) if warnings.is_empty() => Outcome::Ok(version),
        Ok(warnings) => Outcome::Fail(
            "`mdbook build book` reported problems".into(),
            warnings.into_iter().map(|l| format!("| {l}")).collect(),
        ),
        Err(e) => Outcome::Fail(e.to_string(), vec![]),
    };
    if !matches!(build, Outcome::Ok(_)) {
        return vec![("mdbook build", build)];
    }
    let links = match Site::from_dir(&site_dir) {
        Err(e) => Outcome::Fail(e, vec![]),
        Ok(site) => {
            let (problems, stats) = site.check();
            if problems.is_empty() {
                Outcome::Ok(format!("{} internal links", stats.internal))
            } else {
                Outcome::Fail(
                    format!("{} broken link(s)", problems.len()),
                    problems.iter().map(|p| p.to_string()).collect(),
                )
            }
        }
    };
    let shots = match shots::find_chromium() {
        Err(Error::Missing { hint, .. }) => Outcome::Skip(format!("no Chromium: {hint}")),
        Err(e) => Outcome::Fail(e.to_string(), vec![]),
        Ok(exe) => {
            let out_dir = root.join("target/book-shots");
            let work = tmp.path().join("chromium");
            let _ = std::fs::create_dir_all(&work);
            let _ = std::fs::create_dir_all(&out_dir);
            let chromium = shots::Chromium::new(exe, work, Duration::from_secs(180));
            let site = Site::from_dir(&site_dir).unwrap_or_default();
            let pages = shots::pages_to_render(&site);
            let pb = spinner(format!("rendering {} pages with Chromium", pages.len()));
            let mut failed = Vec::new();
            for page in &pages {
                if let Err(e) =
                    shots::render_page(&chromium, &site_dir, page, &out_dir, 1280, 60_000)
                {
                    failed.push(format!("{page}: {e}"));
                }
            }
            pb.finish_and_clear();
            if failed.is_empty() {
                Outcome::Ok(format!("{} pages in target/book-shots/", pages.len()))
            } else {
                Outcome::Fail(format!("{} page(s) not rendered", failed.len()), failed)
            }
        }
    };
    vec![
        ("mdbook build", build),
        ("links", links),
        ("screenshots", shots),
    ]
}

/// Every generated file of the book regenerated from the committed CSVs (and snapshots, and
/// the tree of files) into a temporary folder, and compared with the committed copy.
fn check_generated(root: &Path) -> Outcome {
    let files = match figures::generate_all(root) {
        Ok(f) => f,
        Err(e) => return Outcome::Fail(e, vec![]),
    };
    let dir = std::env::temp_dir().join(format!("moe-steps-generated-{}", std::process::id()));
    if let Err(e) = figures::write_all(&dir, &files) {
        return Outcome::Fail(e, vec![]);
    }
    let mut problems = Vec::new();
    for g in &files {
        let fresh = std::fs::read_to_string(dir.join(&g.path)).unwrap_or_default();
        match std::fs::read_to_string(root.join(&g.path)) {
            Ok(committed) if committed == fresh => {}
            Ok(committed) => {
                problems.push(format!("{} differs from its regeneration:", g.path));
                let d = diff::unified(
                    &committed,
                    &fresh,
                    &format!("{} (committed)", g.path),
                    "regenerated",
                    12,
                );
                problems.extend(d.lines().map(|l| format!("  {l}")));
            }
            Err(_) => problems.push(format!("{} is missing", g.path)),
        }
    }
    if problems.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        Outcome::Ok(format!("{} files", files.len()))
    } else {
        problems.push(format!(
            "regenerated copies kept in {}; `tools/plot` rewrites the committed ones",
            dir.display()
        ));
        Outcome::Fail("generated files are stale".into(), problems)
    }
}

/// `passed; failed` counts from libtest's `test result:` lines of a log.
fn test_counts(log: &str) -> (usize, usize) {
    let mut passed = 0;
    let mut failed = 0;
    for line in log.lines().filter(|l| l.contains("test result:")) {
        let count = |word: &str| {
            line.split(';')
                .find_map(|part| part.trim().strip_suffix(word))
                .and_then(|n| {
                    n.trim()
                        .rsplit(' ')
                        .next()
                        .and_then(|n| n.parse::<usize>().ok())
                })
                .unwrap_or(0)
        };
        passed += count(" passed");
        failed += count(" failed");
    }
    (passed, failed)
}

/// `cargo test` of a chapter's exercise tests (ignored in a plain run), on its stubs or, with
/// `answers`, on the answers built in their place.
fn exercise_test_args(package: &str, answers: bool) -> Vec<&str> {
    let mut a = vec!["test", "-p", package];
    if answers {
        a.extend(["--features", "answers"]);
    }
    a.extend(["--test", "exercises", "--", "--ignored"]);
    a
}

/// The chapter's exercises checked both ways (rustlings' rule): every test fails on the stubs,
/// and every test passes with `--features answers`.
fn check_exercises(root: &Path, ch: &Chapter) -> Outcome {
    if !ch.dir.join("tests/exercises.rs").is_file() {
        return Outcome::Fail(format!("{} has no tests/exercises.rs", ch.name), vec![]);
    }
    let label = format!("ch{:02} exercises", ch.n);
    let stub_args = exercise_test_args(&ch.name, false);
    let (ok, log, _) = match run_combined(root, &stub_args, &[], &label) {
        Ok(r) => r,
        Err(e) => return Outcome::Fail(e, vec![]),
    };
    let (passed, failed) = test_counts(&log);
    if ok || passed > 0 || failed == 0 {
        return Outcome::Fail(
            format!("unsolved, every exercise test must fail: {passed} passed, {failed} failed"),
            tail(&log, 20),
        );
    }
    let answer_args = exercise_test_args(&ch.name, true);
    match run_combined(root, &answer_args, &[], &label) {
        Ok((true, log, _)) => {
            let (p, _) = test_counts(&log);
            if p == failed {
                Outcome::Ok(format!("{failed} fail unsolved, pass answered"))
            } else {
                Outcome::Fail(
                    format!("{failed} failed unsolved but {p} passed answered"),
                    tail(&log, 20),
                )
            }
        }
        Ok((false, log, _)) => Outcome::Fail("the answers do not pass".into(), tail(&log, 30)),
        Err(e) => Outcome::Fail(e, vec![]),
    }
}

fn check(
    root: &Path,
    only: Option<u32>,
    no_book: bool,
    no_test_runs: bool,
) -> Result<bool, String> {
    let start = Instant::now();
    let all = chapters(root)?;
    if let Some(n) = only {
        if !all.iter().any(|c| c.n == n) {
            let have: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
            eprintln!(
                "steps: no chapter {n} under chapters/ (have: {})",
                have.join(", ")
            );
            std::process::exit(2);
        }
    }
    let selected: Vec<&Chapter> = all
        .iter()
        .filter(|c| only.is_none_or(|n| c.n == n))
        .collect();
    let backend = std::env::var("MOE_BACKEND")
        .map(|b| format!("MOE_BACKEND={b}"))
        .unwrap_or_else(|_| "MOE_BACKEND unset: auto".to_string());
    println!(
        "steps check: foundation + {} chapter(s) ({}); tests with {backend}, examples with MOE_BACKEND=emu",
        selected.len(),
        selected.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    let mut report = Report {
        failures: Vec::new(),
        skipped: Vec::new(),
    };

    // The foundation: the runtime and its emulator.
    let t = Instant::now();
    let foundation = match test_step(
        root,
        &["test", "-p", "moe-kernels"],
        "foundation",
        !no_test_runs,
    ) {
        Outcome::Ok(_) if no_test_runs => not_run("moe-kernels".into()),
        o => o,
    };
    let foundation_ok = !matches!(foundation, Outcome::Fail(..));
    report.line(
        "foundation",
        vec![("moe-kernels tests", foundation)],
        t.elapsed(),
    );

    let root_manifest = deps::parse(
        &std::fs::read_to_string(root.join("Cargo.toml"))
            .map_err(|e| format!("cannot read Cargo.toml: {e}"))?,
        "Cargo.toml",
    )?;
    let ws = deps::workspace_deps(&root_manifest);
    let summary = summary_links(root);

    for ch in &selected {
        let t = Instant::now();
        let deps = check_deps(root, &ws, ch);
        let (tests, example, exercises) = if foundation_ok {
            (
                check_tests(root, ch, !no_test_runs),
                check_example(root, ch),
                check_exercises(root, ch),
            )
        } else {
            (
                Outcome::Skip("foundation failed".into()),
                Outcome::Skip("foundation failed".into()),
                Outcome::Skip("foundation failed".into()),
            )
        };
        let book = check_book_page(root, ch, &summary);
        report.line(
            &ch.name,
            vec![
                ("deps", deps),
                ("tests", tests),
                ("example", example),
                ("exercises", exercises),
                ("book", book),
            ],
            t.elapsed(),
        );
    }

    // The other pages (introduction, runtime, …), each reported once.
    let t = Instant::now();
    let others: Vec<PathBuf> = book_pages(root)
        .into_iter()
        .filter(|p| match page_chapter(p) {
            None => true,
            // A chapter page is checked on its chapter's line, unless it has no chapter crate.
            Some(n) => {
                let on_chapter_line =
                    p.parent() == Some(&root.join("book/src")) && all.iter().any(|c| c.n == n);
                !on_chapter_line && only.is_none_or(|o| o == n)
            }
        })
        .collect();
    let mut problems = Vec::new();
    let mut count = 0;
    for p in &others {
        let (n, bad) = page_problems(root, p);
        count += n;
        problems.extend(bad);
    }
    if let Err(e) = &summary {
        problems.push(e.clone());
    }
    let pages = if problems.is_empty() {
        Outcome::Ok(format!("{} pages, {count} includes", others.len()))
    } else {
        Outcome::Fail(format!("{} problem(s)", problems.len()), problems)
    };
    let mut steps = vec![
        ("includes", pages),
        ("prose", check_prose(root, only)),
        ("generated files", check_generated(root)),
    ];
    if no_book {
        steps.push(("mdbook build", Outcome::Skip("--no-book".into())));
    } else {
        steps.extend(book_build(root));
    }
    report.line("book", steps, t.elapsed());

    let took = secs(start.elapsed());
    if report.failures.is_empty() && report.skipped.is_empty() {
        println!(
            "✔ steps check: all green — foundation and {} chapter(s) in {took}",
            selected.len()
        );
        Ok(true)
    } else if report.failures.is_empty() {
        println!(
            "✔ steps check: green, but {} step(s) skipped — {} — foundation and {} chapter(s) in {took}",
            report.skipped.len(),
            report.skipped.join(", "),
            selected.len()
        );
        Ok(true)
    } else {
        println!(
            "✘ steps check: {} failed — {} ({took})",
            report.failures.len(),
            report.failures.join(", ")
        );
        Ok(false)
    }
}
