//! Chapter 1: reference routers.
//!
//! A router turns `[T, E]` fp32 logits (and, for DeepSeek-V3-style models, an `[E]` selection
//! bias) into `k` expert ids and `k` weights per token. This crate defines the [`Router`] trait
//! every later chapter implements, the f64 [`LiteralRouter`] that is the oracle of the whole
//! book, the f32 [`ReferenceRouter`] that computes the way engines do, the cut and its gap, the
//! router article's toy example, and the one list of named input regimes.
//!
//! Rules every router follows:
//! - rank key = score + bias; the key selects, the unbiased score becomes the weight;
//! - k rounds of argmax, ties to the lowest expert id, ids in selection order;
//! - renormalised weights are `s / (Σ s + 1e-20)`, then × `routed_scaling`;
//! - a NaN or ±∞ logit has score 0 and rank key −∞, and softmax runs over finite logits only;
//! - `T = 0` returns an empty routing; `E = 0` is [`RouterError::NoExperts`].

pub mod chain;
pub mod compare;
pub mod config;
pub mod conformance;
pub mod cut;
pub mod device_router;
pub mod error;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod inputs;
pub mod io;
pub mod literal;
pub mod reference;
pub mod regimes;
pub mod routing;
pub mod toy;

pub use config::{Grouping, RouterConfig, Scoring};
pub use cut::{cut_of, Cut};
pub use error::RouterError;
pub use literal::{LiteralRouter, RowDetail};
pub use reference::ReferenceRouter;
pub use routing::{Router, Routing};
