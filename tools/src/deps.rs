//! The dependency rule of the chapters: chapter NN may use, among the workspace's own crates,
//! only the runtime (`moe-kernels`, `moe-kernels-build`) and chapters below NN. External crates
//! are allowed.

use crate::chapter_number;
use toml::{Table, Value};

/// The workspace crates a runtime-only chapter may always use.
pub const FOUNDATION: [&str; 2] = ["moe-kernels", "moe-kernels-build"];

/// Parses a Cargo.toml.
pub fn parse(text: &str, what: &str) -> Result<Table, String> {
    text.parse::<Table>()
        .map_err(|e| format!("{what}: not valid TOML: {e}"))
}

/// The root manifest's `[workspace.dependencies]`, where `name.workspace = true` resolves.
pub fn workspace_deps(root: &Table) -> Table {
    root.get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(Value::as_table)
        .cloned()
        .unwrap_or_default()
}

/// One dependency that names a crate of this workspace (a path dependency, directly or through
/// `[workspace.dependencies]`).
#[derive(Debug, PartialEq, Eq)]
pub struct LocalDep {
    /// `dependencies`, `build-dependencies`, or `target.<cfg>.dependencies` …
    pub table: String,
    /// The crate's package name (after `package = …` renames).
    pub name: String,
}

/// The workspace crates named in a manifest's `[dependencies]` and `[build-dependencies]`
/// (target-specific ones included). Dev-dependencies are not part of the rule.
pub fn local_deps(manifest: &Table, ws: &Table) -> Vec<LocalDep> {
    let mut tables: Vec<(String, &Table)> = Vec::new();
    for key in ["dependencies", "build-dependencies"] {
        if let Some(t) = manifest.get(key).and_then(Value::as_table) {
            tables.push((key.to_string(), t));
        }
    }
    if let Some(targets) = manifest.get("target").and_then(Value::as_table) {
        for (cfg, t) in targets {
            for key in ["dependencies", "build-dependencies"] {
                if let Some(t) = t.get(key).and_then(Value::as_table) {
                    tables.push((format!("target.{cfg}.{key}"), t));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (table, deps) in tables {
        for (key, spec) in deps {
            let inherited = spec.get("workspace").and_then(Value::as_bool) == Some(true);
            let resolved = if inherited {
                ws.get(key).unwrap_or(spec)
            } else {
                spec
            };
            if resolved.get("path").is_none() {
                continue; // external crate (registry or git)
            }
            let name = spec
                .get("package")
                .or_else(|| resolved.get("package"))
                .and_then(Value::as_str)
                .unwrap_or(key)
                .to_string();
            out.push(LocalDep {
                table: table.clone(),
                name,
            });
        }
    }
    out
}

/// Checks chapter `n`'s manifest; returns one message per forbidden dependency.
pub fn check_chapter(manifest: &Table, ws: &Table, n: u32) -> Vec<String> {
    local_deps(manifest, ws)
        .into_iter()
        .filter(|d| {
            if FOUNDATION.contains(&d.name.as_str()) {
                return false;
            }
            !matches!(chapter_number(&d.name), Some(m) if m < n)
        })
        .map(|d| {
            let why = match chapter_number(&d.name) {
                Some(m) if m == n => "itself".to_string(),
                Some(m) => format!("chapter {m} comes later"),
                None => "not a chapter or the runtime".to_string(),
            };
            format!(
                "[{}] names workspace crate `{}` ({why}); a chapter may use only {} and earlier chapters",
                d.table,
                d.name,
                FOUNDATION.join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = r#"
[workspace.dependencies]
cudarc = { version = "0.19", default-features = false }
moe-kernels = { path = "kernels" }
moe-kernels-build = { path = "kernels/build-support" }
ch01-router = { path = "chapters/ch01-router" }
ch03-align = { path = "chapters/ch03-align" }
moe-tools = { path = "tools" }
"#;

    #[test]
    fn allows_runtime_earlier_chapters_and_external_crates() {
        let ws = workspace_deps(&parse(ROOT, "root").unwrap());
        let m = parse(
            r#"
[dependencies]
moe-kernels.workspace = true
ch01-router.workspace = true
cudarc.workspace = true
half = "2.7"
[build-dependencies]
moe-kernels-build = { workspace = true }
[dev-dependencies]
ch03-align.workspace = true
"#,
            "ch02",
        )
        .unwrap();
        assert_eq!(local_deps(&m, &ws).len(), 3);
        assert_eq!(check_chapter(&m, &ws, 2), Vec::<String>::new());
    }

    #[test]
    fn rejects_later_chapters_tools_and_direct_paths() {
        let ws = workspace_deps(&parse(ROOT, "root").unwrap());
        let m = parse(
            r#"
[dependencies]
ch03-align.workspace = true
moe-tools.workspace = true
router = { path = "../ch01-router", package = "ch01-router" }
[target.'cfg(unix)'.build-dependencies]
ch02-grouped = { path = "../ch02-grouped" }
"#,
            "ch02",
        )
        .unwrap();
        let errs = check_chapter(&m, &ws, 2);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].contains("`ch03-align` (chapter 3 comes later)"),
            "{errs:?}"
        );
        assert!(errs[1].contains("`moe-tools` (not a chapter"), "{errs:?}");
        assert!(errs[2].starts_with("[target.cfg(unix).build-dependencies] names workspace crate `ch02-grouped` (itself)"), "{errs:?}");
    }
}
