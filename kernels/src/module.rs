//! A compiled kernel family on one device: the kernel table (name → the backend's handle and the
//! parameter kinds the build read from the signature), which belongs to neither backend, and
//! the one place every launch of the book goes through.
//!
//! Two per-thread hooks live here, for the measuring harness and for tests, so that chapter code
//! carries no benchmark code: [`record_launches`] lists the kernels a piece of code launches, and
//! a launch budget (`with_launch_budget`, crate-internal) lets the harness time the first `n`
//! launches of a piece of work alone (its per-kernel breakdown).

use crate::backend::{Backend, KernelHandle};
use crate::error::{KernelError, Result};
use crate::launch::{KernelArg, LaunchConfig, ParamArray, ParamKind};
use crate::source::KernelSource;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// One kernel of the table.
#[derive(Clone, Copy)]
struct Entry {
    handle: KernelHandle,
    params: &'static [ParamKind],
}

/// A compiled kernel family on one device.
pub struct Module {
    backend: &'static dyn Backend,
    launches: &'static AtomicU64,
    family: &'static str,
    kernels: HashMap<&'static str, Entry>,
}

thread_local! {
    /// `Some(names)` while [`record_launches`] runs on this thread.
    static RECORDED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
    /// Launches still allowed on this thread (`None`: no limit).
    static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `f` and returns its result with the `family::kernel` labels of the launches it made on
/// this thread, in order (skipped launches, past a budget, are not listed).
pub fn record_launches<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let outer = RECORDED.with(|r| r.replace(Some(Vec::new())));
    let out = f();
    let names = RECORDED.with(|r| r.replace(None)).unwrap_or_default();
    if let Some(mut outer) = outer {
        // Nested recording: the outer recorder sees these launches too.
        outer.extend(names.iter().cloned());
        RECORDED.with(|r| *r.borrow_mut() = Some(outer));
    }
    (out, names)
}

/// Takes one launch from this thread's budget and records its label: `false` when the budget
/// is spent (the launch is skipped). Kernels and library GEMMs go through here alike, so a
/// launch count is the same whichever of the two did the work.
pub(crate) fn take_launch(label: &str) -> bool {
    let allowed = BUDGET.with(|b| match b.get() {
        None => true,
        Some(0) => false,
        Some(n) => {
            b.set(Some(n - 1));
            true
        }
    });
    if allowed {
        RECORDED.with(|r| {
            if let Some(v) = r.borrow_mut().as_mut() {
                v.push(label.to_string());
            }
        });
    }
    allowed
}

/// Runs `f` with at most `n` launches on this thread; the launches past the budget return `Ok`
/// without running, so a piece of work stopped after its `n`-th kernel can be timed (the
/// harness's per-kernel breakdown, and the emulator's GEMM rate in `tools/bench`).
pub fn with_launch_budget<R>(n: usize, f: impl FnOnce() -> R) -> R {
    let outer = BUDGET.with(|b| b.replace(Some(n)));
    let out = f();
    BUDGET.with(|b| b.set(outer));
    out
}

impl Module {
    pub(crate) fn new(
        backend: &'static dyn Backend,
        launches: &'static AtomicU64,
        src: &'static KernelSource,
    ) -> Result<Module> {
        let handles = backend.load(src)?;
        let params: HashMap<&str, &'static [ParamKind]> =
            src.emu.iter().map(|k| (k.name, k.params)).collect();
        let kernels = handles
            .into_iter()
            .map(|(name, handle)| {
                let params = params.get(name).copied().unwrap_or(&[]);
                (name, Entry { handle, params })
            })
            .collect();
        Ok(Module {
            backend,
            launches,
            family: src.family,
            kernels,
        })
    }

    /// The family's name (`ch01_router`).
    pub fn family(&self) -> &'static str {
        self.family
    }

    /// Launches kernel `name` of this family. On the GPU the launch is queued on the device's
    /// stream; on the emulator it runs to completion before this returns.
    pub fn launch(&self, name: &str, cfg: LaunchConfig, args: &[KernelArg]) -> Result<()> {
        let entry = *self
            .kernels
            .get(name)
            .ok_or_else(|| KernelError::UnknownKernel {
                family: self.family.into(),
                name: name.into(),
            })?;
        let want = entry.params;
        if want.len() != args.len() || want.iter().zip(args).any(|(p, a)| *p != a.kind()) {
            let show = |v: &mut dyn Iterator<Item = ParamKind>| {
                v.map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
            };
            return Err(KernelError::Arguments {
                kernel: format!("{}::{name}", self.family),
                expected: show(&mut want.iter().copied()),
                got: show(&mut args.iter().map(|a| a.kind())),
            });
        }
        let label = format!("{}::{name}", self.family);
        if !take_launch(&label) {
            return Ok(());
        }
        self.launches.fetch_add(1, Ordering::Relaxed);
        let mut params = ParamArray::new(args);
        self.backend.launch(&label, entry.handle, cfg, &mut params)
    }
}
