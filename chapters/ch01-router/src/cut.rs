//! The cut: the boundary between the last selected rank key and the first rejected one.
//!
//! A top-k is not continuous: its output changes only when two keys swap places across the
//! cut. So the gap at the cut is the number to compare with any rounding error — an error
//! smaller than the gap cannot change the selection, a larger one may.

/// Where one row's selection was decided. Keys are rank keys (score + bias), in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Cut {
    /// `(expert, rank key)` of the lowest-keyed selected expert.
    pub last_selected: (u32, f64),
    /// `(expert, rank key)` of the highest-keyed expert that was not selected.
    pub first_rejected: (u32, f64),
    /// `last_selected.1 - first_rejected.1`; 0 for a tie (also a tie of two −∞ keys).
    pub gap: f64,
}

// ANCHOR: cut_of
/// The cut of one row: `keys` is the row's `[E]` rank keys, `selected` the chosen ids.
///
/// `None` when every expert is selected (k = E): nothing was rejected, so there is no cut.
/// Ties resolve the way the selection does: among equal selected keys the later pick is the
/// last selected; among equal rejected keys the lowest id is the first rejected.
pub fn cut_of(keys: &[f64], selected: &[u32]) -> Option<Cut> {
    let mut is_selected = vec![false; keys.len()];
    for &e in selected {
        is_selected[e as usize] = true;
    }
    let mut last: Option<(u32, f64)> = None;
    for &e in selected {
        let key = keys[e as usize];
        if last.is_none_or(|(_, k)| key <= k) {
            last = Some((e, key));
        }
    }
    let mut first: Option<(u32, f64)> = None;
    for (e, &key) in keys.iter().enumerate() {
        if !is_selected[e] && first.is_none_or(|(_, k)| key > k) {
            first = Some((e as u32, key));
        }
    }
    let (last, first) = (last?, first?);
    // −∞ − (−∞) is NaN; two equal keys are a tie whatever their value.
    let gap = if last.1 == first.1 {
        0.0
    } else {
        last.1 - first.1
    };
    Some(Cut {
        last_selected: last,
        first_rejected: first,
        gap,
    })
}
// ANCHOR_END: cut_of
