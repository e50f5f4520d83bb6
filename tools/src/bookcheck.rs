//! `tools/bookcheck`: checks the book as a reader gets it, the built HTML rather than the
//! Markdown. `steps check` proves that the includes resolve and that `mdbook build` succeeds;
//! neither sees a link to a renamed heading, nor a table that runs off the page. This module
//! builds the book into a temporary directory (never into `book/`), checks every internal link
//! and anchor of the generated pages ([`links`]), and renders each chapter with headless
//! Chromium so a person can look at it ([`shots`]). [`html`] is the tag scanner both use.
//! [`prose`] checks the Markdown itself for typed measurements and project history.
//!
//! This file holds what they share: the error type that becomes the exit code, the temporary
//! directory, the program lookup and the book build.

pub mod html;
pub mod links;
pub mod prose;
pub mod shots;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Why a run stopped. The two kinds exit differently so that a caller (CI, `steps`) can report
/// "skipped" when a program is missing rather than "failed" or, worse, "passed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A program the step needs is not installed: exit 3.
    Missing { program: String, hint: String },
    /// Anything else that stops the run (a failed build, an unwritable file, a crash): exit 1.
    Failed(String),
}

impl Error {
    /// The process exit code: 3 for a missing program, 1 for anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Missing { .. } => 3,
            Error::Failed(_) => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Missing { program, hint } => write!(f, "{program} not found: {hint}"),
            Error::Failed(why) => f.write_str(why),
        }
    }
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Failed(s)
    }
}

/// A directory under the system's temporary directory, removed with everything in it when
/// dropped: the book is built and Chromium's profiles live there, never in the source tree.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh, empty directory named after `label`, the process and a counter.
    pub fn new(label: &str) -> Result<TempDir, Error> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::temp_dir();
        for _ in 0..100 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("moe-{label}-{}-{n}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(Error::Failed(format!(
                        "cannot create a temporary directory {}: {e}",
                        path.display()
                    )))
                }
            }
        }
        Err(Error::Failed(format!(
            "cannot create a temporary directory in {}",
            base.display()
        )))
    }

    /// Where it is; valid until the `TempDir` is dropped.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Finds an executable: `$env_var` if set (an explicit choice, so a wrong one is an error),
/// else the first of `names` on `PATH`, else in `extra_dirs` (where `cargo install` puts
/// programs when `~/.cargo/bin` is not on `PATH`).
pub fn find_program(
    env_var: &str,
    names: &[&str],
    extra_dirs: &[PathBuf],
) -> Result<Option<PathBuf>, Error> {
    if let Some(v) = std::env::var_os(env_var).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(&v);
        return if is_executable(&p) {
            Ok(Some(p))
        } else {
            Err(Error::Failed(format!(
                "{env_var}={} is not an executable file",
                p.display()
            )))
        };
    }
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for dir in path_dirs.iter().chain(extra_dirs) {
        for name in names {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return Ok(Some(candidate));
            }
        }
    }
    Ok(None)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `mdbook`: `$MDBOOK`, `PATH`, then Cargo's bin directory.
pub fn find_mdbook() -> Result<PathBuf, Error> {
    let mut extra = Vec::new();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        extra.push(PathBuf::from(home).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        extra.push(PathBuf::from(home).join(".cargo/bin"));
    }
    find_program("MDBOOK", &["mdbook"], &extra)?.ok_or_else(|| Error::Missing {
        program: "mdbook".to_string(),
        hint: "install it with `cargo install mdbook --version 0.5.4 --locked`, or set MDBOOK"
            .to_string(),
    })
}

/// The first line a program prints for `--version`, if it prints one.
pub fn program_version(exe: &Path) -> Option<String> {
    let out = Command::new(exe)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim();
    (out.status.success() && !line.is_empty()).then(|| line.to_string())
}

/// Builds `book_dir` into `dest` with `mdbook build --dest-dir`. Returns mdbook's warning lines
/// (they do not fail the build, but a reader may see their effect).
pub fn build_book(mdbook: &Path, book_dir: &Path, dest: &Path) -> Result<Vec<String>, Error> {
    let out = Command::new(mdbook)
        .arg("build")
        .arg(book_dir)
        .arg("--dest-dir")
        .arg(dest)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Failed(format!("cannot run {}: {e}", mdbook.display())))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(Error::Failed(format!(
            "`mdbook build {}` failed (exit {}):\n{}",
            book_dir.display(),
            out.status.code().unwrap_or(-1),
            tail(&log, 20)
        )));
    }
    Ok(log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .map(str::to_string)
        .collect())
}

/// The last `n` lines of a program's output, indented, for an error message.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..]
        .iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_tell_missing_from_failed() {
        let missing = Error::Missing {
            program: "chromium".into(),
            hint: "apt-get install chromium".into(),
        };
        assert_eq!(missing.exit_code(), 3);
        assert_eq!(
            missing.to_string(),
            "chromium not found: apt-get install chromium"
        );
        assert_eq!(Error::Failed("x".into()).exit_code(), 1);
    }

    #[test]
    fn temp_dirs_are_fresh_and_removed() {
        let a = TempDir::new("bookcheck-test").unwrap();
        let b = TempDir::new("bookcheck-test").unwrap();
        assert_ne!(a.path(), b.path());
        assert!(a.path().starts_with(std::env::temp_dir()));
        std::fs::write(a.path().join("f"), "x").unwrap();
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists());
    }

    #[test]
    fn finds_programs_in_extra_dirs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new("bookcheck-test").unwrap();
        let exe = dir.path().join("some-tool-xyz");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let found = |d: &Path| {
            find_program(
                "MOE_BOOKCHECK_TEST_UNSET_VAR",
                &["not-a-tool-abc", "some-tool-xyz"],
                &[d.to_path_buf()],
            )
        };
        // Not executable yet: not found.
        assert_eq!(found(dir.path()), Ok(None));
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(found(dir.path()), Ok(Some(exe.clone())));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "  | b\n  | c");
    }
}
