// emu_tensor.cpp -- tensor-core fragments as warp collectives. Every lane of the warp calls
// moe_mma_m16n8k16_bf16 (or moe_ldmatrix_*) with its own registers; when all 32 have arrived,
// this file assembles the whole tiles from the lanes' fragments in the layout the PTX ISA
// documents for mma.m16n8k16 and ldmatrix.m8n8, computes, and hands each lane its part.
// The arithmetic of one mma is tc_model.h's model of the H100/H200 tensor core, which gives the
// same bits as the H200 (measured: tools/gpu/probes/mma_probe.cu).
#include "emu_internal.h"
#include "tc_model.h"

namespace emu_rt {

static inline uint16_t lo16(unsigned v) { return (uint16_t)(v & 0xffffu); }
static inline uint16_t hi16(unsigned v) { return (uint16_t)(v >> 16); }
static inline unsigned pack(uint16_t lo, uint16_t hi) { return (unsigned)lo | ((unsigned)hi << 16); }

// D = A B + C for one m16n8k16 tile. Lane l = 4 g + t (g = l / 4, t = l % 4) holds
//   a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   c[0..1] = C[g][2t, 2t+1]   c[2..3] = C[g+8][2t, 2t+1]   (and d alike)
static void execute_mma(Fiber* F) {
    uint16_t A[16][16], Bt[8][16];  // Bt[n][k]: the columns of B
    float C[16][8];
    for (unsigned l = 0; l < 32; ++l) {
        const emu_mma_operands& o = *static_cast<const emu_mma_operands*>(F[l].payload);
        const unsigned g = l / 4, t = l % 4;
        A[g][2 * t] = lo16(o.a[0]), A[g][2 * t + 1] = hi16(o.a[0]);
        A[g + 8][2 * t] = lo16(o.a[1]), A[g + 8][2 * t + 1] = hi16(o.a[1]);
        A[g][2 * t + 8] = lo16(o.a[2]), A[g][2 * t + 9] = hi16(o.a[2]);
        A[g + 8][2 * t + 8] = lo16(o.a[3]), A[g + 8][2 * t + 9] = hi16(o.a[3]);
        Bt[g][2 * t] = lo16(o.b[0]), Bt[g][2 * t + 1] = hi16(o.b[0]);
        Bt[g][2 * t + 8] = lo16(o.b[1]), Bt[g][2 * t + 9] = hi16(o.b[1]);
        C[g][2 * t] = o.c[0], C[g][2 * t + 1] = o.c[1];
        C[g + 8][2 * t] = o.c[2], C[g + 8][2 * t + 1] = o.c[3];
    }
    for (unsigned l = 0; l < 32; ++l) {
        const emu_mma_operands& o = *static_cast<const emu_mma_operands*>(F[l].payload);
        const unsigned g = l / 4, t = l % 4;
        const unsigned rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        float d[4];
        for (int i = 0; i < 4; ++i)
            d[i] = tc_model::dot(A[rows[i]], Bt[cols[i]], 16, C[rows[i]][cols[i]], tc_model::H100);
        for (int i = 0; i < 4; ++i) o.d[i] = d[i];  // after all reads: d may alias c
    }
}

// ldmatrix.m8n8.x{1,2,4}[.trans].b16: lanes 8i..8i+7 gave the rows of matrix i (each lane read
// its own 16-byte row before parking). Without .trans lane t receives row t/4, elements
// 2(t%4) and 2(t%4)+1 of each matrix; with .trans, column t/4, rows 2(t%4) and 2(t%4)+1.
static void execute_ldmatrix(Fiber* F) {
    const emu_ldmatrix_operands& first = *static_cast<const emu_ldmatrix_operands*>(F[0].payload);
    const int num = first.num;
    for (unsigned l = 0; l < 32; ++l) {
        const emu_ldmatrix_operands& o = *static_cast<const emu_ldmatrix_operands*>(F[l].payload);
        const unsigned r = l / 4, c = 2 * (l % 4);
        for (int i = 0; i < num; ++i) {
            const emu_ldmatrix_operands& row_r = *static_cast<const emu_ldmatrix_operands*>(F[8 * i + r].payload);
            if (!o.trans) {
                o.out[i] = pack(row_r.row[c], row_r.row[c + 1]);
            } else {
                const emu_ldmatrix_operands& a = *static_cast<const emu_ldmatrix_operands*>(F[8 * i + c].payload);
                const emu_ldmatrix_operands& b = *static_cast<const emu_ldmatrix_operands*>(F[8 * i + c + 1].payload);
                o.out[i] = pack(a.row[r], b.row[r]);
            }
        }
    }
}

void execute_tensor_collective(Worker& w, Warp& W, unsigned M) {
    Fiber* F = &w.fibers[W.first];
    (void)M;  // always the full warp (checked when the lanes arrived)
    if (F[0].op == EMU_OP_MMA) {
        execute_mma(F);
        return;
    }
    // All lanes must agree on the shape.
    const emu_ldmatrix_operands& first = *static_cast<const emu_ldmatrix_operands*>(F[0].payload);
    for (unsigned l = 1; l < 32; ++l) {
        const emu_ldmatrix_operands& o = *static_cast<const emu_ldmatrix_operands*>(F[l].payload);
        if (o.num != first.num || o.trans != first.trans) {
            block_error(w, fmt("moe_ldmatrix at %s: lanes 0 and %u ask for different shapes (x%d%s vs x%d%s).",
                               where(F[0].file, F[0].line).c_str(), l, first.num, first.trans ? ".trans" : "",
                               o.num, o.trans ? ".trans" : ""));
            return;
        }
    }
    execute_ldmatrix(F);
}

}  // namespace emu_rt
