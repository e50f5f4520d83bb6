//! Writing safetensors files, the small part of the format the book writes: f32 and i32 tensors
//! and string metadata. Reading is candle's (`candle_core::safetensors`); writing is done here
//! because candle's `save` writes through a temporary file (its error names that file, and the
//! result gets the temporary's 0600 permissions) and has no way to write to memory.
//!
//! The layout: 8 bytes of little-endian header length, the JSON header (metadata first, then the
//! tensors in the order they were added) padded with spaces to a multiple of 8, then each tensor's
//! little-endian values, in the same order.

use std::path::Path;

/// A safetensors file being put together in memory.
#[derive(Clone, Debug, Default)]
pub struct SafetensorsWriter {
    metadata: Vec<(String, String)>,
    /// name, dtype, shape, bytes
    tensors: Vec<(String, &'static str, Vec<usize>, Vec<u8>)>,
}

/// JSON strings of the header are written as they are: names and metadata are plain words.
fn plain(s: &str) -> &str {
    assert!(
        !s.contains(['"', '\\']) && !s.chars().any(char::is_control),
        "safetensors name or metadata {s:?} would need JSON escaping"
    );
    s
}

impl SafetensorsWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// One `__metadata__` entry.
    pub fn metadata(&mut self, key: &str, value: &str) -> &mut Self {
        self.metadata.push((plain(key).into(), plain(value).into()));
        self
    }

    /// An f32 tensor of `shape` (its element count must be `values.len()`).
    pub fn f32(&mut self, name: &str, shape: &[usize], values: &[f32]) -> &mut Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, "F32", shape, values.len(), bytes)
    }

    /// An i32 tensor of `shape`.
    pub fn i32(&mut self, name: &str, shape: &[usize], values: &[i32]) -> &mut Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, "I32", shape, values.len(), bytes)
    }

    fn tensor(
        &mut self,
        name: &str,
        dtype: &'static str,
        shape: &[usize],
        len: usize,
        bytes: Vec<u8>,
    ) -> &mut Self {
        assert_eq!(
            shape.iter().product::<usize>(),
            len,
            "tensor {name}: shape {shape:?} does not hold {len} values"
        );
        self.tensors
            .push((plain(name).into(), dtype, shape.to_vec(), bytes));
        self
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut entries = Vec::new();
        if !self.metadata.is_empty() {
            let meta: Vec<String> = self
                .metadata
                .iter()
                .map(|(k, v)| format!(r#""{k}":"{v}""#))
                .collect();
            entries.push(format!(r#""__metadata__":{{{}}}"#, meta.join(",")));
        }
        let mut offset = 0;
        for (name, dtype, shape, bytes) in &self.tensors {
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            entries.push(format!(
                r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{offset},{}]}}"#,
                dims.join(","),
                offset + bytes.len()
            ));
            offset += bytes.len();
        }
        let mut header = format!("{{{}}}", entries.join(","));
        while header.len() % 8 != 0 {
            header.push(' '); // the format allows trailing spaces; aligned data suits mmap
        }
        let mut out = Vec::with_capacity(8 + header.len() + offset);
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        for (_, _, _, bytes) in &self.tensors {
            out.extend_from_slice(bytes);
        }
        out
    }

    /// Creates (or replaces) the file at `path` directly, so an error names that path.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_bytes())
    }
}

/// What is wrong with `path` as a file to write, checked before any long work: `None` when its
/// folder exists and it is not itself a folder.
pub fn output_path_problem(path: &Path) -> Option<&'static str> {
    if path.is_dir() {
        return Some("is a folder, expected a file name");
    }
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) if !parent.is_dir() => Some("its folder does not exist"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candle_reads_back_what_is_written() {
        let mut w = SafetensorsWriter::new();
        w.metadata("shape", "qwen3")
            .f32("x", &[2, 3], &[1.0, -2.5, 3.0, 0.0, 1e-3, 7.0])
            .i32("ids", &[3], &[4, -1, 9]);
        let bytes = w.to_bytes();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(header_len % 8, 0);
        let t = candle_core::safetensors::load_buffer(&bytes, &candle_core::Device::Cpu).unwrap();
        assert_eq!(t["x"].dims(), &[2, 3]);
        assert_eq!(
            t["x"].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            vec![1.0, -2.5, 3.0, 0.0, 1e-3, 7.0]
        );
        assert_eq!(t["ids"].to_vec1::<i32>().unwrap(), vec![4, -1, 9]);
        assert!(std::str::from_utf8(&bytes[8..8 + header_len])
            .unwrap()
            .contains(r#""__metadata__":{"shape":"qwen3"}"#));
    }

    #[test]
    fn output_paths() {
        let tmp = std::env::temp_dir();
        assert_eq!(
            output_path_problem(&tmp),
            Some("is a folder, expected a file name")
        );
        assert_eq!(
            output_path_problem(Path::new("/nonexistent-folder-xyz/out.safetensors")),
            Some("its folder does not exist")
        );
        assert_eq!(output_path_problem(&tmp.join("out.safetensors")), None);
        assert_eq!(output_path_problem(Path::new("out.safetensors")), None);
    }
}
