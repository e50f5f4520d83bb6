//! The book's tools: `steps` (check the chapters, print the tree of files), `plot` (generate
//! the book's figures, tables and quoted numbers from the committed CSVs) and the benchmark
//! CSV's row type they share with `tools/bench`. The binaries are thin: the logic lives
//! in these modules so that it can be unit-tested.

pub mod bench_row;
pub mod bookcheck;
pub mod csv;
pub mod deps;
pub mod diff;
pub mod figures;
pub mod includes;
pub mod snap;
pub mod tree;

use std::path::{Path, PathBuf};

/// The repository root: the one the wrapper scripts (`tools/plot`, `tools/steps`,
/// `tools/bookcheck`) run from (`MOE_REPO_ROOT`), else the workspace this crate was built from
/// (`tools/..`). The wrappers' answer comes first because Cargo reuses a build whose sources
/// match even when it was made in another checkout (a target folder copied or shared between
/// clones), and the path compiled into that build would send the figures to the other clone.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("MOE_REPO_ROOT").map(PathBuf::from) {
        if root.join("tools").join("Cargo.toml").is_file() {
            return root;
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools/ has a parent")
        .to_path_buf()
}

/// Resolves a path given on the command line: relative paths are relative to the directory the
/// user ran the wrapper script from (`MOE_TOOLS_CWD`, set by `tools/steps` and `tools/plot`,
/// which themselves run from the repository root), else to the current directory.
pub fn user_path(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match std::env::var_os("MOE_TOOLS_CWD") {
        Some(cwd) => PathBuf::from(cwd).join(p),
        None => p.to_path_buf(),
    }
}

/// The number of a chapter named in a path component: `ch01-router` → 1, `ch12_x.rs` → 12.
/// Needs `ch` followed by at least two digits at the start of the component.
pub fn chapter_number(component: &str) -> Option<u32> {
    let rest = component.strip_prefix("ch")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.len() < 2 {
        return None;
    }
    digits.parse().ok()
}
