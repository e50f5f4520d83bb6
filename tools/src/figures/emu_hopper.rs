//! The runtime page's table of chapter 4's Hopper versions on the emulator: every configuration
//! of versions 4 to 11 on one small layer beside the portable path, from
//! `bench/results/emu/ch04_versions.csv` (`tools/bench/run emu-hopper`, on a CPU). Made from it:
//! `runtime-emu-hopper.md` (one row per configuration) and the facts the page quotes
//! (`runtime-emu-facts.md`: the layer, the CPU, the slowest Hopper configuration against the
//! portable path).

use super::facts::Facts;
use super::{read, Generated};
use crate::csv::Table;
use std::fmt::Write as _;
use std::path::Path;

pub const CSV: &str = "bench/results/emu/ch04_versions.csv";
const TABLE_MD: &str = "book/src/figures/runtime-emu-hopper.md";
const FACTS_MD: &str = "book/src/figures/runtime-emu-facts.md";

/// One row of the CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub imp: String,
    pub config: String,
    pub version: u32,
    pub block_m: u32,
    pub seconds: f64,
    pub vs_portable: f64,
}

/// The CSV's rows, checked: every configuration's ratio is its time over the portable path's at
/// its BLOCK_M, and each BLOCK_M has its portable row.
pub fn parse(text: &str) -> Result<(Vec<Row>, Table), String> {
    let t = Table::parse(text, CSV)?;
    let mut rows = Vec::new();
    for rec in t.records() {
        let num = |c: &str| -> Result<f64, String> {
            rec(c)
                .parse::<f64>()
                .map_err(|e| format!("{CSV}: {c} `{}`: {e}", rec(c)))
        };
        let row = Row {
            imp: rec("impl"),
            config: rec("config"),
            version: num("version")? as u32,
            block_m: num("block_m")? as u32,
            seconds: num("seconds")?,
            vs_portable: num("vs_portable")?,
        };
        let portable = num("portable_seconds")?;
        if !(row.seconds > 0.0 && portable > 0.0) {
            return Err(format!(
                "{CSV}: {}: a time that is not positive",
                row.config
            ));
        }
        if (row.seconds / portable - row.vs_portable).abs() > 0.002 {
            return Err(format!(
                "{CSV}: {}: vs_portable {} is not seconds / portable_seconds",
                row.config, row.vs_portable
            ));
        }
        rows.push(row);
    }
    for bm in rows.iter().map(|r| r.block_m).collect::<Vec<_>>() {
        if !rows.iter().any(|r| r.block_m == bm && r.imp == "portable") {
            return Err(format!("{CSV}: no portable row at BLOCK_M {bm}"));
        }
    }
    if !rows.iter().any(|r| r.imp == "hopper") {
        return Err(format!("{CSV}: no Hopper configuration"));
    }
    Ok((rows, t))
}

/// The table: one row per configuration, the portable path's first at each BLOCK_M.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| BLOCK_M | version | configuration | emulator time (s) | × the portable path's |\n\
         |---:|---:|---|---:|---:|\n",
    );
    let mut bms: Vec<u32> = rows.iter().map(|r| r.block_m).collect();
    bms.sort_unstable();
    bms.dedup();
    for bm in bms {
        let mut at: Vec<&Row> = rows.iter().filter(|r| r.block_m == bm).collect();
        // The portable path, then version 1's tile, then the Hopper versions in order.
        at.sort_by_key(|r| (r.imp != "portable", r.imp != "default", r.version));
        for r in at {
            let name = match r.imp.as_str() {
                "portable" => format!("`{}` (the portable path)", r.config),
                "default" => format!("`{}` (the emulator's default)", r.config),
                _ => format!("`{}`", r.config),
            };
            let _ = writeln!(
                s,
                "| {bm} | {} | {name} | {:.3} | {:.2} |",
                r.version, r.seconds, r.vs_portable
            );
        }
    }
    s
}

pub fn generate(root: &Path) -> Result<Vec<Generated>, String> {
    let (rows, t) = parse(&read(root, CSV)?)?;
    let mut f = Facts::default();
    let first = |c: &str| t.records().next().map(|r| r(c)).unwrap_or_default();
    f.add("emu_hopper_hidden", first("hidden"), CSV);
    f.add("emu_hopper_intermediate", first("intermediate"), CSV);
    f.add("emu_hopper_experts", first("experts"), CSV);
    f.add("emu_hopper_tokens", first("tokens"), CSV);
    f.add("emu_hopper_threads", first("threads"), CSV);
    f.add("emu_hopper_host", first("host"), CSV);
    let hopper = rows.iter().filter(|r| r.imp == "hopper");
    let worst = hopper
        .clone()
        .max_by(|a, b| a.vs_portable.total_cmp(&b.vs_portable))
        .expect("parse checks there is one");
    f.add(
        "emu_hopper_worst_ratio",
        format!("{:.1}", worst.vs_portable),
        CSV,
    );
    f.add("emu_hopper_worst_config", worst.config.clone(), CSV);
    f.add("emu_hopper_worst_version", worst.version.to_string(), CSV);
    f.add("emu_hopper_configs", hopper.count().to_string(), CSV);
    Ok(vec![
        Generated {
            path: TABLE_MD.into(),
            content: table(&rows),
        },
        Generated {
            path: FACTS_MD.into(),
            content: f.render("The runtime page's numbers of the emulator's Hopper versions"),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "impl,config,version,block_m,hidden,intermediate,experts,tokens,k,seconds,portable_seconds,vs_portable,threads,host\n";

    fn csv(lines: &[&str]) -> String {
        let mut s = HEAD.to_string();
        for l in lines {
            s += l;
            s.push('\n');
        }
        s
    }

    #[test]
    fn the_table_puts_the_portable_path_first_and_the_facts_name_the_slowest() {
        let text = csv(&[
            "hopper,g1_x_ws_mc,9,64,512,256,8,128,2,1.2,0.6,2.000,2,cpu",
            "default,w4_k64_n1,1,64,512,256,8,128,2,0.6,0.6,1.000,2,cpu",
            "portable,w2x2_k64_n4_s3,3,64,512,256,8,128,2,0.6,0.6,1.000,2,cpu",
            "hopper,g1_x,5,64,512,256,8,128,2,0.66,0.6,1.100,2,cpu",
        ]);
        let (rows, _) = parse(&text).unwrap();
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2].contains("the portable path"), "{t}");
        assert!(lines[3].contains("the emulator's default"), "{t}");
        assert!(
            lines[4].contains("`g1_x`") && lines[4].contains("| 1.10 |"),
            "{t}"
        );
        assert!(
            lines[5].contains("`g1_x_ws_mc`") && lines[5].contains("| 2.00 |"),
            "{t}"
        );
        let dir = std::env::temp_dir().join(format!("emu_hopper_fig_{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bench/results/emu")).unwrap();
        std::fs::write(dir.join(CSV), &text).unwrap();
        let files = generate(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let facts = &files[1].content;
        assert!(
            facts.contains("ANCHOR: emu_hopper_worst_config\ng1_x_ws_mc\n"),
            "{facts}"
        );
        assert!(
            facts.contains("ANCHOR: emu_hopper_worst_ratio\n2.0\n"),
            "{facts}"
        );
        assert!(facts.contains("ANCHOR: emu_hopper_configs\n2\n"), "{facts}");
    }

    #[test]
    fn a_ratio_that_is_not_the_times_or_a_missing_portable_row_is_refused() {
        let bad_ratio = csv(&[
            "portable,p,3,64,512,256,8,128,2,0.6,0.6,1.000,2,cpu",
            "hopper,h,8,64,512,256,8,128,2,0.9,0.6,1.100,2,cpu",
        ]);
        assert!(parse(&bad_ratio)
            .unwrap_err()
            .contains("is not seconds / portable_seconds"));
        let no_portable = csv(&["hopper,h,8,128,512,256,8,128,2,0.9,0.6,1.500,2,cpu"]);
        assert!(parse(&no_portable)
            .unwrap_err()
            .contains("no portable row at BLOCK_M 128"));
    }
}
