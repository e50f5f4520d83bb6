//! How any router's output is checked against the oracle (the f64 [`LiteralRouter`]).
//!
//! f32 arithmetic may legitimately swap two experts whose rank keys differ by less than its
//! rounding, so a comparison is only exact where the oracle's gap at the cut is wide:
//! - where the literal gap exceeds `gap` (1e-5 by default), the selected set must be identical,
//!   and so must the order, except that two selected experts whose own literal keys are within
//!   `gap` of each other may swap (a near tie inside the selection);
//! - where it does not, either order is accepted, but every expert the router picked must have
//!   a literal key within `gap` of the literal cut (a near tie, never a wrong choice);
//! - where the sets match, each weight must be within `weight_abs` of the literal weight of the
//!   same expert (relative to that weight where it exceeds 1: a routed scaling makes weights of
//!   any size), and no weight may be NaN.
//!
//! [`LiteralRouter`]: crate::LiteralRouter

use crate::literal::RowDetail;
use crate::routing::Routing;

/// The tolerances of one comparison.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Below this literal gap at the cut, the two experts at the cut may swap.
    pub gap: f64,
    /// Largest accepted weight difference: absolute for weights up to 1, relative to the literal
    /// weight above (`weight_abs × max(1, |w|)`).
    pub weight_abs: f64,
}

impl Tolerance {
    /// For a router that takes the same f32 logits as the oracle (chapter 1's reference).
    pub const SAME_LOGITS: Tolerance = Tolerance {
        gap: 1e-5,
        weight_abs: 2e-6,
    };
    /// For a router that computes its own logits in f32 from hidden states (the GEMM adds
    /// about 1e-6 of error to each logit at our regimes' sizes).
    pub const OWN_LOGITS: Tolerance = Tolerance {
        gap: 1e-5,
        weight_abs: 5e-6,
    };
}

/// Whether two rows select the same experts, in any order.
fn same_set(a: &[u32], b: &[u32]) -> bool {
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    x.sort_unstable();
    y.sort_unstable();
    x == y
}

/// Whether, at every position, `b`'s expert has `a`'s expert's oracle key within `gap` (or the
/// same key: two −∞ keys are equal, though their difference is NaN).
fn same_keys_in_order(d: &RowDetail, a: &[u32], b: &[u32], gap: f64) -> bool {
    a.iter().zip(b).all(|(&x, &y)| {
        let (kx, ky) = (d.keys[x as usize], d.keys[y as usize]);
        kx == ky || (kx - ky).abs() <= gap
    })
}

/// Compares `got` with the oracle's rows; returns how many rows had a clear cut (compared
/// exactly), or a message naming the regime, row, ids, gap and difference.
pub fn check_routing(
    name: &str,
    oracle: &[RowDetail],
    got: &Routing,
    tol: Tolerance,
) -> Result<usize, String> {
    if got.rows != oracle.len() {
        return Err(format!(
            "regime {name}: {} rows, expected {}",
            got.rows,
            oracle.len()
        ));
    }
    let mut exact = 0;
    for (r, d) in oracle.iter().enumerate() {
        let (a, b) = (&d.ids[..], got.row_ids(r));
        let gap = d.cut.as_ref().map_or(f64::INFINITY, |c| c.gap);
        if gap > tol.gap {
            // The set is exact. So is the order, except between selected experts whose keys are
            // themselves within the gap tolerance of each other (a near tie inside the
            // selection: f32 keys may order them either way): at every position the expert
            // given must have the oracle's key there, within the tolerance.
            if a != b && !(same_set(a, b) && same_keys_in_order(d, a, b, tol.gap)) {
                return Err(format!(
                    "regime {name}: row {r} ids {a:?} vs {b:?}, gap {gap}"
                ));
            }
            exact += 1;
        } else {
            let cut_key = d.cut.as_ref().expect("a gap implies a cut").last_selected.1;
            for &e in b {
                let key = d.keys[e as usize];
                if !(key >= cut_key - tol.gap || key == cut_key) {
                    return Err(format!(
                        "regime {name}: row {r} ids {a:?} vs {b:?}, gap {gap}: expert {e} key {key} is not near the cut {cut_key}"
                    ));
                }
            }
        }
        if same_set(a, b) {
            // Each weight against the oracle's weight of the same expert.
            let oracle_weight = |e: u32| d.weights[a.iter().position(|&x| x == e).unwrap()];
            let lit: Vec<f64> = b.iter().map(|&e| oracle_weight(e)).collect();
            for (i, (&w_lit, &w)) in lit.iter().zip(got.row_weights(r)).enumerate() {
                if w.is_nan() {
                    return Err(format!("regime {name}: row {r} NaN weight at {i}"));
                }
                let diff = (w_lit - w as f64).abs();
                if diff > tol.weight_abs * w_lit.abs().max(1.0) {
                    return Err(format!(
                        "regime {name}: row {r} max diff {diff:e} at {i} ({w_lit} vs {w})"
                    ));
                }
            }
        }
    }
    Ok(exact)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cut::Cut;

    /// One row of 4 experts, k = 3: keys 0.9, 0.5, 0.5 + 4e-6 (a near tie with expert 1), 0.1.
    fn row() -> RowDetail {
        RowDetail {
            ids: vec![0, 2, 1],
            weights: vec![0.5, 0.3, 0.2],
            scores: vec![0.9, 0.5, 0.500004, 0.1],
            keys: vec![0.9, 0.5, 0.500004, 0.1],
            cut: Some(Cut {
                last_selected: (1, 0.5),
                first_rejected: (3, 0.1),
                gap: 0.4,
            }),
        }
    }

    fn got(ids: [u32; 3], weights: [f32; 3]) -> Routing {
        Routing {
            rows: 1,
            k: 3,
            ids: ids.to_vec(),
            weights: weights.to_vec(),
        }
    }

    #[test]
    fn a_near_tie_inside_the_selection_may_swap_but_nothing_else() {
        let (d, tol) = ([row()], Tolerance::SAME_LOGITS);
        assert_eq!(
            check_routing("t", &d, &got([0, 2, 1], [0.5, 0.3, 0.2]), tol),
            Ok(1)
        );
        // Experts 2 and 1 are 4e-6 apart: either order, each with its own weight.
        assert_eq!(
            check_routing("t", &d, &got([0, 1, 2], [0.5, 0.2, 0.3]), tol),
            Ok(1)
        );
        // The weights follow the experts, not the positions.
        assert!(check_routing("t", &d, &got([0, 1, 2], [0.5, 0.3, 0.2]), tol).is_err());
        // Experts 0 and 2 are 0.4 apart: their order is exact.
        assert!(check_routing("t", &d, &got([2, 0, 1], [0.3, 0.5, 0.2]), tol).is_err());
        // A clear cut: another set is wrong.
        assert!(check_routing("t", &d, &got([0, 2, 3], [0.5, 0.3, 0.2]), tol).is_err());
    }

    /// k = E (no cut, so the order is checked): experts 0 and 2 tie at key 0 (their
    /// probabilities underflow in f64 too) and expert 3's logit is not finite (key −∞, the same
    /// last pick on both sides).
    #[test]
    fn equal_keys_may_swap_and_infinite_keys_match() {
        let d = [RowDetail {
            ids: vec![1, 0, 2, 3],
            weights: vec![1.0, 0.0, 0.0, 0.0],
            scores: vec![0.0, 1.0, 0.0, 0.0],
            keys: vec![0.0, 1.0, 0.0, f64::NEG_INFINITY],
            cut: None,
        }];
        let got = Routing {
            rows: 1,
            k: 4,
            ids: vec![1, 2, 0, 3],
            weights: vec![1.0, 0.0, 0.0, 0.0],
        };
        assert_eq!(check_routing("t", &d, &got, Tolerance::SAME_LOGITS), Ok(1));
        // Expert 3 (−∞) ahead of 0 is still wrong.
        let wrong = Routing {
            ids: vec![1, 3, 0, 2],
            ..got
        };
        assert!(check_routing("t", &d, &wrong, Tolerance::SAME_LOGITS).is_err());
    }

    /// A routed scaling of 100 makes weights of about 40, whose f32 ulp (3.8e-6) is past the
    /// absolute tolerance: the tolerance grows with the weight above 1, no faster.
    #[test]
    fn the_weight_tolerance_is_relative_above_one() {
        let mut d = row();
        d.weights = vec![50.0, 30.0, 37.892_273_057_462_89];
        let tol = Tolerance::SAME_LOGITS;
        // One float above the nearest f32 (the example's failure: 3.92e-6 off), 1e-7 relative.
        let w = f32::from_bits((37.892_273_057_462_89f64 as f32).to_bits() + 1);
        assert!((37.892_273_057_462_89 - w as f64).abs() > tol.weight_abs);
        assert_eq!(
            check_routing("t", &[d.clone()], &got([0, 2, 1], [50.0, 30.0, w]), tol),
            Ok(1)
        );
        // 1e-4 off, relative: wrong.
        let off = (37.892_273_057_462_89 * (1.0 + 1e-4)) as f32;
        assert!(check_routing("t", &[d], &got([0, 2, 1], [50.0, 30.0, off]), tol).is_err());
        // Below 1 the tolerance stays absolute: 0.2 + 3e-6 is wrong.
        assert!(check_routing("t", &[row()], &got([0, 2, 1], [0.5, 0.3, 0.200_003]), tol).is_err());
    }
}
