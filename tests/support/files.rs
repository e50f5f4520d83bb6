//! Shared by the examples' tests (`#[path]`-included): a fresh folder per test, a path as the
//! `&str` a command line takes, and one f32 tensor of a safetensors file the example wrote.

#![allow(dead_code)] // each test file uses some of these

use std::path::{Path, PathBuf};

/// A fresh folder under the system's temporary folder for test `test` of example `example`.
pub fn temp_dir(example: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{example}-example-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Tensor `name` of the safetensors file at `path`, flattened, as f32.
pub fn load_f32(path: &Path, name: &str) -> Vec<f32> {
    candle_core::safetensors::load(path, &candle_core::Device::Cpu).unwrap()[name]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}
