//! What leaves a router, and the trait every router of the book implements.

use candle_core::{DType, Tensor};

use crate::config::RouterConfig;
use crate::error::RouterError;

/// A router's whole output: `k` expert ids and `k` weights per token, nothing else.
///
/// Both arrays are `[rows, k]` row-major, in selection order (best rank key first), so two
/// routers that agree on the selection agree on the layout too.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub rows: usize,
    pub k: usize,
    /// `[rows, k]` expert ids.
    pub ids: Vec<u32>,
    /// `[rows, k]` weights the layer multiplies the experts' outputs by.
    pub weights: Vec<f32>,
}

impl Routing {
    /// The `k` ids of row `r`, best first.
    pub fn row_ids(&self, r: usize) -> &[u32] {
        &self.ids[r * self.k..(r + 1) * self.k]
    }

    /// The `k` weights of row `r`, aligned with [`Routing::row_ids`].
    pub fn row_weights(&self, r: usize) -> &[f32] {
        &self.weights[r * self.k..(r + 1) * self.k]
    }

    /// The routing of an empty batch: valid, with no rows (a decode step may have no tokens for
    /// this rank).
    pub fn empty(k: usize) -> Self {
        Routing {
            rows: 0,
            k,
            ids: Vec::new(),
            weights: Vec::new(),
        }
    }
}

/// The interface later chapters implement (a fused kernel in chapter 5 implements it too), so
/// every router is checked against the same oracle by the same tests.
pub trait Router {
    /// A short name for test messages and tables.
    fn name(&self) -> &str;
    /// Routes `[T, E]` fp32 logits, with an optional `[E]` fp32 selection bias.
    fn route(&self, logits: &Tensor, bias: Option<&Tensor>) -> Result<Routing, RouterError>;
}

/// Checks a router's tensors in the documented order — logits shape, dtypes, then the config
/// against `E` and the bias — and returns `(T, E, bias as a flat [E] vector)`.
///
/// Shared by every [`Router`] so that all of them refuse the same inputs with the same error.
pub fn check_inputs(
    config: &RouterConfig,
    logits: &Tensor,
    bias: Option<&Tensor>,
) -> Result<(usize, usize, Option<Vec<f32>>), RouterError> {
    let dims = logits.dims();
    if dims.len() != 2 {
        return Err(RouterError::LogitsNot2d {
            dims: dims.to_vec(),
        });
    }
    let (rows, experts) = (dims[0], dims[1]);
    if logits.dtype() != DType::F32 {
        return Err(RouterError::WrongDtype {
            what: "logits",
            dtype: format!("{:?}", logits.dtype()),
        });
    }
    let bias = bias.map(bias_vector).transpose()?;
    config.validate(experts, bias.as_deref())?;
    Ok((rows, experts, bias))
}

/// A selection bias tensor as the `[E]` fp32 values a router takes: f32 and one-dimensional, or
/// the error that says which it is not (its length is checked against `E` by the config).
pub fn bias_vector(bias: &Tensor) -> Result<Vec<f32>, RouterError> {
    if bias.dtype() != DType::F32 {
        return Err(RouterError::WrongDtype {
            what: "bias",
            dtype: format!("{:?}", bias.dtype()),
        });
    }
    if bias.rank() != 1 {
        return Err(RouterError::BiasShape {
            dims: bias.dims().to_vec(),
        });
    }
    Ok(bias.to_vec1::<f32>()?)
}
