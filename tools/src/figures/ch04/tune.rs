//! `bench ch04-tune`: the table of the fastest configurations, and the crossover of the paths.

use super::*;

pub(super) const TUNED_CSV: &str = gpu_file!("ch04_tuned.csv");
pub(super) const TUNE_ALL_CSV: &str = gpu_file!("ch04_tune_all.csv");
pub(super) const TUNE_TABLE: &str = "book/src/figures/ch04-tuned-table.md";
pub(super) const TUNE_FACTS: &str = "book/src/figures/ch04-tune-facts.md";
pub(super) const VERSIONS_TABLE: &str = "book/src/figures/ch04-versions.md";

/// A layer's shape as the tuning files spell it: (H, I, E, k).
pub type Dims = (u64, u64, u64, u64);

/// One candidate timed by `bench ch04-tune`: a line of `ch04_tune_all.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub shape: String,
    pub dims: Dims,
    pub tokens: u64,
    pub path: String,
    pub config: String,
    pub cold_us: f64,
    pub cold_p10_us: f64,
    pub cold_p90_us: f64,
    pub warm_us: f64,
}

/// One bucket of `ch04_tuned.csv`: the fastest (path, configuration), and the rule's.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedBucket {
    pub dims: Dims,
    pub tokens: u64,
    pub path: String,
    pub config: String,
    pub cold_us: f64,
    pub rule_path: String,
    pub rule_config: String,
    pub rule_cold_us: f64,
}

/// `ch04_tuned.csv`: the device its comment line names (`# bench ch04-tune on NVIDIA H200: …`),
/// whether it was a `--quick` run, and the buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedFile {
    pub device: Option<String>,
    pub quick: bool,
    pub buckets: Vec<TunedBucket>,
}

/// A CSV's numeric field, or an error naming the file, the line and the column.
pub(super) fn field_num(t: &Table, r: &crate::csv::Row, c: &str) -> Result<f64, String> {
    let v = &r.fields[t.col(c)?];
    v.parse().map_err(|_| {
        format!(
            "{}:{}: `{v}` in column {c} is not a number",
            t.name(),
            r.line
        )
    })
}

pub(super) fn field_dims(t: &Table, r: &crate::csv::Row) -> Result<Dims, String> {
    let n = |c: &str| field_num(t, r, c).map(|v| v as u64);
    Ok((n("hidden")?, n("intermediate")?, n("experts")?, n("k")?))
}

pub(super) fn field(t: &Table, r: &crate::csv::Row, c: &str) -> Result<String, String> {
    Ok(r.fields[t.col(c)?].clone())
}

pub fn parse_tune_all(text: &str, name: &str) -> Result<Vec<Candidate>, String> {
    let t = Table::parse(text, name)?;
    t.rows()
        .iter()
        .map(|r| {
            Ok(Candidate {
                shape: field(&t, r, "shape")?,
                dims: field_dims(&t, r)?,
                tokens: field_num(&t, r, "tokens")? as u64,
                path: field(&t, r, "path")?,
                config: field(&t, r, "config")?,
                cold_us: field_num(&t, r, "cold_us")?,
                cold_p10_us: field_num(&t, r, "cold_p10_us")?,
                cold_p90_us: field_num(&t, r, "cold_p90_us")?,
                warm_us: field_num(&t, r, "warm_us")?,
            })
        })
        .collect()
}

/// Parses `ch04_tuned.csv`. Its `#` lines are comments (the first says where the table comes
/// from); they are blanked, not removed, so errors keep the file's line numbers.
pub fn parse_tuned(text: &str, name: &str) -> Result<TunedFile, String> {
    let mut device = None;
    let mut quick = false;
    let mut body = String::new();
    for line in text.lines() {
        match line.trim().strip_prefix('#') {
            Some(comment) => {
                if let Some(rest) = comment.trim().strip_prefix("bench ch04-tune on ") {
                    if let Some((d, _)) = rest.split_once(':') {
                        quick |= d.contains("--quick");
                        let d = d.split(" (").next().unwrap_or(d).trim();
                        device = Some(d.to_string());
                    }
                }
                body.push('\n');
            }
            None => {
                body += line;
                body.push('\n');
            }
        }
    }
    let t = Table::parse(&body, name)?;
    let buckets = t
        .rows()
        .iter()
        .map(|r| {
            Ok(TunedBucket {
                dims: field_dims(&t, r)?,
                tokens: field_num(&t, r, "tokens")? as u64,
                path: field(&t, r, "path")?,
                config: field(&t, r, "config")?,
                cold_us: field_num(&t, r, "cold_us")?,
                rule_path: field(&t, r, "rule_path")?,
                rule_config: field(&t, r, "rule_config")?,
                rule_cold_us: field_num(&t, r, "rule_cold_us")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(TunedFile {
        device,
        quick,
        buckets,
    })
}

/// The tiled path, as the CSVs spell it; every other path (`decode`, and any later one such as
/// `decode_grouped`) runs the decode kernels' arithmetic.
pub(super) const TILED: &str = "tiled";

/// One bucket with its candidates: the winner and the rule's choice as timed, and the fastest
/// candidate of each path timed.
#[derive(Clone, Debug)]
pub struct TuneBucket {
    pub tokens: u64,
    pub winner: Candidate,
    pub rule: Candidate,
    pub best: Vec<Candidate>,
}

impl TuneBucket {
    /// The rule's cold median over the winner's.
    pub fn rule_over_winner(&self) -> f64 {
        self.rule.cold_us / self.winner.cold_us
    }
    /// The fastest candidate of `path`, if that path was timed.
    pub fn best_of(&self, path: &str) -> Option<&Candidate> {
        self.best.iter().find(|c| c.path == path)
    }
    /// The fastest candidate of any decode path.
    pub fn best_decode_any(&self) -> Option<&Candidate> {
        self.best
            .iter()
            .filter(|c| c.path != TILED)
            .min_by(|a, b| a.cold_us.total_cmp(&b.cold_us))
    }
    /// The fastest tile's cold median over the fastest of `path`, when both were timed.
    pub fn tiled_over(&self, path: &str) -> Option<f64> {
        Some(self.best_of(TILED)?.cold_us / self.best_of(path)?.cold_us)
    }
    /// The fastest tile over the fastest of any decode path.
    pub fn tiled_over_decode_any(&self) -> Option<f64> {
        Some(self.best_of(TILED)?.cold_us / self.best_decode_any()?.cold_us)
    }
}

/// One shape's buckets, by tokens.
#[derive(Clone, Debug)]
pub struct TuneShape {
    /// As `ch04_tune_all.csv` names it (`qwen3_30b_a3b`).
    pub name: String,
    pub dims: Dims,
    /// The paths timed at this shape: `tiled`, `decode`, then any other in the file's order.
    pub paths: Vec<String>,
    pub buckets: Vec<TuneBucket>,
}

impl TuneShape {
    /// Pairs per expert on average at `tokens`: T·k / E.
    pub fn pairs_per_expert(&self, tokens: u64) -> f64 {
        (tokens * self.dims.3) as f64 / self.dims.2.max(1) as f64
    }
}

/// The same (path, configuration).
pub(super) fn same_choice(c: &Candidate, path: &str, config: &str) -> bool {
    c.path == path && c.config == config
}

/// Both files joined: per shape (in the tuned table's order) and bucket, the candidates behind
/// each row. The two files must come from one run: every row's winner and rule's choice are
/// among its bucket's candidates with the same cold median, the winner is the fastest of them,
/// and every bucket timed has a row.
pub fn tune_shapes(tuned: &TunedFile, all: &[Candidate]) -> Result<Vec<TuneShape>, String> {
    // Two files' medians written with three decimals from the same number.
    const SAME_US: f64 = 5e-4;
    let mut shapes: Vec<TuneShape> = Vec::new();
    for b in &tuned.buckets {
        let here: Vec<&Candidate> = all
            .iter()
            .filter(|c| c.dims == b.dims && c.tokens == b.tokens)
            .collect();
        let at = format!(
            "H {}, I {}, E {}, k {}, T {}",
            b.dims.0, b.dims.1, b.dims.2, b.dims.3, b.tokens
        );
        let Some(first) = here.first() else {
            return Err(format!(
                "{TUNED_CSV} has a row for {at} and {TUNE_ALL_CSV} no candidate: not one run"
            ));
        };
        let name = first.shape.clone();
        let find = |path: &str, config: &str, cold: f64, what: &str| -> Result<Candidate, String> {
            let c = here
                .iter()
                .find(|c| same_choice(c, path, config))
                .ok_or_else(|| format!("{at}: {what} {path} {config} is not in {TUNE_ALL_CSV}"))?;
            if (c.cold_us - cold).abs() > SAME_US {
                return Err(format!(
                    "{at}: {what} {path} {config} took {cold} µs in {TUNED_CSV} and {} in {TUNE_ALL_CSV}: not one run",
                    c.cold_us
                ));
            }
            Ok((*c).clone())
        };
        let winner = find(&b.path, &b.config, b.cold_us, "the winner")?;
        let rule = find(
            &b.rule_path,
            &b.rule_config,
            b.rule_cold_us,
            "the rule's choice",
        )?;
        if let Some(faster) = here.iter().find(|c| c.cold_us < winner.cold_us) {
            return Err(format!(
                "{at}: {} {} ({} µs) is faster than the winner {} {} ({} µs)",
                faster.path,
                faster.config,
                faster.cold_us,
                winner.path,
                winner.config,
                winner.cold_us
            ));
        }
        let mut best: Vec<Candidate> = Vec::new();
        for c in &here {
            match best.iter_mut().find(|b| b.path == c.path) {
                Some(b) if c.cold_us < b.cold_us => *b = (*c).clone(),
                Some(_) => {}
                None => best.push((*c).clone()),
            }
        }
        let bucket = TuneBucket {
            tokens: b.tokens,
            winner,
            rule,
            best,
        };
        match shapes.iter_mut().find(|s| s.dims == b.dims) {
            Some(s) => {
                if s.buckets.iter().any(|x| x.tokens == b.tokens) {
                    return Err(format!("{TUNED_CSV}: two rows for {at}"));
                }
                s.buckets.push(bucket);
            }
            None => shapes.push(TuneShape {
                name,
                dims: b.dims,
                paths: Vec::new(),
                buckets: vec![bucket],
            }),
        }
    }
    for c in all {
        let listed = shapes
            .iter()
            .any(|s| s.dims == c.dims && s.buckets.iter().any(|b| b.tokens == c.tokens));
        if !listed {
            return Err(format!(
                "{TUNE_ALL_CSV}: {} at T {} has no row in {TUNED_CSV}: not one run",
                c.shape, c.tokens
            ));
        }
    }
    for s in &mut shapes {
        s.buckets.sort_by_key(|b| b.tokens);
        let mut paths = vec![TILED.to_string(), "decode".to_string()];
        for c in all.iter().filter(|c| c.dims == s.dims) {
            if !paths.contains(&c.path) {
                paths.push(c.path.clone());
            }
        }
        paths.retain(|p| s.buckets.iter().any(|b| b.best_of(p).is_some()));
        s.paths = paths;
    }
    Ok(shapes)
}

/// `qwen3_30b_a3b` → `Qwen3-30B-A3B`; a name with its sizes in it (`glm_h4096_…`) → its short
/// title (`GLM-like`).
pub(super) fn tune_title(shape: &str) -> String {
    if super::super::ch02::dims(shape).is_some() {
        return short_title(shape);
    }
    let mut parts = shape.split('_');
    let first = parts.next().unwrap_or(shape);
    let first = match first.strip_prefix("qwen") {
        Some(v) => format!("Qwen{v}"),
        None => first.to_string(),
    };
    std::iter::once(first)
        .chain(parts.map(|p| p.to_uppercase()))
        .collect::<Vec<_>>()
        .join("-")
}

/// A ratio or a count of pairs per expert with about two significant digits: `0.06`, `1.8`, `32`.
pub(super) fn fmt_small(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `1, 8, 64 and 512`.
pub(super) fn and_list(v: &[String]) -> String {
    match v {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The tuning table: one block per shape, one column per batch bucket.
pub fn tune_table(shapes: &[TuneShape], device: Option<&str>) -> String {
    let mut s = format!(
        "Cold µs per layer call (the L2 flushed before each replay), median (p10–p90), one run of \
         `bench ch04-tune`{}; \"–\": the path was not timed at that batch.\n\n",
        device.map(|d| format!(" on the {d}")).unwrap_or_default()
    );
    for shape in shapes {
        let (h, i, e, k) = shape.dims;
        let _ = writeln!(
            s,
            "**{}: H {h}, I {i}, E {e}, k {k}**\n",
            tune_title(&shape.name)
        );
        let _ = writeln!(
            s,
            "| | {} |",
            shape
                .buckets
                .iter()
                .map(|b| format!("{} token{}", b.tokens, if b.tokens == 1 { "" } else { "s" }))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(s, "|---|{}", "---:|".repeat(shape.buckets.len()));
        let line = |s: &mut String, label: &str, cell: &dyn Fn(&TuneBucket) -> String| {
            let cells: Vec<String> = shape.buckets.iter().map(cell).collect();
            let _ = writeln!(s, "| {label} | {} |", cells.join(" | "));
        };
        let timed = |c: &Candidate| {
            format!(
                "{} ({}–{})",
                fmt_us(c.cold_us),
                fmt_us(c.cold_p10_us),
                fmt_us(c.cold_p90_us)
            )
        };
        line(&mut s, "pairs per expert, T·k / E", &|b| {
            fmt_small(shape.pairs_per_expert(b.tokens))
        });
        line(&mut s, "fastest: path, configuration", &|b| {
            format!("**{} {}**", b.winner.path, b.winner.config)
        });
        line(&mut s, "fastest: cold µs", &|b| timed(&b.winner));
        line(&mut s, "the rule alone: path, configuration", &|b| {
            format!("{} {}", b.rule.path, b.rule.config)
        });
        line(&mut s, "the rule alone: cold µs", &|b| timed(&b.rule));
        line(&mut s, "the rule ÷ the fastest", &|b| {
            format!("{:.2}×", b.rule_over_winner())
        });
        for path in &shape.paths {
            let what = if path == TILED { "tile" } else { "geometry" };
            line(
                &mut s,
                &format!("fastest {path}: {what} · cold µs"),
                &|b| {
                    b.best_of(path)
                        .map(|c| format!("{} · {}", c.config, fmt_us(c.cold_us)))
                        .unwrap_or("–".into())
                },
            );
        }
        for path in shape.paths.iter().filter(|p| *p != TILED) {
            line(&mut s, &format!("fastest tiled ÷ fastest {path}"), &|b| {
                b.tiled_over(path)
                    .map(|x| format!("{x:.2}×"))
                    .unwrap_or("–".into())
            });
        }
        s.push('\n');
    }
    s
}

/// The numbers the page quotes from the tuning run. Overall: `tune_device`, `tune_quick`
/// (`yes` or `no`), `tune_buckets` (`1, 8, 64, 512 and 4096`), `tune_timings`. Per shape
/// (`qwen3`, `glm`) and bucket (`qwen3_tune_t64_…`): the winner (`_path`, `_config`, `_cold`),
/// the rule's choice (`_rule_path`, `_rule_config`, `_rule_cold`), the rule over the winner
/// (`_speedup`), the fastest of each path timed (`_best_tiled`, `_best_tiled_cold`,
/// `_best_decode`, `_best_decode_cold`, `_best_decode_grouped`, …) and the tile's time over each
/// other path's (`_tiled_over_decode`, `_decode_over_tiled`, …), pairs per expert (`_ppe`). Per
/// shape: the crossover, measured (`_decode_last`: a decode path, `decode` or any other that is
/// not `tiled`, won every bucket from the smallest up to it; `_tiled_first`: the next bucket,
/// which the tiled path won; with their pairs
/// per expert `_ppe` and the margin there between the fastest tile and the fastest decode
/// candidate of any decode path, `_decode_last_tiled_over_decode`,
/// `_tiled_first_decode_over_tiled`) and as the rule drew it (`_rule_decode_last`,
/// `_rule_tiled_first`); in how many buckets the rule picked the winner's path (`_path_agrees`,
/// of `_buckets`) and configuration too (`_choice_agrees`); the rule's tile (`_rule_tile`) and
/// in how many buckets it was the fastest tile (`_rule_tile_fastest`, of `_tiled_buckets`); the
/// largest speedup over the rule (`_speedup_max`, at `_speedup_max_tokens`, `…_ppe`, `…_config`,
/// `…_rule_config`), and the largest where both ran the decode path (`_decode_speedup_max`:
/// what the decode geometry is worth).
pub fn tune_facts(shapes: &[TuneShape], tuned: &TunedFile, timings: usize, f: &mut Facts) {
    let src = format!("{TUNED_CSV} and {TUNE_ALL_CSV}");
    let src = src.as_str();
    if let Some(d) = &tuned.device {
        f.add("tune_device", d.clone(), TUNED_CSV);
    }
    f.add(
        "tune_quick",
        if tuned.quick { "yes" } else { "no" },
        TUNED_CSV,
    );
    let buckets: BTreeSet<u64> = shapes
        .iter()
        .flat_map(|s| s.buckets.iter().map(|b| b.tokens))
        .collect();
    let buckets: Vec<String> = buckets.iter().map(|t| t.to_string()).collect();
    f.add("tune_buckets", and_list(&buckets), TUNED_CSV);
    f.add("tune_timings", timings.to_string(), TUNE_ALL_CSV);
    let ratio = |x: f64| format!("{x:.2}");
    for shape in shapes {
        let s = short(&shape.name);
        let n = shape.buckets.len();
        for b in &shape.buckets {
            let p = format!("{s}_tune_t{}", b.tokens);
            f.add(
                format!("{p}_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            f.add(format!("{p}_path"), b.winner.path.clone(), src);
            f.add(format!("{p}_config"), b.winner.config.clone(), src);
            f.add(format!("{p}_cold"), fmt_us(b.winner.cold_us), src);
            f.add(format!("{p}_rule_path"), b.rule.path.clone(), src);
            f.add(format!("{p}_rule_config"), b.rule.config.clone(), src);
            f.add(format!("{p}_rule_cold"), fmt_us(b.rule.cold_us), src);
            f.add(format!("{p}_speedup"), ratio(b.rule_over_winner()), src);
            for path in &shape.paths {
                if let Some(c) = b.best_of(path) {
                    f.add(format!("{p}_best_{path}"), c.config.clone(), src);
                    f.add(format!("{p}_best_{path}_cold"), fmt_us(c.cold_us), src);
                }
            }
            for path in shape.paths.iter().filter(|p| *p != TILED) {
                if let Some(x) = b.tiled_over(path) {
                    f.add(format!("{p}_tiled_over_{path}"), ratio(x), src);
                    f.add(format!("{p}_{path}_over_tiled"), ratio(1.0 / x), src);
                }
            }
        }
        let p = format!("{s}_tune");
        f.add(format!("{p}_buckets"), n.to_string(), src);
        // The measured crossover: a decode path won every bucket from the smallest up to
        // `decode_last`, and the tiled path the next one, `tiled_first`.
        let decode_run = shape
            .buckets
            .iter()
            .take_while(|b| b.winner.path != TILED)
            .count();
        let last_decode = decode_run.checked_sub(1);
        if let Some(i) = last_decode {
            let b = &shape.buckets[i];
            f.add(format!("{p}_decode_last"), b.tokens.to_string(), src);
            f.add(
                format!("{p}_decode_last_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            if let Some(x) = b.tiled_over_decode_any() {
                f.add(format!("{p}_decode_last_tiled_over_decode"), ratio(x), src);
            }
        }
        if let Some(b) = shape.buckets.get(decode_run) {
            f.add(format!("{p}_tiled_first"), b.tokens.to_string(), src);
            f.add(
                format!("{p}_tiled_first_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            if let Some(x) = b.tiled_over_decode_any() {
                f.add(
                    format!("{p}_tiled_first_decode_over_tiled"),
                    ratio(1.0 / x),
                    src,
                );
            }
        }
        // The rule's crossover on the same buckets.
        if let Some(b) = shape.buckets.iter().rev().find(|b| b.rule.path != TILED) {
            f.add(format!("{p}_rule_decode_last"), b.tokens.to_string(), src);
        }
        if let Some(b) = shape.buckets.iter().find(|b| b.rule.path == TILED) {
            f.add(format!("{p}_rule_tiled_first"), b.tokens.to_string(), src);
        }
        let count = |pred: &dyn Fn(&TuneBucket) -> bool| {
            shape.buckets.iter().filter(|b| pred(b)).count().to_string()
        };
        f.add(
            format!("{p}_path_agrees"),
            count(&|b| b.rule.path == b.winner.path),
            src,
        );
        f.add(
            format!("{p}_choice_agrees"),
            count(&|b| same_choice(&b.rule, &b.winner.path, &b.winner.config)),
            src,
        );
        // The rule's tile: the same at every bucket it tiles (the rule does not look at T).
        let mut rule_tiles: Vec<&str> = Vec::new();
        for b in shape.buckets.iter().filter(|b| b.rule.path == TILED) {
            if !rule_tiles.contains(&b.rule.config.as_str()) {
                rule_tiles.push(&b.rule.config);
            }
        }
        if !rule_tiles.is_empty() {
            f.add(format!("{p}_rule_tile"), rule_tiles.join(" / "), src);
            let tiled: Vec<&Candidate> = shape
                .buckets
                .iter()
                .filter_map(|b| b.best_of(TILED))
                .collect();
            f.add(
                format!("{p}_rule_tile_fastest"),
                tiled
                    .iter()
                    .filter(|c| rule_tiles.contains(&c.config.as_str()))
                    .count()
                    .to_string(),
                src,
            );
            f.add(format!("{p}_tiled_buckets"), tiled.len().to_string(), src);
        }
        // On the decode path, what the geometry is worth: the rule's default against the
        // fastest, where both ran the decode path.
        let decode_gain = shape
            .buckets
            .iter()
            .filter(|b| b.rule.path == "decode" && b.winner.path == "decode")
            .map(TuneBucket::rule_over_winner)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        if let Some(x) = decode_gain {
            f.add(format!("{p}_decode_speedup_max"), ratio(x), src);
        }
        if let Some(b) = shape
            .buckets
            .iter()
            .max_by(|a, b| a.rule_over_winner().total_cmp(&b.rule_over_winner()))
        {
            f.add(format!("{p}_speedup_max"), ratio(b.rule_over_winner()), src);
            f.add(format!("{p}_speedup_max_tokens"), b.tokens.to_string(), src);
            f.add(
                format!("{p}_speedup_max_ppe"),
                fmt_small(shape.pairs_per_expert(b.tokens)),
                src,
            );
            f.add(
                format!("{p}_speedup_max_config"),
                format!("{} {}", b.winner.path, b.winner.config),
                src,
            );
            f.add(
                format!("{p}_speedup_max_rule_config"),
                format!("{} {}", b.rule.path, b.rule.config),
                src,
            );
        }
    }
}

/// Chapter 4's tile configurations, one a line: the list the kernels stamp their entry points
/// from and the library reads (`kernels/ch04/configs.def`), here for its `version` column.
const CONFIGS_DEF: &str = include_str!("../../../../kernels/ch04/configs.def");

/// The kernel version of a tiled configuration (the page's numbering, 1 to 11), as
/// `kernels/ch04/configs.def` lists it; a `_m64` suffix (a larger BLOCK_M) keeps the version of
/// its tile. `None` for a name the list does not hold (a configuration since removed, whose rows
/// the committed tuning table still records).
pub fn tile_version(config: &str) -> Option<u8> {
    let base = match config.rsplit_once("_m") {
        Some((base, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => base,
        _ => config,
    };
    moe_kernels_build::parse_macro_list(CONFIGS_DEF)
        .into_iter()
        .find(|(_, args)| args.first().map(String::as_str) == Some(base))
        .and_then(|(_, args)| args.get(1)?.parse().ok())
}

/// The versions compared, (a, b) for "version a ÷ version b": each with the one before it,
/// versions 4 and 5 (Hopper's) with version 3 (the last portable one), and versions 7 to 9 with
/// version 5 (whose tiles they keep), version 10 with version 8 (of which it is the persistent
/// form), version 11 with version 10 (whose items it hands out as blocks free up). The table's
/// ratio rows and the facts `{shape}_t{T}_v{a}_over_v{b}`.
pub(super) const VERSION_RATIOS: [(u8, u8); 15] = [
    (1, 2),
    (2, 3),
    (3, 4),
    (3, 5),
    (4, 5),
    (5, 6),
    (6, 7),
    (7, 8),
    (5, 7),
    (5, 8),
    (8, 9),
    (5, 9),
    (8, 10),
    (5, 10),
    (10, 11),
];

/// The fastest tiled candidate of each kernel version, by (shape, batch, version).
pub type ByVersion<'a> = BTreeMap<(String, u64, u8), &'a Candidate>;

/// Per shape and batch, the fastest tiled candidate of each kernel version.
pub fn fastest_by_version(all: &[Candidate]) -> ByVersion<'_> {
    let mut best = ByVersion::new();
    for c in all.iter().filter(|c| c.path == "tiled") {
        let Some(v) = tile_version(&c.config) else {
            continue;
        };
        let slot = best.entry((c.shape.clone(), c.tokens, v)).or_insert(c);
        if c.cold_us < slot.cold_us {
            *slot = c;
        }
    }
    best
}

/// The table of the tiled kernel's versions: per shape (in the tuning table's order), the
/// fastest configuration of each version at every batch (cold µs), and what each version gained
/// over the one before.
pub fn versions_table(shapes: &[TuneShape], best: &ByVersion) -> String {
    let mut s = format!(
        "The tiled path's fastest configuration of each kernel version (any BLOCK_M), cold µs \
         per layer call, median, from `bench ch04-tune` \
         ({TUNE_ALL_CSV}: every candidate of one batch from one run; \
         – where a version was not timed).\n"
    );
    for shape in shapes.iter().map(|t| &t.name) {
        let tokens: BTreeSet<u64> = best.keys().filter(|k| &k.0 == shape).map(|k| k.1).collect();
        s += &format!("\n**{}**\n\n| version |", tune_title(shape));
        for t in &tokens {
            s += &format!(" {t} {} |", if *t == 1 { "token" } else { "tokens" });
        }
        s += "\n|---|";
        s += &"---:|".repeat(tokens.len());
        s += "\n";
        let get = |t: u64, v: u8| best.get(&(shape.clone(), t, v));
        for (v, about) in [
            (1, "1: one stage"),
            (2, "2: stages in flight"),
            (3, "3: a grid of warps"),
            (4, "4: warpgroup MMA (sm_90a)"),
            (5, "5: 4 in the 128-byte swizzle"),
            (
                6,
                "6: 5 waiting for each slice's MMA, copies a slice deeper",
            ),
            (7, "7: 5 or 6, the weights through TMA"),
            (8, "8: 7, warp-specialized"),
            (9, "9: 8 in clusters of two, the weight slice multicast"),
            (10, "10: 8, persistent"),
            (11, "11: 10, items handed out as blocks free up"),
        ] {
            s += &format!("| {about} |");
            for &t in &tokens {
                s += &match get(t, v) {
                    Some(c) => format!(" {:.0} `{}` |", c.cold_us, c.config),
                    None => " – |".into(),
                };
            }
            s += "\n";
        }
        for (a, b) in VERSION_RATIOS {
            s += &format!("| version {a} ÷ version {b} |");
            for &t in &tokens {
                s += &match (get(t, a), get(t, b)) {
                    (Some(x), Some(y)) => format!(" {:.2}× |", x.cold_us / y.cold_us),
                    _ => " – |".into(),
                };
            }
            s += "\n";
        }
    }
    s
}

/// The versions' numbers for the prose: `{shape}_t{T}_v{N}_cold`, `…_v{N}_config` and
/// `{shape}_t{T}_v{A}_over_v{B}` for every pair of `VERSION_RATIOS`.
pub fn version_facts(best: &ByVersion, f: &mut Facts) {
    for ((shape, t, v), c) in best {
        let s = short(shape);
        f.add(
            format!("{s}_t{t}_v{v}_cold"),
            format!("{:.0}", c.cold_us),
            TUNE_ALL_CSV,
        );
        f.add(
            format!("{s}_t{t}_v{v}_config"),
            c.config.clone(),
            TUNE_ALL_CSV,
        );
        for (a, b) in VERSION_RATIOS {
            if *v != b {
                continue;
            }
            if let Some(ca) = best.get(&(shape.clone(), *t, a)) {
                f.add(
                    format!("{s}_t{t}_v{a}_over_v{b}"),
                    format!("{:.2}", ca.cold_us / c.cold_us),
                    TUNE_ALL_CSV,
                );
            }
        }
    }
}

/// `ch04_tune_all.csv`, for the facts specs.
pub(super) const TUNE_ALL: Csv = Csv::at(TUNE_ALL_CSV);
/// This file, as the specs' errors name it.
pub(super) const TUNE_HERE: &str = "tools/src/figures/ch04/tune.rs";
/// A decode candidate's cold median at `{shape}` and `{t}`.
macro_rules! decode {
    ($config:literal) => {
        Value::col(
            &TUNE_ALL,
            concat!("shape={shape} tokens={t} path=decode config=", $config),
            "cold_us",
        )
    };
}
const NA: Value = decode!("w4_c1_na_swiglu");
const L1: Value = decode!("w4_c1_swiglu");
const SUMK: Value = decode!("w4_c1_na");

/// The decode path's two choices that the table settles, from `ch04_tune_all.csv`: the weight
/// loads that skip the L1 (`w4_c1_na_swiglu` against its twin `w4_c1_swiglu`) and the sum over k
/// in its own kernel (`w4_c1_na_swiglu` against `w4_c1_na`, the sum fused into GEMM 2), at every
/// batch where all three were timed: `{shape}_t{T}_decode_{config}_cold`,
/// `{shape}_t{T}_decode_l1_over_na` and `{shape}_t{T}_decode_sumk_over_swiglu`.
#[rustfmt::skip]
pub(super) const DECODE_FACTS: &[Item] = &[
    each!(Loop::csv("shape", &TUNE_ALL, "", "shape").named(Name::Prefix), [
        each!(Loop::csv("t", &TUNE_ALL, "shape={shape}", "tokens"), [
            if_rows!(&TUNE_ALL, [
                "shape={shape} tokens={t} path=decode config=w4_c1_na_swiglu",
                "shape={shape} tokens={t} path=decode config=w4_c1_swiglu",
                "shape={shape} tokens={t} path=decode config=w4_c1_na",
            ], [
                fact!("{shape}_t{t}_decode_w4_c1_na_swiglu_cold", NA, Fmt::Us),
                fact!("{shape}_t{t}_decode_w4_c1_swiglu_cold", L1, Fmt::Us),
                fact!("{shape}_t{t}_decode_w4_c1_na_cold", SUMK, Fmt::Us),
                fact!("{shape}_t{t}_decode_l1_over_na", Value::Ratio(&L1, &NA), Fmt::Fixed(2)),
                fact!("{shape}_t{t}_decode_sumk_over_swiglu", Value::Ratio(&SUMK, &NA), Fmt::Fixed(2)),
            ]),
        ]),
    ]),
];

/// The tuning table and its facts, whenever both files of `bench ch04-tune` are committed.
pub(super) fn tune_files(root: &Path) -> Result<Vec<Generated>, String> {
    let have = [TUNED_CSV, TUNE_ALL_CSV].map(|p| root.join(p).exists());
    if have != [true, true] {
        let committed: Vec<&str> = [TUNE_TABLE, VERSIONS_TABLE, TUNE_FACTS]
            .into_iter()
            .filter(|p| root.join(p).exists())
            .collect();
        if !committed.is_empty() || have.contains(&true) {
            return Err(format!(
                "{TUNED_CSV} and {TUNE_ALL_CSV} come from one run of `bench ch04-tune` and must \
                 both be committed{}",
                if committed.is_empty() {
                    String::new()
                } else {
                    format!(" ({} need them)", committed.join(", "))
                }
            ));
        }
        eprintln!("plot: ch04: no {TUNED_CSV} yet (bench ch04-tune makes it): the tuning table is left out");
        return Ok(Vec::new());
    }
    let tuned = parse_tuned(&read(root, TUNED_CSV)?, TUNED_CSV)?;
    let all = parse_tune_all(&read(root, TUNE_ALL_CSV)?, TUNE_ALL_CSV)?;
    if tuned.buckets.is_empty() {
        return Err(format!("{TUNED_CSV} has no rows"));
    }
    let shapes = tune_shapes(&tuned, &all)?;
    let mut f = Facts::default();
    tune_facts(&shapes, &tuned, all.len(), &mut f);
    let by_version = fastest_by_version(&all);
    version_facts(&by_version, &mut f);
    let mut d = Data::default();
    d.add(&TUNE_ALL, &read(root, TUNE_ALL_CSV)?)?;
    spec::facts(&d, TUNE_HERE, DECODE_FACTS, &mut f)?;
    Ok(vec![
        Generated {
            path: TUNE_TABLE.into(),
            content: tune_table(&shapes, tuned.device.as_deref()),
        },
        Generated {
            path: VERSIONS_TABLE.into(),
            content: versions_table(&shapes, &by_version),
        },
        Generated {
            path: TUNE_FACTS.into(),
            content: f.render("Chapter 4's tuning numbers"),
        },
    ])
}
