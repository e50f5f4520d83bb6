//! The switch point between the tiny GEMM and cuBLAS, checked against the committed
//! measurements: `bench/results/h200/ch05.csv` (chapter 5's bench, `pair` against `blas_fused`).
//! When a new run of the bench moves a crossover, this test names the constant to change.

use ch05_fused_router::LogitsFrom;
use ch06_layer::switch::crossovers;
use ch06_layer::{logits_for, switch_rows, DEFAULT_SWITCH_ROWS, SWITCH_POINTS};

const CSV: &str = include_str!("../../../bench/results/h200/ch05.csv");

// ANCHOR: switch_matches_the_csv
/// Every shape of the CSV has a switch point here, equal to the crossover the CSV shows (the
/// largest measured row count at which the tiny GEMM's pair is no slower, cold medians),
/// and every switch point here is a shape of the CSV.
#[test]
fn switch_points_are_the_measured_crossovers() {
    let found = crossovers(CSV).unwrap();
    assert!(!found.is_empty(), "no pair / blas_fused rows in ch05.csv");
    for (shape, rows) in &found {
        let p = SWITCH_POINTS
            .iter()
            .find(|p| p.shape == shape)
            .unwrap_or_else(|| panic!("ch05.csv measures {shape}: add its switch point ({rows})"));
        assert_eq!(
            p.rows, *rows,
            "{shape}: SWITCH_POINTS says {}, ch05.csv's crossover is {rows}",
            p.rows
        );
        // The shape's name carries the sizes the rule looks up.
        assert!(
            shape.contains(&format!("_h{}_e{}_", p.hidden, p.experts)),
            "{shape}"
        );
    }
    for p in SWITCH_POINTS {
        assert!(
            found.iter().any(|(s, _)| s == p.shape),
            "{} is not measured in ch05.csv",
            p.shape
        );
    }
    let smallest = SWITCH_POINTS.iter().map(|p| p.rows).min().unwrap();
    assert_eq!(DEFAULT_SWITCH_ROWS, smallest);
}
// ANCHOR_END: switch_matches_the_csv

/// The rule at its edges: the tiny GEMM up to the switch point, cuBLAS past it, cuBLAS at every
/// row count when H is no multiple of 8, the default for an unmeasured shape.
#[test]
fn the_rule_switches_at_the_switch_point() {
    for p in SWITCH_POINTS {
        assert_eq!(switch_rows(p.hidden, p.experts), p.rows);
        assert_eq!(logits_for(1, p.hidden, p.experts), LogitsFrom::TinyGemm);
        assert_eq!(
            logits_for(p.rows, p.hidden, p.experts),
            LogitsFrom::TinyGemm
        );
        assert_eq!(
            logits_for(p.rows + 1, p.hidden, p.experts),
            LogitsFrom::Blas
        );
    }
    assert_eq!(switch_rows(128, 32), DEFAULT_SWITCH_ROWS);
    assert_eq!(
        logits_for(DEFAULT_SWITCH_ROWS, 128, 32),
        LogitsFrom::TinyGemm
    );
    assert_eq!(
        logits_for(DEFAULT_SWITCH_ROWS + 1, 128, 32),
        LogitsFrom::Blas
    );
    assert_eq!(logits_for(1, 70, 12), LogitsFrom::Blas);
}

/// The crossover reader on a small CSV: the last win counts, a loss below it does not; a tie is
/// a win; a count measured for one implementation only is skipped; other rows are ignored.
#[test]
fn crossovers_reads_the_first_loss() {
    let csv = "chapter,shape,impl,rows,cold_median_us\n\
               ch05,a,pair,1,5.0\nch05,a,blas_fused,1,6.0\n\
               ch05,a,pair,8,5.5\nch05,a,chain,8,1.0\n\
               ch05,a,pair,16,6.0\nch05,a,blas_fused,16,6.0\n\
               ch05,a,pair,32,7.0\nch05,a,blas_fused,32,6.5\n\
               ch05,a,pair,64,6.0\nch05,a,blas_fused,64,6.5\n\
               ch05,b,pair,1,9.0\nch05,b,blas_fused,1,8.0\n";
    assert_eq!(
        crossovers(csv).unwrap(),
        vec![("a".to_string(), 64), ("b".to_string(), 0)]
    );
    assert!(crossovers("").is_err());
    assert!(crossovers("shape,impl,rows\n").is_err());
}
