//! Ranks as threads of one process, each with its own device buffers, for the tests and the
//! example only: they check the layers' dispatch, combine and reduction on the emulator, where
//! there is one device and no NCCL. Every block goes through the host (a download, a mailbox,
//! an upload), which no runtime would do; [`crate::nccl::Nccl`] is the real communicator.

use crate::comm::{check_all_to_all, Communicator, Element};
use crate::error::ParallelError;
use moe_kernels::{Device, DeviceBuffer};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long a rank waits for the others at a collective before it gives up with an error (a
/// rank that failed before the collective would otherwise leave the rest waiting for ever).
const WAIT: Duration = Duration::from_secs(120);

/// What the ranks of one group share: a barrier and a mailbox `[from][to]` of byte blocks.
struct Group {
    world: usize,
    /// (ranks arrived, generation)
    barrier: Mutex<(usize, u64)>,
    turned: Condvar,
    mail: Mutex<Vec<Vec<Vec<u8>>>>,
}

impl Group {
    /// Waits until every rank has arrived; an error after [`WAIT`].
    fn wait(&self, rank: usize, op: &'static str) -> Result<(), ParallelError> {
        let mut g = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
        let generation = g.1;
        g.0 += 1;
        if g.0 == self.world {
            *g = (0, generation + 1);
            self.turned.notify_all();
            return Ok(());
        }
        let (g, timeout) = self
            .turned
            .wait_timeout_while(g, WAIT, |g| g.1 == generation)
            .unwrap_or_else(|e| e.into_inner());
        drop(g);
        if timeout.timed_out() {
            return Err(ParallelError::Comm {
                op,
                why: format!(
                    "rank {rank} waited {} s for the other ranks (did one fail before the collective?)",
                    WAIT.as_secs()
                ),
            });
        }
        Ok(())
    }
}

/// One rank of an in-process group (see the module's documentation).
pub struct InProcess {
    rank: usize,
    group: Arc<Group>,
    device: &'static Device,
}

/// `world` ranks on `device`, one [`InProcess`] each, to hand to `world` threads.
pub fn in_process_group(world: usize, device: &'static Device) -> Vec<InProcess> {
    let group = Arc::new(Group {
        world,
        barrier: Mutex::new((0, 0)),
        turned: Condvar::new(),
        mail: Mutex::new(vec![vec![Vec::new(); world]; world]),
    });
    (0..world)
        .map(|rank| InProcess {
            rank,
            group: group.clone(),
            device,
        })
        .collect()
}

// ANCHOR: run_ranks
/// Runs `f` on `world` in-process ranks, one thread each, and returns their results in rank
/// order.
pub fn run_ranks<R: Send>(
    world: usize,
    device: &'static Device,
    f: impl Fn(&InProcess) -> R + Sync,
) -> Vec<R> {
    let ranks = in_process_group(world, device);
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks.iter().map(|c| s.spawn(|| f(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}
// ANCHOR_END: run_ranks

fn to_bytes<T: Element>(v: &[T]) -> Vec<u8> {
    // SAFETY: Element types are plain data (DeviceRepr: no padding, every bit pattern valid).
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        .to_vec()
}

fn from_bytes<T: Element>(b: &[u8]) -> Vec<T> {
    let n = b.len() / std::mem::size_of::<T>();
    let mut v = vec![T::default(); n];
    // SAFETY: `v` holds exactly `n · size_of::<T>()` bytes, and every bit pattern is a valid T.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr() as *mut u8, n * size_of::<T>())
    };
    v
}

impl InProcess {
    /// Posts `blocks[d]` for every rank d and returns the blocks every rank posted for this one,
    /// in rank order.
    fn exchange(
        &self,
        blocks: Vec<Vec<u8>>,
        op: &'static str,
    ) -> Result<Vec<Vec<u8>>, ParallelError> {
        let g = &self.group;
        {
            let mut mail = g.mail.lock().unwrap_or_else(|e| e.into_inner());
            mail[self.rank] = blocks;
        }
        g.wait(self.rank, op)?;
        let got: Vec<Vec<u8>> = {
            let mail = g.mail.lock().unwrap_or_else(|e| e.into_inner());
            (0..g.world)
                .map(|from| mail[from].get(self.rank).cloned().unwrap_or_default())
                .collect()
        };
        // Nobody posts the next collective's blocks before everyone has read these.
        g.wait(self.rank, op)?;
        Ok(got)
    }
}

impl Communicator for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.group.world
    }
    fn device(&self) -> &'static Device {
        self.device
    }

    fn all_reduce_sum(&self, buf: &mut DeviceBuffer<f32>) -> Result<(), ParallelError> {
        let mine = to_bytes(&buf.to_vec()?);
        let all = self.exchange(vec![mine; self.group.world], "all_reduce_sum")?;
        let parts: Vec<Vec<f32>> = all.iter().map(|b| from_bytes(b)).collect();
        if let Some(p) = parts.iter().find(|p| p.len() != buf.len()) {
            return Err(ParallelError::Comm {
                op: "all_reduce_sum",
                why: format!("ranks hold {} and {} values", buf.len(), p.len()),
            });
        }
        // ANCHOR: rank_order
        let mut sum = vec![0.0f32; buf.len()];
        for p in &parts {
            for (s, v) in sum.iter_mut().zip(p) {
                *s += v; // ((0 + b₀) + b₁) + …, rank by rank
            }
        }
        // ANCHOR_END: rank_order
        buf.copy_from(&sum)?;
        Ok(())
    }

    fn exchange_counts(&self, send: &[usize]) -> Result<Vec<usize>, ParallelError> {
        let world = self.group.world;
        if send.len() != world {
            return Err(ParallelError::Comm {
                op: "exchange_counts",
                why: format!("{} counts for a world of {world}", send.len()),
            });
        }
        let blocks = send
            .iter()
            .map(|&n| (n as u64).to_le_bytes().to_vec())
            .collect();
        let got = self.exchange(blocks, "exchange_counts")?;
        Ok(got
            .iter()
            .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as usize)
            .collect())
    }

    fn all_to_all<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
        recv: &mut DeviceBuffer<T>,
        recv_counts: &[usize],
    ) -> Result<(), ParallelError> {
        let world = self.group.world;
        check_all_to_all(world, send.len(), send_counts, recv.len(), recv_counts)?;
        let data = send.to_vec()?;
        let mut at = 0;
        let blocks = send_counts
            .iter()
            .map(|&n| {
                let b = to_bytes(&data[at..at + n]);
                at += n;
                b
            })
            .collect();
        let got = self.exchange(blocks, "all_to_all")?;
        let mut all: Vec<T> = Vec::with_capacity(recv.len());
        for (from, b) in got.iter().enumerate() {
            let v: Vec<T> = from_bytes(b);
            if v.len() != recv_counts[from] {
                return Err(ParallelError::Comm {
                    op: "all_to_all",
                    why: format!(
                        "rank {} expected {} elements from rank {from}, which sent {}",
                        self.rank,
                        recv_counts[from],
                        v.len()
                    ),
                });
            }
            all.extend(v);
        }
        if !all.is_empty() {
            recv.copy_from(&all)?;
        }
        Ok(())
    }
}
