//! What is measured: three router shapes (chapter 1's model families at their real sizes), the
//! bias spreads the router article reports for real checkpoints, and the arithmetics compared
//! with the fp64 router. Written once, as data: the generator, the tests, the example and the
//! figures read these lists.

use ch01_router::RouterConfig;

// ANCHOR: shapes
/// One router shape: the model family's router (chapter 1's presets) at the model's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The CSV's name: `glm_h4096_e288_k8`.
    pub name: &'static str,
    /// For a reader: `GLM-like`.
    pub title: &'static str,
    pub hidden: usize,
    pub experts: usize,
    /// Chapter 1's preset for the family.
    pub config: fn() -> RouterConfig,
    /// The bias spreads this shape runs with (none: a softmax router has no bias).
    pub spreads: &'static [BiasSpread],
}

/// The three shapes: GLM-5.3-Flash's router as the router article describes it, Qwen3-30B-A3B's
/// and DeepSeek-V3's (its grouped selection: the best 4 of 8 groups first).
pub const SHAPES: [Shape; 3] = [
    Shape {
        name: "glm_h4096_e288_k8",
        title: "GLM-like",
        hidden: 4096,
        experts: 288,
        config: || RouterConfig::glm5(8),
        spreads: &[GLM53, KIMI_K3],
    },
    Shape {
        name: "qwen3_h2048_e128_k8",
        title: "Qwen3-30B-A3B",
        hidden: 2048,
        experts: 128,
        config: || RouterConfig::qwen3(8),
        spreads: &[],
    },
    Shape {
        name: "deepseek_h7168_e256_k8",
        title: "DeepSeek-V3",
        hidden: 7168,
        experts: 256,
        config: RouterConfig::deepseek_v3,
        spreads: &[GLM53, KIMI_K3],
    },
];
// ANCHOR_END: shapes

// ANCHOR: spreads
/// Where a checkpoint's selection biases lie. Ours are synthetic: `experts` values spread over
/// `[lo, hi]` by chapter 1's generator; only the range is the real checkpoint's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BiasSpread {
    /// The CSV's name: `glm53`.
    pub name: &'static str,
    /// For a reader.
    pub title: &'static str,
    pub lo: f32,
    pub hi: f32,
}

/// GLM-5.3-Flash, layer 24 (the router article, section 2.1): biases between 11.54 and 11.96,
/// where neighbouring bf16 values are 0.0625 apart.
pub const GLM53: BiasSpread = BiasSpread {
    name: "glm53",
    title: "GLM-5.3-Flash's bias range",
    lo: 11.54,
    hi: 11.96,
};

/// Kimi K3 (the same section): biases between −0.76 and 0.15, where neighbouring bf16 values
/// are at most 0.004 apart.
pub const KIMI_K3: BiasSpread = BiasSpread {
    name: "kimi_k3",
    title: "Kimi K3's bias range",
    lo: -0.76,
    hi: 0.15,
};

impl BiasSpread {
    /// `experts` synthetic biases in `[lo, hi]`: chapter 1's `patterned` values in [−1, 1),
    /// mapped onto the range, from `salt`.
    pub fn biases(&self, experts: usize, salt: u64) -> Vec<f32> {
        let (mid, half) = ((self.lo + self.hi) / 2.0, (self.hi - self.lo) / 2.0);
        ch01_router::inputs::patterned(experts, salt, 1.0)
            .iter()
            .map(|u| mid + half * u)
            .collect()
    }
}
// ANCHOR_END: spreads

// ANCHOR: arithmetics
// ANCHOR: arithmetic_type
/// How the logits are summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sum {
    /// fp32, products added one after the other along H (a plain loop; one thread's order).
    Sequential,
    /// fp32 in the order of chapter 5's tiny GEMM on CUDA cores: 256 threads each add their
    /// 16-byte slices in turn, each warp adds its 32 lanes by a xor tree, then the 8 warps'
    /// sums are added in warp order.
    TinyGemm,
}

/// One arithmetic compared with the fp64 router: how the logits are summed, whether they are
/// rounded to bf16 after the sum, and whether the bias is stored in bf16. Scores and rank keys
/// are then computed in fp32, as engines do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arithmetic {
    /// The CSV's name: `bf16_bias`.
    pub name: &'static str,
    pub sum: Sum,
    pub bf16_logits: bool,
    pub bf16_bias: bool,
}
// ANCHOR_END: arithmetic_type

/// The arithmetics, in the order tables list them. A softmax router has no bias: the two with a
/// bf16 bias run only with a bias.
pub const ARITHMETICS: [Arithmetic; 5] = [
    Arithmetic {
        name: "fp32",
        sum: Sum::Sequential,
        bf16_logits: false,
        bf16_bias: false,
    },
    Arithmetic {
        name: "fp32_tiny_gemm",
        sum: Sum::TinyGemm,
        bf16_logits: false,
        bf16_bias: false,
    },
    Arithmetic {
        name: "bf16_logits",
        sum: Sum::Sequential,
        bf16_logits: true,
        bf16_bias: false,
    },
    Arithmetic {
        name: "bf16_bias",
        sum: Sum::Sequential,
        bf16_logits: false,
        bf16_bias: true,
    },
    Arithmetic {
        name: "bf16_both",
        sum: Sum::Sequential,
        bf16_logits: true,
        bf16_bias: true,
    },
];
// ANCHOR_END: arithmetics

impl Arithmetic {
    /// Whether this arithmetic applies to a router with (or without) a bias.
    pub fn applies(&self, has_bias: bool) -> bool {
        has_bias || !self.bf16_bias
    }
}

/// The shape named `name`, if any.
pub fn shape(name: &str) -> Option<&'static Shape> {
    SHAPES.iter().find(|s| s.name == name)
}

/// The standard deviation our synthetic logits are drawn for. Hidden states are uniform in
/// [−1, 1) (standard deviation 1/√3), the gate uniform in ±`gate_scale(h)`: then a logit, a
/// sum of `h` such products, has about this standard deviation.
pub const LOGIT_STD: f32 = 1.0;

/// The gate's range for hidden size `h`: `3 · LOGIT_STD / √h` gives logits of standard
/// deviation `LOGIT_STD` (`√h · (1/√3) · (s/√3) = √h · s / 3`).
pub fn gate_scale(h: usize) -> f32 {
    3.0 * LOGIT_STD / (h as f32).sqrt()
}
