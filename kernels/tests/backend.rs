//! Backend selection: the one printed line, and the errors a reader meets.
use moe_kernels::{BackendKind, Device, KernelError};

#[test]
fn forcing_cuda_without_a_gpu_is_a_clear_error() {
    match Device::cuda() {
        Ok(d) => assert_eq!(d.kind(), BackendKind::Cuda), // on the GPU machine
        Err(e) => {
            assert!(matches!(e, KernelError::NoGpu { .. }), "{e}");
            assert!(
                e.to_string()
                    .starts_with("the CUDA backend cannot run here: "),
                "{e}"
            );
        }
    }
}

#[test]
fn the_emulator_is_always_there() {
    let d = Device::emu();
    assert_eq!(d.kind(), BackendKind::Emu);
    assert!(
        d.describe().starts_with("CPU emulator, "),
        "{}",
        d.describe()
    );
}

#[test]
fn selection_follows_moe_backend() {
    // The variable is read once per process, so this test checks the answer for whatever the
    // run set: `cuda`, `emu` or unset.
    let var = std::env::var("MOE_BACKEND").unwrap_or_default();
    match (var.as_str(), Device::select()) {
        ("emu", Ok((d, why))) => {
            assert_eq!(d.kind(), BackendKind::Emu);
            assert_eq!(why, "MOE_BACKEND=emu");
        }
        ("cuda", Ok((d, why))) => {
            assert_eq!(d.kind(), BackendKind::Cuda);
            assert_eq!(why, "MOE_BACKEND=cuda");
        }
        ("cuda", Err(e)) => assert!(matches!(e, KernelError::NoGpu { .. }), "{e}"),
        ("", Ok((d, why))) => {
            assert!(why.starts_with("MOE_BACKEND is unset and "), "{why}");
            assert_eq!(d.kind() == BackendKind::Cuda, Device::cuda().is_ok());
        }
        (v, r) => panic!("MOE_BACKEND={v:?} gave {:?}", r.map(|(d, w)| (d.kind(), w))),
    }
}

#[test]
fn an_unknown_backend_name_is_rejected_by_message() {
    let e = KernelError::UnknownBackend("gpu".into());
    assert_eq!(
        e.to_string(),
        "MOE_BACKEND=\"gpu\" is not a backend: use `cuda`, `emu`, or leave it unset"
    );
}
