//! How any router's output is checked against the oracle (the f64 [`LiteralRouter`]).
//!
//! f32 arithmetic may legitimately swap two experts whose rank keys differ by less than its
//! rounding, so a comparison is only exact where the oracle's gap at the cut is wide:
//! - where the literal gap exceeds `gap` (1e-5 by default), the ids must be identical;
//! - where it does not, either order is accepted, but every expert the router picked must have
//!   a literal key within `gap` of the literal cut (a near tie, never a wrong choice);
//! - where the ids match, each weight must be within `weight_abs` of the literal weight, and no
//!   weight may be NaN.
//!
//! [`LiteralRouter`]: crate::LiteralRouter

use crate::literal::RowDetail;
use crate::routing::Routing;

/// The tolerances of one comparison.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Below this literal gap at the cut, the two experts at the cut may swap.
    pub gap: f64,
    /// Largest accepted absolute weight difference.
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
            if a != b {
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
        if a == b {
            for (i, (&w_lit, &w)) in d.weights.iter().zip(got.row_weights(r)).enumerate() {
                if w.is_nan() {
                    return Err(format!("regime {name}: row {r} NaN weight at {i}"));
                }
                let diff = (w_lit - w as f64).abs();
                if diff > tol.weight_abs {
                    return Err(format!(
                        "regime {name}: row {r} max diff {diff:e} at {i} ({w_lit} vs {w})"
                    ));
                }
            }
        }
    }
    Ok(exact)
}
