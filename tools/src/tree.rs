//! `steps tree N`: the files of the repository as they stand after chapter N, with chapter N's
//! files marked and the directories it does not touch collapsed.

use crate::chapter_number;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The repository's files: tracked, plus untracked ones git does not ignore.
pub fn git_files(root: &Path) -> Result<Vec<String>, String> {
    let mut files = Vec::new();
    for args in [
        &["ls-files", "-z"][..],
        &["ls-files", "-z", "--others", "--exclude-standard"][..],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .map_err(|e| format!("cannot run git: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`git {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        files.extend(
            String::from_utf8_lossy(&out.stdout)
                .split('\0')
                .filter(|p| !p.is_empty() && root.join(p).is_file())
                .map(str::to_string),
        );
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// The chapter a file belongs to: the highest `chNN` that starts any component of its path
/// (a directory, or the file's name): `chapters/ch01-router/src/lib.rs`, `examples/ch01.rs`,
/// `kernels/ch01_router.cu`, `tests/snapshots/ch01_example__ch01_example.snap` → 1.
/// Files that name no chapter are the foundation, which chapter 1 introduces.
pub fn chapter_of(path: &str) -> u32 {
    path.split('/')
        .filter_map(chapter_number)
        .max()
        .unwrap_or(1)
}

#[derive(Default)]
struct Dir {
    files: Vec<(String, u32)>,
    dirs: BTreeMap<String, Dir>,
}

impl Dir {
    fn insert(&mut self, path: &str, chapter: u32) {
        match path.split_once('/') {
            Some((dir, rest)) => self
                .dirs
                .entry(dir.to_string())
                .or_default()
                .insert(rest, chapter),
            None => self.files.push((path.to_string(), chapter)),
        }
    }

    /// (files in this subtree, files of chapter `n` in it).
    fn count(&self, n: u32) -> (usize, usize) {
        let mut total = self.files.len();
        let mut new = self.files.iter().filter(|(_, c)| *c == n).count();
        for d in self.dirs.values() {
            let (t, k) = d.count(n);
            total += t;
            new += k;
        }
        (total, new)
    }

    fn render(&self, n: u32, prefix: &str, out: &mut String) {
        let mut files = self.files.clone();
        files.sort();
        let entries = files.len() + self.dirs.len();
        let mut i = 0;
        let mut branch = |out: &mut String| {
            i += 1;
            let last = i == entries;
            out.push_str(prefix);
            out.push_str(if last { "└── " } else { "├── " });
            format!("{prefix}{}", if last { "    " } else { "│   " })
        };
        for (name, chapter) in &files {
            branch(out);
            out.push_str(name);
            if *chapter == n {
                out.push_str(&format!("  ← new in chapter {n}"));
            }
            out.push('\n');
        }
        for (name, dir) in &self.dirs {
            let child_prefix = branch(out);
            let (total, new) = dir.count(n);
            if new == 0 {
                let s = if total == 1 { "" } else { "s" };
                out.push_str(&format!("{name}/  ({total} file{s}, none new)\n"));
            } else {
                out.push_str(&format!("{name}/\n"));
                dir.render(n, &child_prefix, out);
            }
        }
    }
}

/// Whether a path is one of the GPU runs' logs (`bench/results/<gpu>/logs/…`): records of
/// measurements, not files a reader builds; each run adds some, so the tree leaves them out
/// (and stays the same from one run to the next).
fn is_run_log(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts.len() > 4 && parts[0] == "bench" && parts[1] == "results" && parts[3] == "logs"
}

/// Renders the tree after chapter `n` of the given repository-relative paths (`/`-separated).
/// Files of later chapters are left out, and so are the GPU runs' logs.
pub fn render(paths: &[String], n: u32, root_name: &str) -> String {
    let mut root = Dir::default();
    for p in paths.iter().filter(|p| !is_run_log(p)) {
        let c = chapter_of(p);
        if c <= n {
            root.insert(p, c);
        }
    }
    let (total, new) = root.count(n);
    let mut out = format!(
        "Files so far: {total} ({new} new in chapter {n}; the GPU runs' logs under \
         bench/results/*/logs/ not shown)\n\n{root_name}/\n"
    );
    root.render(n, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_chapter_component() {
        for (path, ch) in [
            ("chapters/ch01-router/src/lib.rs", 1),
            ("examples/ch01.rs", 1),
            ("kernels/ch01_router.cu", 1),
            ("book/src/ch01-router.md", 1),
            ("tests/ch01_example.rs", 1),
            ("bench/results/h200/ch01.csv", 1),
            ("book/src/figures/ch01-router.svg", 1),
            ("tests/snapshots/ch01_example__ch01_example.snap", 1),
            ("chapters/ch02-grouped/Cargo.toml", 2),
            ("kernels/ch04_fused_moe.cu", 4),
            ("tests/snapshots/ch10_merged__ch10_merged.snap", 10),
            // The foundation: no chapter in the path.
            ("Cargo.toml", 1),
            ("kernels/emu/cuda.h", 1),
            ("tools/src/bin/steps.rs", 1),
            // `ch` needs two digits to name a chapter; `chapters/` and `check.rs` do not.
            ("tools/src/check.rs", 1),
            ("chunks/ch3.rs", 1),
            // The highest chapter named wins.
            (
                "chapters/ch03-align/tests/snapshots/ch03_ch01_parity.snap",
                3,
            ),
        ] {
            assert_eq!(chapter_of(path), ch, "{path}");
        }
    }

    fn paths() -> Vec<String> {
        [
            "Cargo.toml",
            "kernels/src/lib.rs",
            "kernels/emu/cuda.h",
            "kernels/ch01_router.cu",
            "kernels/ch02_grouped.cu",
            "chapters/ch01-router/Cargo.toml",
            "chapters/ch01-router/src/lib.rs",
            "chapters/ch02-grouped/src/lib.rs",
            "chapters/ch03-align/src/lib.rs",
            "tools/src/lib.rs",
            // A GPU run's log: never drawn, never counted.
            "bench/results/h200/logs/run_ch02.log",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    #[test]
    fn tree_after_chapter_two() {
        let t = render(&paths(), 2, "moe");
        let expected = "\
Files so far: 9 (2 new in chapter 2; the GPU runs' logs under bench/results/*/logs/ not shown)

moe/
├── Cargo.toml
├── chapters/
│   ├── ch01-router/  (2 files, none new)
│   └── ch02-grouped/
│       └── src/
│           └── lib.rs  ← new in chapter 2
├── kernels/
│   ├── ch01_router.cu
│   ├── ch02_grouped.cu  ← new in chapter 2
│   ├── emu/  (1 file, none new)
│   └── src/  (1 file, none new)
└── tools/  (1 file, none new)
";
        assert_eq!(t, expected);
    }

    #[test]
    fn chapter_one_owns_the_foundation() {
        let t = render(&paths(), 1, "moe");
        assert!(
            t.starts_with("Files so far: 7 (7 new in chapter 1; "),
            "{t}"
        );
        assert!(t.contains("│   └── ch01-router/\n"), "{t}");
        assert!(t.contains("│   └── cuda.h  ← new in chapter 1\n"), "{t}");
        assert!(!t.contains("ch02") && !t.contains("ch03"), "{t}");
        assert!(
            !t.contains("none new") && !t.contains("run_ch02.log"),
            "{t}"
        );
    }
}
