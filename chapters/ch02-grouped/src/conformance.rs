//! One test body for every implementation of the layer, over every regime and both compute
//! types: the literal oracle gives the routing and the expected output; each implementation
//! runs the experts on that routing (so a near tie broken differently by another router cannot
//! hide or fake an error) and its whole forward pass, and must be within the stated tolerance
//! of the oracle ([`crate::compare`]). The snapshot of a regime is the oracle's text: it does
//! not depend on the backend, and every backend is checked against the numbers it shows.

use crate::compare::{check_output, OutputError, Tolerance};
use crate::config::Dtype;
use crate::layer::MoeLayer;
use crate::literal::{literal_logits, LiteralLayer};
use crate::plan::GroupPlan;
use crate::regimes::MoeRegime;
use ch01_router::compare::Tolerance as RouterTolerance;
use ch01_router::LiteralRouter;
use ch01_router::Routing;

/// What the oracle gives for one regime and type.
pub struct OracleRun {
    pub routing: Routing,
    pub out: Vec<f32>,
}

/// The oracle's routing and output for `r` in `dtype`.
pub fn oracle(r: &MoeRegime, dtype: Dtype) -> OracleRun {
    let lit = LiteralLayer::new(&r.weights, dtype).unwrap_or_else(|e| panic!("{}: {e}", r.name));
    let o = lit
        .forward(&r.hidden)
        .unwrap_or_else(|e| panic!("{}: {e}", r.name));
    OracleRun {
        routing: o.routing,
        out: o.out,
    }
}

/// Checks `layer` on regime `r` against `oracle`: its experts on the oracle's routing, and its
/// whole forward pass (whose routing must pick the same experts). Returns the two errors.
pub fn check_layer(
    r: &MoeRegime,
    oracle: &OracleRun,
    layer: &dyn MoeLayer,
) -> Result<(OutputError, OutputError), String> {
    let what = format!("regime {}, {} in {}", r.name, layer.name(), layer.dtype());
    let tol = Tolerance::vs_oracle(layer.dtype());
    let got = layer
        .experts(&r.hidden, &oracle.routing)
        .map_err(|e| format!("{what}: {e}"))?;
    let experts = check_output(&format!("{what}, experts"), &oracle.out, &got, tol)?;
    let fwd = layer
        .forward(&r.hidden)
        .map_err(|e| format!("{what}: {e}"))?;
    // The forward pass routes with its own f32 logits: chapter 1's rules decide whether its
    // choices are right (only near ties at the cut may swap) ...
    let w = &r.weights;
    let details = LiteralRouter {
        config: w.config.router.clone(),
    }
    .route_rows(
        &literal_logits(w, &r.hidden, r.rows),
        r.rows,
        w.config.experts,
        w.bias.as_deref(),
    )
    .map_err(|e| format!("{what}: {e}"))?;
    // The layer's output depends on the set of experts a token picked, not on their order, so
    // the sets are compared: they must be equal wherever the oracle's gap at the cut is wider
    // than f32 logits can blur (chapter 1's `OWN_LOGITS` gap); a near tie may swap the last one.
    let sorted = |ids: &[u32]| {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v
    };
    let gap = RouterTolerance::OWN_LOGITS.gap;
    for (t, d) in details.iter().enumerate() {
        let clear = d.cut.as_ref().is_none_or(|c| c.gap > gap);
        if clear && sorted(&d.ids) != sorted(fwd.routing.row_ids(t)) {
            return Err(format!(
                "{what}: row {t} picked experts {:?}, the oracle {:?} (gap at the cut {:?})",
                fwd.routing.row_ids(t),
                d.ids,
                d.cut.as_ref().map(|c| c.gap)
            ));
        }
    }
    // ... and the output is compared on the rows that picked the same experts as the oracle.
    let h = w.config.hidden;
    let same: Vec<usize> = (0..r.rows)
        .filter(|&t| sorted(fwd.routing.row_ids(t)) == sorted(oracle.routing.row_ids(t)))
        .collect();
    if same.len() * 10 < r.rows * 9 {
        return Err(format!(
            "{what}: only {} of {} rows routed as the oracle did",
            same.len(),
            r.rows
        ));
    }
    let pick = |v: &[f32]| -> Vec<f32> {
        same.iter()
            .flat_map(|&t| v[t * h..(t + 1) * h].iter().copied())
            .collect()
    };
    let forward = check_output(
        &format!("{what}, forward"),
        &pick(&oracle.out),
        &pick(&fwd.out),
        tol,
    )?;
    Ok((experts, forward))
}

/// The snapshot text of a regime: its title, how the oracle grouped the pairs, and the first
/// rows of its output to 4 decimals.
pub fn regime_text(r: &MoeRegime, dtype: Dtype, oracle: &OracleRun) -> String {
    let c = &r.weights.config;
    let mut s = format!(
        "{} ({dtype}): {}\nT {} H {} I {} E {} k {}, shared {:?}\n",
        r.name, r.about, r.rows, c.hidden, c.intermediate, c.experts, c.router.k, c.shared
    );
    let plan = GroupPlan::new(&oracle.routing, c.experts).expect("the oracle's ids are in range");
    let active = plan.active_experts();
    let counts: Vec<String> = active
        .iter()
        .map(|&e| format!("{e}:{}", plan.count(e)))
        .collect();
    s += &format!(
        "{} pairs on {} active experts (expert:pairs) {}\n",
        plan.pairs(),
        active.len(),
        counts.join(" ")
    );
    for t in 0..r.rows.min(4) {
        let row = &oracle.out[t * c.hidden..(t + 1) * c.hidden];
        let first: Vec<String> = row.iter().take(6).map(|v| format!("{v:.4}")).collect();
        s += &format!("out[{t}][..6] {}\n", first.join(" "));
    }
    s
}
