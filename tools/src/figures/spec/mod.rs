//! Figures, tables and facts as data: a chapter writes one short spec per generated thing —
//! which CSV, which rows, which column, which format — and this module makes the file. A
//! chapter's generator is then its specs plus the few named functions a spec cannot express.
//!
//! A spec is Rust data (consts), not a text file beside the CSV: the compiler checks its shape
//! (a format or a value kind is an enum variant, not a word a parser may misread), the spec can
//! name the constants the bench shares with the figures (a chapter's targets, its list of
//! implementations: STYLE.md item 16, one list read by both), a value the spec cannot express
//! is a named Rust function beside it, and there is no parser to keep. Each fact records its
//! line (`line!()`, through the `fact!`, `each!` and `when!` macros; a table its `line`), so an
//! error names the spec line and the CSV: `tools/src/figures/ch05.rs:190: fact
//! `glm_96_pair_cold`: bench/results/h200/ch05.csv has no row with shape=… rows=96 impl=pair`.
//!
//! The parts:
//! - [`Csv`]: a committed CSV, by path; the facts it gives name it as their source.
//! - A row filter is a string of conditions, `shape={shape} rows!=0 rows<=96 impl=pair|chain`
//!   (`=`, here one of two values, `!=`, `<=` and `>`, the last two numeric), `{var}` standing
//!   for a loop variable's value.
//! - [`Loop`]: a variable over a list, over a CSV column's distinct values (in the CSV's order,
//!   ascending as numbers, or ranked by a function); a fact's name uses the variable's name form
//!   ([`Name`]: `glm` for `glm_h4096_e288_k8`, `8 tokens` for `8`).
//! - [`Value`]: one cell, a ratio, a difference, a value scaled, a min, max or range over a
//!   loop, a sum or count of rows, a column's distinct values, a constant, a variable, values
//!   over a loop joined, or a named function ([`Value::Named`], [`Value::NamedText`]).
//! - [`Fmt`]: how a value is written (µs to three digits, fixed decimals, thousands, a verdict).
//! - [`Item`]: a fact, a loop of items, items under a condition on the variables or on rows
//!   being there; [`facts`] runs a list of them into a [`Facts`] file.
//! - [`Pivot`]: a Markdown table, one line per value of one loop and a column per value of
//!   another, each cell a template of values, with [`Line`]s before and after; `Chart`: an SVG
//!   figure drawn by `svg::Figure`.
//! - `Group` (group.rs): a chapter's files, the CSVs they need and what a missing one means; a
//!   file no spec describes is a named drawing (`Make::Drawn`).
//!
//! A missing row is an error, never an empty string: a fact marked optional (`fact!(? …)`) is
//! left out of the file instead (the page's include of it then fails), a table says what its
//! empty cell reads (`""` or `–`) or makes a missing cell an error.

mod group;
pub(crate) use group::{generate, Absent, Group, Make, Part, Source};

use super::facts::{thousands, Facts};
use super::svg::{self, Marker, Series};
use super::tables::fmt_us;
use crate::bench_row::parse_csv;
use crate::csv::{Row, Table};
use std::fmt::Write as _;
use std::path::Path;

/// A committed CSV. `run`: a column naming the run each row comes from, which the facts' source
/// then names (`…/ch05_tried.csv, run ch05_ca0b032`).
#[derive(Debug)]
pub struct Csv {
    pub path: &'static str,
    pub run: Option<&'static str>,
}

impl Csv {
    /// A CSV whose rows are one run's.
    pub const fn at(path: &'static str) -> Csv {
        Csv { path, run: None }
    }

    /// A CSV of several runs, each row's named in column `run`.
    pub const fn runs(path: &'static str, run: &'static str) -> Csv {
        Csv {
            path,
            run: Some(run),
        }
    }
}

/// How a loop variable's value is written in a fact's name, a column head or a row label.
#[derive(Clone, Copy)]
pub enum Name {
    /// As the CSV or the list writes it.
    AsIs,
    /// Up to the first `_`: `glm_h4096_e288_k8` → `glm`.
    Prefix,
    /// Lower case, anything but letters and digits as `_`: `random rows` → `random_rows`.
    Slug,
    /// `(value, name)` pairs; a value not listed keeps its own.
    Map(&'static [(&'static str, &'static str)]),
    /// A function of the value (a shape spelled out).
    Fn(fn(&str) -> String),
    /// The value and a noun, plural but for 1: `1 token`, `8 tokens` (a column of counts).
    Plural(&'static str),
}

/// The values a loop takes.
#[derive(Clone, Copy)]
pub enum Over {
    /// These, in this order.
    List(&'static [&'static str]),
    /// The first of each pair, in this order (the pairs also a [`Name::Map`]).
    Keys(&'static [(&'static str, &'static str)]),
    /// The distinct values of `col` among the rows of `csv` matching `rows`, in the order the
    /// CSV first has them, or ascending as numbers.
    Csv {
        csv: &'static Csv,
        rows: &'static str,
        col: &'static str,
        numeric: bool,
    },
    /// The same values in the CSV's order, those `rank` keeps, in the order of their ranks
    /// (ours first, then its variants, then the peers in a list's order).
    Ranked {
        csv: &'static Csv,
        rows: &'static str,
        col: &'static str,
        rank: fn(&str) -> Option<usize>,
    },
}

/// A variable and the values it takes.
#[derive(Clone, Copy)]
pub struct Loop {
    pub var: &'static str,
    pub over: Over,
    pub name: Name,
}

impl Loop {
    /// A variable over a list.
    pub const fn list(var: &'static str, values: &'static [&'static str]) -> Loop {
        Loop {
            var,
            over: Over::List(values),
            name: Name::AsIs,
        }
    }

    /// A variable over the distinct values of `col` among the rows matching `rows`.
    pub const fn csv(
        var: &'static str,
        csv: &'static Csv,
        rows: &'static str,
        col: &'static str,
    ) -> Loop {
        Loop {
            var,
            over: Over::Csv {
                csv,
                rows,
                col,
                numeric: false,
            },
            name: Name::AsIs,
        }
    }

    /// A variable over the distinct values of `col` among the rows matching `rows` that `rank`
    /// keeps, by rank (equal ranks in the CSV's order).
    pub const fn ranked(
        var: &'static str,
        csv: &'static Csv,
        rows: &'static str,
        col: &'static str,
        rank: fn(&str) -> Option<usize>,
    ) -> Loop {
        Loop {
            var,
            over: Over::Ranked {
                csv,
                rows,
                col,
                rank,
            },
            name: Name::AsIs,
        }
    }

    /// The same values, ascending as numbers.
    pub const fn numeric(self) -> Loop {
        let over = match self.over {
            Over::Csv { csv, rows, col, .. } => Over::Csv {
                csv,
                rows,
                col,
                numeric: true,
            },
            other => other,
        };
        Loop { over, ..self }
    }

    /// The same values, named by `name`.
    pub const fn named(self, name: Name) -> Loop {
        Loop { name, ..self }
    }
}

/// A number (or text) a fact or a cell shows.
pub enum Value {
    /// Column `col` of the first row of `csv` matching `rows`.
    Col {
        csv: &'static Csv,
        rows: &'static str,
        col: &'static str,
    },
    /// The first over the second.
    Ratio(&'static Value, &'static Value),
    /// The first less the second.
    Diff(&'static Value, &'static Value),
    /// A number times a value (`100 ×` a share: a percentage).
    Times(f64, &'static Value),
    /// A value over a number (bytes over `1e6`: MB).
    Per(&'static Value, f64),
    /// The least of a value over a loop (values whose rows are missing left out).
    Min(&'static Loop, &'static Value),
    /// The greatest, likewise.
    Max(&'static Loop, &'static Value),
    /// The least and the greatest, written `lo–hi` (one number where they read the same).
    Range(&'static Loop, &'static Value),
    /// The sum of `col` over the rows matching `rows`.
    Sum {
        csv: &'static Csv,
        rows: &'static str,
        col: &'static str,
    },
    /// How many rows match `rows`.
    Count {
        csv: &'static Csv,
        rows: &'static str,
    },
    /// The distinct values of `col` over the rows matching (ascending), joined by `–`.
    Distinct {
        csv: &'static Csv,
        rows: &'static str,
        col: &'static str,
    },
    /// A constant, and where it is defined (the facts' source).
    Const(f64, &'static str),
    /// A variable's value, as text.
    Var(&'static str),
    /// A value over a loop, each written in `fmt` (`or` where its rows are missing), joined by
    /// `sep`: `19 · 65 · –`.
    Join {
        each: &'static Loop,
        value: &'static Value,
        fmt: Fmt,
        sep: &'static str,
        or: &'static str,
    },
    /// What a spec cannot say: a named function of the CSV and the variables; `None` when its
    /// rows are missing.
    Named {
        csv: &'static Csv,
        f: fn(&Ctx) -> Result<Option<f64>, String>,
    },
    /// The same, giving text (a list written for reading: `1, 64 and 4,096`).
    NamedText {
        csv: &'static Csv,
        f: fn(&Ctx) -> Result<Option<String>, String>,
    },
}

impl Value {
    /// [`Value::Col`].
    pub const fn col(csv: &'static Csv, rows: &'static str, col: &'static str) -> Value {
        Value::Col { csv, rows, col }
    }

    /// [`Value::Sum`].
    pub const fn sum(csv: &'static Csv, rows: &'static str, col: &'static str) -> Value {
        Value::Sum { csv, rows, col }
    }

    /// [`Value::Distinct`].
    pub const fn distinct(csv: &'static Csv, rows: &'static str, col: &'static str) -> Value {
        Value::Distinct { csv, rows, col }
    }

    /// [`Value::Named`].
    pub const fn named(csv: &'static Csv, f: fn(&Ctx) -> Result<Option<f64>, String>) -> Value {
        Value::Named { csv, f }
    }
}

/// How a value is written.
#[derive(Clone, Copy)]
pub enum Fmt {
    /// A time in µs to about three significant digits ([`fmt_us`]).
    Us,
    /// Fixed decimals.
    Fixed(usize),
    /// A whole number (rounded) with thousands separators.
    Thousands,
    /// The same, in bold when it is not zero (a difference a reader must see).
    ThousandsBold,
    /// One decimal below 10, none from 10 (a percentage in a crowded cell: `6.3`, `94`).
    Short,
    /// Scientific, this many decimals: `2.5e-4` (a relative error).
    Sci(usize),
    /// A whole number.
    Int,
    /// As Rust writes an `f64` (`1.05`, `2`).
    Plain,
    /// The CSV's own text.
    Raw,
    /// `met` when the value is at most this, else `**missed**`.
    AtMost(f64),
    /// `met` when the value is at least this.
    AtLeast(f64),
    /// The text and a noun, singular when the text is `1`: `2 launches`, `1 launch`.
    Noun(&'static str, &'static str),
}

/// One step of a facts spec.
pub enum Item {
    /// A named value; `name` may use the loop variables (`{s}_{n}_probe`). An optional fact is
    /// left out where a row it reads is missing; any other is then an error.
    Fact {
        line: u32,
        name: &'static str,
        value: Value,
        fmt: Fmt,
        optional: bool,
    },
    /// The items, once per value of the loop.
    Each {
        line: u32,
        each: Loop,
        items: &'static [Item],
    },
    /// The items, where the variables meet the conditions (`n=1`, `imp!=pair`).
    When {
        line: u32,
        cond: &'static str,
        items: &'static [Item],
    },
    /// The items, where `csv` has a row matching each filter (several facts that stand or fall
    /// together: a comparison of three candidates, written only where all three were timed).
    IfRows {
        line: u32,
        csv: &'static Csv,
        rows: &'static [&'static str],
        items: &'static [Item],
    },
}

/// A fact: `fact!(name, value, fmt)`, or `fact!(? name, value, fmt)` for an optional one.
macro_rules! fact {
    (? $name:expr, $value:expr, $fmt:expr) => {
        $crate::figures::spec::Item::Fact {
            line: line!(),
            name: $name,
            value: $value,
            fmt: $fmt,
            optional: true,
        }
    };
    ($name:expr, $value:expr, $fmt:expr) => {
        $crate::figures::spec::Item::Fact {
            line: line!(),
            name: $name,
            value: $value,
            fmt: $fmt,
            optional: false,
        }
    };
}

pub(crate) use fact;

/// Items once per value of a loop: `each!(LOOP, [items…])`.
macro_rules! each {
    ($each:expr, [$($item:expr),* $(,)?]) => {
        $crate::figures::spec::Item::Each { line: line!(), each: $each, items: &[$($item),*] }
    };
}

pub(crate) use each;

/// Items under a condition on the variables: `when!("n=1", [items…])`.
macro_rules! when {
    ($cond:expr, [$($item:expr),* $(,)?]) => {
        $crate::figures::spec::Item::When { line: line!(), cond: $cond, items: &[$($item),*] }
    };
}

pub(crate) use when;

/// Items where a CSV has rows matching each filter: `if_rows!(CSV, ["a=1", "b=2"], [items…])`.
macro_rules! if_rows {
    ($csv:expr, [$($rows:expr),* $(,)?], [$($item:expr),* $(,)?]) => {
        $crate::figures::spec::Item::IfRows {
            line: line!(),
            csv: $csv,
            rows: &[$($rows),*],
            items: &[$($item),*],
        }
    };
}

pub(crate) use if_rows;

/// One value in a cell's template: `{name}` in the text, `wrap` around it (`" ({}×)"`),
/// written only where the variables meet `when` (`""`: always). A missing optional slot reads
/// as `or` (nothing, or `–`); a missing required one makes the whole cell missing.
pub struct Slot {
    pub name: &'static str,
    pub value: Value,
    pub fmt: Fmt,
    pub wrap: &'static str,
    pub when: &'static str,
    pub optional: bool,
    pub or: &'static str,
}

impl Slot {
    /// A slot that must be there.
    pub const fn new(name: &'static str, value: Value, fmt: Fmt) -> Slot {
        Slot {
            name,
            value,
            fmt,
            wrap: "{}",
            when: "",
            optional: false,
            or: "",
        }
    }

    /// A slot written inside `wrap` where the variables meet `when`, nothing where its rows
    /// are missing.
    pub const fn optional(
        name: &'static str,
        value: Value,
        fmt: Fmt,
        wrap: &'static str,
        when: &'static str,
    ) -> Slot {
        Slot {
            name,
            value,
            fmt,
            wrap,
            when,
            optional: true,
            or: "",
        }
    }

    /// An optional slot that reads `or` where its rows are missing (`–`: not measured).
    pub const fn or(name: &'static str, value: Value, fmt: Fmt, or: &'static str) -> Slot {
        Slot {
            name,
            value,
            fmt,
            wrap: "{}",
            when: "",
            optional: true,
            or,
        }
    }
}

/// A cell: a template (`{cold} / {warm}{ratio}`; `{row}` is the line's name, `{var}` a
/// variable's name form) and its slots.
pub struct Cell {
    pub text: &'static str,
    pub slots: &'static [Slot],
}

impl Cell {
    /// The line's name alone: the usual label.
    pub const ROW: Cell = Cell {
        text: "{row}",
        slots: &[],
    };
}

/// A line of a [`Pivot`] after the loop's: a label, a cell per column, and where `only_if` is
/// set, written only where its CSV has a row matching the filter (a peer's ratio, where the peer
/// was measured).
pub struct Line {
    /// A template, its `{slot}`s from `label_slots`.
    pub label: &'static str,
    pub label_slots: &'static [Slot],
    pub cell: Cell,
    pub only_if: Option<(&'static Csv, &'static str)>,
}

impl Line {
    /// A line always written.
    pub const fn new(label: &'static str, cell: Cell) -> Line {
        Line {
            label,
            label_slots: &[],
            cell,
            only_if: None,
        }
    }

    /// The same, its label a template of these slots (`launches: {imps}`).
    pub const fn labelled(self, slots: &'static [Slot]) -> Line {
        Line {
            label_slots: slots,
            ..self
        }
    }

    /// The same, written only where `csv` has a row matching `rows`.
    pub const fn only_if(self, csv: &'static Csv, rows: &'static str) -> Line {
        Line {
            only_if: Some((csv, rows)),
            ..self
        }
    }
}

/// A Markdown table, or one per value of `blocks`: the `lead` lines, a line per value of `rows`
/// (where `row_if` matches a row of its CSV), a column per value of `cols`, then the `extra`
/// lines.
pub struct Pivot {
    pub line: u32,
    /// Written once before everything.
    pub head: &'static str,
    pub blocks: Option<Loop>,
    /// Before and after each block's table (templates; the head's `{slot}`s from `block_slots`).
    pub block_head: &'static str,
    pub block_slots: &'static [Slot],
    pub block_tail: &'static str,
    /// The top-left cell (a template).
    pub corner: &'static str,
    pub rows: Loop,
    pub row_if: Option<(&'static Csv, &'static str)>,
    pub cols: Loop,
    pub label: Cell,
    pub cell: Cell,
    pub lead: &'static [Line],
    pub extra: &'static [Line],
    /// What a missing cell reads; `None`: a missing cell is an error.
    pub missing: Option<&'static str>,
    /// Where `cols` has more values than `rows`, swap them, with this corner.
    pub transpose_as: Option<&'static str>,
}

impl Pivot {
    /// The fields a table usually leaves as they are: no head, one block, an empty corner,
    /// every line drawn, labelled by its name, no extra lines, a missing cell an error. A
    /// table sets `line`, `rows`, `cols` and `cell` over it (`..Pivot::PLAIN`).
    pub const PLAIN: Pivot = Pivot {
        line: 0,
        head: "",
        blocks: None,
        block_head: "",
        block_slots: &[],
        block_tail: "",
        corner: "",
        rows: Loop::list("", &[]),
        row_if: None,
        cols: Loop::list("", &[]),
        label: Cell::ROW,
        cell: Cell::ROW,
        lead: &[],
        extra: &[],
        missing: None,
        transpose_as: None,
    };
}

/// One implementation in a [`Chart`]: its color, marker and legend line.
pub(crate) struct Style {
    pub imp: &'static str,
    pub color: &'static str,
    pub marker: Marker,
    pub label: &'static str,
}

impl Style {
    /// A series: the implementation, its color, marker and legend line.
    pub const fn new(
        imp: &'static str,
        color: &'static str,
        marker: Marker,
        label: &'static str,
    ) -> Style {
        Style {
            imp,
            color,
            marker,
            label,
        }
    }
}

/// A figure of µs per call against rows, one log-log panel per shape ([`svg::Figure`]): the
/// `draw`n implementations that the CSV has (and the floor probes, where `probes`), and the
/// floor read off `floor_from`'s rows.
pub(crate) struct Chart {
    pub csv: &'static Csv,
    pub draw: &'static [Style],
    pub floor_from: &'static str,
    pub panel_w: f64,
    pub panel_h: f64,
    pub left: f64,
    pub title: &'static str,
    pub notes: &'static [&'static str],
    /// A panel's title from its shape.
    pub panel_title: fn(&str) -> String,
    pub x_label: &'static str,
    pub floor_label: &'static str,
    /// Whether the floor probes' rows are drawn with the rest (they then count in the y range).
    pub probes: bool,
}

/// The CSVs a spec reads, parsed once.
#[derive(Default)]
pub struct Data {
    tables: Vec<(&'static str, String, Table)>,
}

impl Data {
    /// Reads each CSV from the repository at `root`.
    pub fn read(root: &Path, csvs: &[&'static Csv]) -> Result<Data, String> {
        let mut d = Data::default();
        for c in csvs {
            d.add(c, &super::read(root, c.path)?)?;
        }
        Ok(d)
    }

    /// A CSV's text, as read (a drawing a spec cannot describe parses it: `Make::Drawn`).
    pub fn text(&self, csv: &Csv) -> Result<&str, String> {
        Ok(&self.get(csv)?.1)
    }

    /// Adds a CSV's text (tests give it directly).
    pub fn add(&mut self, csv: &'static Csv, text: &str) -> Result<(), String> {
        let t = Table::parse(text, csv.path)?;
        self.tables.push((csv.path, text.to_string(), t));
        Ok(())
    }

    /// The one GPU that every CSV read with a `device` column names (the pages' `gpu` fact): an
    /// error if two of them name different machines, whose times a page must not set side by
    /// side; `None` if no CSV has the column.
    pub fn gpu(&self) -> Result<Option<String>, String> {
        let mut devices: Vec<String> = Vec::new();
        let mut paths: Vec<&str> = Vec::new();
        for (path, _, t) in &self.tables {
            if t.col("device").is_ok() {
                devices.extend(t.records().map(|r| r("device")));
                paths.push(path);
            }
        }
        if paths.is_empty() {
            return Ok(None);
        }
        crate::figures::one_gpu(devices.iter().map(String::as_str), &paths.join(", ")).map(Some)
    }

    fn get(&self, csv: &Csv) -> Result<&(&'static str, String, Table), String> {
        self.tables
            .iter()
            .find(|(p, _, _)| *p == csv.path)
            .ok_or_else(|| format!("{}: not read", csv.path))
    }
}

/// A variable: its value, and its name form.
type Vars = Vec<(&'static str, String, String)>;

/// What a named function ([`Value::Named`]) sees: its CSV and the loop variables.
pub struct Ctx<'a> {
    pub table: &'a Table,
    data: &'a Data,
    vars: &'a Vars,
}

impl<'a> Ctx<'a> {
    /// The same variables over another CSV of the spec's (a ceiling a value is scaled by; only
    /// the value's own CSV is named as its source).
    pub fn with(&self, csv: &Csv) -> Result<Ctx<'a>, String> {
        Ok(Ctx {
            table: &self.data.get(csv)?.2,
            data: self.data,
            vars: self.vars,
        })
    }

    /// A variable's value (`shape`, `n`).
    pub fn var(&self, v: &str) -> Result<&str, String> {
        var(self.vars, v)
    }

    /// The rows matching a filter.
    pub fn rows(&self, filter: &str) -> Result<Vec<&Row>, String> {
        matching(self.table, filter, self.vars)
    }

    /// A row's column as a number.
    pub fn num(&self, row: &Row, col: &str) -> Result<f64, String> {
        num(self.table, row, col)
    }
}

fn var<'v>(vars: &'v Vars, v: &str) -> Result<&'v str, String> {
    vars.iter()
        .rev()
        .find(|(n, _, _)| *n == v)
        .map(|(_, val, _)| val.as_str())
        .ok_or_else(|| format!("no variable `{v}`"))
}

/// `{var}` in `t` replaced by each variable's value (`name: false`) or name form (`true`).
fn fill(t: &str, vars: &Vars, name: bool) -> Result<String, String> {
    fill_with(t, vars, name, &[])
}

/// [`fill`], `{slot}` first replaced by its text where `slots` has it.
fn fill_with(t: &str, vars: &Vars, name: bool, slots: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = t;
    while let Some(i) = rest.find('{') {
        out += &rest[..i];
        let j = rest[i..]
            .find('}')
            .ok_or_else(|| format!("`{t}`: `{{` without `}}`"))?;
        let v = &rest[i + 1..i + j];
        if let Some((_, text)) = slots.iter().find(|(k, _)| *k == v) {
            out += text;
            rest = &rest[i + j + 1..];
            continue;
        }
        let (_, val, nm) = vars
            .iter()
            .rev()
            .find(|(n, _, _)| *n == v)
            .ok_or_else(|| format!("`{t}`: no variable `{v}`"))?;
        out += if name { nm } else { val };
        rest = &rest[i + j + 1..];
    }
    Ok(out + rest)
}

/// One condition of a filter: a column (or variable), an operator, a value.
fn conds(filter: &str, vars: &Vars) -> Result<Vec<(String, &'static str, String)>, String> {
    filter
        .split_whitespace()
        .map(|c| {
            let (k, op, v) = ["!=", "<=", ">", "="]
                .iter()
                .find_map(|op| c.split_once(op).map(|(k, v)| (k, *op, v)))
                .ok_or_else(|| format!("`{c}`: not `column=value` (or !=, <=, >)"))?;
            Ok((k.to_string(), op, fill(v, vars, false)?))
        })
        .collect()
}

fn holds(op: &str, have: &str, want: &str) -> Result<bool, String> {
    let n = |s: &str| {
        s.parse::<f64>()
            .map_err(|_| format!("`{s}` is not a number (for `{op}`)"))
    };
    Ok(match op {
        "=" => want.split('|').any(|w| have == w),
        "!=" => have != want,
        "<=" => n(have)? <= n(want)?,
        _ => n(have)? > n(want)?,
    })
}

fn matching<'t>(t: &'t Table, filter: &str, vars: &Vars) -> Result<Vec<&'t Row>, String> {
    let cs = conds(filter, vars)?;
    let idx: Vec<(usize, &str, &str)> = cs
        .iter()
        .map(|(k, op, v)| Ok((t.col(k)?, *op, v.as_str())))
        .collect::<Result<_, String>>()?;
    let mut out = Vec::new();
    for r in t.rows() {
        let mut ok = true;
        for (i, op, v) in &idx {
            ok &=
                holds(op, &r.fields[*i], v).map_err(|e| format!("{}:{}: {e}", t.name(), r.line))?;
        }
        if ok {
            out.push(r);
        }
    }
    Ok(out)
}

fn num(t: &Table, r: &Row, col: &str) -> Result<f64, String> {
    let v = &r.fields[t.col(col)?];
    v.parse().map_err(|_| {
        format!(
            "{}:{}: `{v}` in column `{col}` is not a number",
            t.name(),
            r.line
        )
    })
}

/// Whether the variables meet every condition of `cond`.
fn vars_meet(cond: &str, vars: &Vars) -> Result<bool, String> {
    for (k, op, v) in conds(cond, vars)? {
        if !holds(op, var(vars, &k)?, &v)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Why a value is not there: a row missing (an optional fact is then left out), or an error.
enum Miss {
    Missing(String),
    Error(String),
}

impl From<String> for Miss {
    fn from(e: String) -> Miss {
        Miss::Error(e)
    }
}

enum Out {
    Num(f64, String),
    Text(String),
    Span(f64, f64),
}

/// Evaluates a spec against its CSVs.
struct Eval<'a> {
    data: &'a Data,
    sources: Vec<String>,
}

impl Eval<'_> {
    fn source(&mut self, s: String) {
        if !self.sources.contains(&s) {
            self.sources.push(s);
        }
    }

    /// The rows of `csv` matching `filter` (the first alone where `first`), each named as a
    /// source of the value.
    fn rows<'d>(
        &mut self,
        data: &'d Data,
        csv: &Csv,
        filter: &str,
        vars: &Vars,
        first: bool,
    ) -> Result<(&'d Table, Vec<&'d Row>), Miss> {
        let (_, _, t) = data.get(csv)?;
        let mut rows = matching(t, filter, vars)?;
        if first {
            rows.truncate(1);
        }
        match csv.run {
            Some(run) => {
                let i = t.col(run)?;
                for r in &rows {
                    self.source(format!("{}, run {}", csv.path, r.fields[i]));
                }
            }
            None => self.source(csv.path.to_string()),
        }
        Ok((t, rows))
    }

    fn value(&mut self, v: &Value, vars: &mut Vars) -> Result<Out, Miss> {
        let data = self.data;
        let n = |o: Out| match o {
            Out::Num(x, _) => Ok(x),
            _ => Err(Miss::Error("not a single number".into())),
        };
        Ok(match v {
            Value::Col { csv, rows, col } => {
                let (t, found) = self.rows(data, csv, rows, vars, true)?;
                let r = found.first().ok_or_else(|| {
                    Miss::Missing(format!(
                        "{} has no row with {}",
                        csv.path,
                        fill(rows, vars, false).unwrap_or_default()
                    ))
                })?;
                let text = r.fields[t.col(col)?].clone();
                match text.parse() {
                    Ok(x) => Out::Num(x, text),
                    Err(_) => Out::Text(text),
                }
            }
            Value::Ratio(a, b) => {
                let a = n(self.value(a, vars)?)?;
                let b = n(self.value(b, vars)?)?;
                Out::Num(a / b, String::new())
            }
            Value::Diff(a, b) => {
                let a = n(self.value(a, vars)?)?;
                let b = n(self.value(b, vars)?)?;
                Out::Num(a - b, String::new())
            }
            Value::Times(k, a) => Out::Num(k * n(self.value(a, vars)?)?, String::new()),
            Value::Per(a, k) => Out::Num(n(self.value(a, vars)?)? / k, String::new()),
            Value::Min(l, x) | Value::Max(l, x) | Value::Range(l, x) => {
                let mut got = Vec::new();
                for (val, name) in self.values(l, vars)? {
                    vars.push((l.var, val, name));
                    let r = self.value(x, vars);
                    vars.pop();
                    match r {
                        Ok(o) => got.push(n(o)?),
                        Err(Miss::Missing(e)) if matches!(v, Value::Range(..)) => {
                            return Err(Miss::Missing(e))
                        }
                        Err(Miss::Missing(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                if got.is_empty() {
                    return Err(Miss::Missing(format!("no values over `{}`", l.var)));
                }
                let lo = got.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = got.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                match v {
                    Value::Min(..) => Out::Num(lo, String::new()),
                    Value::Max(..) => Out::Num(hi, String::new()),
                    _ => Out::Span(lo, hi),
                }
            }
            Value::Sum { csv, rows, col } => {
                let (t, found) = self.rows(data, csv, rows, vars, false)?;
                let mut s = 0.0;
                for r in found {
                    s += num(t, r, col)?;
                }
                Out::Num(s, String::new())
            }
            Value::Count { csv, rows } => {
                let (_, found) = self.rows(data, csv, rows, vars, false)?;
                Out::Num(found.len() as f64, String::new())
            }
            Value::Distinct { csv, rows, col } => {
                let (t, found) = self.rows(data, csv, rows, vars, false)?;
                let c = t.col(col)?;
                let mut vals: Vec<&str> = found.iter().map(|r| r.fields[c].as_str()).collect();
                vals.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
                    (Ok(x), Ok(y)) => x.total_cmp(&y),
                    _ => a.cmp(b),
                });
                vals.dedup();
                if vals.is_empty() {
                    return Err(Miss::Missing(format!(
                        "{} has no row with {}",
                        csv.path,
                        fill(rows, vars, false)?
                    )));
                }
                Out::Text(vals.join("–"))
            }
            Value::Const(x, source) => {
                self.source(source.to_string());
                Out::Num(*x, String::new())
            }
            Value::Var(name) => Out::Text(var(vars, name)?.to_string()),
            Value::Join {
                each,
                value,
                fmt,
                sep,
                or,
            } => {
                let mut got = Vec::new();
                for (val, name) in self.values(each, vars)? {
                    vars.push((each.var, val, name));
                    let r = self.value(value, vars);
                    vars.pop();
                    got.push(match r {
                        Ok(o) => format(&o, *fmt)?,
                        Err(Miss::Missing(_)) => or.to_string(),
                        Err(e) => return Err(e),
                    });
                }
                Out::Text(got.join(sep))
            }
            Value::NamedText { csv, f } => {
                let (_, _, table) = data.get(csv)?;
                self.source(csv.path.to_string());
                match f(&Ctx { table, data, vars })? {
                    Some(t) => Out::Text(t),
                    None => return Err(Miss::Missing(format!("{}: no value", csv.path))),
                }
            }
            Value::Named { csv, f } => {
                let (_, _, table) = data.get(csv)?;
                self.source(csv.path.to_string());
                match f(&Ctx { table, data, vars })? {
                    Some(x) => Out::Num(x, String::new()),
                    None => {
                        return Err(Miss::Missing(format!(
                            "{}: no value for {}",
                            csv.path,
                            vars.iter()
                                .map(|(k, v, _)| format!("{k}={v}"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        )))
                    }
                }
            }
        })
    }

    /// A loop's values and their name forms.
    fn values(&mut self, l: &Loop, vars: &Vars) -> Result<Vec<(String, String)>, String> {
        let vals: Vec<String> = match l.over {
            Over::List(v) => v.iter().map(|s| s.to_string()).collect(),
            Over::Keys(v) => v.iter().map(|(s, _)| s.to_string()).collect(),
            Over::Csv {
                csv,
                rows,
                col,
                numeric,
            } => {
                let (_, _, t) = self.data.get(csv)?;
                let c = t.col(col)?;
                let mut v: Vec<String> = Vec::new();
                for r in matching(t, rows, vars)? {
                    if !v.contains(&r.fields[c]) {
                        v.push(r.fields[c].clone());
                    }
                }
                if numeric {
                    let mut keyed = Vec::new();
                    for s in v {
                        let x: f64 = s.parse().map_err(|_| {
                            format!("{}: `{s}` in `{col}` is not a number", t.name())
                        })?;
                        keyed.push((x, s));
                    }
                    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
                    v = keyed.into_iter().map(|(_, s)| s).collect();
                }
                v
            }
            Over::Ranked {
                csv,
                rows,
                col,
                rank,
            } => {
                let (_, _, t) = self.data.get(csv)?;
                let c = t.col(col)?;
                let mut v: Vec<(usize, String)> = Vec::new();
                for r in matching(t, rows, vars)? {
                    let f = &r.fields[c];
                    if let Some(k) = rank(f) {
                        if !v.iter().any(|(_, s)| s == f) {
                            v.push((k, f.clone()));
                        }
                    }
                }
                v.sort_by_key(|(k, _)| *k);
                v.into_iter().map(|(_, s)| s).collect()
            }
        };
        Ok(vals
            .into_iter()
            .map(|v| {
                let name = match l.name {
                    Name::AsIs => v.clone(),
                    Name::Prefix => v.split('_').next().unwrap_or(&v).to_string(),
                    Name::Slug => v
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() {
                                c.to_ascii_lowercase()
                            } else {
                                '_'
                            }
                        })
                        .collect(),
                    Name::Map(m) => m
                        .iter()
                        .find(|(k, _)| *k == v)
                        .map_or(v.clone(), |(_, n)| n.to_string()),
                    Name::Fn(f) => f(&v),
                    Name::Plural(noun) => {
                        format!("{v} {noun}{}", if v == "1" { "" } else { "s" })
                    }
                };
                (v, name)
            })
            .collect())
    }
}

/// A value written in a format.
fn format(o: &Out, f: Fmt) -> Result<String, String> {
    let one = |x: f64| -> Result<String, String> {
        Ok(match f {
            Fmt::Us => fmt_us(x),
            Fmt::Fixed(d) => format!("{x:.d$}"),
            Fmt::Thousands => thousands(x.round() as u64),
            Fmt::ThousandsBold if x != 0.0 => format!("**{}**", thousands(x.round() as u64)),
            Fmt::ThousandsBold => thousands(x.round() as u64),
            Fmt::Sci(d) => format!("{x:.d$e}"),
            Fmt::Short if x < 10.0 => format!("{x:.1}"),
            Fmt::Short => format!("{x:.0}"),
            Fmt::Int => format!("{}", x as u64),
            Fmt::Plain => format!("{x}"),
            Fmt::AtMost(m) => verdict(x <= m),
            Fmt::AtLeast(m) => verdict(x >= m),
            Fmt::Raw | Fmt::Noun(..) => return Err("a number in a text format".into()),
        })
    };
    match (o, f) {
        (Out::Num(_, raw), Fmt::Raw) if !raw.is_empty() => Ok(raw.clone()),
        (Out::Text(t), Fmt::Raw) => Ok(t.clone()),
        (Out::Text(t), Fmt::Noun(one, many)) => {
            Ok(format!("{t} {}", if t == "1" { one } else { many }))
        }
        (Out::Num(x, _), _) => one(*x),
        (Out::Span(lo, hi), _) => {
            let (lo, hi) = (one(*lo)?, one(*hi)?);
            Ok(if lo == hi { lo } else { format!("{lo}–{hi}") })
        }
        (Out::Text(t), _) => Err(format!("`{t}` is not a number")),
    }
}

fn verdict(ok: bool) -> String {
    (if ok { "met" } else { "**missed**" }).to_string()
}

/// Runs a facts spec (`file`: the spec's source file, for errors) into `f`.
pub fn facts(data: &Data, file: &str, items: &[Item], f: &mut Facts) -> Result<(), String> {
    run(data, file, items, &mut Vec::new(), f)
}

fn run(
    data: &Data,
    file: &str,
    items: &[Item],
    vars: &mut Vars,
    f: &mut Facts,
) -> Result<(), String> {
    for it in items {
        match it {
            Item::Fact {
                line,
                name,
                value,
                fmt,
                optional,
            } => {
                let at = |e: String| format!("{file}:{line}: fact `{name}`: {e}");
                let name = fill(name, vars, true).map_err(at)?;
                let at = |e: String| format!("{file}:{line}: fact `{name}`: {e}");
                let mut ev = Eval {
                    data,
                    sources: Vec::new(),
                };
                match ev.value(value, vars) {
                    Ok(o) => {
                        let text = format(&o, *fmt).map_err(at)?;
                        f.add(name.clone(), text, &ev.sources.join("; "));
                    }
                    Err(Miss::Missing(_)) if *optional => {}
                    Err(Miss::Missing(e) | Miss::Error(e)) => return Err(at(e)),
                }
            }
            Item::Each { line, each, items } => {
                let mut ev = Eval {
                    data,
                    sources: Vec::new(),
                };
                let vals = ev
                    .values(each, vars)
                    .map_err(|e| format!("{file}:{line}: {e}"))?;
                for (v, n) in vals {
                    vars.push((each.var, v, n));
                    let r = run(data, file, items, vars, f);
                    vars.pop();
                    r?;
                }
            }
            Item::When { line, cond, items } => {
                if vars_meet(cond, vars).map_err(|e| format!("{file}:{line}: {e}"))? {
                    run(data, file, items, vars, f)?;
                }
            }
            Item::IfRows {
                line,
                csv,
                rows,
                items,
            } => {
                let t = &data.get(csv).map_err(|e| format!("{file}:{line}: {e}"))?.2;
                let mut all = true;
                for r in *rows {
                    all &= !matching(t, r, vars)
                        .map_err(|e| format!("{file}:{line}: {e}"))?
                        .is_empty();
                }
                if all {
                    run(data, file, items, vars, f)?;
                }
            }
        }
    }
    Ok(())
}

/// A cell's text, or (`Err` inside) what is missing where a required slot's rows are.
fn cell(ev: &mut Eval, c: &Cell, vars: &mut Vars) -> Result<Result<String, String>, String> {
    let mut shown = Vec::new();
    for s in c.slots {
        let text = if s.when.is_empty() || vars_meet(s.when, vars)? {
            match ev.value(&s.value, vars) {
                Ok(o) => s.wrap.replace("{}", &format(&o, s.fmt)?),
                Err(Miss::Missing(_)) if s.optional => s.or.to_string(),
                Err(Miss::Missing(m)) => return Ok(Err(m)),
                Err(Miss::Error(e)) => return Err(e),
            }
        } else {
            String::new()
        };
        shown.push((s.name, text));
    }
    fill_with(c.text, vars, true, &shown).map(Ok)
}

/// A [`Line`]'s label: its template filled (a missing slot an error).
fn line_label(data: &Data, l: &Line, vars: &mut Vars) -> Result<String, String> {
    let mut ev = Eval {
        data,
        sources: Vec::new(),
    };
    let c = Cell {
        text: l.label,
        slots: l.label_slots,
    };
    cell(&mut ev, &c, vars)?.map_err(|why| format!("no label for `{}`: {why}", l.label))
}

/// The lines of `ls` to write: those without `only_if`, and those whose CSV has a matching row.
fn shown<'l>(data: &Data, ls: &'l [Line], vars: &Vars) -> Result<Vec<&'l Line>, String> {
    let mut out = Vec::new();
    for l in ls {
        if let Some((csv, filter)) = l.only_if {
            if matching(&data.get(csv)?.2, filter, vars)?.is_empty() {
                continue;
            }
        }
        out.push(l);
    }
    Ok(out)
}

/// Writes a [`Pivot`] (`file`: the spec's source file, for errors).
pub fn pivot(data: &Data, file: &str, p: &Pivot) -> Result<String, String> {
    let at = |e: String| format!("{file}:{}: table: {e}", p.line);
    let mut ev = Eval {
        data,
        sources: Vec::new(),
    };
    let mut vars: Vars = Vec::new();
    let mut s = p.head.to_string();
    let blocks = match &p.blocks {
        Some(l) => ev.values(l, &vars).map_err(at)?,
        None => vec![(String::new(), String::new())],
    };
    for (b, bname) in blocks {
        if let Some(l) = &p.blocks {
            vars.push((l.var, b, bname));
        }
        let head = Cell {
            text: p.block_head,
            slots: p.block_slots,
        };
        s += &cell(&mut ev, &head, &mut vars)
            .map_err(at)?
            .map_err(|why| at(format!("no block head: {why}")))?;
        let mut rows = Vec::new();
        for (v, n) in ev.values(&p.rows, &vars).map_err(at)? {
            if let Some((csv, filter)) = p.row_if {
                vars.push((p.rows.var, v.clone(), n.clone()));
                let (_, _, t) = data.get(csv).map_err(at)?;
                let any = !matching(t, filter, &vars).map_err(at)?.is_empty();
                vars.pop();
                if !any {
                    continue;
                }
            }
            rows.push((v, n));
        }
        let cols = ev.values(&p.cols, &vars).map_err(at)?;
        let (mut rl, mut cl, mut corner) = (&p.rows, &p.cols, p.corner);
        let (mut rows, mut cols) = (rows, cols);
        if let Some(c) = p.transpose_as {
            if cols.len() > rows.len() {
                (rl, cl, corner) = (&p.cols, &p.rows, c);
                std::mem::swap(&mut rows, &mut cols);
            }
        }
        let corner = fill(corner, &vars, true).map_err(at)?;
        s += if corner.is_empty() { "| |" } else { "| " };
        if !corner.is_empty() {
            let _ = write!(s, "{corner} |");
        }
        for (_, n) in &cols {
            let _ = write!(s, " {n} |");
        }
        let _ = writeln!(s, "\n|---|{}", "---:|".repeat(cols.len()));
        let mut line = |s: &mut String, label: String, cellspec: &Cell, vars: &mut Vars| {
            let _ = write!(s, "| {label} |");
            for (v, n) in &cols {
                vars.push((cl.var, v.clone(), n.clone()));
                let c = cell(&mut ev, cellspec, vars);
                let here = format!("{}={v}", cl.var);
                vars.pop();
                let c = match c.map_err(at)? {
                    Ok(c) => c,
                    Err(why) => match p.missing {
                        Some(m) => m.to_string(),
                        None => return Err(at(format!("no cell at {label}, {here}: {why}"))),
                    },
                };
                let _ = write!(s, " {c} |");
            }
            s.push('\n');
            Ok(())
        };
        for l in shown(data, p.lead, &vars).map_err(at)? {
            let label = line_label(data, l, &mut vars).map_err(at)?;
            line(&mut s, label, &l.cell, &mut vars)?;
        }
        for (v, n) in &rows {
            vars.push((rl.var, v.clone(), n.clone()));
            vars.push(("row", n.clone(), n.clone()));
            let label = {
                let mut ev = Eval {
                    data,
                    sources: Vec::new(),
                };
                cell(&mut ev, &p.label, &mut vars).map_err(at)?
            }
            .map_err(|why| at(format!("no label for {v}: {why}")))?;
            let r = line(&mut s, label, &p.cell, &mut vars);
            vars.truncate(vars.len() - 2);
            r?;
        }
        for l in shown(data, p.extra, &vars).map_err(at)? {
            let label = line_label(data, l, &mut vars).map_err(at)?;
            line(&mut s, label, &l.cell, &mut vars)?;
        }
        s += &fill(p.block_tail, &vars, true).map_err(at)?;
        if p.blocks.is_some() {
            vars.pop();
        }
    }
    Ok(s)
}

/// Draws a [`Chart`]: rows with a row count, of the drawn implementations and the floor probes.
pub(crate) fn chart(data: &Data, c: &Chart) -> Result<String, String> {
    let (_, text, _) = data.get(c.csv)?;
    let rows = parse_csv(text, c.csv.path)?;
    let drawn: Vec<_> = rows
        .iter()
        .filter(|r| {
            r.rows > 0
                && (c.draw.iter().any(|s| s.imp == r.imp) || (c.probes && r.imp == "floor_probe"))
        })
        .collect();
    Ok(svg::Figure {
        panel_w: c.panel_w,
        panel_h: c.panel_h,
        left: c.left,
        title: c.title,
        notes: c.notes,
        panel_title: c.panel_title,
        x_label: c.x_label,
        series: c
            .draw
            .iter()
            .filter(|s| rows.iter().any(|r| r.imp == s.imp))
            .map(|s| Series {
                imp: s.imp.to_string(),
                color: s.color,
                marker: s.marker,
                label: s.label.to_string(),
            })
            .collect(),
        floor_label: c.floor_label,
        floor_from: c.floor_from,
    }
    .render(&drawn))
}

#[cfg(test)]
mod tests;
