//! Chapter 1's group-limited selection bounds the ranks a token visits under expert parallelism:
//! DeepSeek-V3 picks its 8 experts inside the best 4 of 8 groups of 32, so with the groups
//! aligned to ranks (8 ranks, one group each) a token visits at most 4 of the 8. Without groups,
//! the same 8 experts of 256 land on up to 8 ranks.

use ch01_router::{Grouping, RouterConfig};
use ch02_grouped::{MoeConfig, MoeWeights};
use ch12_parallel::{ranks_bound, ranks_visited, ExpertParallel};
use moe_kernels::Device;

fn layer(router: RouterConfig) -> MoeWeights {
    let c = MoeConfig {
        hidden: 64,
        intermediate: 16,
        experts: 256,
        router,
        shared: None,
    };
    MoeWeights::patterned(&c, 11, 2.0, true)
}

// ANCHOR: groups_bound
#[test]
fn deepseek_v3_groups_aligned_to_ranks_bound_the_ranks_a_token_visits() {
    let v3 = RouterConfig::deepseek_v3();
    assert_eq!(
        v3.grouping,
        Some(Grouping {
            n_group: 8,
            topk_group: 4
        })
    );
    // Aligned: each rank holds whole groups.
    assert_eq!(ranks_bound(&v3, 256, 8), 4);
    assert_eq!(ranks_bound(&v3, 256, 4), 4);
    assert_eq!(ranks_bound(&v3, 256, 2), 2);
    // Not aligned: 16 ranks of 16 experts, each group over 2 ranks: 4 groups, 8 ranks.
    assert_eq!(ranks_bound(&v3, 256, 16), 8);
    // Without groups, only k and the world bound it.
    let flat = RouterConfig {
        grouping: None,
        ..v3
    };
    assert_eq!(ranks_bound(&flat, 256, 8), 8);

    let rows = 64;
    let x = ch01_router::inputs::patterned(rows * 64, 21, 1.0);
    let dev = Device::emu();
    let route = |router| {
        let ep = ExpertParallel::new(dev, &layer(router), 0, 8).unwrap();
        ranks_visited(&ep.route(&x).unwrap(), 256 / 8)
    };
    let grouped = route(v3);
    assert!(grouped.iter().all(|&n| n <= 4), "{grouped:?}");
    let flat = route(flat);
    assert!(
        flat.iter().any(|&n| n > 4),
        "without groups some token should visit more than 4 ranks: {flat:?}"
    );
}
// ANCHOR_END: groups_bound
