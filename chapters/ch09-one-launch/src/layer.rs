//! Chapter 6's layer routed by the one launch: the third routing option, beside chapter 6's pair
//! (+ chapter 3's align) and chapter 8's stage.
//!
//! | step | launches |
//! |---|---|
//! | the gate GEMM, the top-k and the layout ([`OneLaunch`]) | 1 |
//! | chapter 4's experts on that layout (no align) | 2 at decode sizes; 3 to 7 tiled |

use crate::router::OneLaunch;
use ch01_router::chain::{download, GateShape};
use ch01_router::Routing;
use ch02_grouped::error::expect_len;
use ch02_grouped::layer::{rows_of, LayerOutput, MoeLayer};
use ch02_grouped::{Dtype, MoeConfig, MoeError};
use ch04_fused_moe::FusedWorkspace;
use ch06_layer::AssembledLayer;
use ch08_routing_stage::layer::{experts_on, forward_bf16, stage_block_m};
use ch08_routing_stage::StageBuffers;
use half::bf16;
use moe_kernels::{Device, DeviceBuffer};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Chapter 6's layer (its weights, gate, bias, chapter 4's experts) routed in one launch.
pub struct OneLaunchLayer {
    layer: AssembledLayer,
    id: u64,
}

/// What one call for a batch of T tokens needs: the router with its scratch and outputs, and
/// chapter 4's workspace.
pub struct OneLaunchWorkspace {
    layer: u64,
    rows: usize,
    router: OneLaunch,
    routing: StageBuffers,
    experts: FusedWorkspace,
}

impl OneLaunchWorkspace {
    /// The batch size it was built for.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// The router of this batch size.
    pub fn router(&self) -> &OneLaunch {
        &self.router
    }
    /// The routing of the last call, downloaded.
    pub fn routing(&self, k: usize) -> Result<Routing, MoeError> {
        if self.rows == 0 {
            return Ok(Routing::empty(k));
        }
        Ok(download(
            self.rows,
            k,
            &self.routing.ids,
            &self.routing.weights,
        )?)
    }
}

impl OneLaunchLayer {
    pub fn new(layer: AssembledLayer) -> Self {
        OneLaunchLayer {
            layer,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub fn device(&self) -> &'static Device {
        self.layer.device()
    }

    /// Allocates what one call for `rows` tokens needs (the router sorts to chapter 4's BLOCK_M
    /// for the batch, as chapter 8's layer does).
    pub fn workspace(&self, rows: usize) -> Result<OneLaunchWorkspace, MoeError> {
        let c = self.layer.config();
        let experts = self.layer.experts_layer().workspace(rows)?;
        let (_, bias) = self.layer.gate();
        let bias_host = bias.map(|b| b.to_vec()).transpose()?;
        let shape = GateShape {
            rows,
            hidden: c.hidden,
            experts: c.experts,
        };
        let router = OneLaunch::new(
            self.device(),
            &c.router,
            shape,
            stage_block_m(&experts),
            bias_host.as_deref(),
        )?;
        Ok(OneLaunchWorkspace {
            layer: self.id,
            rows,
            routing: router.alloc_outputs(self.device())?,
            router,
            experts,
        })
    }

    // ANCHOR: enqueue
    /// Queues the layer: the one launch, then chapter 4's experts on its layout.
    pub fn enqueue(
        &self,
        ws: &OneLaunchWorkspace,
        hidden: &DeviceBuffer<bf16>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), MoeError> {
        if ws.layer != self.id {
            return Err(MoeError::Config {
                field: "workspace",
                expected: "one built by this layer's OneLaunchLayer::workspace".into(),
                found: "a workspace built by another layer".into(),
            });
        }
        let h = self.layer.config().hidden;
        expect_len("hidden [T, H]", hidden.len(), ws.rows * h)?;
        expect_len("out [T, H]", out.len(), ws.rows * h)?;
        if ws.rows == 0 {
            return Ok(());
        }
        let (gate, bias) = self.layer.gate();
        ws.router.enqueue(hidden, gate, bias, &ws.routing)?;
        experts_on(&self.layer, &ws.experts, hidden, &ws.routing, out)
    }
    // ANCHOR_END: enqueue

    /// How many launches [`Self::enqueue`] makes for `ws`.
    pub fn launches(&self, ws: &OneLaunchWorkspace) -> usize {
        match ws.rows {
            0 => 0,
            _ => {
                ws.router.launches()
                    + self
                        .layer
                        .experts_layer()
                        .launches_laid_out(&ws.experts, Dtype::Bf16)
            }
        }
    }
}

impl MoeLayer for OneLaunchLayer {
    fn name(&self) -> &'static str {
        "one-launch"
    }
    fn dtype(&self) -> Dtype {
        Dtype::Bf16
    }
    fn config(&self) -> &MoeConfig {
        self.layer.config()
    }
    fn experts(&self, hidden: &[f32], routing: &Routing) -> Result<Vec<f32>, MoeError> {
        self.layer.experts(hidden, routing)
    }
    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError> {
        let ws = self.workspace(rows_of(self.config(), hidden)?)?;
        forward_bf16(self.device(), hidden, |x, out| {
            self.enqueue(&ws, x, out)?;
            ws.routing(self.config().router.k)
        })
    }
}
