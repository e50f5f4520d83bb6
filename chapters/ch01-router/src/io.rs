//! The chapter example's `--input` / `--output` files, in safetensors (what Hugging Face
//! checkpoints use), read and written through `candle_core::safetensors`.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::RouterError;
use crate::routing::Routing;

/// Reads `logits` (`[T, E]` f32, required) and `bias` (`[E]` f32, optional) from a
/// safetensors file. The router validates the bias length against `E` when it routes. `ids` and
/// `weights` (what the examples' `--output` writes beside `logits`) are passed over, so that a
/// routed file routes again; any other tensor is refused ([`refuse_others`]).
pub fn read_router_input(path: &Path) -> Result<(Tensor, Option<Tensor>), RouterError> {
    let mut tensors = read_tensors(path)?;
    let Some(logits) = tensors.remove("logits") else {
        let mut found: Vec<&String> = tensors.keys().collect();
        found.sort();
        return Err(RouterError::Io(format!(
            "{}: no tensor named \"logits\" (found {found:?})",
            path.display()
        )));
    };
    if logits.dtype() != DType::F32 {
        return Err(RouterError::WrongDtype {
            what: "logits",
            dtype: format!("{:?}", logits.dtype()),
        });
    }
    if logits.rank() != 2 {
        return Err(RouterError::LogitsNot2d {
            dims: logits.dims().to_vec(),
        });
    }
    let bias = tensors.remove("bias");
    for written_by_output in ["ids", "weights"] {
        tensors.remove(written_by_output);
    }
    refuse_others(path, &tensors, "`logits` and an optional `bias`")?;
    if let Some(b) = &bias {
        if b.dtype() != DType::F32 {
            return Err(RouterError::WrongDtype {
                what: "bias",
                dtype: format!("{:?}", b.dtype()),
            });
        }
    }
    Ok((logits, bias))
}

/// Every tensor of a safetensors file, on the CPU: a missing or unreadable file is an Io error,
/// a file of another kind a [`RouterError::NotSafetensors`] that says so.
pub fn read_tensors(path: &Path) -> Result<HashMap<String, Tensor>, RouterError> {
    let bytes =
        std::fs::read(path).map_err(|e| RouterError::Io(format!("{}: {e}", path.display())))?;
    check_safetensors(&bytes).map_err(|why| RouterError::NotSafetensors {
        path: path.display().to_string(),
        why,
    })?;
    // A frame that parses but whose header disagrees with the data (a truncated file, a shape
    // that does not match its bytes) is still not a safetensors file: name the file.
    candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
        RouterError::NotSafetensors {
            path: path.display().to_string(),
            why: e.to_string(),
        }
    })
}

/// Refuses the tensors a reader did not take: a tensor under another name (a bias saved as
/// `gate_bias`, say) must not be silently ignored.
pub fn refuse_others(
    path: &Path,
    left: &HashMap<String, Tensor>,
    reads: &str,
) -> Result<(), RouterError> {
    if left.is_empty() {
        return Ok(());
    }
    let mut names: Vec<&String> = left.keys().collect();
    names.sort();
    Err(RouterError::Io(format!(
        "{}: unexpected tensors {names:?} (it reads {reads}; rename or drop the others)",
        path.display()
    )))
}

/// The format's frame, checked before the parser sees the bytes, so that a file of another
/// kind gets a message that says so (candle's own would be "header too large"): 8 bytes of
/// little-endian header length, then a JSON object of that length.
pub fn check_safetensors(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 8 {
        return Err(format!(
            "{} bytes, shorter than the 8-byte header length",
            bytes.len()
        ));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if n > (bytes.len() - 8) as u64 {
        return Err(format!(
            "its first 8 bytes give a header of {n} bytes, but the file has {} more",
            bytes.len() - 8
        ));
    }
    if bytes.get(8) != Some(&b'{') {
        return Err("the header is not a JSON object".to_string());
    }
    Ok(())
}

/// Why `output` cannot be written by a run that reads `inputs`, checked before any work: its
/// folder is missing, it is a folder, or it is one of the files the run reads (writing it would
/// overwrite the reader's input: a symbolic link or `./` in either path is seen through).
pub fn output_problem(output: &Path, inputs: &[&Path]) -> Option<String> {
    if let Some(why) = moe_kernels::safetensors::output_path_problem(output) {
        return Some(why.to_string());
    }
    let out = std::fs::canonicalize(output).ok()?; // not there yet: not an input either
    inputs
        .iter()
        .find(|i| std::fs::canonicalize(i).is_ok_and(|i| i == out))
        .map(|i| {
            format!(
                "is the file the run reads ({}): writing it would overwrite it; choose another \
                 name",
                i.display()
            )
        })
}

/// Writes a routing as `ids` (`[T, k]` i32, the type PyTorch indexes with) and `weights`
/// (`[T, k]` f32).
pub fn write_routing(path: &Path, routing: &Routing) -> Result<(), RouterError> {
    let shape = (routing.rows, routing.k);
    let ids: Vec<i32> = routing.ids.iter().map(|&e| e as i32).collect();
    let mut tensors = HashMap::new();
    tensors.insert("ids", Tensor::from_vec(ids, shape, &Device::Cpu)?);
    tensors.insert(
        "weights",
        Tensor::from_vec(routing.weights.clone(), shape, &Device::Cpu)?,
    );
    candle_core::safetensors::save(&tensors, path)
        .map_err(|e| RouterError::Io(format!("{}: {e}", path.display())))
}
