//! Expert parallelism: every rank holds a contiguous run of E/R experts and its own tokens. The
//! router is whole on every rank (the same bits everywhere); each token's pairs travel to the
//! ranks that hold their experts (an all-to-all), each rank runs chapter 4's experts on what it
//! received, the weighted results travel back (a second all-to-all), and the token's home rank
//! sums its k results in slot order, then adds the shared expert, which every rank holds whole.
//!
//! | step | where | what |
//! |---|---|---|
//! | route | home rank | chapter 5's router on chapter 6's bf16 input: ids, weights `[T, k]` |
//! | plan | home rank, host | the routing downloaded: each pair's destination and send position ([`DispatchPlan`]) |
//! | counts | all ranks | [`Communicator::exchange_counts`]: how many pairs each rank receives from each |
//! | gather | home rank | `ch12_gather_rows`: a bf16 row per pair, grouped by destination |
//! | dispatch | all ranks | three all-to-alls: the rows, the local expert ids, the weights |
//! | experts | expert's rank | chapter 4 on the received pairs, each a token of k = 1 |
//! | return | all ranks | one all-to-all of the weighted outputs `[P, H]` f32, back where they came from |
//! | shared | home rank | chapter 4's shared expert ([`crate::shard::shared_only`]) |
//! | combine | home rank | `ch12_combine`: Σⱼ in slot order, then + shared |
//!
//! Against chapter 6's layer on one GPU with the same tile configuration and path on both, the
//! output is the same bits: the router is the same kernel on the same rows; each pair's weighted
//! output is chapter 4's arithmetic for that pair, which does not depend on the other pairs a
//! tile holds (nor on BLOCK_M, nor on which rank runs it); the combine adds the same values in
//! the same order as chapter 4's `fused_combine`. With each side free to choose its own path the
//! bits can differ (the tiled and decode paths sum a dot product in different orders), within
//! chapter 4's [`ch04_fused_moe::ACROSS_SUM_ORDERS`].

use crate::comm::Communicator;
use crate::dispatch::DispatchPlan;
use crate::error::{check_rank, ParallelError};
use crate::kernels::{combine, gather_rows, KERNELS};
use crate::shard::{expert_range, expert_subset, shared_only};
use ch01_router::chain::RouterOutputs;
use ch01_router::chain::{download, DeviceMatrix, DeviceRouter, GateInputs};
use ch01_router::Routing;
use ch02_grouped::error::expect_len;
use ch02_grouped::layer::{rows_of, LayerOutput};
use ch02_grouped::{Dtype, MoeConfig, MoeError, MoeWeights};
use ch04_fused_moe::device::Hidden;
use ch04_fused_moe::{FusedDevice, FusedWorkspace};
use ch05_fused_router::LogitsFrom;
use half::bf16;
use moe_kernels::{Device, DeviceBuffer, Module};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// Checks that `comm` is rank `rank` of a world of `world`.
pub(crate) fn check_comm(
    rank: usize,
    world: usize,
    comm: &impl Communicator,
) -> Result<(), ParallelError> {
    if comm.world() != world {
        return Err(ParallelError::WorldMismatch {
            what: "world size",
            layer: world,
            communicator: comm.world(),
        });
    }
    if comm.rank() != rank {
        return Err(ParallelError::WorldMismatch {
            what: "rank",
            layer: rank,
            communicator: comm.rank(),
        });
    }
    Ok(())
}

/// What one expert-parallel call did, beside the output.
#[derive(Clone, Debug, PartialEq)]
pub struct EpOutput {
    /// The home rank's routing and output.
    pub layer: LayerOutput,
    /// `[world]` pairs this rank sent to each rank (itself included).
    pub sent: Vec<usize>,
    /// `[world]` pairs this rank received from each rank, and ran.
    pub received: Vec<usize>,
}

/// One rank of an expert-parallel layer.
pub struct ExpertParallel {
    device: &'static Device,
    rank: usize,
    world: usize,
    config: MoeConfig,
    experts: Range<usize>,
    module: Arc<Module>,
    /// `[E, H]` bf16, whole on every rank.
    gate: DeviceBuffer<bf16>,
    /// `[E]` f32
    bias: Option<DeviceBuffer<f32>>,
    bias_host: Option<Vec<f32>>,
    logits: Option<LogitsFrom>,
    /// This rank's experts, k = 1.
    local: FusedDevice,
    /// The shared expert, whole ([`shared_only`]).
    shared: Option<FusedDevice>,
    /// Chapter 4's workspaces by received pair count (a count depends on the routing).
    workspaces: Mutex<HashMap<usize, FusedWorkspace>>,
}

fn upload_bf16(dev: &Device, v: &[f32]) -> Result<DeviceBuffer<bf16>, MoeError> {
    let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
    Ok(dev.upload(&b)?)
}

impl ExpertParallel {
    /// Rank `rank` of `world`: experts `r·E/R .. (r+1)·E/R` of `weights` ([`expert_range`]),
    /// the router and the shared expert whole. A typed error when E does not split or the rank
    /// is out of range.
    pub fn new(
        device: &'static Device,
        weights: &MoeWeights,
        rank: usize,
        world: usize,
    ) -> Result<Self, ParallelError> {
        check_rank(rank, world)?;
        let c = &weights.config;
        let experts = expert_range(c.experts, rank, world)?;
        weights.validate()?;
        ch05_fused_router::fused::check_limits(&c.router, c.experts, weights.bias.as_deref())
            .map_err(MoeError::from)?;
        let local = FusedDevice::new(
            device,
            &expert_subset(weights, experts.clone()),
            Dtype::Bf16,
        )?;
        let shared = match shared_only(weights) {
            Some(w) => Some(FusedDevice::new(device, &w, Dtype::Bf16)?),
            None => None,
        };
        Ok(ExpertParallel {
            device,
            rank,
            world,
            config: c.clone(),
            experts,
            module: device.load(&KERNELS)?,
            gate: upload_bf16(device, &weights.gate)?,
            bias: match &weights.bias {
                Some(b) => Some(device.upload(b)?),
                None => None,
            },
            bias_host: weights.bias.clone(),
            logits: None,
            local,
            shared,
            workspaces: Mutex::new(HashMap::new()),
        })
    }

    /// A rank whose experts are made on the device (chapter 4's `patterned_on_device`, seed
    /// `seed + rank`) with chapter 4's router gate for `config` and `bias`: the bench's
    /// production shapes, too big to cut on the host. No shared expert (the bench's shapes have
    /// none; a config with one is refused).
    pub fn patterned_on_device(
        device: &'static Device,
        config: &MoeConfig,
        seed: u64,
        bias: Option<&[f32]>,
        rank: usize,
        world: usize,
    ) -> Result<Self, ParallelError> {
        check_rank(rank, world)?;
        let experts = expert_range(config.experts, rank, world)?;
        if config.shared.is_some() {
            return Err(MoeError::Config {
                field: "shared expert",
                expected: "none in a layer made on the device (cut a host layer instead)".into(),
                found: "one".into(),
            }
            .into());
        }
        config.validate(bias)?;
        ch05_fused_router::fused::check_limits(&config.router, config.experts, bias)
            .map_err(MoeError::from)?;
        let local_config = MoeConfig {
            experts: experts.len(),
            router: ch01_router::RouterConfig::qwen3(1),
            shared: None,
            ..config.clone()
        };
        let local = FusedDevice::patterned_on_device(device, &local_config, seed + rank as u64)?;
        let gate = ch04_fused_moe::fill::router_gate(config, seed);
        Ok(ExpertParallel {
            device,
            rank,
            world,
            config: config.clone(),
            experts,
            module: device.load(&KERNELS)?,
            gate: upload_bf16(device, &gate)?,
            bias: match bias {
                Some(b) => Some(device.upload(b)?),
                None => None,
            },
            bias_host: bias.map(<[f32]>::to_vec),
            logits: None,
            local,
            shared: None,
            workspaces: Mutex::new(HashMap::new()),
        })
    }

    // ANCHOR: map_experts
    /// The same rank with chapter 4's layers (its experts', the shared expert's) changed by `f`:
    /// a path and a tile configuration, to match a one-GPU layer made with the same `f`.
    pub fn map_experts(
        mut self,
        f: impl Fn(FusedDevice) -> Result<FusedDevice, MoeError>,
    ) -> Result<Self, ParallelError> {
        self.local = f(self.local)?;
        self.shared = self.shared.map(&f).transpose()?;
        self.workspaces = Mutex::new(HashMap::new());
        Ok(self)
    }
    // ANCHOR_END: map_experts

    /// The same rank with its logits from `from` at every batch size (chapter 6's
    /// `with_logits`), instead of chapter 6's switch.
    pub fn with_logits(mut self, from: LogitsFrom) -> Self {
        self.logits = Some(from);
        self
    }

    /// The experts this rank holds.
    pub fn experts(&self) -> Range<usize> {
        self.experts.clone()
    }

    pub fn config(&self) -> &MoeConfig {
        &self.config
    }

    /// The router on this rank's `hidden` `[T, H]` bf16: ids and weights `[T, k]` on the
    /// device, with chapter 6's choice of logits GEMM for T rows.
    fn enqueue_router(
        &self,
        rows: usize,
        x: &DeviceBuffer<bf16>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
    ) -> Result<(), ParallelError> {
        let c = &self.config;
        let from = self
            .logits
            .unwrap_or_else(|| ch06_layer::logits_for(rows, c.hidden, c.experts));
        let router =
            ch06_layer::router_for(self.device, c, rows, self.bias_host.as_deref(), from, None)?;
        router
            .enqueue(
                &GateInputs {
                    hidden: DeviceMatrix::Bf16(x),
                    weight: DeviceMatrix::Bf16(&self.gate),
                    bias: self.bias.as_ref(),
                },
                &RouterOutputs { ids, weights },
            )
            .map_err(MoeError::from)?;
        Ok(())
    }

    /// The routing of `hidden` `[T, H]` f32 (rounded to bf16), as [`Self::forward`] computes it;
    /// no communication.
    pub fn route(&self, hidden: &[f32]) -> Result<Routing, ParallelError> {
        let rows = rows_of(&self.config, hidden)?;
        self.route_on(rows, &upload_bf16(self.device, hidden)?)
    }

    /// Runs this rank's experts on `n` received pairs: `y [n, H]` f32, each row one pair's
    /// weighted output.
    fn run_experts(
        &self,
        x: &DeviceBuffer<bf16>,
        ids: &DeviceBuffer<i32>,
        weights: &DeviceBuffer<f32>,
        y: &DeviceBuffer<f32>,
    ) -> Result<(), ParallelError> {
        let n = ids.len();
        if n == 0 {
            return Ok(());
        }
        let mut cache = self.workspaces.lock().unwrap_or_else(|e| e.into_inner());
        let ws = match cache.entry(n) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(self.local.workspace(n)?),
        };
        self.local
            .enqueue_experts_from(ws, Hidden::Bf16(x), ids, weights, y)?;
        Ok(())
    }

    /// The shared expert on the home rank's `rows` tokens: `s [T, H]` f32, or None without one.
    fn run_shared(
        &self,
        rows: usize,
        x: &DeviceBuffer<bf16>,
    ) -> Result<Option<DeviceBuffer<f32>>, ParallelError> {
        let (Some(shared), true) = (&self.shared, rows > 0) else {
            return Ok(None);
        };
        let dev = self.device;
        let ws = shared.workspace(rows)?;
        let (ids, w) = (dev.zeros::<i32>(rows)?, dev.zeros::<f32>(rows)?);
        let s = dev.alloc::<f32>(rows * self.config.hidden)?;
        shared.enqueue_experts_from(&ws, Hidden::Bf16(x), &ids, &w, &s)?;
        Ok(Some(s))
    }

    // ANCHOR: ep_forward
    /// The layer on this rank's `rows` tokens `x` `[T, H]` bf16 on the device, into `out`
    /// `[T, H]` f32 (T may differ between ranks, and be 0). Every rank of the group must call it
    /// together: the ranks' pairs travel between them. Returns the routing and the pairs sent
    /// to and received from each rank.
    pub fn run(
        &self,
        comm: &impl Communicator,
        rows: usize,
        x: &DeviceBuffer<bf16>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(Routing, Vec<usize>, Vec<usize>), ParallelError> {
        check_comm(self.rank, self.world, comm)?;
        let (c, dev) = (&self.config, self.device);
        let (h, k) = (c.hidden, c.router.k);
        expect_len("x [T, H]", x.len(), rows * h)?;
        expect_len("out [T, H]", out.len(), rows * h)?;
        // 1. Route this rank's tokens (the same gate on every rank), and bring the routing to
        //    the host: NCCL's block sizes are host numbers.
        let routing = self.route_on(rows, x)?;
        let plan = DispatchPlan::new(&routing, self.experts.len(), self.world);
        let received = comm.exchange_counts(&plan.counts)?;
        let n_recv: usize = received.iter().sum();
        // 2. Gather one bf16 row per pair, grouped by destination, and send the rows, the
        //    local expert ids and the weights.
        let send_x = dev.alloc::<bf16>(plan.pairs() * h)?;
        gather_rows(&self.module, x, &dev.upload(&plan.rows)?, &send_x, h)?;
        let rows_h = |v: &[usize]| v.iter().map(|n| n * h).collect::<Vec<_>>();
        let mut recv_x = dev.alloc::<bf16>(n_recv * h)?;
        comm.all_to_all(
            &send_x,
            &rows_h(&plan.counts),
            &mut recv_x,
            &rows_h(&received),
        )?;
        let mut recv_ids = dev.alloc::<i32>(n_recv)?;
        comm.all_to_all(
            &dev.upload(&plan.local_ids)?,
            &plan.counts,
            &mut recv_ids,
            &received,
        )?;
        let mut recv_w = dev.alloc::<f32>(n_recv)?;
        comm.all_to_all(
            &dev.upload(&plan.weights)?,
            &plan.counts,
            &mut recv_w,
            &received,
        )?;
        // 3. This rank's experts on every pair it received, each a token of k = 1.
        let y = dev.alloc::<f32>(n_recv * h)?;
        self.run_experts(&recv_x, &recv_ids, &recv_w, &y)?;
        // 4. The results back to the ranks they came from, in the order they were sent.
        let mut back = dev.alloc::<f32>(plan.pairs() * h)?;
        comm.all_to_all(&y, &rows_h(&received), &mut back, &rows_h(&plan.counts))?;
        // 5. The shared expert here, then Σⱼ in slot order + shared.
        let shared = self.run_shared(rows, x)?;
        let at = dev.upload(&plan.at)?;
        combine(&self.module, &back, &at, shared.as_ref(), out, (rows, h, k))?;
        Ok((routing, plan.counts, received))
    }
    // ANCHOR_END: ep_forward

    /// [`Self::run`] from host f32 (rounded to bf16, as chapter 6's `forward`), the output
    /// downloaded.
    pub fn forward(
        &self,
        comm: &impl Communicator,
        hidden: &[f32],
    ) -> Result<EpOutput, ParallelError> {
        check_comm(self.rank, self.world, comm)?;
        let rows = rows_of(&self.config, hidden)?;
        let x = upload_bf16(self.device, hidden)?;
        let out = self.device.alloc::<f32>(hidden.len())?;
        let (routing, sent, received) = self.run(comm, rows, &x, &out)?;
        Ok(EpOutput {
            layer: LayerOutput {
                routing,
                out: out.to_vec()?,
            },
            sent,
            received,
        })
    }

    /// The routing of `rows` tokens already on the device in bf16.
    fn route_on(&self, rows: usize, x: &DeviceBuffer<bf16>) -> Result<Routing, ParallelError> {
        let k = self.config.router.k;
        if rows == 0 {
            return Ok(Routing::empty(k));
        }
        let ids = self.device.alloc::<i32>(rows * k)?;
        let w = self.device.alloc::<f32>(rows * k)?;
        self.enqueue_router(rows, x, &ids, &w)?;
        Ok(download(rows, k, &ids, &w).map_err(MoeError::from)?)
    }
}
