//! A chapter's generated files as one spec: the CSVs it reads, what each part makes from
//! them, and what happens while a CSV is not committed yet. [`generate`] runs it: the parts'
//! files in order, then the facts file with every part's facts, in the parts' order.

use super::{Chart, Csv, Data, Item, Pivot};
use crate::figures::facts::Facts;
use crate::figures::Generated;
use std::path::Path;

/// What a part does while its CSV is not committed (a CSV always committed is one of the
/// group's `reads`: reading it is an error when it is not there).
pub(crate) enum Absent {
    /// Its files are left out, stderr says so, and a committed one is an error (it could not
    /// be regenerated): a GPU run's CSV not copied back yet. `stage` names the stage of
    /// `tools/gpu/run` that writes it, `copy` what to copy back, `left_out` what is not made.
    GpuRun {
        stage: &'static str,
        copy: &'static str,
        left_out: &'static str,
    },
    /// Its files are left out, silently.
    Quiet,
    /// Never: the CSV is always committed, and reading it fails when it is not there.
    Never,
}

/// A chapter's own rules on a CSV's text (named by its path), run before the spec reads it.
pub(crate) type Check = fn(&str, &str) -> Result<(), String>;

/// A CSV a part needs, what its absence means, and a check to run on its text first (a
/// chapter's own rules on the CSV: counts that must add up, lines that must not repeat).
pub(crate) struct Source {
    pub csv: &'static Csv,
    pub absent: Absent,
    pub check: Option<Check>,
}

/// One generated file of a part.
pub(crate) enum Make {
    Chart(&'static str, &'static Chart),
    Table(&'static str, &'static Pivot),
    /// A drawing no spec describes: a named function of the CSVs; `None` leaves the file out
    /// (the function says why on stderr).
    Drawn(&'static str, fn(&Data) -> Result<Option<String>, String>),
}

impl Make {
    fn path(&self) -> &'static str {
        match self {
            Make::Chart(p, _) | Make::Table(p, _) | Make::Drawn(p, _) => p,
        }
    }
}

/// A part: the CSVs it needs beside the group's (all present, or the part is left out, as the
/// first absent one's [`Absent`] says), its files, its facts.
pub(crate) struct Part {
    pub needs: &'static [Source],
    pub files: &'static [Make],
    pub facts: &'static [Item],
}

/// A chapter's group of generated files. Without `first`, nothing is made.
pub(crate) struct Group {
    /// `ch05`, as stderr names it.
    pub name: &'static str,
    /// The spec's source file, as errors name it.
    pub spec: &'static str,
    pub first: Source,
    /// CSVs read with the first, always committed.
    pub reads: &'static [&'static Csv],
    pub parts: &'static [Part],
    /// The facts file and its title.
    pub facts: &'static str,
    pub facts_title: &'static str,
}

/// Whether `s`'s CSV is committed under `root`; when not, what [`Absent`] says (for the
/// `files` made from it).
fn present(root: &Path, g: &Group, s: &Source, files: &[&str]) -> Result<bool, String> {
    if root.join(s.csv.path).exists() {
        return Ok(true);
    }
    match &s.absent {
        Absent::GpuRun {
            stage,
            copy,
            left_out,
        } => {
            crate::figures::no_gpu_csv_yet(root, g.name, s.csv.path, files, stage, copy, left_out)?;
            Ok(false)
        }
        Absent::Quiet => Ok(false),
        Absent::Never => Ok(true),
    }
}

fn add(root: &Path, data: &mut Data, s: &Source) -> Result<(), String> {
    let text = crate::figures::read(root, s.csv.path)?;
    if let Some(check) = s.check {
        check(&text, s.csv.path)?;
    }
    data.add(s.csv, &text)
}

/// The group's files, from the repository at `root`.
pub(crate) fn generate(root: &Path, g: &Group) -> Result<Vec<Generated>, String> {
    let mut all: Vec<&str> = g
        .parts
        .iter()
        .flat_map(|p| p.files.iter().map(Make::path))
        .collect();
    all.push(g.facts);
    if !present(root, g, &g.first, &all)? {
        return Ok(Vec::new());
    }
    let mut data = Data::default();
    add(root, &mut data, &g.first)?;
    for c in g.reads {
        data.add(c, &crate::figures::read(root, c.path)?)?;
    }
    let mut made = Vec::new();
    for p in g.parts {
        let files: Vec<&str> = p.files.iter().map(Make::path).collect();
        let mut all = true;
        for s in p.needs {
            all = all && present(root, g, s, &files)?;
        }
        if !all {
            continue;
        }
        for s in p.needs {
            if data.text(s.csv).is_err() {
                add(root, &mut data, s)?;
            }
        }
        made.push(p);
    }
    files(&data, g, &made)
}

/// The files of the `parts` whose CSVs are in `data`, and the facts file.
pub(crate) fn files(data: &Data, g: &Group, parts: &[&Part]) -> Result<Vec<Generated>, String> {
    let mut out = Vec::new();
    let mut f = Facts::default();
    for p in parts {
        for m in p.files {
            let content = match m {
                Make::Chart(_, c) => super::chart(data, c)?,
                Make::Table(_, t) => super::pivot(data, g.spec, t)?,
                Make::Drawn(_, f) => match f(data)? {
                    Some(c) => c,
                    None => continue,
                },
            };
            out.push(Generated {
                path: m.path().into(),
                content,
            });
        }
        super::facts(data, g.spec, p.facts, &mut f)?;
    }
    // The GPU every CSV of the chapter was measured on, for the page to name (`gpu`).
    if let Some(gpu) = data.gpu()? {
        f.add("gpu", gpu, g.first.csv.path);
    }
    out.push(Generated {
        path: g.facts.into(),
        content: f.render(g.facts_title),
    });
    Ok(out)
}
