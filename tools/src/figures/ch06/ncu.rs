//! Chapter 6's kernel-by-kernel comparison at 4096 Qwen3 tokens: Nsight Compute on our two
//! Hopper GEMMs and on the engines' two `fused_moe_kernel` launches, in the same GPU call, with
//! the same sections (tools/gpu/run's `ncu-l2` stage, on the build that `ch04.csv` and `ch06.csv`
//! were measured on; the logs under `bench/results/h100/logs/`).
//! Made from them: `ch06-ncu.md` (one row per GEMM and side) and the facts the page quotes.
//!
//! The reader: a log is Nsight Compute's text report, one block per profiled launch, opening
//! with a line `  NAME (GRID)x(BLOCK), Context ...`; inside it, `    Metric  unit  value` lines
//! and the compute section's sentence "Tensor is the highest-utilized pipeline (P%)". The first
//! two launches in each log are GEMM 1 then GEMM 2 (both tools launch them in that order).

use super::super::facts::Facts;
use super::super::{read, Generated};
use std::path::Path;

const OURS: &str = "bench/results/h100/logs/ncu_l2_ours_s37.txt";
const ENGINES: &str = "bench/results/h100/logs/ncu_l2_engines_s37.txt";
const NCU_MD: &str = "book/src/figures/ch06-ncu.md";

/// One profiled launch: the kernel's name and the numbers the table shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub name: String,
    pub grid: String,
    pub threads: u64,
    pub duration_us: f64,
    pub sm_ghz: f64,
    pub cycles: f64,
    /// The compute section's busiest pipeline and its share of the elapsed cycles, %.
    pub busiest: (String, f64),
    pub l2_pct: f64,
    pub dram_pct: f64,
    /// The L2's sectors and requests (`lts__t_sectors.sum`, `lts__t_requests.sum`), where the
    /// log has those counters (tools/gpu/run's ncu-l2 collects them since session 37).
    pub l2_sectors: Option<f64>,
    pub l2_requests: Option<f64>,
}

/// The value of the first `metric` line (`    Metric  unit  value`) of `block`.
fn metric(block: &str, metric: &str) -> Option<f64> {
    block.lines().find_map(|l| {
        let t = l.trim_start();
        let rest = t.strip_prefix(metric)?;
        // The name must end here: "Duration" is not "Duration Per ...".
        if !rest.starts_with(' ') {
            return None;
        }
        rest.split_whitespace()
            .last()?
            .replace(',', "")
            .parse()
            .ok()
    })
}

/// The launches of one log, in order.
pub fn parse(text: &str, what: &str) -> Result<Vec<Launch>, String> {
    let mut starts = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start();
        if l.starts_with("  ")
            && !l.starts_with("   ")
            && t.contains(")x(")
            && t.contains(", Context ")
        {
            starts.push(i);
        }
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (j, &s) in starts.iter().enumerate() {
        let end = starts.get(j + 1).copied().unwrap_or(lines.len());
        let block = lines[s..end].join("\n");
        let head = lines[s].trim();
        let name = head.split(' ').next().unwrap_or_default().to_string();
        let dims: Vec<&str> = head
            .split(", Context")
            .next()
            .unwrap_or_default()
            .trim_start_matches(&name)
            .trim()
            .split(")x(")
            .collect();
        let grid = dims
            .first()
            .map(|g| g.trim_start_matches('(').replace(", ", "×"));
        let threads = dims
            .get(1)
            .and_then(|b| b.trim_end_matches(')').split(',').next())
            .and_then(|x| x.trim().parse().ok());
        let need = |m: &str| {
            metric(&block, m).ok_or_else(|| format!("{what}: launch {name}: no `{m}` line"))
        };
        let busiest = block.lines().find_map(|l| {
            let (before, after) = l.split_once(" is the highest-utilized pipeline (")?;
            let pipe = before.split_whitespace().last()?.to_string();
            let p: f64 = after.split('%').next()?.parse().ok()?;
            Some((pipe, p))
        });
        out.push(Launch {
            name: name.clone(),
            grid: grid.ok_or_else(|| format!("{what}: launch {name}: no grid"))?,
            threads: threads.ok_or_else(|| format!("{what}: launch {name}: no block size"))?,
            duration_us: need("Duration")?,
            sm_ghz: need("SM Frequency")?,
            cycles: need("Elapsed Cycles")?,
            busiest: busiest
                .ok_or_else(|| format!("{what}: launch {name}: no busiest pipeline named"))?,
            l2_pct: need("L2 Cache Throughput")?,
            dram_pct: need("DRAM Throughput")?,
            l2_sectors: metric(&block, "lts__t_sectors.sum"),
            l2_requests: metric(&block, "lts__t_requests.sum"),
        });
    }
    Ok(out)
}

/// The table and the facts, from the two logs' first two launches.
pub fn table(ours: &[Launch], theirs: &[Launch], f: &mut Facts) -> Result<String, String> {
    if ours.len() < 2 || theirs.len() < 2 {
        return Err(format!(
            "{OURS} and {ENGINES}: want GEMM 1 and GEMM 2 in each, found {} and {} launches",
            ours.len(),
            theirs.len()
        ));
    }
    let mut t = format!(
        "<!-- generated by tools/plot from {OURS} and {ENGINES} \
         (Nsight Compute, one cold launch each, the clocks left alone); do not edit -->\n\n\
         | GEMM | side | kernel | grid × threads | µs | SM GHz | cycles | busiest pipe, % of cycles | \
         L2 throughput, % | DRAM throughput, % |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (g, (o, e)) in ours.iter().zip(theirs.iter()).take(2).enumerate() {
        let gemm = g + 1;
        for (side, l) in [("ours", o), ("engines", e)] {
            t += &format!(
                "| {gemm} | {side} | `{}` | {} × {} | {:.1} | {:.2} | {:.0} | {} {:.1} | {:.1} | {:.1} |\n",
                l.name,
                l.grid,
                l.threads,
                l.duration_us,
                l.sm_ghz,
                l.cycles,
                l.busiest.0,
                l.busiest.1,
                l.l2_pct,
                l.dram_pct
            );
            let p = format!("ncu_gemm{gemm}_{side}");
            f.add(format!("{p}_us"), format!("{:.0}", l.duration_us), OURS);
            f.add(
                format!("{p}_busiest_pipe"),
                l.busiest.0.to_lowercase(),
                OURS,
            );
            f.add(
                format!("{p}_busiest_pct"),
                format!("{:.0}", l.busiest.1),
                OURS,
            );
        }
        // Over the engines': time; DRAM bytes and L2 traffic (each % of its peak rate times the
        // duration: the bytes up to one constant, the same for both sides).
        let g = format!("ncu_gemm{gemm}");
        f.add(
            format!("{g}_time_ratio"),
            format!("{:.2}", o.duration_us / e.duration_us),
            OURS,
        );
        f.add(
            format!("{g}_dram_ratio"),
            format!(
                "{:.2}",
                o.dram_pct * o.duration_us / (e.dram_pct * e.duration_us)
            ),
            OURS,
        );
        f.add(
            format!("{g}_l2_ratio"),
            format!(
                "{:.2}",
                o.l2_pct * o.duration_us / (e.l2_pct * e.duration_us)
            ),
            OURS,
        );
        // The L2's own counts, where both logs have them: the sectors and requests it served,
        // the other half of the L2 included.
        for (what, a, b) in [
            ("sectors", o.l2_sectors, e.l2_sectors),
            ("requests", o.l2_requests, e.l2_requests),
        ] {
            if let (Some(a), Some(b)) = (a, b) {
                f.add(
                    format!("{g}_l2_{what}_ratio"),
                    format!("{:.2}", a / b),
                    OURS,
                );
            }
        }
    }
    Ok(t)
}

/// `ch06-ncu.md` and its facts; `None` until both logs are committed.
pub fn generate(root: &Path, f: &mut Facts) -> Result<Option<Generated>, String> {
    if !root.join(OURS).exists() || !root.join(ENGINES).exists() {
        return Ok(None);
    }
    let ours = parse(&read(root, OURS)?, OURS)?;
    let theirs = parse(&read(root, ENGINES)?, ENGINES)?;
    Ok(Some(Generated {
        path: NCU_MD.into(),
        content: table(&ours, &theirs, f)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "==PROF== Connected\n  fused_gemm1_x (383, 6, 1)x(384, 1, 1), Context 1, Stream 13, Device 0, CC 9.0\n    Section: GPU Speed Of Light Throughput\n    DRAM Frequency                  Ghz         3.20\n    SM Frequency                    Ghz         1.74\n    Elapsed Cycles                cycle      872,142\n    DRAM Throughput                   %        46.48\n    Duration                         us       499.04\n    L2 Cache Throughput               %        82.90\n    INF   Tensor is the highest-utilized pipeline (48.8%) based on elapsed cycles\n    Registers Per Thread             register/thread             154\n    lts__t_sectors.sum                                     sector  125,115,699\n    lts__t_sectors_lookup_hit.sum                          sector   71,336,336\n  fused_gemm2_x (383, 8, 1)x(384, 1, 1), Context 1, Stream 13, Device 0, CC 9.0\n    SM Frequency                    Ghz         1.70\n    Elapsed Cycles                cycle      500,000\n    DRAM Throughput                   %        68.50\n    Duration                         us       322.69\n    L2 Cache Throughput               %        70.00\n    INF   Shared is the highest-utilized pipeline (38.0%)\n    Registers Per Thread             register/thread             154\n";

    #[test]
    fn reads_each_launch_of_a_report() {
        let l = parse(LOG, "log").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].name, "fused_gemm1_x");
        assert_eq!(l[0].grid, "383×6×1");
        assert_eq!(l[0].threads, 384);
        assert_eq!(l[0].cycles, 872142.0);
        assert_eq!(l[0].busiest, ("Tensor".to_string(), 48.8));
        assert_eq!(l[0].dram_pct, 46.48);
        assert_eq!(l[1].busiest, ("Shared".to_string(), 38.0));
        assert_eq!(l[1].duration_us, 322.69);
        assert_eq!(l[0].l2_sectors, Some(125115699.0));
        assert_eq!(l[1].l2_sectors, None);
    }

    #[test]
    fn a_report_without_a_metric_is_an_error_naming_it() {
        let cut = LOG.replace("    Duration                         us       499.04\n", "");
        let e = parse(&cut, "log").unwrap_err();
        assert!(e.contains("fused_gemm1_x") && e.contains("Duration"), "{e}");
    }

    #[test]
    fn the_table_puts_both_sides_of_each_gemm_together() {
        let l = parse(LOG, "log").unwrap();
        let mut f = Facts::default();
        let t = table(&l, &l, &mut f).unwrap();
        assert_eq!(t.matches("| 1 | ours |").count(), 1);
        assert_eq!(t.matches("| 2 | engines |").count(), 1);
        assert!(table(&l[..1], &l, &mut f).is_err());
    }
}
