//! Grouping by expert: where each (token, expert) pair goes.
//!
//! A routing lists `k` experts per token. Grouping sorts the `T·k` pairs by expert, keeping
//! ascending pair order within an expert (a stable counting sort), so that each expert's
//! tokens sit in one run of consecutive *slots* and one GEMM serves the whole run. Chapter 3
//! does the same on the GPU, with each run padded to a tile.

use crate::error::MoeError;
use ch01_router::Routing;

// ANCHOR: group_plan
/// The pairs of one routing, grouped by expert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPlan {
    pub rows: usize,
    pub k: usize,
    /// `[E + 1]`: expert `e`'s slots are `offsets[e]..offsets[e + 1]`.
    pub offsets: Vec<usize>,
    /// `[T·k]`: the pair `t·k + j` of each slot (slot order: by expert, then by pair).
    pub pair_of: Vec<usize>,
    /// `[T·k]`: the token of each slot, `pair_of / k`.
    pub token_of: Vec<i32>,
    /// `[T·k]`: the slot of each pair `t·k + j` (the inverse permutation).
    pub slot_of: Vec<i32>,
}

impl GroupPlan {
    /// Groups `routing`'s pairs by expert. An id outside `0..experts` is an error naming it.
    pub fn new(routing: &Routing, experts: usize) -> Result<GroupPlan, MoeError> {
        let (rows, k) = (routing.rows, routing.k);
        // A routing is [rows, k] twice over; anything else would index past its arrays.
        let pairs = rows.checked_mul(k).ok_or_else(|| MoeError::Config {
            field: "routing rows x k",
            expected: "a number of pairs that fits in memory".into(),
            found: format!("{rows} x {k}"),
        })?;
        if k == 0 && rows > 0 {
            return Err(MoeError::Config {
                field: "routing k",
                expected: "at least 1".into(),
                found: "0".into(),
            });
        }
        crate::error::expect_len("routing ids [T, k]", routing.ids.len(), pairs)?;
        crate::error::expect_len("routing weights [T, k]", routing.weights.len(), pairs)?;
        let mut counts = vec![0usize; experts];
        for (p, &e) in routing.ids.iter().enumerate() {
            if e as usize >= experts {
                return Err(MoeError::IdOutOfRange {
                    row: p / k,
                    slot: p % k,
                    id: e,
                    experts,
                });
            }
            counts[e as usize] += 1;
        }
        let mut offsets = vec![0usize; experts + 1];
        for e in 0..experts {
            offsets[e + 1] = offsets[e] + counts[e];
        }
        // Stable scatter: pairs visited in order, each to the next free slot of its expert.
        let mut next = offsets[..experts].to_vec();
        let mut pair_of = vec![0usize; rows * k];
        let mut token_of = vec![0i32; rows * k];
        let mut slot_of = vec![0i32; rows * k];
        for (p, &e) in routing.ids.iter().enumerate() {
            let s = next[e as usize];
            next[e as usize] += 1;
            pair_of[s] = p;
            token_of[s] = (p / k) as i32;
            slot_of[p] = s as i32;
        }
        Ok(GroupPlan {
            rows,
            k,
            offsets,
            pair_of,
            token_of,
            slot_of,
        })
    }
    // ANCHOR_END: group_plan

    /// How many pairs expert `e` received.
    pub fn count(&self, e: usize) -> usize {
        self.offsets[e + 1] - self.offsets[e]
    }

    /// The experts that received at least one pair, ascending: one GEMM pair each.
    pub fn active_experts(&self) -> Vec<usize> {
        (0..self.offsets.len() - 1)
            .filter(|&e| self.count(e) > 0)
            .collect()
    }

    /// `T·k`
    pub fn pairs(&self) -> usize {
        self.rows * self.k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_sorted_by_expert_stably() {
        // 3 tokens choosing 2 of 4 experts.
        let r = Routing {
            rows: 3,
            k: 2,
            ids: vec![2, 0, 0, 3, 2, 0],
            weights: vec![0.0; 6],
        };
        let p = GroupPlan::new(&r, 4).unwrap();
        assert_eq!(p.offsets, vec![0, 3, 3, 5, 6]);
        // Expert 0 gets pairs 1, 2, 5 (tokens 0, 1, 2); expert 2 pairs 0, 4; expert 3 pair 3.
        assert_eq!(p.token_of, vec![0, 1, 2, 0, 2, 1]);
        assert_eq!(p.slot_of, vec![3, 0, 1, 5, 4, 2]);
        assert_eq!(p.active_experts(), vec![0, 2, 3]);
        for (pair, &s) in p.slot_of.iter().enumerate() {
            assert_eq!(p.token_of[s as usize] as usize, pair / 2);
        }
    }

    #[test]
    fn ids_out_of_range_are_named() {
        let r = Routing {
            rows: 2,
            k: 1,
            ids: vec![1, 4],
            weights: vec![0.0; 2],
        };
        assert_eq!(
            GroupPlan::new(&r, 4),
            Err(MoeError::IdOutOfRange {
                row: 1,
                slot: 0,
                id: 4,
                experts: 4
            })
        );
    }
}
