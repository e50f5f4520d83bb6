//! Bad inputs as typed errors: experts or intermediate sizes that do not split over the ranks, a
//! rank outside the world, a world of none, and a layer handed a communicator of another world or
//! rank.

use ch01_router::RouterConfig;
use ch02_grouped::regimes::regime;
use ch02_grouped::{MoeConfig, MoeWeights, SharedExpert};
use ch12_parallel::{run_ranks, ExpertParallel, ParallelError, TensorParallel};
use moe_kernels::Device;

fn layer(experts: usize, intermediate: usize, shared: Option<usize>) -> MoeWeights {
    let c = MoeConfig {
        hidden: 32,
        intermediate,
        experts,
        router: RouterConfig::qwen3(2),
        shared: shared.map(|intermediate| SharedExpert {
            intermediate,
            gated: false,
        }),
    };
    MoeWeights::patterned(&c, 3, 0.3, false)
}

#[test]
fn sizes_that_do_not_split_are_refused_by_name() {
    let dev = Device::emu();
    let e = ExpertParallel::new(dev, &layer(6, 16, None), 0, 4)
        .err()
        .unwrap();
    assert_eq!(
        e,
        ParallelError::Split {
            what: "experts",
            size: 6,
            world: 4
        }
    );
    let e = TensorParallel::new(dev, &layer(8, 12, None), 0, 8)
        .err()
        .unwrap();
    assert_eq!(
        e,
        ParallelError::Split {
            what: "intermediate",
            size: 12,
            world: 8
        }
    );
    let e = TensorParallel::new(dev, &layer(8, 16, Some(10)), 1, 4)
        .err()
        .unwrap();
    assert_eq!(
        e,
        ParallelError::Split {
            what: "shared expert intermediate",
            size: 10,
            world: 4
        }
    );
    // Chapter 2's unaligned regime: I = 37 over two ranks.
    let r = regime("unaligned_sizes").unwrap();
    let e = TensorParallel::new(dev, &r.weights, 0, 2).err().unwrap();
    assert!(
        e.to_string()
            .contains("intermediate = 37 does not split over 2 ranks"),
        "{e}"
    );
}

#[test]
fn a_rank_out_of_range_or_an_empty_world_is_refused() {
    let dev = Device::emu();
    let w = layer(8, 16, None);
    let e = ExpertParallel::new(dev, &w, 2, 2).err().unwrap();
    assert_eq!(e, ParallelError::RankOutOfRange { rank: 2, world: 2 });
    let e = TensorParallel::new(dev, &w, 4, 4).err().unwrap();
    assert_eq!(e, ParallelError::RankOutOfRange { rank: 4, world: 4 });
    assert_eq!(
        TensorParallel::new(dev, &w, 0, 0).err().unwrap(),
        ParallelError::EmptyWorld
    );
}

#[test]
fn a_communicator_of_another_world_or_rank_is_refused() {
    let dev = Device::emu();
    let w = layer(8, 16, None);
    let x = ch01_router::inputs::patterned(3 * 32, 1, 1.0);
    // A layer built for 2 ranks, called with a group of 4: refused before any collective, so
    // no rank waits.
    let got = run_ranks(4, dev, |comm| {
        let rank = ch12_parallel::Communicator::rank(comm) % 2;
        let ep = ExpertParallel::new(dev, &w, rank, 2).unwrap();
        let tp = TensorParallel::new(dev, &w, rank, 2).unwrap();
        (ep.forward(comm, &x).err(), tp.forward(comm, &x).err())
    });
    for (ep, tp) in got {
        let want = ParallelError::WorldMismatch {
            what: "world size",
            layer: 2,
            communicator: 4,
        };
        assert_eq!(ep, Some(want.clone()));
        assert_eq!(tp, Some(want));
    }
    // Rank 1's layer handed rank 0's communicator.
    let got = run_ranks(2, dev, |comm| {
        let other = 1 - ch12_parallel::Communicator::rank(comm);
        ExpertParallel::new(dev, &w, other, 2)
            .unwrap()
            .forward(comm, &x)
            .err()
    });
    assert_eq!(
        got[0],
        Some(ParallelError::WorldMismatch {
            what: "rank",
            layer: 1,
            communicator: 0
        })
    );
}
