//! The chapter's main, as a library: `examples/ch07/` parses the command line and calls [`run`].
//!
//! Without a checkpoint it runs the committed fixtures (`tools/fixtures/ch07-hf/`): each tiny
//! model generates 32 greedy tokens from each of its three prompts, once with every MoE layer in
//! f32 (chapter 2's grouped layer on the device), where the tokens must be transformers', and
//! once with chapter 6's assembled layer in bf16, where the run says how many tokens follow
//! transformers' before the first difference. With `--checkpoint` it loads a reader's model and
//! prints each token as it comes, with the time of the pass that produced it.
//!
//! stdout is the same on every backend except what is measured, printed in `⟨ ⟩`: times, and the
//! bf16 path's agreement (the tensor cores and the emulator sum in other orders).

use crate::error::ModelError;
use crate::fixtures::{fixture_dir, Greedy, FIXTURES};
use crate::load::load;
use crate::model::{Model, Step};
use crate::{parse_model_config, ModelWeights};
use ch02_grouped::checkpoint::read_config;
use ch02_grouped::Dtype;
use moe_kernels::Device;
use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

type Out<'a> = &'a mut dyn Write;

/// Why the example failed.
#[derive(Debug, PartialEq)]
pub enum ExampleError {
    /// The checkpoint, the prompt or the device refused.
    Model(ModelError),
    /// The prompt and `--tokens` together are more positions than the model's
    /// `max_position_embeddings` (`given`: read from `config`; else the family's default).
    TooLong {
        prompt: usize,
        tokens: usize,
        max: usize,
        given: bool,
        config: PathBuf,
    },
    /// The f32 path's tokens are not transformers'.
    Check(String),
    /// stdout could not be written.
    Stdout(String),
}

impl fmt::Display for ExampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExampleError::Model(e) => write!(f, "{e}"),
            ExampleError::TooLong {
                prompt,
                tokens,
                max,
                given,
                config,
            } => {
                let from = if *given {
                    format!("max_position_embeddings in {}", config.display())
                } else {
                    format!(
                        "{} has no max_position_embeddings: this family's default in transformers",
                        config.display()
                    )
                };
                let ids = if *prompt == 1 { "id" } else { "ids" };
                write!(
                    f,
                    "--tokens {tokens} after a prompt of {prompt} {ids} (--prompt-ids) makes {} \
                     positions, more than the model's {max} ({from}): ",
                    prompt.saturating_add(*tokens)
                )?;
                if prompt < max {
                    write!(f, "ask for at most --tokens {}", max - prompt)
                } else {
                    write!(f, "give a prompt of at most {} ids", max - 1)
                }
            }
            ExampleError::Check(m) => write!(f, "{m}"),
            ExampleError::Stdout(m) => write!(f, "cannot write stdout: {m}"),
        }
    }
}

impl std::error::Error for ExampleError {}

impl From<ModelError> for ExampleError {
    fn from(e: ModelError) -> Self {
        ExampleError::Model(e)
    }
}

fn w(out: Out, s: fmt::Arguments) -> Result<(), ExampleError> {
    out.write_fmt(s)
        .and_then(|_| out.flush())
        .map_err(|e| ExampleError::Stdout(e.to_string()))
}

macro_rules! say {
    ($out:expr, $($t:tt)*) => { w($out, format_args!("{}\n", format_args!($($t)*)))? };
}

/// What a `--checkpoint` run reads and does.
#[derive(Clone, Debug)]
pub struct GenerateRun {
    pub dir: PathBuf,
    pub prompt: Vec<u32>,
    /// How many tokens to generate.
    pub tokens: usize,
    /// The MoE layers' compute type: bf16 (chapter 6's layer) or f32 (chapter 2's, on the device).
    pub dtype: Dtype,
}

/// How many tokens each fixture run generates (transformers generated as many).
pub const FIXTURE_TOKENS: usize = 32;

/// Runs the example: the fixtures, or (with `run`) a reader's checkpoint.
pub fn run(
    opts: Option<&GenerateRun>,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    match opts {
        Some(opts) => run_checkpoint(opts, device, out),
        None => fixtures(device, out),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}

/// `Qwen3-MoE: 3 layers (dense 0, MoE 1 2), …`: what was loaded.
pub fn describe(w: &ModelWeights) -> String {
    let c = &w.config;
    let moe = w.moe_layers();
    let dense: Vec<String> = (0..c.layers)
        .filter(|l| !moe.contains(l))
        .map(|l| l.to_string())
        .collect();
    let moe: Vec<String> = moe.iter().map(|l| l.to_string()).collect();
    let m = &c.moe.config;
    format!(
        "{}: {} layers (dense: {}; MoE: {}), vocabulary {}, hidden {}, {} query heads over {} KV \
         heads of {} (rotary on {}), {} experts of {}, k {}{}",
        c.family(),
        c.layers,
        if dense.is_empty() {
            "none".into()
        } else {
            dense.join(" ")
        },
        if moe.is_empty() {
            "none".into()
        } else {
            moe.join(" ")
        },
        c.vocab,
        c.hidden,
        c.heads,
        c.kv_heads,
        c.head_dim,
        c.rotary_dim,
        m.experts,
        m.intermediate,
        m.router.k,
        match m.shared {
            Some(s) => format!(", a shared expert of {}", s.intermediate),
            None => String::new(),
        }
    )
}

/// Which MoE layer a compute type runs.
pub fn path_text(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "every MoE layer in f32 (chapter 2's grouped layer on the device)",
        Dtype::Bf16 => "every MoE layer in bf16 (chapter 6's assembled layer on the device)",
    }
}

// ANCHOR: fixtures
fn fixtures(device: &'static Device, out: Out) -> Result<(), ExampleError> {
    say!(out, "Chapter 7: a whole model on our MoE layer");
    for name in FIXTURES {
        let fx = Greedy::read(&fixture_dir(name))?;
        let weights = load(&fx.model, false)?;
        say!(out, "");
        say!(out, "== {name}: {}", describe(&weights));
        for dtype in [Dtype::F32, Dtype::Bf16] {
            let model = Model::new(device, weights.clone(), dtype)?;
            say!(out, "{}:", path_text(dtype));
            let mut times = Vec::new();
            // The first prompt's logits against transformers', at the worst step.
            let mut logit_error = 0f32;
            let v = weights.config.vocab;
            for (i, (prompt, want)) in fx.prompts.iter().zip(&fx.tokens).enumerate() {
                let mut step = 0;
                let got = model.generate(prompt, FIXTURE_TOKENS, |s: &Step| {
                    times.push(s.took);
                    if let Some(hf) = fx.logits.get(step * v..(step + 1) * v).filter(|_| i == 0) {
                        logit_error = s
                            .logits
                            .iter()
                            .zip(hf)
                            .fold(logit_error, |m, (a, b)| m.max((a - b).abs()));
                    }
                    step += 1;
                    Ok::<(), ExampleError>(())
                })?;
                let same = got.iter().zip(want).take_while(|(a, b)| a == b).count();
                match dtype {
                    Dtype::F32 if same == want.len() => say!(
                        out,
                        "  prompt {} [{}]: {} = transformers'",
                        i + 1,
                        list(prompt),
                        list(&got)
                    ),
                    Dtype::F32 => {
                        return Err(ExampleError::Check(format!(
                            "{name}, prompt {}: token {} is {}, transformers' is {} (ours: {}; \
                             transformers': {})",
                            i + 1,
                            same + 1,
                            got[same],
                            want[same],
                            list(&got),
                            list(want)
                        )))
                    }
                    Dtype::Bf16 => say!(
                        out,
                        "  prompt {}: the first ⟨{same}⟩ of {} tokens as transformers'",
                        i + 1,
                        want.len()
                    ),
                }
            }
            // The first token of each prompt comes from the prefill; the rest one pass each.
            let decode: Vec<Duration> = times
                .iter()
                .enumerate()
                .filter(|(i, _)| i % FIXTURE_TOKENS != 0)
                .map(|(_, &t)| t)
                .collect();
            let mean = decode.iter().sum::<Duration>() / decode.len().max(1) as u32;
            say!(
                out,
                "  prompt 1's logits against transformers': ⟨{logit_error:.1e}⟩ apart at the worst \
                 (the closest greedy choice of the fixture: {:.1e} between the best two)",
                fx.min_logit_gap
            );
            say!(out, "  one token: ⟨{}⟩ ms on average", ms(mean));
        }
    }
    Ok(())
}
// ANCHOR_END: fixtures

fn run_checkpoint(
    opts: &GenerateRun,
    device: &'static Device,
    out: Out,
) -> Result<(), ExampleError> {
    if opts.prompt.is_empty() {
        return Err(ModelError::EmptyPrompt.into());
    }
    // The config alone (no tensor read yet) says whether the request fits the model.
    let config = parse_model_config(&read_config(&opts.dir).map_err(ModelError::from)?)?;
    let vocab = config.vocab;
    if let Some(&token) = opts.prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(ModelError::Token { token, vocab }.into());
    }
    if opts.prompt.len().saturating_add(opts.tokens) > config.max_positions {
        return Err(ExampleError::TooLong {
            prompt: opts.prompt.len(),
            tokens: opts.tokens,
            max: config.max_positions,
            given: config.max_positions_given,
            config: opts.dir.join("config.json"),
        });
    }
    let weights = load(&opts.dir, true)?;
    say!(out, "{}: {}", opts.dir.display(), describe(&weights));
    let model = Model::new(device, weights, opts.dtype)?;
    say!(out, "{}", path_text(opts.dtype));
    say!(out, "prompt: {}", list(&opts.prompt));
    let mut n = 0;
    let mut decode = Duration::ZERO;
    let tokens = model.generate(&opts.prompt, opts.tokens, |s: &Step| {
        n += 1;
        let what = if n == 1 {
            "the prompt's pass"
        } else {
            "one pass"
        };
        if n > 1 {
            decode += s.took;
        }
        say!(
            out,
            "token {n}: {} (⟨{}⟩ ms, {what}; gap to the runner-up ⟨{:.2e}⟩)",
            s.token,
            ms(s.took),
            s.gap
        );
        Ok::<(), ExampleError>(())
    })?;
    say!(out, "generated: {}", list(&tokens));
    if tokens.len() > 1 {
        say!(
            out,
            "one token: ⟨{}⟩ ms on average after the prompt's pass",
            ms(decode / (tokens.len() - 1) as u32)
        );
    }
    Ok(())
}
