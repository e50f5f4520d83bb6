//! The PyTorch peers' raw samples (`tools/peers/*.py --samples FILE`), summarised here with the
//! same statistics as our own measurements ([`moe_kernels::measure::Stats`]), so a median means
//! one thing in every row.
//!
//! The samples file is a CSV: the identifying columns of `tools/bench/columns.txt` (`chapter`,
//! `shape`, `impl`, `rows`, `launches`, `device`), then `cold_us` and `warm_us`, each a
//! space-separated list of microseconds.

use moe_kernels::measure::{Measurement, Stats};

/// One peer measurement: who, and its samples.
#[derive(Debug)]
pub struct PeerSamples {
    pub chapter: String,
    pub shape: String,
    pub imp: String,
    pub rows: usize,
    pub device: String,
    pub m: Measurement,
}

pub fn parse(text: &str, name: &str) -> Result<Vec<PeerSamples>, String> {
    let table = moe_tools::csv::Table::parse(text, name)?;
    let header = table.header().1;
    let (ch, sh, im, ro, la, de, co, wa) = (
        table.col("chapter")?,
        table.col("shape")?,
        table.col("impl")?,
        table.col("rows")?,
        table.col("launches")?,
        table.col("device")?,
        table.col("cold_us")?,
        table.col("warm_us")?,
    );
    table
        .rows()
        .iter()
        .map(|row| {
            let f = &row.fields;
            let at = format!("{name}:{}", row.line);
            let samples = |c: usize| -> Result<Stats, String> {
                let v: Vec<f64> = f[c]
                    .split_whitespace()
                    .map(|x| {
                        x.parse::<f64>()
                            .map_err(|_| format!("{at}: `{x}` is not a time"))
                    })
                    .collect::<Result<_, _>>()?;
                Stats::of(v).ok_or(format!("{at}: no samples in `{}`", header[c]))
            };
            Ok(PeerSamples {
                chapter: f[ch].clone(),
                shape: f[sh].clone(),
                imp: f[im].clone(),
                rows: f[ro].parse().map_err(|_| format!("{at}: bad rows"))?,
                device: f[de].clone(),
                m: Measurement {
                    cold: samples(co)?,
                    warm: samples(wa)?,
                    launches: f[la].parse().map_err(|_| format!("{at}: bad launches"))?,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_with_the_one_median() {
        let text = "chapter,shape,impl,rows,launches,device,cold_us,warm_us\n\
                    ch01,glm,torch_5line,1,8,H200,1 2 3 10,4 5\n";
        let p = parse(text, "p.csv").unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].m.cold.median_us, 2.5);
        assert_eq!(p[0].m.warm.median_us, 4.5);
        assert_eq!(p[0].m.launches, 8);
        let bad = parse("chapter,shape\nch01,glm\n", "p.csv").unwrap_err();
        assert!(bad.contains("no column `impl`"), "{bad}");
    }
}
