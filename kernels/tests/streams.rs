//! `Device::side_by_side`: two halves of work queued on two streams (on the GPU), forked from and
//! joined to the device's stream. The results must be those of the halves run one after the
//! other, inside a CUDA graph capture too, and an error in a half must come back as an error
//! with the device still usable.

use moe_kernels::blas::{linear, Linear};
use moe_kernels::measure::{Harness, Plan};
use moe_kernels::{Device, DeviceBuffer, KernelError};

const SHAPE: Linear = Linear {
    rows: 3,
    in_features: 64,
    out_features: 40,
};

fn values(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 97) as f32 / 48.0 - 1.0)
        .collect()
}

struct Work {
    x: DeviceBuffer<f32>,
    w: [DeviceBuffer<f32>; 2],
    y: [DeviceBuffer<f32>; 2],
}

impl Work {
    fn new(dev: &'static Device) -> Work {
        let n_in = SHAPE.rows * SHAPE.in_features;
        let n_w = SHAPE.out_features * SHAPE.in_features;
        let n_out = SHAPE.rows * SHAPE.out_features;
        Work {
            x: dev.upload(&values(n_in, 1)).unwrap(),
            w: [
                dev.upload(&values(n_w, 2)).unwrap(),
                dev.upload(&values(n_w, 3)).unwrap(),
            ],
            y: [dev.alloc(n_out).unwrap(), dev.alloc(n_out).unwrap()],
        }
    }

    fn gemm(&self, dev: &'static Device, i: usize) -> Result<(), KernelError> {
        linear(
            dev,
            SHAPE,
            &self.x.as_view(),
            &self.w[i].as_view(),
            &self.y[i].as_view(),
            false,
        )
    }

    /// NaN in both outputs, so a half that wrote nothing shows.
    fn poison(&mut self) {
        for y in &mut self.y {
            let n = y.len();
            y.copy_from(&vec![f32::NAN; n]).unwrap();
        }
    }

    fn outputs(&self) -> [Vec<f32>; 2] {
        [self.y[0].to_vec().unwrap(), self.y[1].to_vec().unwrap()]
    }
}

/// Both GEMMs one after the other, then the same two side by side: the same bits.
fn side_by_side_gives_the_sequential_results(dev: &'static Device) {
    let mut work = Work::new(dev);
    work.gemm(dev, 0).unwrap();
    work.gemm(dev, 1).unwrap();
    let sequential = work.outputs();
    work.poison();
    let ((), ()) = dev
        .side_by_side(|| work.gemm(dev, 0), || work.gemm(dev, 1))
        .unwrap();
    let both = work.outputs();
    for i in 0..2 {
        assert!(
            both[i].iter().all(|v| v.is_finite()),
            "half {i} wrote nothing"
        );
        moe_kernels::testing::assert_same_bits("side_by_side", &both[i], &sequential[i]);
    }
}

/// A failing half is an error; the other half does not run when the side half fails; the
/// device goes on working (the join happened).
fn a_failing_half_is_an_error(dev: &'static Device) {
    let work = Work::new(dev);
    let wrong = Linear {
        rows: SHAPE.rows + 1,
        ..SHAPE
    };
    let mut main_ran = false;
    let r: Result<((), ()), KernelError> = dev.side_by_side(
        || {
            linear(
                dev,
                wrong,
                &work.x.as_view(),
                &work.w[0].as_view(),
                &work.y[0].as_view(),
                false,
            )
        },
        || {
            main_ran = true;
            Ok(())
        },
    );
    assert!(matches!(r, Err(KernelError::Length { .. })), "{r:?}");
    assert!(!main_ran, "the main half ran after the side half failed");
    let r: Result<((), ()), KernelError> = dev.side_by_side(
        || work.gemm(dev, 0),
        || {
            linear(
                dev,
                wrong,
                &work.x.as_view(),
                &work.w[1].as_view(),
                &work.y[1].as_view(),
                false,
            )
        },
    );
    assert!(matches!(r, Err(KernelError::Length { .. })), "{r:?}");
    side_by_side_gives_the_sequential_results(dev);
}

mod emu {
    #[test]
    fn side_by_side_gives_the_sequential_results() {
        super::side_by_side_gives_the_sequential_results(moe_kernels::testing::emu());
    }

    #[test]
    fn a_failing_half_is_an_error() {
        super::a_failing_half_is_an_error(moe_kernels::testing::emu());
    }
}

mod cuda {
    use super::*;
    use std::sync::{Mutex, MutexGuard};

    /// The GPU tests of this file take turns: they share the device's one stream, and a copy
    /// queued on it by one test while another captures it into a graph breaks both (the harness
    /// runs tests on two threads).
    fn one_at_a_time() -> MutexGuard<'static, ()> {
        static TURN: Mutex<()> = Mutex::new(());
        TURN.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    #[ignore = "needs a GPU"]
    fn side_by_side_gives_the_sequential_results() {
        let _turn = one_at_a_time();
        super::side_by_side_gives_the_sequential_results(moe_kernels::testing::cuda());
    }

    #[test]
    #[ignore = "needs a GPU"]
    fn a_failing_half_is_an_error() {
        let _turn = one_at_a_time();
        super::a_failing_half_is_an_error(moe_kernels::testing::cuda());
    }

    /// Captured into a CUDA graph (the harness's quick plan replays it; nothing is timed here)
    /// the fork and the join become graph edges: the capture ends cleanly and the replays leave
    /// the sequential results.
    #[test]
    #[ignore = "needs a GPU"]
    fn side_by_side_captures_into_a_graph() {
        let _turn = one_at_a_time();
        let dev = moe_kernels::testing::cuda();
        let mut work = Work::new(dev);
        work.gemm(dev, 0).unwrap();
        work.gemm(dev, 1).unwrap();
        let sequential = work.outputs();
        work.poison();
        let harness = Harness::new(dev, Plan::quick()).unwrap();
        let m = harness
            .measure::<KernelError>(|| {
                dev.side_by_side(|| work.gemm(dev, 0), || work.gemm(dev, 1))
                    .map(|_| ())
            })
            .unwrap();
        assert!(m.launches >= 2, "{m:?}");
        let both = work.outputs();
        for i in 0..2 {
            moe_kernels::testing::assert_same_bits("captured", &both[i], &sequential[i]);
        }
    }
}
