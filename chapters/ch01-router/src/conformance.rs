//! One test body for every router that runs on a device, over every named regime: chapter 1's
//! chain runs it on every backend (`tests/chain.rs`), and chapter 5's fused router runs the very
//! same body. A router passes when, on every regime, it matches the f64 oracle by the rules of
//! [`crate::compare`] and prints exactly the regime's snapshot (the one the f32 reference
//! prints).

use crate::compare::{check_routing, Tolerance};
use crate::device_router::{route_on_device, DeviceRouter, DeviceRouterError, GateDtype};
use crate::literal::LiteralRouter;
use crate::regimes::{regime, RegimeInput, REGIMES};
use crate::routing::Routing;
use moe_kernels::Device;

/// What a routing is snapshotted as: a title line, then the first `first_rows` rows with their
/// ids and their weights to 4 decimals.
pub fn routing_text(title: &str, routing: &Routing, first_rows: usize) -> String {
    let mut out = format!("{title}\n");
    for r in 0..routing.rows.min(first_rows) {
        let ids: Vec<String> = routing
            .row_ids(r)
            .iter()
            .map(|e| format!("{e:3}"))
            .collect();
        let ws: Vec<String> = routing
            .row_weights(r)
            .iter()
            .map(|w| format!("{w:.4}"))
            .collect();
        out += &format!(
            "row {r:3}: ids {} | weights {}\n",
            ids.join(" "),
            ws.join(" ")
        );
    }
    out
}

/// A regime's title line: its sizes and its router's configuration.
pub fn regime_title(r: &RegimeInput) -> String {
    let c = &r.config;
    format!(
        "{}: {} rows x {} experts, k = {}, {:?}, renormalize {}, groups {:?}, scaling {}, bias {}",
        r.name,
        r.rows,
        r.experts,
        c.k,
        c.scoring,
        c.renormalize,
        c.grouping.map(|g| (g.n_group, g.topk_group)),
        c.routed_scaling,
        r.bias.is_some()
    )
}

/// A regime's router in a few words for a table: `Sigmoid+bias+groups`, `Softmax`, …
pub fn scoring_label(r: &RegimeInput) -> String {
    format!(
        "{:?}{}{}",
        r.config.scoring,
        if r.bias.is_some() { "+bias" } else { "" },
        if r.config.grouping.is_some() {
            "+groups"
        } else {
            ""
        }
    )
}

/// A regime as a router of element type `dtype` sees it: for bf16, the hidden states and the
/// gate weight rounded to bf16 (so the oracle's logits, computed from these values, are the
/// exact logits of what the router receives).
pub fn as_dtype(r: &RegimeInput, dtype: GateDtype) -> RegimeInput {
    match dtype {
        GateDtype::F32 => r.clone(),
        GateDtype::Bf16 => {
            let round = |v: &[f32]| -> Vec<f32> {
                v.iter()
                    .map(|&x| half::bf16::from_f32(x).to_f32())
                    .collect()
            };
            RegimeInput {
                hidden_states: round(&r.hidden_states),
                gate_weight: round(&r.gate_weight),
                ..r.clone()
            }
        }
    }
}

/// What one regime gave.
#[derive(Clone, Debug)]
pub struct RegimeResult {
    pub name: &'static str,
    pub rows: usize,
    pub routing: Routing,
    /// Rows whose cut was clear enough to compare ids exactly.
    pub exact_rows: usize,
    /// The snapshot text ([`routing_text`] of the first 8 rows).
    pub text: String,
}

/// Builds a router for one regime on one device.
pub type MakeRouter<'a> =
    &'a dyn Fn(&'static Device, &RegimeInput) -> Result<Box<dyn DeviceRouter>, DeviceRouterError>;

// ANCHOR: check_every_regime
/// Runs the router `make` builds on every regime on `device`, with inputs of type `dtype`, and
/// checks it against the f64 oracle. Returns each regime's result (for the snapshot), or a
/// message naming the regime, row and difference.
pub fn check_every_regime(
    device: &'static Device,
    dtype: GateDtype,
    make: MakeRouter<'_>,
    tol: Tolerance,
) -> Result<Vec<RegimeResult>, String> {
    let mut results = Vec::new();
    for name in REGIMES {
        let r = as_dtype(&regime(name).expect("a listed regime"), dtype);
        let router = make(device, &r).map_err(|e| format!("regime {name}: {e}"))?;
        let got = route_on_device(
            &*router,
            device,
            dtype,
            &r.hidden_states,
            &r.gate_weight,
            r.bias.as_deref(),
        )
        .map_err(|e| format!("regime {name}: {e}"))?;
        let oracle = LiteralRouter {
            config: r.config.clone(),
        }
        .route_rows(&r.logits_f32(), r.rows, r.experts, r.bias.as_deref())
        .map_err(|e| format!("regime {name}: {e}"))?;
        let exact_rows = check_routing(name, &oracle, &got, tol)?;
        if got.weights.iter().any(|w| w.is_nan()) {
            return Err(format!("regime {name}: a NaN weight"));
        }
        results.push(RegimeResult {
            name,
            rows: r.rows,
            text: routing_text(&regime_title(&r), &got, 8),
            routing: got,
            exact_rows,
        });
    }
    Ok(results)
}
// ANCHOR_END: check_every_regime
