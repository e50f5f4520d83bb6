//! Expert parallelism's bookkeeping on the host: which rank each of a batch's (token, slot) pairs
//! goes to, in what order, and where its result lands when it comes back. A pure function of the
//! routing, so every rank can be checked against it.

use ch01_router::Routing;

// ANCHOR: dispatch_plan
/// Where a batch's pairs go. Pairs are sent grouped by destination rank, and within a rank in
/// (token, slot) order; each rank returns its results in the order it received them, so pair
/// `(t, j)`'s result comes back at the position it was sent from, `at[t·k + j]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchPlan {
    /// `[world]` pairs sent to each rank.
    pub counts: Vec<usize>,
    /// `[P]` the token of each sent pair, in send order.
    pub rows: Vec<i32>,
    /// `[P]` each sent pair's expert, as an id local to its rank (`e − first expert of the rank`).
    pub local_ids: Vec<i32>,
    /// `[P]` each sent pair's routing weight.
    pub weights: Vec<f32>,
    /// `[T, k]` the send position of pair (t, j): the row of the returned results it reads.
    pub at: Vec<i32>,
}

impl DispatchPlan {
    /// The plan for `routing` over `world` ranks of `per_rank` experts each.
    pub fn new(routing: &Routing, per_rank: usize, world: usize) -> DispatchPlan {
        let pairs = routing.ids.len();
        let dest = |p: usize| routing.ids[p] as usize / per_rank;
        let mut counts = vec![0usize; world];
        for p in 0..pairs {
            counts[dest(p)] += 1;
        }
        // Each rank's first position in the send buffer.
        let mut next: Vec<usize> = counts
            .iter()
            .scan(0, |s, &n| {
                let first = *s;
                *s += n;
                Some(first)
            })
            .collect();
        let mut plan = DispatchPlan {
            counts,
            rows: vec![0; pairs],
            local_ids: vec![0; pairs],
            weights: vec![0.0; pairs],
            at: vec![0; pairs],
        };
        for p in 0..pairs {
            let d = dest(p);
            let at = next[d];
            next[d] += 1;
            plan.rows[at] = (p / routing.k) as i32;
            plan.local_ids[at] = (routing.ids[p] as usize - d * per_rank) as i32;
            plan.weights[at] = routing.weights[p];
            plan.at[p] = at as i32;
        }
        plan
    }

    /// How many pairs are sent in all.
    pub fn pairs(&self) -> usize {
        self.rows.len()
    }
}
// ANCHOR_END: dispatch_plan

/// How many different ranks each token of `routing` visits, with `per_rank` experts a rank.
pub fn ranks_visited(routing: &Routing, per_rank: usize) -> Vec<usize> {
    (0..routing.rows)
        .map(|t| {
            let mut r: Vec<u32> = routing
                .row_ids(t)
                .iter()
                .map(|&e| e / per_rank as u32)
                .collect();
            r.sort_unstable();
            r.dedup();
            r.len()
        })
        .collect()
}

// ANCHOR: ranks_bound
/// The most ranks one token can visit, for a router `config` over `experts` experts spread over
/// `world` ranks: k (one per pair) and the world at most; with chapter 1's group-limited
/// selection (the best `topk_group` of `n_group` groups, then the k best experts inside them),
/// at most the ranks that the `topk_group` groups spanning the most ranks touch. With groups
/// aligned to ranks (each rank holding whole groups), that is at most `topk_group` ranks:
/// DeepSeek-V3's 4 of 8 groups on 8 GPUs, 4 ranks of 8 for each token's 8 experts.
pub fn ranks_bound(config: &ch01_router::RouterConfig, experts: usize, world: usize) -> usize {
    let plain = config.k.min(world);
    let Some(g) = config.grouping else {
        return plain;
    };
    let (per_group, per_rank) = (experts / g.n_group, experts / world);
    if per_group == 0 || per_rank == 0 {
        return plain;
    }
    // The ranks each group touches.
    let mut spans: Vec<usize> = (0..g.n_group)
        .map(|grp| {
            let (first, last) = (grp * per_group, (grp + 1) * per_group - 1);
            last / per_rank - first / per_rank + 1
        })
        .collect();
    spans.sort_unstable_by(|a, b| b.cmp(a));
    plain.min(spans.iter().take(g.topk_group).sum())
}
// ANCHOR_END: ranks_bound
