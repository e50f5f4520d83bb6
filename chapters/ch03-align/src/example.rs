//! The chapter's main, as a library: `examples/ch03/` parses the command line and calls [`run`].
//!
//! Without options it prints the book's worked example (5 tokens, each choosing 2 of 8 experts,
//! BLOCK_M 4), computed by the literal sort and checked against the CPU reference and the kernel,
//! then every regime through the kernel against the literal sort. With `--input` it aligns a
//! reader's own `topk_ids` and can write the three buffers a fused expert kernel reads.
//!
//! stdout is the same on every backend: the layout is integers, and the launch counts depend only
//! on the sizes. Nothing is timed here (`tools/bench/run ch03` does that).

use crate::device::align_on_device;
use crate::error::AlignError;
use crate::layout::{capacity, check, choose_block_m, max_tiles, Aligned};
use crate::literal::align_literal;
use crate::reference::align_reference;
use crate::regimes::{regime, REGIMES};
use crate::text::draw;
use ch01_router::io::output_problem;
use moe_kernels::safetensors::SafetensorsWriter;
use moe_kernels::{record_launches, Device};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What `--input` asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct InputOptions {
    /// A safetensors file holding `topk_ids [T, k]` i32.
    pub input: PathBuf,
    /// E, the layer's expert count: ids must lie in `0..E`.
    pub experts: usize,
    /// BLOCK_M; `None` takes the chapter's rule ([`choose_block_m`]).
    pub block_m: Option<usize>,
    /// Where to write `sorted_ids`, `expert_ids` and `num_tokens_post_padded` (all i32).
    pub output: Option<PathBuf>,
}

/// Why the example stopped. Every variant names the file or the value at fault.
#[derive(Clone, Debug, PartialEq)]
pub enum ExampleError {
    /// The bookkeeping refused its input (BLOCK_M, E, a size past the kernel's limits) or the
    /// device failed.
    Align(AlignError),
    /// An id of the file outside `0..E`, negative ids included.
    IdOutOfRange {
        path: PathBuf,
        token: usize,
        slot: usize,
        id: i64,
        experts: usize,
    },
    /// A file could not be read or written.
    Io { path: PathBuf, why: String },
    /// The bytes are not a safetensors file.
    NotSafetensors { path: PathBuf, why: String },
    /// The file holds neither `topk_ids` nor `ids`.
    MissingTensor { path: PathBuf, found: Vec<String> },
    /// The ids are not i32.
    Dtype {
        path: PathBuf,
        tensor: String,
        found: String,
    },
    /// The ids are not a `[T, k]` matrix.
    Rank {
        path: PathBuf,
        tensor: String,
        shape: Vec<usize>,
    },
    /// The kernel and the literal sort disagree (a bug: the tests should have caught it).
    Mismatch { what: String },
    /// stdout could not be written.
    Stdout(String),
}

impl fmt::Display for ExampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExampleError::Align(e) => write!(f, "{e}"),
            ExampleError::IdOutOfRange {
                path,
                token,
                slot,
                id,
                experts,
            } => write!(
                f,
                "{}: topk_ids[{token}, {slot}] is {id}, outside 0..{experts} (--experts {experts})",
                path.display()
            ),
            ExampleError::Io { path, why } => write!(f, "{}: {why}", path.display()),
            ExampleError::NotSafetensors { path, why } => {
                write!(f, "{} is not a safetensors file: {why}", path.display())
            }
            ExampleError::MissingTensor { path, found } => write!(
                f,
                "{}: no tensor named `topk_ids` (or `ids`, as chapter 1's example writes it); found {found:?}",
                path.display()
            ),
            ExampleError::Dtype {
                path,
                tensor,
                found,
            } => write!(
                f,
                "{}: `{tensor}` is {found}, expected I32 (in PyTorch: `.to(torch.int32)`)",
                path.display()
            ),
            ExampleError::Rank {
                path,
                tensor,
                shape,
            } => write!(
                f,
                "{}: `{tensor}` has shape {shape:?}, expected [T, k]",
                path.display()
            ),
            ExampleError::Mismatch { what } => {
                write!(f, "the kernel and the literal sort differ: {what}")
            }
            ExampleError::Stdout(why) => write!(f, "stdout: {why}"),
        }
    }
}

impl std::error::Error for ExampleError {}

impl From<AlignError> for ExampleError {
    fn from(e: AlignError) -> Self {
        ExampleError::Align(e)
    }
}

type Out<'a> = &'a mut dyn Write;

fn w(out: Out, s: fmt::Arguments) -> Result<(), ExampleError> {
    out.write_fmt(s)
        .map_err(|e| ExampleError::Stdout(e.to_string()))
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => { w($out, format_args!("{}\n", format_args!($($t)*)))? };
}

/// Runs the example: the tour, or (with `input`) a reader's file.
pub fn run(
    input: Option<&InputOptions>,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    match input {
        Some(opts) => run_input(opts, device, out),
        None => tour(device, out),
    }
}

/// The worked example's routing: 5 tokens, each choosing 2 of 8 experts, token-major (pair
/// `p = t·k + j`). Chosen by hand so that one expert's run crosses a tile edge (expert 5: five
/// pairs), one tile is partly full (expert 2: three pairs) and half the experts get nothing.
pub const WORKED_IDS: [[i64; 2]; 5] = [[2, 5], [5, 0], [5, 2], [7, 5], [2, 5]];
/// The worked example's expert count and tile.
pub const WORKED_EXPERTS: usize = 8;
pub const WORKED_BLOCK_M: usize = 4;

/// `a == b` as the example's check: a typed error naming the first buffer that differs.
fn same(what: &str, got: &Aligned, want: &Aligned) -> Result<(), ExampleError> {
    let first = |a: &[i32], b: &[i32]| {
        if a.len() != b.len() {
            Some(format!("{} elements against {}", a.len(), b.len()))
        } else {
            (0..a.len())
                .find(|&i| a[i] != b[i])
                .map(|i| format!("first at {i}: {} against {}", a[i], b[i]))
        }
    };
    let why = if let Some(d) = first(&got.sorted_ids, &want.sorted_ids) {
        Some(format!("sorted_ids, {d}"))
    } else if let Some(d) = first(&got.expert_ids, &want.expert_ids) {
        Some(format!("expert_ids, {d}"))
    } else if got.num_tokens_post_padded != want.num_tokens_post_padded {
        Some(format!(
            "num_tokens_post_padded {} against {}",
            got.num_tokens_post_padded, want.num_tokens_post_padded
        ))
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(ExampleError::Mismatch {
            what: format!("{what}: {why}"),
        }),
    }
}

/// `["ch03_align_block_size::align_one_block"]` as `align_one_block`.
fn short_names(launched: &[String]) -> String {
    let names: Vec<&str> = launched
        .iter()
        .map(|l| l.rsplit("::").next().unwrap_or(l))
        .collect();
    names.join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

// ANCHOR: tour
fn tour(device: &'static Device, out: Out) -> Result<(), ExampleError> {
    let (e, bm) = (WORKED_EXPERTS, WORKED_BLOCK_M);
    let k = WORKED_IDS[0].len();
    let ids: Vec<i64> = WORKED_IDS.iter().flatten().copied().collect();
    let p = ids.len();
    say!(
        out,
        "Chapter 3: sorting pairs by expert (moe_align_block_size)"
    );
    say!(out, "");
    say!(
        out,
        "== The worked example: {} tokens, each choosing {k} of {e} experts; BLOCK_M {bm}",
        WORKED_IDS.len()
    );
    let rows: Vec<String> = WORKED_IDS
        .iter()
        .enumerate()
        .map(|(t, row)| {
            let es: Vec<String> = row.iter().map(|x| x.to_string()).collect();
            format!("{t}: {}", es.join(" "))
        })
        .collect();
    say!(out, "topk_ids (token: experts): {}", rows.join(" | "));
    let pairs: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(q, e)| format!("{q}:{e}"))
        .collect();
    say!(out, "pairs p = t·k + j (pair:expert): {}", pairs.join(" "));
    let mut count = vec![0usize; e];
    for &x in &ids {
        count[x as usize] += 1;
    }
    let counts: Vec<String> = count.iter().map(|c| c.to_string()).collect();
    let padded: Vec<String> = count
        .iter()
        .map(|c| (c.div_ceil(bm) * bm).to_string())
        .collect();
    say!(out, "pairs per expert 0..{e}:  {}", counts.join(" "));
    say!(out, "padded to BLOCK_M {bm}:   {}", padded.join(" "));
    // The literal version computes what is shown; the other two must give the same bits.
    let lit = align_literal(&ids, e, bm);
    say!(
        out,
        "sorted_ids, one tile a line (· is the placeholder {p}, one past the last pair):"
    );
    w(out, format_args!("{}", draw(&lit, p, bm, usize::MAX)))?;
    let tiles = lit.tiles(bm);
    let experts: Vec<String> = lit.expert_ids[..tiles]
        .iter()
        .map(|x| x.to_string())
        .collect();
    say!(out, "expert_ids (tile → expert): {}", experts.join(" "));
    say!(
        out,
        "num_tokens_post_padded {}; the buffers hold the worst case: sorted_ids {} slots, expert_ids {} tiles",
        lit.num_tokens_post_padded,
        capacity(p, e, bm),
        max_tiles(p, e, bm)
    );
    same("the CPU reference", &align_reference(&ids, e, bm), &lit)?;
    let (dev, launched) = record_launches(|| align_on_device(device, &ids, e, bm));
    same("the kernel", &dev?, &lit)?;
    say!(
        out,
        "literal sort = CPU reference = kernel ({}: {}): same bits",
        plural(launched.len(), "launch", "launches"),
        short_names(&launched)
    );
    say!(out, "");
    say!(
        out,
        "== Every regime: the kernel on this device against the literal sort"
    );
    for name in REGIMES {
        let r = regime(name).expect("every listed regime exists");
        let lit = align_literal(&r.ids, r.experts, r.block_m);
        let (got, launched) =
            record_launches(|| align_on_device(device, &r.ids, r.experts, r.block_m));
        same(name, &got?, &lit)?;
        let (pairs, slots) = (r.ids.len(), lit.num_tokens_post_padded as usize);
        say!(
            out,
            "{name:<30} {pairs:>5} pairs {:>3} experts {:>4} tiles of {:<3} {:>5} padding  {:<10} same bits",
            r.experts,
            lit.tiles(r.block_m),
            r.block_m,
            slots - pairs,
            plural(launched.len(), "launch", "launches")
        );
    }
    say!(out, "");
    say!(
        out,
        "Align your own ids: cargo run --example ch03 -- --input FILE.safetensors --experts E (see --help)."
    );
    Ok(())
}
// ANCHOR_END: tour

fn run_input(opts: &InputOptions, device: &'static Device, out: Out) -> Result<(), ExampleError> {
    // The output's folder before any work, so a typo costs nothing.
    if let Some(path) = &opts.output {
        check_output_path(path, &opts.input)?;
    }
    let (name, ids, tokens, k) = read_topk_ids(&opts.input)?;
    let e = opts.experts;
    let pairs = ids.len();
    let (bm, why) = match opts.block_m {
        Some(bm) => (bm, "--block-m"),
        None => (choose_block_m(pairs, e), "the chapter's rule"),
    };
    check(&ids, e, bm).map_err(|err| match err {
        AlignError::IdOutOfRange { pair, id, experts } => ExampleError::IdOutOfRange {
            path: opts.input.clone(),
            token: pair / k.max(1),
            slot: pair % k.max(1),
            id,
            experts,
        },
        other => ExampleError::Align(other),
    })?;
    say!(
        out,
        "{}: `{name}` [{tokens}, {k}] i32, {pairs} pairs over {e} experts; BLOCK_M {bm} ({why})",
        opts.input.display()
    );
    let (got, launched) = record_launches(|| align_on_device(device, &ids, e, bm));
    let got = got?;
    let tiles = got.tiles(bm);
    let slots = got.num_tokens_post_padded as usize;
    say!(
        out,
        "{} in {tiles} tiles: {} padding ({:.1}% of the slots); the kernel took {}",
        plural(slots, "slot", "slots"),
        slots - pairs,
        if slots == 0 {
            0.0
        } else {
            100.0 * (slots - pairs) as f64 / slots as f64
        },
        plural(launched.len(), "launch", "launches")
    );
    w(out, format_args!("{}", draw(&got, pairs, bm, 8)))?;
    // The output first: a check that fails must not cost the reader the output.
    if let Some(path) = &opts.output {
        write_outputs(path, &got)?;
        say!(
            out,
            "wrote sorted_ids [{}], expert_ids [{}], num_tokens_post_padded [1] (i32) to {}",
            got.sorted_ids.len(),
            got.expert_ids.len(),
            path.display()
        );
    }
    same("your ids", &got, &align_literal(&ids, e, bm))?;
    say!(out, "checked: the same bits as the literal sort");
    Ok(())
}

/// Reads `topk_ids [T, k]` i32 (or `ids`, chapter 1's output) from a safetensors file:
/// `(tensor name, ids flattened, T, k)`.
pub fn read_topk_ids(path: &Path) -> Result<(String, Vec<i64>, usize, usize), ExampleError> {
    let bytes = std::fs::read(path).map_err(|e| ExampleError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let not_st = |why: String| ExampleError::NotSafetensors {
        path: path.to_path_buf(),
        why,
    };
    ch01_router::io::check_safetensors(&bytes).map_err(not_st)?;
    let st = candle_core::safetensors::SliceSafetensors::new(&bytes)
        .map_err(|e| not_st(e.to_string()))?;
    let names: Vec<String> = st.tensors().into_iter().map(|(n, _)| n).collect();
    let Some(name) = ["topk_ids", "ids"]
        .into_iter()
        .find(|n| names.iter().any(|m| m == n))
    else {
        let mut found = names;
        found.sort();
        return Err(ExampleError::MissingTensor {
            path: path.to_path_buf(),
            found,
        });
    };
    if names.iter().any(|n| n == "topk_ids") && names.iter().any(|n| n == "ids") {
        return Err(ExampleError::Io {
            path: path.to_path_buf(),
            why: "holds both `topk_ids` and `ids`: keep the one to align (it reads either)"
                .to_string(),
        });
    }
    let view = st.get(name).map_err(|e| not_st(e.to_string()))?;
    let dtype = format!("{:?}", view.dtype());
    if dtype != "I32" {
        return Err(ExampleError::Dtype {
            path: path.to_path_buf(),
            tensor: name.to_string(),
            found: dtype,
        });
    }
    let &[tokens, k] = view.shape() else {
        return Err(ExampleError::Rank {
            path: path.to_path_buf(),
            tensor: name.to_string(),
            shape: view.shape().to_vec(),
        });
    };
    let ids = view
        .data()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
        .collect();
    Ok((name.to_string(), ids, tokens, k))
}

/// Writes the three buffers as i32 tensors of a safetensors file: `sorted_ids [capacity]`,
/// `expert_ids [max_tiles]` and `num_tokens_post_padded [1]`, whole, as the kernel leaves them
/// (placeholders and `-1` tiles past the padded total included).
pub fn write_outputs(path: &Path, a: &Aligned) -> Result<(), ExampleError> {
    SafetensorsWriter::new()
        .i32("sorted_ids", &[a.sorted_ids.len()], &a.sorted_ids)
        .i32("expert_ids", &[a.expert_ids.len()], &a.expert_ids)
        .i32("num_tokens_post_padded", &[1], &[a.num_tokens_post_padded])
        .write(path)
        .map_err(|e| ExampleError::Io {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
}

/// Checks, before any work, that `path` can be written: its folder exists, it is not a folder,
/// and it is not the `input` file (which it would overwrite).
pub fn check_output_path(path: &Path, input: &Path) -> Result<(), ExampleError> {
    match output_problem(path, &[input]) {
        None => Ok(()),
        Some(why) => Err(ExampleError::Io {
            path: path.to_path_buf(),
            why,
        }),
    }
}
