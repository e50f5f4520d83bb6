//! Chapter 3's cases: the bookkeeping a fused expert kernel reads (`moe_align_block_size`:
//! the routing's `T·k` pairs sorted by expert, each expert's run padded to BLOCK_M), our kernel
//! ([`DeviceAlign::enqueue`]: one launch up to 2048 pairs, three above) beside the same
//! bookkeeping in PyTorch (`tools/peers/ch03_align.py`: a stable argsort, the counts, a cumsum
//! of the padded counts, a scatter) and beside one empty launch, measured in the same GPU
//! session on exactly the same ids.
//!
//!     bench ch03 --export-ids F.safetensors     the ids and the expected outputs, for the peer
//!                                               (no GPU needed)
//!     python3 tools/peers/ch03_align.py --ids F.safetensors --samples S.csv --hashes H.csv
//!     bench ch03 --ids F.safetensors --peers S.csv --out-dir bench/results/h200
//!     bench ch03 --hashes --peer-hashes H.csv --out-dir bench/results/h200
//!                                               1,000 runs at four sizes, one hash each
//!     bench ch03 --padding                      the share of padded slots (CPU, exact):
//!                                               bench/results/cpu/ch03_padding.csv
//!     bench ch03 --quick                        on the GPU: fewer samples; without one: a smoke
//!                                               test on the emulator at small sizes
//!
//! The shapes: E = 128 and E = 288 experts, k = 8, T from 1 to 16384 tokens; BLOCK_M by the
//! chapter's rule ([`choose_block_m`] of `T·k` and E); the ids are [`routed_ids`] of a fixed
//! seed, no bias (each token's 8 best of E patterned scores: spread about evenly, as a
//! load-balanced model routes). What is timed is one call on ids already on the device: the
//! graph holds only the kernel's launches. The floor of each case is one empty launch plus its
//! bytes at the measured copy bandwidth: the ids read (`4·T·k` bytes) and the three outputs
//! written at the sizes they are allocated (`4·(capacity + max_tiles + 1)`); the CSV also
//! holds the empty launch itself, so ours minus one launch is read off the same run.
//!
//! Before timing, the GPU run checks our output on the device against [`align_reference`] at
//! every T, exactly (every slot of the three buffers, the placeholders past the padded total
//! included), and stops at the first difference. The peer checks its own output against the
//! same reference, exported with the ids, and fails loudly on any difference.
//!
//! Determinism (`--hashes`): at E = 288 and T = 1, 64, 4096, 16384, the kernel runs 1,000 times
//! on the same ids; before each run the three outputs are overwritten with a value that changes
//! from run to run, so a slot the kernel failed to write would change the hash. Each run's
//! three outputs are hashed (CRC-32 of their little-endian bytes, in order: `sorted_ids`,
//! `expert_ids`, `num_tokens_post_padded`; zlib's CRC, so the peer's Python computes the same
//! value) and compared with the reference. Every size must give one hash, the reference's, in
//! every run; else the command fails after writing the CSV.

use crate::cases::{csv, steps_csv, summary, Case, Session, SummaryLayout, Work};
use ch03_align::device::geometry::ALIGN_ONE_BLOCK_MAX_PAIRS;
use ch03_align::device::{AlignBuffers, DeviceAlign, Order};
use ch03_align::layout::{capacity, choose_block_m, max_tiles, padding_share};
use ch03_align::reference::align_reference;
use ch03_align::regimes::routed_ids;
use ch03_align::Aligned;
use moe_kernels::safetensors::SafetensorsWriter;
use moe_kernels::{record_launches, BackendKind, Device, DeviceBuffer};
use moe_tools::bench_row::BenchRow;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

/// `bench ch03`'s arguments.
#[derive(clap::Args)]
pub struct Ch03Args {
    /// Where the GPU CSVs go (`ch03.csv`, `ch03_steps.csv`, `ch03_layout.csv`,
    /// `ch03_ceilings.csv`; with `--hashes`, `ch03_determinism.csv`).
    #[arg(long, default_value = "bench/results/h200")]
    out_dir: PathBuf,
    /// The PyTorch peer's samples to merge (from `tools/peers/ch03_align.py --samples`).
    #[arg(long)]
    peers: Option<PathBuf>,
    /// The ids file the peer measured (from `--export-ids`): checked to be exactly the inputs
    /// measured here.
    #[arg(long, value_name = "FILE")]
    ids: Option<PathBuf>,
    /// GPU: fewer samples (a smoke test of the pipeline, not numbers to publish), and 20 runs
    /// for `--hashes`. Without a GPU: the whole path once on the emulator at small sizes,
    /// writing nothing. Also `MOE_BENCH_QUICK=1`.
    #[arg(long)]
    quick: bool,
    /// Write the ids of every measured case and the outputs they must give (safetensors, see
    /// [`ids_file`]) for the peer, and stop.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["peers", "ids", "hashes", "padding"])]
    export_ids: Option<PathBuf>,
    /// Determinism instead of timing: `--runs` runs at each of four sizes, one hash each, into
    /// `ch03_determinism.csv`; fails unless every size gives one hash, the reference's.
    #[arg(long, conflicts_with_all = ["peers", "ids", "padding"])]
    hashes: bool,
    /// With `--hashes`: the peer's rows (from `tools/peers/ch03_align.py --hashes`), checked the
    /// same way and merged.
    #[arg(long, value_name = "FILE", requires = "hashes")]
    peer_hashes: Option<PathBuf>,
    /// With `--hashes`: runs per size.
    #[arg(long, default_value_t = RUNS)]
    runs: usize,
    /// The share of padded slots for BLOCK_M 16 to 128, E 8 to 384, T 1 to 8192 (CPU, exact, no
    /// timing), into `--padding-out`.
    #[arg(long, conflicts_with_all = ["peers", "ids"])]
    padding: bool,
    /// Where `--padding` writes its CSV.
    #[arg(long, default_value = "bench/results/cpu/ch03_padding.csv")]
    padding_out: PathBuf,
}

/// Experts chosen per token.
pub const K: usize = 8;
/// The measured shapes: a name (the CSVs' `shape`) and E.
pub const SHAPES: [(&str, usize); 2] = [("e128_k8", 128), ("e288_k8", 288)];
/// One decode token, decode batches, prefill chunks.
pub const TOKENS: [usize; 7] = [1, 8, 16, 64, 512, 4096, 16384];
/// The seed of every measured routing ([`routed_ids`]).
pub const IDS_SEED: u64 = 303;
/// Where determinism is shown: E, the token counts, the runs at each.
pub const HASH_EXPERTS: usize = 288;
pub const HASH_TOKENS: [usize; 4] = [1, 64, 4096, 16384];
pub const RUNS: usize = 1000;
/// The emulator's smoke test: one token, a decode batch, and 2400 pairs (the two-launch path).
const TINY_TOKENS: [usize; 3] = [1, 16, 300];
/// The padding table's tiles and experts.
pub const PAD_BLOCK_M: [usize; 4] = [16, 32, 64, 128];
pub const PAD_EXPERTS: [usize; 5] = [8, 64, 128, 256, 384];

fn no_bias(_: usize) -> f32 {
    0.0
}

/// One measured input: the ids of `tokens` tokens over `experts` experts, the BLOCK_M the rule
/// picks, and the outputs the reference gives.
#[derive(Clone, Debug)]
pub struct Input {
    pub shape: &'static str,
    pub experts: usize,
    pub tokens: usize,
    pub block_m: usize,
    /// `[T·k]`, token-major.
    pub ids: Vec<i64>,
    pub want: Aligned,
}

impl Input {
    pub fn pairs(&self) -> usize {
        self.tokens * K
    }

    /// Bytes one call must move: the ids read, the three outputs written at their allocated
    /// sizes.
    pub fn bytes(&self) -> f64 {
        let (p, e, bm) = (self.pairs(), self.experts, self.block_m);
        (4 * (p + capacity(p, e, bm) + max_tiles(p, e, bm) + 1)) as f64
    }

    fn ids32(&self) -> Vec<i32> {
        // Ids are below E ≤ 512 (routed_ids picks them from 0..E).
        self.ids.iter().map(|&e| e as i32).collect()
    }

    fn launches(&self) -> usize {
        if self.pairs() > ALIGN_ONE_BLOCK_MAX_PAIRS {
            2
        } else {
            1
        }
    }
}

/// The input of `tokens` tokens at the shape `shape` (E experts).
pub fn input(shape: &'static str, experts: usize, tokens: usize) -> Input {
    let ids = routed_ids(tokens, experts, K, IDS_SEED, no_bias);
    let block_m = choose_block_m(tokens * K, experts);
    let want = align_reference(&ids, experts, block_m);
    Input {
        shape,
        experts,
        tokens,
        block_m,
        ids,
        want,
    }
}

/// Every shape's input at each of `tokens`, shape by shape.
pub fn inputs(tokens: &[usize]) -> Vec<Input> {
    SHAPES
        .iter()
        .flat_map(|&(shape, e)| tokens.iter().map(move |&t| input(shape, e, t)))
        .collect()
}

/// The inputs where determinism is shown.
fn hash_inputs(tokens: &[usize]) -> Vec<Input> {
    let shape = SHAPES
        .iter()
        .find(|(_, e)| *e == HASH_EXPERTS)
        .expect("HASH_EXPERTS is a measured shape")
        .0;
    tokens
        .iter()
        .map(|&t| input(shape, HASH_EXPERTS, t))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The file the peer reads.

/// The inputs and their expected outputs as a safetensors file: for each shape's E and each T,
/// `ids.e{E}.{T}` i32 [T, k], and what the reference gives: `sorted_ids.e{E}.{T}` i32
/// [capacity], `expert_ids.e{E}.{T}` i32 [max_tiles], `num_tokens_post_padded.e{E}.{T}`
/// i32 `[1]`. The metadata names the shapes, E, k, the token counts, BLOCK_M of every case
/// (`block_m.e{E}`, one per token count) and where determinism is shown (`hash_experts`,
/// `hash_tokens`, `hash_runs`). Written with `moe_kernels::safetensors`, as chapter 2's routing
/// file.
pub fn ids_file(inputs: &[Input]) -> Vec<u8> {
    let join = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(",");
    let mut shapes: Vec<(&str, usize)> = Vec::new();
    for i in inputs {
        if !shapes.contains(&(i.shape, i.experts)) {
            shapes.push((i.shape, i.experts));
        }
    }
    let tokens: Vec<usize> = inputs
        .iter()
        .filter(|i| i.shape == shapes[0].0)
        .map(|i| i.tokens)
        .collect();
    let mut meta = vec![
        ("chapter".to_string(), "ch03".to_string()),
        (
            "shapes".into(),
            join(&mut shapes.iter().map(|s| s.0.to_string())),
        ),
        (
            "experts".into(),
            join(&mut shapes.iter().map(|s| s.1.to_string())),
        ),
        ("k".into(), K.to_string()),
        (
            "tokens".into(),
            join(&mut tokens.iter().map(|t| t.to_string())),
        ),
    ];
    for (shape, e) in &shapes {
        meta.push((
            format!("block_m.e{e}"),
            join(
                &mut inputs
                    .iter()
                    .filter(|i| i.shape == *shape)
                    .map(|i| i.block_m.to_string()),
            ),
        ));
    }
    meta.push(("hash_experts".into(), HASH_EXPERTS.to_string()));
    meta.push((
        "hash_tokens".into(),
        join(&mut HASH_TOKENS.iter().map(|t| t.to_string())),
    ));
    meta.push(("hash_runs".into(), RUNS.to_string()));
    let mut w = SafetensorsWriter::new();
    for (k, v) in &meta {
        w.metadata(k, v);
    }
    for i in inputs {
        let name = |n: &str| format!("{n}.e{}.{}", i.experts, i.tokens);
        let want = &i.want;
        w.i32(&name("ids"), &[i.tokens, K], &i.ids32())
            .i32(
                &name("sorted_ids"),
                &[want.sorted_ids.len()],
                &want.sorted_ids,
            )
            .i32(
                &name("expert_ids"),
                &[want.expert_ids.len()],
                &want.expert_ids,
            )
            .i32(
                &name("num_tokens_post_padded"),
                &[1],
                &[want.num_tokens_post_padded],
            );
    }
    w.to_bytes()
}

// ---------------------------------------------------------------------------------------------
// The work on a device.

/// One call of our kernel on ids already on the device, ready to be captured.
struct AlignWork {
    align: DeviceAlign,
    ids: DeviceBuffer<i32>,
    out: AlignBuffers,
}

impl Work for AlignWork {
    fn enqueue(&self) -> Result<(), String> {
        self.align
            .enqueue(&self.ids, &self.out)
            .map_err(|e| e.to_string())
    }
}

fn download(out: &AlignBuffers) -> Result<Aligned, String> {
    let e = |e: moe_kernels::KernelError| e.to_string();
    Ok(Aligned {
        sorted_ids: out.sorted_ids.to_vec().map_err(e)?,
        expert_ids: out.expert_ids.to_vec().map_err(e)?,
        num_tokens_post_padded: out.num_post.to_vec().map_err(e)?[0],
    })
}

/// Where `got` first differs from `want`, in words; `None` when they are equal.
pub fn first_difference(got: &Aligned, want: &Aligned) -> Option<String> {
    if got.num_tokens_post_padded != want.num_tokens_post_padded {
        return Some(format!(
            "num_tokens_post_padded is {}, expected {}",
            got.num_tokens_post_padded, want.num_tokens_post_padded
        ));
    }
    for (name, g, w) in [
        ("sorted_ids", &got.sorted_ids, &want.sorted_ids),
        ("expert_ids", &got.expert_ids, &want.expert_ids),
    ] {
        if g.len() != w.len() {
            return Some(format!(
                "{name} has {} slots, expected {}",
                g.len(),
                w.len()
            ));
        }
        if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
            let n = g.iter().zip(w).filter(|(a, b)| a != b).count();
            return Some(format!(
                "{name}[{i}] is {}, expected {} ({n} of {} slots differ)",
                g[i],
                w[i],
                g.len()
            ));
        }
    }
    None
}

/// Where the runs of `got` first hold other pairs than those of `want` (each expert's run
/// compared as a set: the order inside a run is free in [`Order::Arrival`]), or where the tiles,
/// the total or the tail differ; `None` when they agree.
pub fn first_run_difference(got: &Aligned, want: &Aligned, block_m: usize) -> Option<String> {
    if got.num_tokens_post_padded != want.num_tokens_post_padded
        || got.expert_ids != want.expert_ids
    {
        return first_difference(got, want);
    }
    let sorted_run = |a: &Aligned, tile: usize| {
        let mut v = a.sorted_ids[tile * block_m..(tile + 1) * block_m].to_vec();
        v.sort_unstable();
        v
    };
    // Tile by tile is enough only within a tile; a run spans consecutive tiles of one expert.
    let tiles = want.tiles(block_m);
    let mut start = 0;
    while start < tiles {
        let e = want.expert_ids[start];
        let end = (start..tiles)
            .find(|&t| want.expert_ids[t] != e)
            .unwrap_or(tiles);
        let run = |a: &Aligned| {
            let mut v: Vec<i32> = (start..end).flat_map(|t| sorted_run(a, t)).collect();
            v.sort_unstable();
            v
        };
        if run(got) != run(want) {
            return Some(format!(
                "the run of expert {e} (tiles {start}..{end}) holds other pairs"
            ));
        }
        start = end;
    }
    let tail = want.num_tokens_post_padded as usize;
    (got.sorted_ids[tail..] != want.sorted_ids[tail..])
        .then(|| "sorted_ids past the padded total differ".to_string())
}

/// Builds the work of `input` on `dev` with the pairs of a run in `order`, runs it once outside
/// any graph and checks what that run says: the launches are the ones
/// [`DeviceAlign::launches`] counts, and the output equals the reference exactly (in
/// [`Order::Arrival`], run by run as sets). The buffers start poisoned, so a slot left unwritten
/// shows.
fn build(dev: &'static Device, input: &Input, order: Order) -> Result<AlignWork, String> {
    let e = |e: moe_kernels::KernelError| e.to_string();
    let align = DeviceAlign::with_order(dev, input.pairs(), input.experts, input.block_m, order)
        .map_err(|e| e.to_string())?;
    let out = align.alloc_outputs(dev).map_err(|e| e.to_string())?;
    let work = AlignWork {
        ids: dev.upload(&input.ids32()).map_err(e)?,
        align,
        out,
    };
    let (r, names) = record_launches(|| work.enqueue());
    r?;
    let at = format!(
        "E = {}, T = {}, BLOCK_M {}",
        input.experts, input.tokens, input.block_m
    );
    if names.len() != work.align.launches() || names.len() != input.launches() {
        return Err(format!(
            "{at}: {} launches recorded ({names:?}), the kernel counts {}",
            names.len(),
            work.align.launches()
        ));
    }
    let got = download(&work.out)?;
    let diff = match order {
        Order::Stable => first_difference(&got, &input.want),
        Order::Arrival => first_run_difference(&got, &input.want, input.block_m),
    };
    if let Some(d) = diff {
        return Err(format!(
            "{at}: our output on {} differs from align_reference: {d}",
            dev.describe()
        ));
    }
    Ok(work)
}

/// Our output on the device at every input against the reference, exactly; stops at the first
/// difference.
fn check_on_device(dev: &'static Device, inputs: &[Input]) -> Result<(), String> {
    let t = Instant::now();
    for (shape, _) in SHAPES {
        let here: Vec<&Input> = inputs.iter().filter(|i| i.shape == shape).collect();
        if here.is_empty() {
            continue;
        }
        for i in &here {
            build(dev, i, Order::Stable)?;
            build(dev, i, Order::Arrival)?;
        }
        eprintln!(
            "bench ch03: {shape}: our output equals align_reference exactly (every slot of sorted_ids, expert_ids and num_tokens_post_padded), and the arrival-order twin's runs hold the same pairs, at T = {}",
            here.iter()
                .map(|i| i.tokens.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    eprintln!(
        "bench ch03: checked on {} in {:.1} s",
        dev.describe(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The measured cases: our kernel at each input, with its floor and the per-kernel breakdown
/// where it launches more than once; then its arrival-order twin (`align_arrival`), which
/// scatters through atomic cursors: what the stable order costs is the difference.
fn cases(inputs: &[Input]) -> Vec<Case> {
    let case = |input: &Input, imp: &'static str, order: Order| {
        let input = input.clone();
        Case {
            chapter: "ch03",
            shape: input.shape,
            imp,
            rows: input.tokens,
            bytes: input.bytes(),
            read_bytes: (4 * input.pairs()) as f64,
            flops: 0.0,
            steps: order == Order::Stable && input.launches() > 1,
            build: Box::new(move |dev: &'static Device| {
                Ok(Box::new(build(dev, &input, order)?) as Box<dyn Work>)
            }),
        }
    };
    inputs
        .iter()
        .map(|i| case(i, "align", Order::Stable))
        .chain(
            inputs
                .iter()
                .map(|i| case(i, "align_arrival", Order::Arrival)),
        )
        .collect()
}

/// The layout of every measured case (`ch03_layout.csv`): what the table prints beside the
/// timings (BLOCK_M, the padded slots, the tiles, the active experts).
pub const LAYOUT_HEADER: &str = "shape,experts,tokens,k,pairs,block_m,capacity,max_tiles,tiles,num_tokens_post_padded,active_experts";

pub fn layout_csv(inputs: &[Input]) -> String {
    let mut s = format!("{LAYOUT_HEADER}\n");
    for i in inputs {
        let (p, e, bm) = (i.pairs(), i.experts, i.block_m);
        let active = i.ids.iter().collect::<BTreeSet<_>>().len();
        s += &format!(
            "{},{e},{},{K},{p},{bm},{},{},{},{},{active}\n",
            i.shape,
            i.tokens,
            capacity(p, e, bm),
            max_tiles(p, e, bm),
            i.want.tiles(bm),
            i.want.num_tokens_post_padded
        );
    }
    s
}

// ---------------------------------------------------------------------------------------------
// `bench ch03`.

pub fn run(args: &Ch03Args) -> Result<(), String> {
    let quick = args.quick || crate::cases::quick_from_env();
    if let Some(p) = &args.export_ids {
        let inputs = inputs(&TOKENS);
        if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        std::fs::write(p, ids_file(&inputs)).map_err(|e| format!("{}: {e}", p.display()))?;
        let pairs: usize = inputs.iter().map(Input::pairs).sum();
        println!(
            "wrote the ids of T = {} at E = {} (k = {K}, {pairs} pairs) and their aligned outputs to {}",
            TOKENS.map(|t| t.to_string()).join(", "),
            SHAPES.map(|s| s.1.to_string()).join(" and "),
            p.display()
        );
        return Ok(());
    }
    if args.padding {
        let text = padding_csv()?;
        crate::common::write(&args.padding_out, &text)?;
        println!(
            "wrote {} rows of padding shares (BLOCK_M {}, E {}, k {K}, T 1 to {}) to {}",
            text.lines().count() - 1,
            PAD_BLOCK_M.map(|b| b.to_string()).join("/"),
            PAD_EXPERTS.map(|b| b.to_string()).join("/"),
            pad_tokens().last().unwrap_or(&0),
            args.padding_out.display()
        );
        return Ok(());
    }
    let (dev, why) = Device::select().map_err(|e| e.to_string())?;
    match dev.kind() {
        BackendKind::Cuda if args.hashes => hashes(dev, args, quick),
        BackendKind::Cuda => gpu(dev, args, quick),
        BackendKind::Emu if quick => emu_smoke(dev, args.hashes, args.peer_hashes.as_deref()),
        BackendKind::Emu => Err(format!(
            "bench ch03 measures on the GPU, and the backend is the emulator ({why}); \
             --quick (or MOE_BENCH_QUICK=1) runs a smoke test of the same path on the emulator, \
             --padding the CPU padding table, --export-ids the peer's inputs"
        )),
    }
}

fn gpu(dev: &'static Device, args: &Ch03Args, quick: bool) -> Result<(), String> {
    let inputs = inputs(&TOKENS);
    if let Some(p) = &args.ids {
        let file = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if file != ids_file(&inputs) {
            return Err(format!(
                "{} is not the ids file of this build (bench ch03 --export-ids): the peer measured other inputs",
                p.display()
            ));
        }
        eprintln!(
            "bench ch03: {} holds exactly the ids measured here",
            p.display()
        );
    }
    let session = Session::start(dev, quick)?;
    let Session {
        empty, ceilings, ..
    } = &session;
    eprintln!(
        "{}: copy {:.0} GB/s; empty kernel cold {:.2} µs, warm {:.2} µs",
        dev.describe(),
        ceilings.copy_gbs,
        empty.cold.median_us,
        empty.warm.median_us
    );
    check_on_device(dev, &inputs)?;
    let cases = cases(&inputs);
    let (rows, steps) = session.run_all("ch03", "tokens", &cases, args.peers.as_deref())?;

    let out = &args.out_dir;
    crate::common::write(&out.join("ch03.csv"), &csv(&rows))?;
    crate::common::write(&out.join("ch03_steps.csv"), &steps_csv(&steps))?;
    crate::common::write(&out.join("ch03_layout.csv"), &layout_csv(&inputs))?;
    crate::common::write(&out.join("ch03_ceilings.csv"), &session.ceilings_csv())?;
    print!(
        "{}",
        summary(
            &rows,
            &SummaryLayout {
                shape_w: 8,
                rows_name: "tokens",
                rows_w: 6,
                imp_w: 12,
                tflops_digits: 1,
            }
        )
    );
    print!("{}", against_launch_and_peer(&rows, &inputs));
    println!(
        "wrote ch03.csv, ch03_steps.csv, ch03_layout.csv and ch03_ceilings.csv in {}{}",
        out.display(),
        if quick {
            " (--quick: not numbers to publish)"
        } else {
            ""
        }
    );
    Ok(())
}

/// What the chapter's targets read: at each case, ours minus one empty launch (cold and warm)
/// and the peer over ours, then whether the targets hold (at least 6× faster than the peer at
/// every T; within 2 µs of one empty launch, cold, at T ≤ 16). Printed, not enforced: the
/// numbers are the result either way.
pub fn against_launch_and_peer(rows: &[BenchRow], inputs: &[Input]) -> String {
    let Some(empty) = rows.iter().find(|r| r.imp == "empty_kernel") else {
        return String::new();
    };
    let find = |shape: &str, t: usize, imp: &str| {
        rows.iter()
            .find(|r| r.shape == shape && r.rows == t as u64 && r.imp == imp)
    };
    let mut s = format!(
        "{:<8} {:>6} {:>7} {:>8} {:>17} {:>17} {:>21}\n",
        "shape",
        "tokens",
        "BLOCK_M",
        "launches",
        "ours−empty µs c/w",
        "torch÷ours c/w",
        "torch launches"
    );
    let (mut worst_ratio, mut worst_gap) = (f64::INFINITY, f64::NEG_INFINITY);
    for i in inputs {
        let Some(ours) = find(i.shape, i.tokens, "align") else {
            continue;
        };
        let peer = find(i.shape, i.tokens, "torch_align");
        let (c, w) = (
            ours.cold_median_us - empty.cold_median_us,
            ours.warm_median_us - empty.warm_median_us,
        );
        if i.tokens <= 16 {
            worst_gap = worst_gap.max(c);
        }
        let ratio = peer.map(|p| {
            let r = (
                p.cold_median_us / ours.cold_median_us,
                p.warm_median_us / ours.warm_median_us,
            );
            worst_ratio = worst_ratio.min(r.0);
            r
        });
        s += &format!(
            "{:<8} {:>6} {:>7} {:>8} {:>8.2} / {:>6.2} {:>17} {:>21}\n",
            i.shape,
            i.tokens,
            i.block_m,
            ours.launches,
            c,
            w,
            ratio
                .map(|(c, w)| format!("{c:.1}× / {w:.1}×"))
                .unwrap_or("–".into()),
            peer.map(|p| p.launches.to_string()).unwrap_or("–".into())
        );
    }
    if worst_gap.is_finite() {
        s += &format!(
            "bench ch03: target within 2 µs of one empty launch at T ≤ 16 (cold): worst {worst_gap:.2} µs: {}\n",
            if worst_gap <= 2.0 { "met" } else { "MISSED" }
        );
    }
    if worst_ratio.is_finite() {
        s += &format!(
            "bench ch03: target at least 6× faster than PyTorch at every T (cold): worst {worst_ratio:.1}×: {}\n",
            if worst_ratio >= 6.0 { "met" } else { "MISSED" }
        );
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Determinism.

/// CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`) of `bytes`, continuing from `crc` (0 to
/// start).
pub fn crc32(crc: u32, bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !crc;
    for &b in bytes {
        c = TABLE[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// The hash of one run's outputs: CRC-32 of `sorted_ids`, then `expert_ids`, then
/// `num_tokens_post_padded`, each as little-endian i32s.
pub fn output_hash(a: &Aligned) -> u32 {
    let le = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let c = crc32(0, &le(&a.sorted_ids));
    let c = crc32(c, &le(&a.expert_ids));
    crc32(c, &le(&[a.num_tokens_post_padded]))
}

/// One row of `ch03_determinism.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct HashRow {
    pub imp: String,
    pub experts: usize,
    pub tokens: usize,
    pub block_m: usize,
    pub runs: usize,
    pub distinct_hashes: usize,
    pub runs_equal_to_reference: usize,
    /// The first run's hash (8 hex digits).
    pub hash: String,
    pub reference_hash: String,
    pub device: String,
}

pub const HASH_HEADER: &str = "impl,experts,tokens,k,block_m,pairs,runs,distinct_hashes,runs_equal_to_reference,hash,reference_hash,device";

impl HashRow {
    fn to_csv(&self) -> String {
        format!(
            "{},{},{},{K},{},{},{},{},{},{},{},{}",
            self.imp,
            self.experts,
            self.tokens,
            self.block_m,
            self.tokens * K,
            self.runs,
            self.distinct_hashes,
            self.runs_equal_to_reference,
            self.hash,
            self.reference_hash,
            self.device
        )
    }

    /// One hash in every run, the reference's, and every run's output equal to the reference.
    pub fn ok(&self) -> bool {
        self.runs > 0
            && self.distinct_hashes == 1
            && self.runs_equal_to_reference == self.runs
            && self.hash == self.reference_hash
    }
}

/// Runs our kernel `runs` times on `input`, the outputs overwritten before each run with a value
/// that changes from run to run; hashes each run's outputs and compares them with the reference.
fn determinism(dev: &'static Device, input: &Input, runs: usize) -> Result<HashRow, String> {
    let e = |e: moe_kernels::KernelError| e.to_string();
    let work = build(dev, input, Order::Stable)?;
    let AlignWork {
        align,
        ids,
        mut out,
    } = work;
    let (cap, tiles) = (out.sorted_ids.len(), out.expert_ids.len());
    let mut seen = BTreeSet::new();
    let (mut equal, mut first) = (0, None);
    for run in 0..runs {
        // Never a value the kernel writes (pair indices and the placeholder are ≥ 0; -1 marks
        // the tiles past the last).
        let poison = -2 - (run % 1_000_000) as i32;
        out.sorted_ids.copy_from(&vec![poison; cap]).map_err(e)?;
        out.expert_ids.copy_from(&vec![poison; tiles]).map_err(e)?;
        out.num_post.copy_from(&[poison]).map_err(e)?;
        align.enqueue(&ids, &out).map_err(|e| e.to_string())?;
        let got = download(&out)?;
        let h = output_hash(&got);
        first.get_or_insert(h);
        seen.insert(h);
        if got == input.want {
            equal += 1;
        }
    }
    Ok(HashRow {
        imp: "align".into(),
        experts: input.experts,
        tokens: input.tokens,
        block_m: input.block_m,
        runs,
        distinct_hashes: seen.len(),
        runs_equal_to_reference: equal,
        hash: format!("{:08x}", first.unwrap_or(0)),
        reference_hash: format!("{:08x}", output_hash(&input.want)),
        device: dev.name().replace(' ', "_"),
    })
}

/// The peer's determinism rows (the same columns), each checked to be at one of `inputs` with
/// its BLOCK_M and its reference hash.
pub fn peer_hash_rows(text: &str, name: &str, inputs: &[Input]) -> Result<Vec<HashRow>, String> {
    let t = moe_tools::csv::Table::parse(text, name)?;
    let want: Vec<&str> = HASH_HEADER.split(',').collect();
    if t.header().1 != want {
        return Err(format!("{name}: header is not `{HASH_HEADER}`"));
    }
    t.records()
        .map(|r| {
            let num = |c: &str| {
                r(c).parse::<usize>()
                    .map_err(|_| format!("{name}: `{}` in column {c} is not a count", r(c)))
            };
            let row = HashRow {
                imp: r("impl"),
                experts: num("experts")?,
                tokens: num("tokens")?,
                block_m: num("block_m")?,
                runs: num("runs")?,
                distinct_hashes: num("distinct_hashes")?,
                runs_equal_to_reference: num("runs_equal_to_reference")?,
                hash: r("hash"),
                reference_hash: r("reference_hash"),
                device: r("device"),
            };
            let input = inputs
                .iter()
                .find(|i| i.experts == row.experts && i.tokens == row.tokens)
                .ok_or(format!(
                    "{name}: {} at E = {}, T = {}: not a size measured here",
                    row.imp, row.experts, row.tokens
                ))?;
            let reference = format!("{:08x}", output_hash(&input.want));
            if row.block_m != input.block_m || row.reference_hash != reference {
                return Err(format!(
                    "{name}: {} at E = {}, T = {}: BLOCK_M {} and reference hash {}, expected {} and {reference}",
                    row.imp, row.experts, row.tokens, row.block_m, row.reference_hash, input.block_m
                ));
            }
            Ok(row)
        })
        .collect()
}

fn hashes(dev: &'static Device, args: &Ch03Args, quick: bool) -> Result<(), String> {
    let runs = if quick { args.runs.min(20) } else { args.runs }.max(1);
    let inputs = hash_inputs(&HASH_TOKENS);
    eprintln!(
        "bench ch03 --hashes: our kernel {runs} times at E = {HASH_EXPERTS}, T = {}, on {}",
        HASH_TOKENS.map(|t| t.to_string()).join(", "),
        dev.describe()
    );
    let t = Instant::now();
    let mut rows = Vec::new();
    for i in &inputs {
        rows.push(determinism(dev, i, runs)?);
    }
    eprintln!(
        "bench ch03 --hashes: {} runs in {:.1} s",
        runs * inputs.len(),
        t.elapsed().as_secs_f64()
    );
    if let Some(p) = &args.peer_hashes {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        rows.extend(peer_hash_rows(&text, &p.display().to_string(), &inputs)?);
    }
    let text: String = std::iter::once(HASH_HEADER.to_string())
        .chain(rows.iter().map(HashRow::to_csv))
        .map(|l| l + "\n")
        .collect();
    let path = args.out_dir.join("ch03_determinism.csv");
    crate::common::write(&path, &text)?;
    print!("{text}");
    finish_hashes(&rows)?;
    println!(
        "bench ch03 --hashes: one hash per size, the reference's, in every run ({} rows); wrote {}",
        rows.len(),
        path.display()
    );
    Ok(())
}

/// An error naming every row that is not [`HashRow::ok`].
fn finish_hashes(rows: &[HashRow]) -> Result<(), String> {
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| !r.ok())
        .map(|r| {
            format!(
                "{} at E = {}, T = {}: {} distinct hashes in {} runs, {} equal to the reference, first {} (reference {})",
                r.imp, r.experts, r.tokens, r.distinct_hashes, r.runs, r.runs_equal_to_reference, r.hash, r.reference_hash
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "NOT DETERMINISTIC or wrong:\n  {}",
            bad.join("\n  ")
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// The emulator's smoke test.

/// The GPU path on the emulator at [`TINY_TOKENS`] (both shapes): each case built and checked
/// exactly as the GPU run checks it, timed by wall clock; then the determinism path with a few
/// runs, and the peer's determinism rows when given (checked against the reference hashes of
/// the GPU run's sizes, computed here). Writes nothing: these are not GPU numbers.
fn emu_smoke(
    dev: &'static Device,
    hashes_only: bool,
    peer_hashes: Option<&std::path::Path>,
) -> Result<(), String> {
    eprintln!(
        "bench ch03 --quick on the emulator ({}): a smoke test of the GPU path at T = {}; nothing is written",
        dev.describe(),
        TINY_TOKENS.map(|t| t.to_string()).join(", ")
    );
    if !hashes_only {
        let inputs = inputs(&TINY_TOKENS);
        check_on_device(dev, &inputs)?;
        println!(
            "{:<8} {:>6} {:>7} {:>8} {:>8} {:>12}",
            "shape", "tokens", "BLOCK_M", "launches", "slots", "emu ms/call"
        );
        for case in cases(&inputs) {
            // The same boxed build the GPU runner measures, so its closure is exercised too.
            let work = (case.build)(dev)?;
            let mut ms = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                work.enqueue()?;
                dev.synchronize().map_err(|e| e.to_string())?;
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            ms.sort_by(f64::total_cmp);
            let i = inputs
                .iter()
                .find(|i| i.shape == case.shape && i.tokens == case.rows)
                .expect("a case per input");
            println!(
                "{:<8} {:>6} {:>7} {:>8} {:>8} {:>12.2}",
                i.shape,
                i.tokens,
                i.block_m,
                i.launches(),
                i.want.num_tokens_post_padded,
                ms[1]
            );
        }
    }
    let mut rows = hash_inputs(&[1, 300])
        .iter()
        .map(|i| determinism(dev, i, 3))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(p) = peer_hashes {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let inputs = hash_inputs(&HASH_TOKENS);
        rows.extend(peer_hash_rows(&text, &p.display().to_string(), &inputs)?);
    }
    for r in &rows {
        println!("{}", r.to_csv());
    }
    finish_hashes(&rows)?;
    println!("bench ch03 --quick: the GPU path ran on the emulator and matches align_reference, one hash per size");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// What padding costs.

/// The padding table's token counts: the powers of two from 1 to 8192, and 1.5 times each from
/// 2 to 4096 (3, 6, …, 6144).
pub fn pad_tokens() -> Vec<usize> {
    let mut v: Vec<usize> = (0..=13).map(|j| 1usize << j).collect();
    v.extend((0..=11).map(|j| 3usize << j));
    v.sort_unstable();
    v
}

pub const PAD_HEADER: &str = "experts,k,tokens,pairs,block_m,padded_slots,padding_share,chosen";

/// `bench ch03 --padding`: for each E, T and BLOCK_M, the padded slots when the `T·k` pairs
/// spread as evenly as they can over the E experts, the share of them that is padding
/// ([`padding_share`]), and whether the chapter's rule ([`choose_block_m`]) picks that BLOCK_M.
/// Each share is checked against the reference layout of evenly spread ids (pair p on expert
/// `p mod E`): its padded total gives the same share, bit for bit.
pub fn padding_csv() -> Result<String, String> {
    padding_csv_of(&PAD_EXPERTS, &pad_tokens())
}

fn padding_csv_of(experts: &[usize], tokens: &[usize]) -> Result<String, String> {
    let mut s = format!("{PAD_HEADER}\n");
    for &e in experts {
        for &t in tokens {
            let p = t * K;
            let ids: Vec<i64> = (0..p).map(|q| (q % e) as i64).collect();
            let rule = choose_block_m(p, e);
            if !PAD_BLOCK_M.contains(&rule) {
                return Err(format!(
                    "the rule picks BLOCK_M {rule} at {e} experts, {t} tokens: not in the table"
                ));
            }
            for bm in PAD_BLOCK_M {
                let share = padding_share(p, e, bm);
                let padded = align_reference(&ids, e, bm).num_tokens_post_padded as usize;
                let from_layout = 1.0 - p as f64 / padded as f64;
                if from_layout.to_bits() != share.to_bits() {
                    return Err(format!(
                        "{e} experts, {t} tokens, BLOCK_M {bm}: padding_share {share} but the reference layout pads {p} pairs to {padded} slots ({from_layout})"
                    ));
                }
                s += &format!(
                    "{e},{K},{t},{p},{bm},{padded},{share:.6},{}\n",
                    u8::from(bm == rule)
                );
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{peer_rows, Ceilings};

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(0, b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(crc32(0, b"1234"), b"56789"), 0xCBF4_3926);
        assert_eq!(crc32(0, b""), 0);
    }

    #[test]
    fn the_ids_file_reads_back_with_candle() {
        let inputs = inputs(&TINY_TOKENS);
        let bytes = ids_file(&inputs);
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        for want in [
            r#""tokens":"1,16,300""#,
            r#""experts":"128,288""#,
            r#""block_m.e128":"16,16,16""#,
            r#""block_m.e288":"16,16,16""#,
            r#""hash_tokens":"1,64,4096,16384""#,
            r#""hash_runs":"1000""#,
        ] {
            assert!(header.contains(want), "{want} in {header}");
        }
        let back =
            candle_core::safetensors::load_buffer(&bytes, &candle_core::Device::Cpu).unwrap();
        assert_eq!(back.len(), 4 * inputs.len());
        for i in &inputs {
            let get = |name: &str| {
                let t = &back[&format!("{name}.e{}.{}", i.experts, i.tokens)];
                t.flatten_all().unwrap().to_vec1::<i32>().unwrap()
            };
            assert_eq!(
                back[&format!("ids.e{}.{}", i.experts, i.tokens)].dims(),
                &[i.tokens, K]
            );
            assert_eq!(get("ids"), i.ids32());
            assert_eq!(get("sorted_ids"), i.want.sorted_ids);
            assert_eq!(get("expert_ids"), i.want.expert_ids);
            assert_eq!(
                get("num_tokens_post_padded"),
                [i.want.num_tokens_post_padded]
            );
        }
    }

    #[test]
    fn the_measured_inputs() {
        // Every determinism size is a measured case, so the peer finds it in the ids file.
        for t in HASH_TOKENS {
            assert!(TOKENS.contains(&t));
        }
        assert!(SHAPES.iter().any(|s| s.1 == HASH_EXPERTS));
        let a = input("e128_k8", 128, 64);
        assert_eq!(a.ids, input("e128_k8", 128, 64).ids, "fixed");
        assert_eq!((a.pairs(), a.block_m, a.launches()), (512, 16, 1));
        // The rule at the measured sizes: 16384 tokens over 128 experts is 1024 pairs each:
        // tiles of 128; 4096 over 288 is 113 each: tiles of 64, and two launches.
        assert_eq!(input("e128_k8", 128, 16384).block_m, 128);
        let prefill = input("e288_k8", 288, 4096);
        assert_eq!((prefill.block_m, prefill.launches()), (64, 2));
        // One token touches 8 experts: 8 tiles of 16, 8 pairs and 120 placeholders.
        let one = input("e288_k8", 288, 1);
        assert_eq!(one.want.num_tokens_post_padded, 128);
        assert_eq!(one.bytes(), (4 * (8 + 8 * 16 + 8 + 1)) as f64);
        let layout = layout_csv(&[one]);
        assert_eq!(
            layout.lines().nth(1).unwrap(),
            "e288_k8,288,1,8,8,16,128,8,8,128,8"
        );
    }

    #[test]
    fn the_gpu_path_runs_on_the_emulator() {
        emu_smoke(Device::emu(), false, None).unwrap();
    }

    #[test]
    fn a_wrong_output_is_named() {
        let a = input("e128_k8", 128, 8).want;
        assert_eq!(first_difference(&a, &a), None);
        let mut b = a.clone();
        b.sorted_ids[3] += 1;
        let d = first_difference(&b, &a).unwrap();
        assert!(d.starts_with("sorted_ids[3] is"), "{d}");
        assert!(d.contains("(1 of"), "{d}");
        let mut c = a.clone();
        c.num_tokens_post_padded = 0;
        assert!(first_difference(&c, &a)
            .unwrap()
            .contains("num_tokens_post_padded"));
        assert_ne!(output_hash(&a), output_hash(&b));
    }

    #[test]
    fn hashes_pass_only_when_one_and_the_references() {
        let inputs = hash_inputs(&[1, 64]);
        let r = |i: &Input| format!("{:08x}", output_hash(&i.want));
        let text = format!(
            "{HASH_HEADER}\n\
             torch_align,288,1,8,16,8,1000,1,1000,{a},{a},NVIDIA_H200\n\
             torch_align,288,64,8,16,512,1000,2,999,{b},{b},NVIDIA_H200\n",
            a = r(&inputs[0]),
            b = r(&inputs[1])
        );
        let rows = peer_hash_rows(&text, "h.csv", &inputs).unwrap();
        assert!(rows[0].ok() && !rows[1].ok());
        assert_eq!(rows[0].to_csv(), text.lines().nth(1).unwrap());
        let e = finish_hashes(&rows).unwrap_err();
        assert!(
            e.contains("torch_align at E = 288, T = 64: 2 distinct hashes"),
            "{e}"
        );
        assert!(!e.contains("T = 1:"), "{e}");
        let wrong = text.replace(",288,1,8,16,", ",288,1,8,32,");
        assert!(peer_hash_rows(&wrong, "h.csv", &inputs)
            .unwrap_err()
            .contains("BLOCK_M 32"));
        let elsewhere = text.replace(",288,64,", ",288,65,");
        assert!(peer_hash_rows(&elsewhere, "h.csv", &inputs)
            .unwrap_err()
            .contains("not a size measured here"));
    }

    #[test]
    fn padding_shares_are_exact_and_the_rule_is_marked() {
        let text = padding_csv_of(&[8, 128], &[1, 2, 64, 512]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], PAD_HEADER);
        assert_eq!(lines.len(), 1 + 2 * 4 * 4);
        // One token over 128 experts: 8 pairs, 8 tiles of 16 = 128 slots, 120 of them padding.
        assert!(lines.contains(&"128,8,1,8,16,128,0.937500,1"), "{text}");
        assert!(lines.contains(&"128,8,1,8,128,1024,0.992188,0"), "{text}");
        // 512 tokens over 8 experts: 512 pairs each, every tile full; the rule takes 128.
        assert!(
            lines.contains(&"8,8,512,4096,128,4096,0.000000,1"),
            "{text}"
        );
        // Exactly one BLOCK_M chosen per (E, T).
        let chosen = lines[1..].iter().filter(|l| l.ends_with(",1")).count();
        assert_eq!(chosen, 2 * 4);
        let t = pad_tokens();
        assert_eq!((t[0], t[t.len() - 1], t.len()), (1, 8192, 26));
    }

    #[test]
    fn peers_get_the_floor_of_our_case() {
        let inputs = inputs(&TINY_TOKENS);
        let cases = cases(&inputs);
        let ceilings = Ceilings {
            launch_us: 4.0,
            copy_gbs: 4000.0,
            bf16_tflops: 600.0,
        };
        let text = "chapter,shape,impl,rows,launches,device,cold_us,warm_us\n\
                    ch03,e288_k8,torch_align,16,21,H200,30 10 20,5 6\n";
        let rows = peer_rows(text, "s.csv", &cases, &ceilings).unwrap();
        let ours = inputs
            .iter()
            .find(|i| i.shape == "e288_k8" && i.tokens == 16)
            .unwrap();
        assert_eq!(rows[0].floor_us, ceilings.floor_us(ours.bytes(), 0.0));
        assert_eq!((rows[0].cold_median_us, rows[0].launches), (20.0, 21));
        // The summary of the targets from such rows.
        let mut all = vec![BenchRow {
            chapter: "ch03".into(),
            shape: "none".into(),
            imp: "empty_kernel".into(),
            rows: 0,
            launches: 1,
            cold_median_us: 4.0,
            cold_p10_us: 4.0,
            cold_p90_us: 4.0,
            warm_median_us: 0.6,
            warm_p10_us: 0.6,
            warm_p90_us: 0.6,
            floor_us: 4.0,
            bytes: 0.0,
            flops: 0.0,
            cold_gbs: 0.0,
            cold_tflops: 0.0,
            samples: 3,
            device: "H200".into(),
        }];
        let mut ours_row = rows[0].clone();
        (
            ours_row.imp,
            ours_row.cold_median_us,
            ours_row.warm_median_us,
            ours_row.launches,
        ) = ("align".into(), 5.0, 2.0, 1);
        all.push(ours_row);
        all.extend(rows);
        let s = against_launch_and_peer(&all, &inputs);
        assert!(s.contains("1.00 /   1.40"), "{s}");
        assert!(s.contains("4.0× / 2.8×"), "{s}");
        assert!(s.contains("worst 1.00 µs: met"), "{s}");
        assert!(s.contains("worst 4.0×: MISSED"), "{s}");
    }
}
