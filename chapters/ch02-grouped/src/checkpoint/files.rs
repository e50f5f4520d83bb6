//! A checkpoint's safetensors files: which there are, which tensor lives in which, and each
//! tensor's bytes, memory-mapped (nothing is read until a tensor's bytes are converted).
//!
//! With `model.safetensors.index.json` (a sharded checkpoint), the index's `weight_map` says which
//! shard holds each tensor, and a shard is opened only when a tensor in it is needed: loading one
//! layer of a checkpoint of 160 shards opens the two or three that hold it, and a folder with only
//! those shards downloaded loads that layer. The index may name only files inside the folder (no
//! absolute path, no `..`). Without an index, `model.safetensors` is the checkpoint if it exists,
//! else every `*.safetensors` of the folder; their headers give the names.

use super::error::CheckpointError;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::DType;
use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The index file of a sharded checkpoint.
pub const INDEX: &str = "model.safetensors.index.json";

/// The floating-point types a checkpoint's weights may have; all convert to f32 exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileDtype {
    F32,
    Bf16,
    F16,
}

impl FileDtype {
    pub fn bytes(self) -> usize {
        match self {
            FileDtype::F32 => 4,
            FileDtype::Bf16 | FileDtype::F16 => 2,
        }
    }

    /// `f32`, `bf16`, `f16`.
    pub fn name(self) -> &'static str {
        match self {
            FileDtype::F32 => "f32",
            FileDtype::Bf16 => "bf16",
            FileDtype::F16 => "f16",
        }
    }
}

/// One tensor of a file: its shape, its type, and its bytes in the memory map.
pub struct Raw<'a> {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: FileDtype,
    pub data: &'a [u8],
}

impl Raw<'_> {
    /// `Ok` when the tensor has exactly `expected` as its shape.
    pub fn expect_shape(&self, expected: &[usize]) -> Result<(), CheckpointError> {
        if self.shape == expected {
            Ok(())
        } else {
            Err(CheckpointError::Shape {
                tensor: self.name.clone(),
                expected: expected.to_vec(),
                found: self.shape.clone(),
            })
        }
    }

    /// Converts elements `start..start + dst.len()` of the tensor (row-major) into `dst`, exactly.
    pub fn convert(&self, start: usize, dst: &mut [f32]) {
        let _ = self.convert_all_finite(start, dst);
    }

    /// [`Raw::convert`], saying whether every value converted is finite: the test rides on the
    /// conversion's own pass (an `&` per value, no early exit, so the loop stays a straight
    /// vector loop).
    fn convert_all_finite(&self, start: usize, dst: &mut [f32]) -> bool {
        let b = self.dtype.bytes();
        let src = &self.data[start * b..(start + dst.len()) * b];
        let mut finite = true;
        // Little-endian, as safetensors stores; `from_le_bytes` also reads unaligned bytes.
        match self.dtype {
            FileDtype::F32 => {
                for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
                    *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    finite &= d.is_finite();
                }
            }
            FileDtype::Bf16 => {
                for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
                    finite &= d.is_finite();
                }
            }
            FileDtype::F16 => {
                for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
                    finite &= d.is_finite();
                }
            }
        }
        finite
    }

    /// [`Raw::convert`] for a weight: a NaN or an infinity among the values is a
    /// [`CheckpointError::NonFinite`] naming the tensor, its first such element and how many it
    /// holds. A NaN in a router's gate row makes that expert's logit NaN on every token; one in
    /// an expert makes the outputs of the tokens it serves NaN: nothing a layer can compute with.
    pub fn convert_finite(&self, start: usize, dst: &mut [f32]) -> Result<(), CheckpointError> {
        if self.convert_all_finite(start, dst) {
            Ok(())
        } else {
            Err(self.non_finite())
        }
    }

    /// The whole tensor in f32.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut v = vec![0f32; self.shape.iter().product()];
        self.convert(0, &mut v);
        v
    }

    /// The whole tensor in f32, refused if it holds a NaN or an infinity
    /// ([`Raw::convert_finite`]).
    pub fn to_f32_finite(&self) -> Result<Vec<f32>, CheckpointError> {
        let mut v = vec![0f32; self.shape.iter().product()];
        self.convert_finite(0, &mut v)?;
        Ok(v)
    }

    /// The error for a tensor known to hold a non-finite value: the whole tensor scanned again
    /// (only on this path) for the first one and the count.
    fn non_finite(&self) -> CheckpointError {
        let len: usize = self.shape.iter().product();
        let (mut first, mut count) = (None, 0usize);
        let mut buf = [0f32; 4096];
        for start in (0..len).step_by(buf.len()) {
            let chunk = &mut buf[..(len - start).min(4096)];
            self.convert(start, chunk);
            for (i, v) in chunk.iter().enumerate() {
                if !v.is_finite() {
                    first.get_or_insert((start + i, *v));
                    count += 1;
                }
            }
        }
        let (flat, value) = first.unwrap_or((0, f32::NAN));
        // Row-major: the last dimension varies fastest.
        let mut index = vec![0; self.shape.len()];
        let mut rest = flat;
        for (ix, &dim) in index.iter_mut().zip(&self.shape).rev() {
            *ix = rest % dim.max(1);
            rest /= dim.max(1);
        }
        CheckpointError::NonFinite {
            tensor: self.name.clone(),
            index,
            value: value.to_string(),
            count,
        }
    }
}

/// Checks the safetensors frame before the parser sees the file, so that a file of another kind
/// gets a message that says so: 8 bytes of little-endian header length, then a JSON object of
/// that length. Reads 9 bytes.
fn check_frame(path: &Path) -> Result<(), CheckpointError> {
    let io = |e: std::io::Error| CheckpointError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    let not = |why: String| CheckpointError::NotSafetensors {
        path: path.to_path_buf(),
        why,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len < 9 {
        return Err(not(format!("{len} bytes, too short for a header")));
    }
    let mut head = [0u8; 9];
    file.read_exact(&mut head).map_err(io)?;
    let n = u64::from_le_bytes([
        head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7],
    ]);
    if n > len - 8 {
        return Err(not(format!(
            "its first 8 bytes give a header of {n} bytes, but the file has {} more",
            len - 8
        )));
    }
    if head[8] != b'{' {
        return Err(not("the header is not a JSON object".to_string()));
    }
    Ok(())
}

/// Memory-maps one safetensors file and parses its header.
pub fn map(path: &Path) -> Result<MmapedSafetensors, CheckpointError> {
    check_frame(path)?;
    // SAFETY: the map is read-only; like every loader of safetensors (candle's, the Python
    // `safe_open`'s) it assumes that no one truncates or rewrites the file while it is mapped.
    unsafe { MmapedSafetensors::new(path) }.map_err(|e| CheckpointError::NotSafetensors {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

/// The tensor `name` of one mapped file.
pub fn raw<'a>(
    st: &'a MmapedSafetensors,
    name: &str,
    file: &Path,
) -> Result<Raw<'a>, CheckpointError> {
    let view = st.get(name).map_err(|_| CheckpointError::MissingTensor {
        name: name.to_string(),
        looked_in: file.display().to_string(),
    })?;
    let dtype = match DType::try_from(view.dtype()) {
        Ok(DType::F32) => FileDtype::F32,
        Ok(DType::BF16) => FileDtype::Bf16,
        Ok(DType::F16) => FileDtype::F16,
        _ => {
            return Err(CheckpointError::Dtype {
                tensor: name.to_string(),
                found: view.dtype().to_string(),
            })
        }
    };
    Ok(Raw {
        name: name.to_string(),
        shape: view.shape().to_vec(),
        dtype,
        data: view.data(),
    })
}

/// A checkpoint's files, and which holds each tensor.
pub struct Files {
    dir: PathBuf,
    /// `Some` for a sharded checkpoint.
    index: Option<PathBuf>,
    paths: Vec<PathBuf>,
    /// Tensor name → its file in `paths`.
    names: BTreeMap<String, usize>,
    /// Each file, mapped the first time a tensor in it is asked for.
    maps: Vec<OnceCell<Result<MmapedSafetensors, CheckpointError>>>,
}

impl Files {
    /// Finds the files of the checkpoint in `dir` and the names of their tensors.
    pub fn discover(dir: &Path) -> Result<Files, CheckpointError> {
        let meta = std::fs::metadata(dir).map_err(|e| CheckpointError::Io {
            path: dir.to_path_buf(),
            why: e.to_string(),
        })?;
        if !meta.is_dir() {
            return Err(CheckpointError::Io {
                path: dir.to_path_buf(),
                why: "not a folder (a checkpoint is a folder with config.json and .safetensors)"
                    .to_string(),
            });
        }
        let index = dir.join(INDEX);
        if index.exists() {
            return Files::from_index(dir, index);
        }
        let single = dir.join("model.safetensors");
        let paths = if single.exists() {
            vec![single]
        } else {
            let entries = std::fs::read_dir(dir).map_err(|e| CheckpointError::Io {
                path: dir.to_path_buf(),
                why: e.to_string(),
            })?;
            let mut paths: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            paths.sort();
            paths
        };
        if paths.is_empty() {
            return Err(CheckpointError::MissingFile {
                path: dir.join("model.safetensors"),
                what: format!("the weights: no .safetensors file in {}", dir.display()),
            });
        }
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        let mut maps = Vec::new();
        for (i, path) in paths.iter().enumerate() {
            let st = map(path)?;
            for (name, _) in st.tensors() {
                if let Some(&first) = names.get(&name) {
                    return Err(CheckpointError::DuplicateTensor {
                        name,
                        first: paths[first].clone(),
                        second: path.clone(),
                    });
                }
                names.insert(name, i);
            }
            maps.push(OnceCell::from(Ok(st)));
        }
        Ok(Files {
            dir: dir.to_path_buf(),
            index: None,
            paths,
            names,
            maps,
        })
    }

    fn from_index(dir: &Path, index: PathBuf) -> Result<Files, CheckpointError> {
        let json = read_json(&index)?;
        let bad = |why: &str| CheckpointError::Json {
            path: index.clone(),
            why: why.to_string(),
        };
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad("no `weight_map` object (tensor name → shard file)"))?;
        let mut paths: Vec<PathBuf> = Vec::new();
        let mut names = BTreeMap::new();
        for (name, file) in map {
            let file = file
                .as_str()
                .ok_or_else(|| bad(&format!("`weight_map[{name:?}]` is not a file name")))?;
            if !inside(file) {
                return Err(CheckpointError::ShardPath {
                    index: index.clone(),
                    tensor: name.clone(),
                    file: file.to_string(),
                });
            }
            let path = dir.join(file);
            let i = match paths.iter().position(|p| *p == path) {
                Some(i) => i,
                None => {
                    paths.push(path);
                    paths.len() - 1
                }
            };
            names.insert(name.clone(), i);
        }
        Ok(Files {
            dir: dir.to_path_buf(),
            maps: paths.iter().map(|_| OnceCell::new()).collect(),
            index: Some(index),
            paths,
            names,
        })
    }

    /// Every tensor name of the checkpoint, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Where a tensor absent from the names was looked for.
    fn looked_in(&self) -> String {
        match (&self.index, self.paths.as_slice()) {
            (Some(index), _) => index.display().to_string(),
            (None, [one]) => one.display().to_string(),
            (None, all) => format!(
                "the {} .safetensors files of {}",
                all.len(),
                self.dir.display()
            ),
        }
    }

    /// The tensor `name`: its shape, type and mapped bytes (mapping its file if need be).
    pub fn get(&self, name: &str) -> Result<Raw<'_>, CheckpointError> {
        let &i = self
            .names
            .get(name)
            .ok_or_else(|| CheckpointError::MissingTensor {
                name: name.to_string(),
                looked_in: self.looked_in(),
            })?;
        let path = &self.paths[i];
        let st = self.maps[i]
            .get_or_init(|| {
                if !path.exists() {
                    return Err(CheckpointError::MissingFile {
                        path: path.clone(),
                        what: format!(
                            "the shard that {INDEX} names for `{name}` and the tensors beside it"
                        ),
                    });
                }
                map(path)
            })
            .as_ref()
            .map_err(Clone::clone)?;
        raw(st, name, path)
    }
}

/// Whether `file`, joined to the checkpoint's folder, stays inside it: a relative path of plain
/// names (`.` allowed), neither absolute nor with a `..`, and not empty. (`Path::join` with an
/// absolute path replaces the folder; `..` climbs out of it.)
fn inside(file: &str) -> bool {
    let path = Path::new(file);
    let mut names = 0;
    for c in path.components() {
        match c {
            Component::Normal(_) => names += 1,
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    names > 0 && !path.is_absolute()
}

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> Result<serde_json::Value, CheckpointError> {
    let text = std::fs::read_to_string(path).map_err(|e| CheckpointError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| CheckpointError::Json {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}
