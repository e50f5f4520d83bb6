//! The measurement: rows of synthetic bf16 hidden states through each shape's router in every
//! arithmetic of [`ARITHMETICS`], each compared with the fp64 router on the same inputs. A row
//! *flips* when its selected expert set differs from the fp64 router's.
//!
//! Where the rows come from: chapter 1's deterministic generator (`patterned`, no RNG crate),
//! hidden states uniform in [−1, 1) rounded to bf16, the gate uniform in ±[`gate_scale`] rounded
//! to bf16, so that the logits have a standard deviation of about [`LOGIT_STD`]. These are not
//! a model's hidden states (the router article's rates were measured on captured ones): real
//! hidden states have a few large features and rows that resemble each other, and real gates
//! were trained. What carries over is the mechanism: a rounding error larger than the gap at the
//! cut flips the set.

use crate::hist::LogHist;
use crate::keys::{keys_f32, keys_f64, same_set, select, select_with_gap};
use crate::logits::{bf16, logits_f32_sequential, logits_f32_tiny_gemm, logits_f64, Gate};
use crate::shapes::{gate_scale, Arithmetic, BiasSpread, Shape, Sum, ARITHMETICS, LOGIT_STD};
use ch01_router::inputs::patterned;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Rows generated and summed together; row `i` is the same whatever `--rows` and `--threads`.
pub const CHUNK: usize = 500;

/// The salt of everything generated for shape `s` (`n` tells the tensors apart).
fn salt(shape: &Shape, n: u64) -> u64 {
    let s = crate::shapes::SHAPES
        .iter()
        .position(|x| x.name == shape.name)
        .expect("a shape of SHAPES") as u64;
    100_000 * (s + 1) + n
}

/// The gate weight of `shape`: `[E, H]`, uniform in ±`gate_scale(H)`, rounded to bf16.
pub fn gate_of(shape: &Shape) -> Gate {
    let w = patterned(
        shape.experts * shape.hidden,
        salt(shape, 1),
        gate_scale(shape.hidden),
    );
    Gate::new(&w, shape.hidden, shape.experts)
}

/// Rows `first .. first + n` of `shape`'s hidden states `[n, H]`, uniform in [−1, 1), rounded
/// to bf16; `first` a multiple of [`CHUNK`] and `n` at most one chunk.
pub fn hidden_rows(shape: &Shape, first: usize, n: usize) -> Vec<f32> {
    // `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace's MSRV is 1.85).
    #[allow(clippy::manual_is_multiple_of)]
    let whole = first % CHUNK == 0;
    assert!(whole && n <= CHUNK, "rows {first}.. of one chunk");
    let all = patterned(
        CHUNK * shape.hidden,
        salt(shape, 1000 + (first / CHUNK) as u64),
        1.0,
    );
    all[..n * shape.hidden].iter().map(|&v| bf16(v)).collect()
}

/// The selection bias of `shape` with `spread` (`[E]`, fp32).
pub fn bias_of(shape: &Shape, spread: &BiasSpread) -> Vec<f32> {
    spread.biases(shape.experts, salt(shape, 2))
}

/// One arithmetic's count over the rows of one case.
#[derive(Clone, Debug)]
pub struct ArithTally {
    pub arithmetic: Arithmetic,
    /// Rows whose expert set differs from the fp64 router's.
    pub flips: u64,
    /// `|key − fp64 key|` of every expert of every row.
    pub key_err: LogHist,
    /// Summed over the rows, in units of 2^-32 (an integer sum, so that it does not depend on
    /// which thread summed which rows): the share of the row's weight on experts the fp64 router
    /// did not select ([`weight_outside`]).
    pub weight_outside: u64,
}

/// One shape with one bias spread (or none).
#[derive(Clone, Debug)]
pub struct CaseTally {
    pub spread: Option<BiasSpread>,
    /// `[E]` fp32 biases (empty without a bias).
    pub bias: Vec<f32>,
    /// The fp64 router's gap at the cut of every row.
    pub gaps: LogHist,
    pub arith: Vec<ArithTally>,
    /// Rows whose set differs between the two fp32 summation orders.
    pub orders_differ: u64,
}

/// Everything measured at one shape.
#[derive(Clone, Debug)]
pub struct ShapeTally {
    pub shape: &'static Shape,
    pub rows: u64,
    /// Largest `|fp32 sequential − fp32 tiny GEMM|` over every logit.
    pub max_order_diff: f64,
    /// Largest `|fp32 − fp64|` over every logit, each order.
    pub max_err_sequential: f64,
    pub max_err_tiny: f64,
    pub cases: Vec<CaseTally>,
}

impl ShapeTally {
    fn empty(shape: &'static Shape) -> ShapeTally {
        let spreads: Vec<Option<BiasSpread>> = if shape.spreads.is_empty() {
            vec![None]
        } else {
            shape.spreads.iter().copied().map(Some).collect()
        };
        let cases = spreads
            .into_iter()
            .map(|spread| CaseTally {
                spread,
                bias: spread.map_or(Vec::new(), |s| bias_of(shape, &s)),
                gaps: LogHist::default(),
                arith: ARITHMETICS
                    .iter()
                    .filter(|a| a.applies(spread.is_some()))
                    .map(|&arithmetic| ArithTally {
                        arithmetic,
                        flips: 0,
                        key_err: LogHist::default(),
                        weight_outside: 0,
                    })
                    .collect(),
                orders_differ: 0,
            })
            .collect();
        ShapeTally {
            shape,
            rows: 0,
            max_order_diff: 0.0,
            max_err_sequential: 0.0,
            max_err_tiny: 0.0,
            cases,
        }
    }

    fn merge(&mut self, o: &ShapeTally) {
        self.rows += o.rows;
        self.max_order_diff = self.max_order_diff.max(o.max_order_diff);
        self.max_err_sequential = self.max_err_sequential.max(o.max_err_sequential);
        self.max_err_tiny = self.max_err_tiny.max(o.max_err_tiny);
        for (a, b) in self.cases.iter_mut().zip(&o.cases) {
            a.gaps.merge(&b.gaps);
            a.orders_differ += b.orders_differ;
            for (x, y) in a.arith.iter_mut().zip(&b.arith) {
                x.flips += y.flips;
                x.key_err.merge(&y.key_err);
                x.weight_outside += y.weight_outside;
            }
        }
    }
}

/// The logits of one chunk, every way they are summed.
pub struct ChunkLogits {
    pub f64: Vec<f64>,
    pub sequential: Vec<f32>,
    pub tiny_gemm: Vec<f32>,
}

impl ChunkLogits {
    pub fn new(gate: &Gate, x: &[f32]) -> ChunkLogits {
        ChunkLogits {
            f64: logits_f64(gate, x),
            sequential: logits_f32_sequential(gate, x),
            tiny_gemm: logits_f32_tiny_gemm(gate, x),
        }
    }
}

// ANCHOR: arithmetic_keys
/// Row `r`'s `[E]` fp32 logits in arithmetic `a`: summed in its order, rounded to bf16 if it
/// rounds them.
pub fn arithmetic_logits(
    shape: &Shape,
    a: &Arithmetic,
    logits: &ChunkLogits,
    r: usize,
) -> Vec<f32> {
    let e = shape.experts;
    let summed = match a.sum {
        Sum::Sequential => &logits.sequential[r * e..(r + 1) * e],
        Sum::TinyGemm => &logits.tiny_gemm[r * e..(r + 1) * e],
    };
    if a.bf16_logits {
        summed.iter().map(|&v| bf16(v)).collect()
    } else {
        summed.to_vec()
    }
}

/// Row `r`'s fp32 rank keys in arithmetic `a`, from the chunk's logits and the case's bias.
pub fn arithmetic_keys(
    shape: &Shape,
    a: &Arithmetic,
    logits: &ChunkLogits,
    r: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let row = arithmetic_logits(shape, a, logits, r);
    let rounded: Option<Vec<f32>> = match bias {
        Some(b) if a.bf16_bias => Some(b.iter().map(|&v| bf16(v)).collect()),
        _ => None,
    };
    keys_f32(&(shape.config)(), &row, rounded.as_deref().or(bias))
}

/// The share of a row's routed weight that arithmetic `a` gives to experts outside `want` (the
/// fp64 router's set): its selected scores, in fp32, renormalised over its own selection.
pub fn weight_outside(
    shape: &Shape,
    a: &Arithmetic,
    logits: &ChunkLogits,
    r: usize,
    got: &[u32],
    want: &[u32],
) -> f64 {
    let scores = keys_f32(
        &(shape.config)(),
        &arithmetic_logits(shape, a, logits, r),
        None,
    );
    let (mut outside, mut all) = (0f64, 0f64);
    for &i in got {
        let s = scores[i as usize] as f64;
        all += s;
        if !want.contains(&i) {
            outside += s;
        }
    }
    if all > 0.0 {
        outside / all
    } else {
        0.0
    }
}
// ANCHOR_END: arithmetic_keys

/// Tallies `rows` rows of one chunk into `t`.
fn tally_chunk(t: &mut ShapeTally, logits: &ChunkLogits, rows: usize) {
    let shape = t.shape;
    let config = (shape.config)();
    let e = shape.experts;
    t.rows += rows as u64;
    for i in 0..rows * e {
        let exact = logits.f64[i];
        let (s, q) = (logits.sequential[i] as f64, logits.tiny_gemm[i] as f64);
        t.max_order_diff = t.max_order_diff.max((s - q).abs());
        t.max_err_sequential = t.max_err_sequential.max((s - exact).abs());
        t.max_err_tiny = t.max_err_tiny.max((q - exact).abs());
    }
    for case in &mut t.cases {
        let bias = (!case.bias.is_empty()).then_some(case.bias.as_slice());
        for r in 0..rows {
            // ANCHOR: tally_row
            let reference = keys_f64(&config, &logits.f64[r * e..(r + 1) * e], bias);
            let (want, gap) = select_with_gap(&config, &reference);
            case.gaps.add(gap);
            let mut sets = Vec::with_capacity(case.arith.len());
            for at in &mut case.arith {
                let keys = arithmetic_keys(shape, &at.arithmetic, logits, r, bias);
                let got = select(&config, &keys);
                if !same_set(&got, &want) {
                    at.flips += 1;
                    let w = weight_outside(shape, &at.arithmetic, logits, r, &got, &want);
                    at.weight_outside += (w * WEIGHT_UNIT).round() as u64;
                }
                for (k, x) in keys.iter().zip(&reference) {
                    at.key_err.add(*k as f64 - x);
                }
                sets.push(got);
            }
            // ANCHOR_END: tally_row
            // ARITHMETICS lists the two fp32 orders first.
            if !same_set(&sets[0], &sets[1]) {
                case.orders_differ += 1;
            }
        }
    }
}

/// The unit of [`ArithTally::weight_outside`]: 2^32 per row's whole weight.
pub const WEIGHT_UNIT: f64 = 4_294_967_296.0;

/// How many rows, on how many threads.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub rows: usize,
    pub threads: usize,
}

// ANCHOR: run_shape
/// `opts.rows` rows of `shape`, in chunks of [`CHUNK`] spread over `opts.threads` threads;
/// `progress` is called with the rows of each chunk done. The counts do not depend on the
/// number of threads.
pub fn run_shape(
    shape: &'static Shape,
    opts: Options,
    progress: &(dyn Fn(usize) + Sync),
) -> ShapeTally {
    let gate = gate_of(shape);
    let chunks = opts.rows.div_ceil(CHUNK);
    let next = AtomicUsize::new(0);
    let total = Mutex::new(ShapeTally::empty(shape));
    std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            s.spawn(|| {
                let mut mine = ShapeTally::empty(shape);
                loop {
                    let c = next.fetch_add(1, Ordering::Relaxed);
                    if c >= chunks {
                        break;
                    }
                    let first = c * CHUNK;
                    let n = CHUNK.min(opts.rows - first);
                    let x = hidden_rows(shape, first, n);
                    let logits = ChunkLogits::new(&gate, &x);
                    tally_chunk(&mut mine, &logits, n);
                    progress(n);
                }
                total.lock().unwrap().merge(&mine);
            });
        }
    });
    total.into_inner().unwrap()
}
// ANCHOR_END: run_shape

/// Distinct values among `v` once rounded to bf16.
pub fn distinct_bf16(v: &[f32]) -> usize {
    let mut bits: Vec<u16> = v
        .iter()
        .map(|&x| half::bf16::from_f32(x).to_bits())
        .collect();
    bits.sort_unstable();
    bits.dedup();
    bits.len()
}

/// A value for a CSV: 3 significant digits in scientific notation, `0` for zero.
pub fn sci(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else {
        format!("{v:.2e}")
    }
}

/// The name of a case's bias in the CSVs: the spread's, or `none`.
fn bias_name(c: &CaseTally) -> &'static str {
    c.spread.map_or("none", |s| s.name)
}

// ANCHOR: csvs
/// `ch10_flips.csv`: per shape, bias and arithmetic, the rows, the flips, the median rank-key
/// error, and the mean share of a row's weight on experts the fp64 router did not select.
pub fn flips_csv(tallies: &[ShapeTally]) -> String {
    let mut s = String::from("shape,bias,arithmetic,rows,flips,key_err_median,weight_outside\n");
    for t in tallies {
        for c in &t.cases {
            for a in &c.arith {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{}",
                    t.shape.name,
                    bias_name(c),
                    a.arithmetic.name,
                    t.rows,
                    a.flips,
                    sci(a.key_err.median().unwrap_or(f64::NAN)),
                    sci(a.weight_outside as f64 / WEIGHT_UNIT / t.rows as f64)
                );
            }
        }
    }
    s
}
// ANCHOR_END: csvs

/// `ch10_cases.csv`: per shape and bias, the sizes, the bias range and how many distinct bf16
/// values it keeps, the median gap at the cut, and the two fp32 orders against each other and
/// against fp64.
pub fn cases_csv(tallies: &[ShapeTally]) -> String {
    let mut s = String::from(
        "shape,hidden,experts,k,bias,bias_lo,bias_hi,bias_distinct_bf16,rows,gap_median,\
         orders_sets_differ,max_logit_diff_orders,max_logit_err_sequential,max_logit_err_tiny,logit_std\n",
    );
    for t in tallies {
        let k = (t.shape.config)().k;
        for c in &t.cases {
            let (lo, hi, distinct) = match c.spread {
                Some(sp) => (
                    sp.lo.to_string(),
                    sp.hi.to_string(),
                    distinct_bf16(&c.bias).to_string(),
                ),
                None => ("".into(), "".into(), "".into()),
            };
            let _ = writeln!(
                s,
                "{},{},{},{k},{},{lo},{hi},{distinct},{},{},{},{},{},{},{LOGIT_STD}",
                t.shape.name,
                t.shape.hidden,
                t.shape.experts,
                bias_name(c),
                t.rows,
                sci(c.gaps.median().unwrap_or(f64::NAN)),
                c.orders_differ,
                sci(t.max_order_diff),
                sci(t.max_err_sequential),
                sci(t.max_err_tiny),
            );
        }
    }
    s
}

/// The gap histogram's range in the CSV: 10 bins per decade from 10^GAP_LO to 10^GAP_HI; a
/// first line `0,1e-9` counts every smaller gap (and the ties).
pub const GAP_LO: i32 = -9;
pub const GAP_HI: i32 = 1;

/// `ch10_gaps.csv`: the fp64 router's gap at the cut, per shape and bias, in bins of a tenth of
/// a decade (`lo,hi` the bin's edges, `rows` its count).
pub fn gaps_csv(tallies: &[ShapeTally]) -> String {
    let mut s = String::from("shape,bias,lo,hi,rows\n");
    for t in tallies {
        for c in &t.cases {
            let bins = c.gaps.coarse(10);
            let lo = 10f64.powi(GAP_LO);
            let below: u64 = c.gaps.under
                + bins
                    .iter()
                    .filter(|b| b.1 <= lo * 1.0001)
                    .map(|b| b.2)
                    .sum::<u64>();
            let _ = writeln!(s, "{},{},0,1e{GAP_LO},{below}", t.shape.name, bias_name(c));
            let start = ((GAP_LO - crate::hist::LOWEST) * 10) as usize;
            let end = ((GAP_HI - crate::hist::LOWEST) * 10) as usize;
            for (i, b) in bins[start..end].iter().enumerate() {
                let edge = |j: usize| 10f64.powf(GAP_LO as f64 + j as f64 / 10.0);
                let _ = writeln!(
                    s,
                    "{},{},{:.4e},{:.4e},{}",
                    t.shape.name,
                    bias_name(c),
                    edge(i),
                    edge(i + 1),
                    b.2
                );
            }
            assert_eq!(c.gaps.over, 0, "a gap past 10^{GAP_HI}");
        }
    }
    s
}
