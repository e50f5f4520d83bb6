//! Shared by the examples' tests (`#[path]`-included; files below `tests/` are not test
//! targets of their own): a Hugging Face fixture with a poisoned weight.

use ch02_grouped::conformance::hf_fixture;

/// A copy of fixture `name`'s one-file checkpoint (`per_expert/`) in `dir`, with `value` at
/// element `at` of every tensor whose name ends with `suffix`: a checkpoint holding a NaN or an
/// infinity, in the system's temporary folder.
pub fn poisoned_fixture(
    name: &str,
    dir: &std::path::Path,
    suffix: &str,
    at: usize,
    value: f32,
) -> std::path::PathBuf {
    let src = hf_fixture(name).join("per_expert");
    let ckpt = dir.join(format!("{name}-poisoned"));
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::copy(src.join("config.json"), ckpt.join("config.json")).unwrap();
    let cpu = candle_core::Device::Cpu;
    let mut tensors = candle_core::safetensors::load(src.join("model.safetensors"), &cpu).unwrap();
    for (n, t) in tensors.iter_mut() {
        if n.ends_with(suffix) {
            let dtype = t.dtype();
            let mut v = t
                .to_dtype(candle_core::DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            v[at] = value;
            *t = candle_core::Tensor::from_vec(v, t.shape(), &cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
        }
    }
    candle_core::safetensors::save(&tensors, ckpt.join("model.safetensors")).unwrap();
    ckpt
}
