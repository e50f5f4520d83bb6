// emu_trampoline.h -- calls an emulated kernel with CUDA-style packed parameters.
//
//   extern "C" void emu_tramp__ch01_router__router_topk(void** p) { emu::call_kernel(router_topk, p); }
//
// params[i] points at the value of argument i (as for cuLaunchKernel): the kernel
// `void name(A0, A1, ...)` is called with *(A0*)params[0], *(A1*)params[1], ... (cv/ref stripped).
#ifndef MOE_EMU_TRAMPOLINE_H
#define MOE_EMU_TRAMPOLINE_H
#include <cstddef>
#include <type_traits>
#include <utility>

// While emu_tls_probe is set (emu_launch, before it runs any block), a trampoline does not run its
// kernel: it leaves the kernel's address in emu_tls_probe_kernel, where the runtime looks up the
// kernel's cluster shape (__cluster_dims__, cuda_emu.h). So every function given to emu_launch
// must be a trampoline made with emu::call_kernel.
extern __thread int emu_tls_probe;
extern __thread const void* emu_tls_probe_kernel;

namespace emu {
template <class T>
using param_value_t = std::remove_cv_t<std::remove_reference_t<T>>;

template <class... A, std::size_t... I>
inline void call_kernel_impl(void (*f)(A...), void** params, std::index_sequence<I...>) {
    f(*static_cast<param_value_t<A>*>(params[I])...);
}
template <class... A>
inline void call_kernel(void (*f)(A...), void** params) {
    if (__builtin_expect(emu_tls_probe, 0)) {
        emu_tls_probe_kernel = reinterpret_cast<const void*>(f);
        return;
    }
    call_kernel_impl(f, params, std::index_sequence_for<A...>{});
}
template <class... A>
inline void call_kernel(void (*f)(A...) noexcept, void** params) {
    call_kernel(reinterpret_cast<void (*)(A...)>(f), params);
}
}  // namespace emu
#endif
