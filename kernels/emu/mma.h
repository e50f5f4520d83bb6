// mma.h -- tensor-core (WMMA) fragment emulation for the emu backend. EMPTY FOR NOW: a later
// chapter fills it. A kernel that includes it under MOE_EMU fails to compile with a clear message.
//
// Planned outline (namespace nvcuda::wmma, mirroring <mma.h>):
//   struct matrix_a; struct matrix_b; struct accumulator; struct row_major; struct col_major;
//   enum layout_t { mem_row_major, mem_col_major };
//   template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
//       // per-lane storage: num_elements values; element-to-lane mapping is unspecified in CUDA,
//       // so the emulator may keep the whole tile in each lane (x[] = this lane's share).
//       T x[...]; static constexpr int num_elements = ...;
//   };
//   fill_fragment(frag, v); load_matrix_sync(frag, ptr, ldm[, layout]);
//   mma_sync(d, a, b, c);   // warp collective: all 32 lanes rendez-vous (emu_warp_collective
//                           // with a full mask), products accumulated in fp32 with the
//                           // hardware's rounding for bf16/fp16 inputs;
//   store_matrix_sync(ptr, frag, ldm, layout);
#ifndef MOE_EMU_MMA_H
#define MOE_EMU_MMA_H
#if defined(MOE_EMU)
#error "kernels/emu/mma.h: WMMA / tensor-core fragments (nvcuda::wmma) are not emulated yet; this kernel cannot run on the CPU emulator until mma.h is implemented."
#endif
#endif
