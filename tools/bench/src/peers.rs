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
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or(format!("{name}: empty"))?
        .split(',')
        .map(str::trim)
        .collect();
    let col = |c: &str| {
        header
            .iter()
            .position(|h| *h == c)
            .ok_or(format!("{name}: no column `{c}`"))
    };
    let (ch, sh, im, ro, la, de, co, wa) = (
        col("chapter")?,
        col("shape")?,
        col("impl")?,
        col("rows")?,
        col("launches")?,
        col("device")?,
        col("cold_us")?,
        col("warm_us")?,
    );
    lines
        .enumerate()
        .map(|(i, l)| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            let at = format!("{name}:{}", i + 2);
            if f.len() != header.len() {
                return Err(format!(
                    "{at}: expected {} fields, found {}",
                    header.len(),
                    f.len()
                ));
            }
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
                chapter: f[ch].to_string(),
                shape: f[sh].to_string(),
                imp: f[im].to_string(),
                rows: f[ro].parse().map_err(|_| format!("{at}: bad rows"))?,
                device: f[de].to_string(),
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
