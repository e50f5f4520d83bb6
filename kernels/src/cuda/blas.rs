//! cuBLAS on the GPU's stream: the library GEMM of [`crate::blas`].

use crate::blas::call::{Dtype, GemmCall};
use crate::error::{KernelError, Result};
use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::driver::{result as cu, sys};
use std::ffi::c_void;

/// The workspace cuBLAS gets from us: NVIDIA's recommended size for Hopper and Blackwell
/// (32 MiB; 4 MiB suffices on older GPUs).
const WORKSPACE_BYTES: usize = 32 << 20;

/// One cuBLAS handle, bound to the GPU's stream, with a workspace of its own.
pub(crate) struct Blas {
    handle: bsys::cublasHandle_t,
    workspace: sys::CUdeviceptr,
}

// The handle is used from any thread under the GPU's current context; cuBLAS handles may be
// shared between host threads as long as calls do not overlap, which the one stream orders.
unsafe impl Send for Blas {}
unsafe impl Sync for Blas {}

fn err(call: &str, e: blas::CublasError) -> KernelError {
    KernelError::Blas {
        call: call.to_string(),
        error: format!("{:?}", e.0),
    }
}

impl Blas {
    pub(crate) fn new(stream: sys::CUstream) -> Result<Blas> {
        if !unsafe { bsys::is_culib_present() } {
            return Err(KernelError::NoGpu {
                why: "cuBLAS (libcublas.so.13) is not on the library path; add the folder that holds \
                      it (e.g. /usr/local/cuda/lib64 or pip's nvidia/cu13/lib) to LD_LIBRARY_PATH"
                    .into(),
            });
        }
        let handle = blas::create_handle().map_err(|e| err("cublasCreate", e))?;
        unsafe { blas::set_stream(handle, stream as bsys::cudaStream_t) }
            .map_err(|e| err("cublasSetStream", e))?;
        // A workspace of our own, set after the stream (cublasSetStream resets it to cuBLAS's
        // pool). Without one, a GEMM captured into a CUDA graph may take its workspace with
        // cudaMallocAsync during the capture: memory nodes in the graph, which every replay the
        // harness times would run, and which a graph used as a child graph cannot hold (cuBLAS
        // documentation, "CUDA Graphs support"). With it, a captured GEMM is its kernels only.
        let workspace = match unsafe { cu::malloc_sync(WORKSPACE_BYTES) } {
            Ok(w) => w,
            Err(e) => {
                let _ = unsafe { blas::destroy_handle(handle) };
                return Err(KernelError::OutOfMemory {
                    bytes: WORKSPACE_BYTES,
                    why: format!(
                        "cuMemAlloc for the cuBLAS workspace: {}",
                        super::describe(&e)
                    ),
                });
            }
        };
        let blas = Blas { handle, workspace };
        // Zeroed once: cuBLAS's split-K reduction (cublasLt::splitKreduce_kernel) reads parts of
        // the workspace its GEMM kernel did not write, which compute-sanitizer's initcheck
        // reports as reads of uninitialized memory (196,036 of them at chapter 4's GLM-like
        // shape, bench/results/h200/logs/sanitizer_initcheck.log). Zeroed, the values it reads
        // are defined, and the same on every run.
        unsafe { cu::memset_d8_sync(workspace, 0, WORKSPACE_BYTES) }.map_err(|e| {
            KernelError::Blas {
                call: "cuMemsetD8 of the cuBLAS workspace".to_string(),
                error: super::describe(&e),
            }
        })?;
        unsafe { bsys::cublasSetWorkspace_v2(handle, workspace as *mut c_void, WORKSPACE_BYTES) }
            .result()
            .map_err(|e| err("cublasSetWorkspace", e))?;
        Ok(blas)
    }

    /// `y = x · wᵀ` row-major, as cuBLAS's column-major `yᵀ = w · xᵀ`: A = w (transposed),
    /// B = x, C = y, m = out, n = rows, k = in.
    pub(crate) fn gemm(&self, c: &GemmCall) -> Result<()> {
        let dt = |d: Dtype| match d {
            Dtype::F32 => bsys::cudaDataType::CUDA_R_32F,
            Dtype::Bf16 => bsys::cudaDataType::CUDA_R_16BF,
        };
        let (alpha, beta) = (1.0f32, if c.accumulate { 1.0f32 } else { 0.0 });
        let to_i32 = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| KernelError::TooLarge {
                what: format!("cuBLAS GEMM {what}"),
                elements: v,
                element_bytes: 1,
            })
        };
        unsafe {
            blas::gemm_ex(
                self.handle,
                bsys::cublasOperation_t::CUBLAS_OP_T,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                to_i32(c.out_features, "out")?,
                to_i32(c.rows, "rows")?,
                to_i32(c.in_features, "in")?,
                &alpha as *const f32 as *const c_void,
                c.w as *const c_void,
                dt(c.input),
                to_i32(c.ldw, "ldw")?,
                c.x as *const c_void,
                dt(c.input),
                to_i32(c.ldx, "ldx")?,
                &beta as *const f32 as *const c_void,
                c.y as *mut c_void,
                dt(c.output),
                to_i32(c.ldy, "ldy")?,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| {
            err(
                &format!(
                    "cublasGemmEx(rows {}, in {}, out {}, {:?} -> {:?})",
                    c.rows, c.in_features, c.out_features, c.input, c.output
                ),
                e,
            )
        })?;
        Ok(())
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        let _ = unsafe { blas::destroy_handle(self.handle) };
        let _ = unsafe { cu::free_sync(self.workspace) };
    }
}
