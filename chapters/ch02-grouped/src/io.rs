//! The chapter example's `--input` / `--output` files: hidden states in, the layer's output out,
//! in safetensors (what PyTorch writes with `safetensors.torch.save_file`).

use crate::checkpoint::files::{map, raw};
use crate::checkpoint::CheckpointError;
use ch01_router::io::output_problem;
use moe_kernels::safetensors::SafetensorsWriter;
use std::path::{Path, PathBuf};

/// Reads the tensor `hidden` [T, H] (F32, BF16 or F16; converted to f32 exactly) from a
/// safetensors file: `(values, T, H)`.
pub fn read_hidden(path: &Path) -> Result<(Vec<f32>, usize, usize), CheckpointError> {
    let st = map(path)?;
    let hidden = raw(&st, "hidden", path)?;
    let &[rows, cols] = hidden.shape.as_slice() else {
        return Err(CheckpointError::Rank {
            tensor: "hidden".to_string(),
            expected: 2,
            found: hidden.shape.clone(),
        });
    };
    Ok((hidden.to_f32(), rows, cols))
}

/// Writes `out` [T, H] f32 as the tensor `out` of a safetensors file (created directly, so an
/// error names the path the reader gave).
pub fn write_out(
    path: &Path,
    out: &[f32],
    rows: usize,
    hidden: usize,
) -> Result<(), CheckpointError> {
    if out.len() != rows * hidden {
        return Err(CheckpointError::Shape {
            tensor: "out".to_string(),
            expected: vec![rows, hidden],
            found: vec![out.len()],
        });
    }
    SafetensorsWriter::new()
        .f32("out", &[rows, hidden], out)
        .write(path)
        .map_err(|e| CheckpointError::Io {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
}

/// Checks, before any work, that `path` can be written: its folder exists, it is not a folder,
/// and it is neither the `input` file nor a file of the `checkpoint` folder (which it would
/// overwrite).
pub fn check_output_path(
    path: &Path,
    input: Option<&Path>,
    checkpoint: &Path,
) -> Result<(), CheckpointError> {
    let mut reads: Vec<PathBuf> = input.into_iter().map(Path::to_path_buf).collect();
    if let Ok(entries) = std::fs::read_dir(checkpoint) {
        reads.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    let reads: Vec<&Path> = reads.iter().map(PathBuf::as_path).collect();
    match output_problem(path, &reads) {
        None => Ok(()),
        Some(why) => Err(CheckpointError::Io {
            path: path.to_path_buf(),
            why,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Tensor};
    use std::collections::HashMap;

    /// A fresh folder under the system's temporary folder, for one test.
    fn temp_dir(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ch02-io-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn save(path: &Path, name: &str, t: Tensor) {
        candle_core::safetensors::save(&HashMap::from([(name, t)]), path).unwrap();
    }

    #[test]
    fn hidden_in_f32_and_bf16_and_out_back() {
        let dir = temp_dir("round-trip");
        let temp = |name: &str| dir.join(name);
        let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.375 - 2.0).collect();
        let t = Tensor::from_slice(&v, (3, 4), &Device::Cpu).unwrap();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let path = temp(&format!("hidden-{dtype:?}.safetensors"));
            save(&path, "hidden", t.to_dtype(dtype).unwrap());
            // Every value is exact in bf16 and f16.
            assert_eq!(read_hidden(&path).unwrap(), (v.clone(), 3, 4));
        }
        let path = temp("out.safetensors");
        write_out(&path, &v, 4, 3).unwrap();
        let back = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        assert_eq!(back["out"].dims(), &[4, 3]);
        assert_eq!(
            back["out"].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            v
        );
        assert_eq!(
            write_out(&path, &v, 5, 3),
            Err(CheckpointError::Shape {
                tensor: "out".into(),
                expected: vec![5, 3],
                found: vec![12],
            })
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_way_a_hidden_file_is_wrong() {
        let dir = temp_dir("wrong");
        let temp = |name: &str| dir.join(name);
        let path = temp("wrong.safetensors");
        let t = Tensor::zeros((2, 3, 4), DType::F32, &Device::Cpu).unwrap();
        save(&path, "hidden", t.clone());
        assert_eq!(
            read_hidden(&path),
            Err(CheckpointError::Rank {
                tensor: "hidden".into(),
                expected: 2,
                found: vec![2, 3, 4],
            })
        );
        save(
            &path,
            "hidden",
            Tensor::zeros((2, 3), DType::I64, &Device::Cpu).unwrap(),
        );
        assert_eq!(
            read_hidden(&path),
            Err(CheckpointError::Dtype {
                tensor: "hidden".into(),
                found: "I64".into(),
            })
        );
        save(&path, "logits", t);
        assert_eq!(
            read_hidden(&path),
            Err(CheckpointError::MissingTensor {
                name: "hidden".into(),
                looked_in: path.display().to_string(),
            })
        );
        std::fs::write(&path, "T, H\n1, 2\n").unwrap();
        assert!(matches!(
            read_hidden(&path),
            Err(CheckpointError::NotSafetensors { .. })
        ));
        let none = temp("does-not-exist.safetensors");
        assert!(
            matches!(read_hidden(&none), Err(CheckpointError::Io { path, .. }) if path == none)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
