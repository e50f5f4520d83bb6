//! The same checks over NCCL, one process per GPU: every test here starts two copies of this
//! test binary (`MOE_RANK` 0 and 1, `CUDA_VISIBLE_DEVICES` 0 and 1), and each rank compares its
//! output with chapter 6's layer on its own GPU. They need two GPUs:
//! `cargo test -p ch12-parallel --test nccl -- --ignored`.

// `is_multiple_of` needs Rust 1.87; the workspace's MSRV is 1.85.
#![allow(clippy::manual_is_multiple_of)]

mod common;

/// Runs `test` as two ranks (child processes), or, in a child, returns true: run the rank.
fn as_two_ranks(test: &str) -> bool {
    if std::env::var("MOE_RANK").is_ok() {
        return true;
    }
    // SAFETY: only tries to load the driver library.
    let gpus = match unsafe { cudarc::driver::sys::is_culib_present() }
        && cudarc::driver::result::init().is_ok()
    {
        true => cudarc::driver::result::device::get_count().unwrap_or(0),
        false => 0,
    };
    assert!(
        gpus >= 2,
        "needs two GPUs (nvidia-h200-x2); this machine has {gpus}"
    );
    assert!(
        ch12_parallel::nccl::nccl_present(),
        "needs NCCL (libnccl.so.2)"
    );
    let id = std::env::temp_dir().join(format!("ch12-nccl-{}-{test}", std::process::id()));
    let _ = std::fs::remove_file(&id);
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|r| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    test,
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("MOE_RANK", r.to_string())
                .env("MOE_WORLD", "2")
                .env("MOE_NCCL_ID_FILE", &id)
                .env("CUDA_VISIBLE_DEVICES", r.to_string())
                .env("MOE_BACKEND", "cuda")
                .spawn()
                .expect("start a rank")
        })
        .collect();
    for (r, mut c) in children.into_iter().enumerate() {
        assert!(
            c.wait().unwrap().success(),
            "rank {r} failed (its output is above)"
        );
    }
    let _ = std::fs::remove_file(&id);
    false
}

mod two_gpus {
    use super::common::{every_regime, one_gpu, pin, split_rows};
    use ch02_grouped::compare::check_output;
    use ch02_grouped::MoeLayer;
    use ch04_fused_moe::Path;
    use ch12_parallel::nccl::Nccl;
    use ch12_parallel::{Communicator, ExpertParallel, TensorParallel, TP_TOLERANCE};
    use moe_kernels::testing::assert_same_bits;
    use moe_kernels::Device;

    pub fn expert_parallel_gives_the_one_gpu_bits() {
        let dev = Device::cuda().unwrap();
        let comm = Nccl::from_env(dev).unwrap();
        let (rank, world) = (comm.rank(), comm.world());
        for r in every_regime().filter(|r| r.weights.config.experts % world == 0) {
            let h = r.weights.config.hidden;
            let mine = split_rows(r.rows, world)[rank].clone();
            let x = &r.hidden[mine.start * h..mine.end * h];
            for path in Path::ALL {
                let ep = ExpertParallel::new(dev, &r.weights, rank, world)
                    .unwrap()
                    .map_experts(pin(path))
                    .unwrap();
                let got = ep.forward(&comm, x).unwrap();
                let want = one_gpu(dev, &r.weights, Some(path)).forward(x).unwrap();
                let what = format!("{}, rank {rank}, {path} path", r.name);
                assert_eq!(got.layer.routing.ids, want.routing.ids, "{what}");
                assert_same_bits(&what, &got.layer.out, &want.out);
            }
        }
    }

    pub fn tensor_parallel_within_the_tolerance() {
        let dev = Device::cuda().unwrap();
        let comm = Nccl::from_env(dev).unwrap();
        let (rank, world) = (comm.rank(), comm.world());
        for r in every_regime().filter(|r| {
            let c = &r.weights.config;
            c.intermediate % world == 0 && c.shared.is_none_or(|s| s.intermediate % world == 0)
        }) {
            for path in Path::ALL {
                let tp = TensorParallel::new(dev, &r.weights, rank, world)
                    .unwrap()
                    .map_experts(pin(path))
                    .unwrap();
                let got = tp.forward(&comm, &r.hidden).unwrap();
                let want = one_gpu(dev, &r.weights, Some(path))
                    .forward(&r.hidden)
                    .unwrap();
                let what = format!("{}, rank {rank}, {path} path", r.name);
                assert_eq!(got.routing.ids, want.routing.ids, "{what}");
                check_output(&what, &want.out, &got.out, TP_TOLERANCE).unwrap();
            }
        }
    }
}

// ANCHOR: nccl_tests
#[test]
#[ignore = "needs two GPUs (nvidia-h200-x2)"]
fn nccl_expert_parallel_gives_the_one_gpu_bits() {
    if as_two_ranks("nccl_expert_parallel_gives_the_one_gpu_bits") {
        two_gpus::expert_parallel_gives_the_one_gpu_bits();
    }
}

#[test]
#[ignore = "needs two GPUs (nvidia-h200-x2)"]
fn nccl_tensor_parallel_within_the_tolerance() {
    if as_two_ranks("nccl_tensor_parallel_within_the_tolerance") {
        two_gpus::tensor_parallel_within_the_tolerance();
    }
}
// ANCHOR_END: nccl_tests
