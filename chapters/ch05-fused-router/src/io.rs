//! The example's `--input` and `--output` files, in safetensors.
//!
//! In: `hidden` [T, H] and `gate` [E, H], each bf16 or f32 (f32 is rounded to bf16, the type
//! the tiny GEMM reads, and the example says so), and optionally `bias` `[E]` f32. Out: `logits`
//! [T, E] f32, `ids` [T, k] i32 and `weights` [T, k] f32.

use candle_core::{DType, Tensor};
use ch01_router::error::RouterError;
use ch01_router::io::{read_tensors, refuse_others};
use ch01_router::routing::{bias_vector, Routing};
use moe_kernels::safetensors::SafetensorsWriter;
use std::path::Path;

/// A router's inputs as read from a file, values widened to f32 for the host.
#[derive(Clone, Debug, PartialEq)]
pub struct GateFile {
    pub rows: usize,
    pub hidden: usize,
    pub experts: usize,
    /// `[T, H]`, exactly representable in bf16.
    pub hidden_states: Vec<f32>,
    /// `[E, H]`, exactly representable in bf16.
    pub gate: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    /// The tensors that were f32 in the file and were rounded to bf16.
    pub rounded: Vec<&'static str>,
}

/// One 2-D tensor of the file as f32 values rounded to bf16.
struct Matrix {
    dims: (usize, usize),
    values: Vec<f32>,
    /// It was f32 in the file, and had to be rounded.
    rounded: bool,
}

/// One 2-D tensor of the file, bf16 or f32.
fn matrix(t: &Tensor, what: &'static str) -> Result<Matrix, RouterError> {
    let dims = t.dims2().map_err(|_| {
        RouterError::Io(format!(
            "`{what}` must be a 2-D matrix, got shape {:?}",
            t.dims()
        ))
    })?;
    let was_f32 = match t.dtype() {
        DType::BF16 => false,
        DType::F32 => true,
        other => {
            return Err(RouterError::Io(format!(
                "`{what}` must be bf16 or f32, got {other:?}"
            )))
        }
    };
    let v = t
        .to_dtype(DType::BF16)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    Ok(Matrix {
        dims,
        values: v,
        rounded: was_f32,
    })
}

/// Reads `hidden`, `gate` and (optionally) `bias` from a safetensors file, checking their types
/// and that H agrees; the router checks E against k, the groups and the bias.
pub fn read_gate_file(path: &Path) -> Result<GateFile, RouterError> {
    let mut tensors = read_tensors(path)?;
    let mut take = |name: &str| {
        tensors.remove(name).ok_or_else(|| {
            RouterError::Io(format!(
                "{}: no tensor named \"{name}\" (it needs `hidden` [T, H] and `gate` [E, H])",
                path.display()
            ))
        })
    };
    let h = matrix(&take("hidden")?, "hidden")?;
    let g = matrix(&take("gate")?, "gate")?;
    let ((rows, hidden), (experts, gate_h)) = (h.dims, g.dims);
    if gate_h != hidden {
        return Err(RouterError::Io(format!(
            "`hidden` has {hidden} columns but `gate` has {gate_h}: both must be H wide"
        )));
    }
    let bias = tensors.remove("bias");
    refuse_others(path, &tensors, "`hidden`, `gate` and an optional `bias`")?;
    let bias = bias.as_ref().map(bias_vector).transpose()?;
    let rounded = [("hidden", h.rounded), ("gate", g.rounded)]
        .into_iter()
        .filter_map(|(n, r)| r.then_some(n))
        .collect();
    Ok(GateFile {
        rows,
        hidden,
        experts,
        hidden_states: h.values,
        gate: g.values,
        bias,
        rounded,
    })
}

/// Writes `logits` [T, E] f32, `ids` [T, k] i32 and `weights` [T, k] f32.
pub fn write_outputs(
    path: &Path,
    logits: &[f32],
    experts: usize,
    routing: &Routing,
) -> Result<(), RouterError> {
    let ids: Vec<i32> = routing.ids.iter().map(|&e| e as i32).collect();
    let (t, k) = (routing.rows, routing.k);
    let mut w = SafetensorsWriter::new();
    w.f32("logits", &[t, experts], logits)
        .i32("ids", &[t, k], &ids)
        .f32("weights", &[t, k], &routing.weights);
    w.write(path)
        .map_err(|e| RouterError::Io(format!("{}: {e}", path.display())))
}
