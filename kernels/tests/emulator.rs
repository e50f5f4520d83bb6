//! The emulator's own promises, tried the way a reader's buggy kernel would try them
//! (`kernels/adversarial.cu`): a fault becomes a typed error naming the kernel, block, thread and
//! address, and the process lives; a faulted device refuses further work with a clear error;
//! a spin-wait between threads completes; a wait that never ends is reported as a deadlock; a
//! barrier reached through a helper from divergent branches is reported; legal patterns are not.

use moe_kernels::families::ADVERSARIAL;
use moe_kernels::{args, Device, EmuErrorKind, FaultKind, KernelError, LaunchConfig};
use std::time::Duration;

/// A fresh emulator device (a fault leaves it unusable) with its adversarial kernels.
fn fresh() -> (&'static Device, std::sync::Arc<moe_kernels::Module>) {
    let dev = Device::emu_isolated();
    let m = dev.load(&ADVERSARIAL).unwrap();
    (dev, m)
}

fn fault_of(e: KernelError) -> moe_kernels::Fault {
    match e {
        KernelError::EmuFault { fault, .. } => fault,
        other => panic!("expected a fault, got: {other}"),
    }
}

// ANCHOR: fault_test
#[test]
fn integer_division_by_zero_is_a_typed_error_naming_the_thread() {
    let (dev, m) = fresh();
    let num = dev.upload(&[7i32; 64]).unwrap();
    let mut den = vec![1i32; 64];
    den[45] = 0; // block 1 (of 32 threads), thread 13
    let den = dev.upload(&den).unwrap();
    let out = dev.alloc::<i32>(64).unwrap();
    let err = m
        .launch(
            "adv_divide",
            LaunchConfig::blocks(2, 32),
            &args![&num, &den, &out, 64i32],
        )
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("kernel adversarial::adv_divide faulted"),
        "{text}"
    );
    let f = fault_of(err);
    assert_eq!(f.kind, FaultKind::IntegerDivision, "{f}");
    assert_eq!(
        (f.block, f.thread),
        (Some([1, 0, 0]), Some([13, 0, 0])),
        "{f}"
    );
    // The device is now unusable, as a CUDA context is after a fault; the process lives on.
    let again = dev.upload(&[1.0f32]).unwrap_err();
    assert!(
        matches!(again, KernelError::DeviceUnusable { .. }),
        "{again}"
    );
    assert!(again.to_string().contains("adv_divide"), "{again}");
    // Other devices are not affected.
    assert_eq!(
        Device::emu().upload(&[2.5f32]).unwrap().to_vec().unwrap(),
        vec![2.5]
    );
}
// ANCHOR_END: fault_test

#[test]
fn a_write_far_out_of_bounds_names_the_address_and_the_nearest_buffer() {
    let (dev, m) = fresh();
    let out = dev.alloc::<f32>(100).unwrap();
    let offset: i64 = 1 << 28; // a gigabyte past the end
    let err = m
        .launch(
            "adv_write",
            LaunchConfig::blocks(1, 32),
            &args![&out, 1i32, offset],
        )
        .unwrap_err();
    let f = fault_of(err);
    assert_eq!(f.kind, FaultKind::Memory, "{f}");
    assert_eq!(f.thread, Some([0, 0, 0]), "{f}");
    assert_eq!(f.address, Some(out.device_ptr() + 4 * offset as u64), "{f}");
    assert!(
        f.detail.contains("DeviceBuffer<f32>[100]") || f.detail.contains("not near"),
        "{f}"
    );
}

#[test]
fn a_write_one_element_past_the_end_hits_the_guard_page() {
    let (dev, m) = fresh();
    // 64 floats = 256 bytes: the buffer ends exactly at its guard page.
    let out = dev.alloc::<f32>(64).unwrap();
    let err = m
        .launch(
            "adv_write",
            LaunchConfig::blocks(2, 32),
            &args![&out, 64i32, 1i64],
        )
        .unwrap_err();
    let f = fault_of(err);
    assert_eq!(f.kind, FaultKind::Memory, "{f}");
    assert_eq!(
        (f.block, f.thread),
        (Some([1, 0, 0]), Some([31, 0, 0])),
        "{f}"
    );
    assert_eq!(f.address, Some(out.device_ptr() + 256), "{f}");
    assert!(
        f.detail
            .starts_with("just past the end of DeviceBuffer<f32>[64]"),
        "{f}"
    );
}

#[test]
fn a_small_overrun_into_the_padding_is_found_after_the_launch() {
    let (dev, m) = fresh();
    // 3 floats = 12 bytes: 4 bytes of padding before the guard page.
    let out = dev.alloc::<f32>(3).unwrap();
    let err = m
        .launch(
            "adv_write",
            LaunchConfig::blocks(1, 32),
            &args![&out, 3i32, 1i64],
        )
        .unwrap_err();
    let f = fault_of(err);
    assert_eq!(f.kind, FaultKind::BufferOverrun, "{f}");
    assert_eq!(f.thread, None);
    assert!(
        f.detail.contains("past the end of DeviceBuffer<f32>[3]"),
        "{f}"
    );
}

#[test]
fn a_read_past_the_end_faults_too() {
    let (dev, m) = fresh();
    let inp = dev.alloc::<f32>(32).unwrap();
    let out = dev.alloc::<f32>(32).unwrap();
    let err = m
        .launch(
            "adv_read",
            LaunchConfig::blocks(1, 32),
            &args![&inp, &out, 32i32, 1i64],
        )
        .unwrap_err();
    assert_eq!(fault_of(err).kind, FaultKind::Memory);
}

#[test]
fn a_stack_overflow_is_reported_not_fatal() {
    let (dev, m) = fresh();
    let out = dev.alloc::<i32>(32).unwrap();
    // 100 frames of a kilobyte fit in the 256 KiB default; 1000 do not.
    m.launch(
        "adv_recurse",
        LaunchConfig::blocks(1, 32),
        &args![100i32, &out],
    )
    .unwrap();
    let err = m
        .launch(
            "adv_recurse",
            LaunchConfig::blocks(1, 32),
            &args![1000i32, &out],
        )
        .unwrap_err();
    let f = fault_of(err);
    assert_eq!(f.kind, FaultKind::StackOverflow, "{f}");
    assert!(f.detail.contains("MOE_EMU_STACK_KB"), "{f}");
}

#[test]
fn huge_and_overflowing_allocations_are_typed_errors() {
    let dev = Device::emu_isolated();
    match dev.alloc::<f32>(usize::MAX / 2) {
        Err(KernelError::TooLarge {
            elements,
            element_bytes: 4,
            ..
        }) => assert_eq!(elements, usize::MAX / 2),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let e = dev.alloc::<u8>(1 << 50).unwrap_err();
    assert!(matches!(e, KernelError::OutOfMemory { .. }), "{e}");
    assert!(e.to_string().contains("MOE_EMU_MEMORY_GB"), "{e}");
    // Still usable: these errors happen before any kernel runs.
    assert_eq!(dev.upload(&[1u8, 2]).unwrap().to_vec().unwrap(), vec![1, 2]);
}

// ANCHOR: spin_test
/// Thread 0 waits for a flag that a later thread sets. Thread 0 runs first, so the emulator must
/// let it give way: at each atomic, and (for a volatile load) when the preemption timer fires.
fn spin_waits_complete(dev: &'static Device) {
    let m = dev.load(&ADVERSARIAL).unwrap();
    for kernel in ["adv_spin_atomic", "adv_spin_volatile"] {
        for setter in [1i32, 40] {
            // setter 1: the same warp; setter 40: another warp.
            let flag = dev.zeros::<i32>(1).unwrap();
            let out = dev.zeros::<i32>(1).unwrap();
            m.launch(
                kernel,
                LaunchConfig::blocks(1, 64),
                &args![&flag, &out, setter],
            )
            .unwrap_or_else(|e| panic!("{kernel} (setter {setter}): {e}"));
            assert_eq!(out.to_vec().unwrap(), vec![1], "{kernel} (setter {setter})");
        }
    }
}
// ANCHOR_END: spin_test

/// `__syncwarp` after some lanes of its mask returned is legal in CUDA.
fn syncwarp_after_lanes_exited_is_legal(dev: &'static Device) {
    let m = dev.load(&ADVERSARIAL).unwrap();
    let out = dev.alloc::<i32>(32).unwrap();
    m.launch(
        "adv_syncwarp_after_exit",
        LaunchConfig::blocks(1, 32),
        &args![&out],
    )
    .unwrap();
    let got = out.to_vec().unwrap();
    for t in 0..16 {
        assert_eq!(got[t], t as i32 + 1);
        assert_eq!(got[16 + t], (t ^ 1) as i32 + 1);
    }
}

/// Branches that rejoin before a barrier, a barrier in an unrolled loop, and a helper holding a
/// barrier called by every thread from one place are not reported.
fn legal_barrier_patterns_pass(dev: &'static Device) {
    let m = dev.load(&ADVERSARIAL).unwrap();
    let out = dev.alloc::<i32>(64).unwrap();
    m.launch(
        "adv_barriers_legit",
        LaunchConfig::blocks(1, 64),
        &args![&out],
    )
    .unwrap();
    let mut s: Vec<i32> = (0..64)
        .map(|t| if t & 1 == 1 { 3 * t } else { t + 7 })
        .collect();
    for _ in 0..4 {
        let next: Vec<i32> = (0..64).map(|t| s[(t + 1) & 63]).collect();
        for t in 0..64 {
            s[t] += next[t];
        }
    }
    let want: Vec<i32> = s.iter().map(|v| v + 1).collect();
    assert_eq!(out.to_vec().unwrap(), want);
}

moe_kernels::backend_tests!(
    spin_waits_complete,
    syncwarp_after_lanes_exited_is_legal,
    legal_barrier_patterns_pass
);

#[test]
fn a_wait_that_never_ends_is_reported_as_a_deadlock() {
    for how in [0i32, 1] {
        let (dev, m) = fresh();
        dev.set_deadlock_timeout(Duration::from_millis(300));
        let flag = dev.zeros::<i32>(1).unwrap();
        let err = m
            .launch(
                "adv_spin_forever",
                LaunchConfig::blocks(1, 32),
                &args![&flag, how],
            )
            .unwrap_err();
        match &err {
            KernelError::Emu {
                kind: EmuErrorKind::Deadlock,
                message,
                ..
            } => {
                assert!(message.contains("thread 0 keeps spinning"), "{message}");
                assert!(message.contains("threads 1-31 have exited"), "{message}");
            }
            other => panic!("expected a deadlock, got: {other}"),
        }
        // A deadlock is not a fault: the device stays usable.
        assert_eq!(dev.upload(&[3i32]).unwrap().to_vec().unwrap(), vec![3]);
    }
}

#[test]
fn a_barrier_in_a_helper_called_from_divergent_branches_is_reported() {
    let (dev, m) = fresh();
    let out = dev.alloc::<i32>(64).unwrap();
    let err = m
        .launch(
            "adv_helper_barrier",
            LaunchConfig::blocks(1, 64),
            &args![&out, 0i32],
        )
        .unwrap_err();
    match &err {
        KernelError::Emu {
            kind: EmuErrorKind::Misuse,
            message,
            ..
        } => {
            assert!(
                message.contains("reached through different calls"),
                "{message}"
            );
            assert!(
                message.contains("threads 0-31") && message.contains("threads 32-63"),
                "{message}"
            );
        }
        other => panic!("expected a divergent-barrier error, got: {other}"),
    }
}

/// The documented blind spot (kernels/emu/README.md, "What the emulator cannot see"): when the
/// compiler inlines the helper, both copies of the barrier are the same source line with no call
/// frame between them, so the emulator cannot tell them apart and the launch completes. If this
/// test starts failing, the emulator got better: move the case into the test above and update the
/// README.
#[test]
fn a_barrier_in_an_inlined_helper_is_a_known_blind_spot() {
    let (dev, m) = fresh();
    let out = dev.alloc::<i32>(64).unwrap();
    let result = m.launch(
        "adv_helper_barrier",
        LaunchConfig::blocks(1, 64),
        &args![&out, 1i32],
    );
    assert!(
        result.is_ok(),
        "the inlined case is now detected: {result:?}"
    );
}
