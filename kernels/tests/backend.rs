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
    // run set: `cuda`, `emu` (any case), empty or unset.
    let var = std::env::var("MOE_BACKEND").ok();
    let lower = var.as_deref().map(|v| v.trim().to_ascii_lowercase());
    match (lower.as_deref(), Device::select()) {
        (Some("emu"), Ok((d, why))) => {
            assert_eq!(d.kind(), BackendKind::Emu);
            assert!(why.starts_with("MOE_BACKEND="), "{why}");
        }
        (Some("cuda"), Ok((d, why))) => {
            assert_eq!(d.kind(), BackendKind::Cuda);
            assert!(why.starts_with("MOE_BACKEND="), "{why}");
        }
        (Some("cuda"), Err(e)) => assert!(matches!(e, KernelError::NoGpu { .. }), "{e}"),
        (None, Ok((d, why))) => {
            assert!(why.starts_with("MOE_BACKEND is unset and "), "{why}");
            assert_eq!(d.kind() == BackendKind::Cuda, Device::cuda().is_ok());
        }
        (Some(""), Ok((_, why))) => {
            assert!(
                why.starts_with("MOE_BACKEND is empty (read as unset) and "),
                "{why}"
            )
        }
        (v, r) => panic!("MOE_BACKEND={v:?} gave {:?}", r.map(|(d, w)| (d.kind(), w))),
    }
}

#[test]
fn moe_backend_is_read_case_insensitively_and_empty_means_unset() {
    use moe_kernels::device::{parse_backend, BackendRequest};
    assert_eq!(parse_backend(Some("EMU")), Ok(BackendRequest::Emu));
    assert_eq!(parse_backend(Some("Cuda")), Ok(BackendRequest::Cuda));
    assert_eq!(
        parse_backend(Some("")),
        Ok(BackendRequest::Auto { empty: true })
    );
    assert_eq!(
        parse_backend(Some("cpu")).unwrap_err().to_string(),
        "MOE_BACKEND=\"cpu\" is not a backend: use `cuda`, `emu`, or leave it unset"
    );
}

#[test]
fn an_unknown_backend_name_is_rejected_by_message() {
    let e = KernelError::UnknownBackend("gpu".into());
    assert_eq!(
        e.to_string(),
        "MOE_BACKEND=\"gpu\" is not a backend: use `cuda`, `emu`, or leave it unset"
    );
}

/// Needs only NVRTC, not a GPU: CI has it (the pinned pip wheel on LD_LIBRARY_PATH); where the
/// build found none, the test is ignored rather than passed.
#[test]
#[cfg_attr(
    not(moe_nvrtc_present),
    ignore = "needs NVRTC (libnvrtc.so.13 on LD_LIBRARY_PATH)"
)]
fn a_kernel_that_does_not_compile_shows_the_nvrtc_log() {
    assert!(
        unsafe { cudarc::nvrtc::sys::is_culib_present() },
        "the build saw libnvrtc.so.13 but it cannot be loaded now"
    );
    static BROKEN: moe_kernels::KernelSource = moe_kernels::KernelSource {
        family: "broken",
        cuda_source: "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }\n",
        emu: &[],
    };
    match moe_kernels::cuda::compile_ptx(&BROKEN, "sm_90") {
        Err(KernelError::Compile {
            family,
            options,
            log,
        }) => {
            assert_eq!(family, "broken");
            assert!(options.iter().any(|o| o == "--fmad=false"), "{options:?}");
            assert!(
                log.contains("undefined_name"),
                "the log should name the problem: {log}"
            );
            let shown = KernelError::Compile {
                family,
                options,
                log,
            }
            .to_string();
            assert!(
                shown.starts_with("NVRTC could not compile kernels/broken.cu"),
                "{shown}"
            );
        }
        // Without the CUDA headers, the error says so instead.
        Err(KernelError::NoGpu { why }) => assert!(why.contains("CUDA headers"), "{why}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn tensor_maps_never_outrun_their_buffer() {
    // The emulator's map (kernels/emu/hopper.h's emu_tensor_map): its magic, the buffer's
    // address, the matrix's rows and columns; a matrix larger than its buffer is refused.
    let emu = Device::emu();
    let w = emu.zeros::<half::bf16>(64 * 64).unwrap();
    let map = emu.tensor_map_bf16(&w, 64, 64, 64, 64).unwrap();
    assert_eq!(map[..4], [0x5041_4d52_4f53_4e54, w.device_ptr(), 64, 64]);
    assert!(matches!(
        emu.tensor_map_bf16(&w, 65, 64, 64, 64),
        Err(KernelError::Length { .. })
    ));
    // On a GPU (when this process has one): a matrix larger than its buffer is refused before
    // the driver sees it; one that fits gives 128 bytes that are not all zero.
    if let Ok(gpu) = Device::cuda() {
        let w = gpu.zeros::<half::bf16>(64 * 64).unwrap();
        assert!(matches!(
            gpu.tensor_map_bf16(&w, 65, 64, 64, 64),
            Err(KernelError::Length { .. })
        ));
        let map = gpu.tensor_map_bf16(&w, 64, 64, 64, 64).unwrap();
        assert!(map.iter().any(|&v| v != 0));
    }
}
