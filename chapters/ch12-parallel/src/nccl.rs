//! The real communicator: NCCL, through cudarc's bindings (loaded at run time; with no
//! `libnccl.so.2` every constructor returns a typed error, never a panic).
//!
//! One process per GPU, as the engines run it: this project's runtime drives one GPU per process
//! ([`Device::cuda`]), so rank r is a process started with `CUDA_VISIBLE_DEVICES=r`, and the
//! ranks meet through NCCL's unique id, which rank 0 makes and writes to a file the others read
//! ([`Nccl::from_env`]).
//!
//! Differences from an engine's use of NCCL:
//! - Each collective waits for the work queued before it (`Device::synchronize`), runs on the
//!   default stream and is waited for: correct and simple, and it adds a host round trip per
//!   collective that an engine, which queues NCCL on its compute stream, does not pay. The bench
//!   (`bench ch12`) reports the collective's share with this cost inside.
//! - The all-reduce is an all-gather followed by `ch12_sum_ranks`, so the sum runs in rank order
//!   and gives the in-process communicator's bits; NCCL's own all-reduce adds in its ring's or
//!   tree's order (the same on every rank, but not rank order) and moves less data.

use crate::comm::{check_all_to_all, Communicator, ElemKind, Element};
use crate::error::ParallelError;
use crate::kernels::{sum_ranks, KERNELS};
use cudarc::nccl::{result, sys};
use moe_kernels::{Device, DeviceBuffer, Module};
use std::ffi::c_void;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One rank's NCCL communicator.
pub struct Nccl {
    comm: sys::ncclComm_t,
    rank: usize,
    world: usize,
    device: &'static Device,
    module: Arc<Module>,
}

fn err(op: &'static str, e: impl std::fmt::Debug) -> ParallelError {
    ParallelError::Comm {
        op,
        why: format!("{e:?}"),
    }
}

/// Whether `libnccl.so.2` can be loaded here.
pub fn nccl_present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { sys::is_culib_present() }
}

fn need_nccl(op: &'static str) -> Result<(), ParallelError> {
    match nccl_present() {
        true => Ok(()),
        false => Err(ParallelError::Comm {
            op,
            why: "no NCCL library (libnccl.so.2) could be loaded".into(),
        }),
    }
}

fn nccl_type(k: ElemKind) -> sys::ncclDataType_t {
    match k {
        ElemKind::Bf16 => sys::ncclDataType_t::ncclBfloat16,
        ElemKind::F32 => sys::ncclDataType_t::ncclFloat32,
        ElemKind::I32 => sys::ncclDataType_t::ncclInt32,
    }
}

/// NCCL's default stream: the collectives run there, between two waits.
fn stream() -> sys::cudaStream_t {
    std::ptr::null_mut()
}

impl Nccl {
    /// A new unique id (rank 0 makes it; every rank passes the same one to [`Nccl::new`]).
    pub fn unique_id() -> Result<[u8; 128], ParallelError> {
        need_nccl("ncclGetUniqueId")?;
        let id = result::get_uniqueid().map_err(|e| err("ncclGetUniqueId", e))?;
        Ok(id.internal.map(|c| c as u8))
    }

    /// Rank `rank` of `world` on `device` (a GPU), joining the group of unique id `id`.
    pub fn new(
        device: &'static Device,
        rank: usize,
        world: usize,
        id: &[u8; 128],
    ) -> Result<Self, ParallelError> {
        crate::error::check_rank(rank, world)?;
        need_nccl("ncclCommInitRank")?;
        if device.kind() != moe_kernels::BackendKind::Cuda {
            return Err(ParallelError::Comm {
                op: "ncclCommInitRank",
                why: format!("NCCL needs a GPU; this device is {}", device.describe()),
            });
        }
        device.synchronize()?; // makes the device's context current on this thread
        let uid = sys::ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is a valid out-pointer; every rank passes the same id and world.
        unsafe { result::comm_init_rank(&mut comm, world as i32, uid, rank as i32) }
            .map_err(|e| err("ncclCommInitRank", e))?;
        Ok(Nccl {
            comm,
            rank,
            world,
            device,
            module: device.load(&KERNELS)?,
        })
    }

    /// The rank, world and unique id from the environment: `MOE_RANK`, `MOE_WORLD`, and
    /// `MOE_NCCL_ID_FILE`, a file rank 0 writes the id into (hex) and the others wait for, up to
    /// a minute.
    pub fn from_env(device: &'static Device) -> Result<Self, ParallelError> {
        let var = |name: &'static str| -> Result<String, ParallelError> {
            std::env::var(name).map_err(|_| ParallelError::Comm {
                op: "Nccl::from_env",
                why: format!("{name} is not set"),
            })
        };
        let num = |name: &'static str| -> Result<usize, ParallelError> {
            let v = var(name)?;
            v.trim().parse().map_err(|_| ParallelError::Comm {
                op: "Nccl::from_env",
                why: format!("{name}={v} is not a number"),
            })
        };
        let (rank, world) = (num("MOE_RANK")?, num("MOE_WORLD")?);
        crate::error::check_rank(rank, world)?;
        let file = var("MOE_NCCL_ID_FILE")?;
        let id = match rank {
            0 => {
                let id = Self::unique_id()?;
                let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                let tmp = format!("{file}.tmp");
                std::fs::write(&tmp, hex)
                    .and_then(|_| std::fs::rename(&tmp, &file))
                    .map_err(|e| err("writing MOE_NCCL_ID_FILE", e))?;
                id
            }
            _ => read_id(Path::new(&file), Duration::from_secs(60))?,
        };
        Self::new(device, rank, world, &id)
    }

    /// Queues `f` (NCCL calls) after everything queued on the device so far, and waits for it.
    fn collective(
        &self,
        op: &'static str,
        f: impl FnOnce() -> Result<(), ParallelError>,
    ) -> Result<(), ParallelError> {
        self.device.synchronize()?;
        f()?;
        cudarc::driver::result::ctx::synchronize().map_err(|e| err(op, e))
    }
}

/// Waits for rank 0's id file.
fn read_id(file: &Path, wait: Duration) -> Result<[u8; 128], ParallelError> {
    let start = Instant::now();
    loop {
        if let Ok(hex) = std::fs::read_to_string(file) {
            let bytes: Vec<u8> = (0..hex.trim().len() / 2)
                .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
                .collect();
            return bytes.try_into().map_err(|_| ParallelError::Comm {
                op: "reading MOE_NCCL_ID_FILE",
                why: format!("{} does not hold 128 hex bytes", file.display()),
            });
        }
        if start.elapsed() > wait {
            return Err(ParallelError::Comm {
                op: "reading MOE_NCCL_ID_FILE",
                why: format!(
                    "{} did not appear within {} s",
                    file.display(),
                    wait.as_secs()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: the communicator was made by comm_init_rank and is destroyed once.
        let _ = unsafe { result::comm_destroy(self.comm) };
    }
}

fn ptr<T: Element>(b: &DeviceBuffer<T>, at: usize) -> *mut c_void {
    (b.device_ptr() + (at * size_of::<T>()) as u64) as *mut c_void
}

impl Communicator for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn device(&self) -> &'static Device {
        self.device
    }

    fn all_reduce_sum(&self, buf: &mut DeviceBuffer<f32>) -> Result<(), ParallelError> {
        let n = buf.len();
        let parts = self.device.alloc::<f32>(n * self.world)?;
        self.collective("ncclAllGather", || {
            // SAFETY: both buffers live on this device and hold n and R·n f32.
            unsafe {
                result::all_gather(
                    ptr(buf, 0),
                    ptr(&parts, 0),
                    n,
                    sys::ncclDataType_t::ncclFloat32,
                    self.comm,
                    stream(),
                )
            }
            .map(|_| ())
            .map_err(|e| err("ncclAllGather", e))
        })?;
        sum_ranks(&self.module, &parts, buf, self.world)
    }

    fn exchange_counts(&self, send: &[usize]) -> Result<Vec<usize>, ParallelError> {
        let ones = vec![1; self.world];
        let s: Vec<i32> = send.iter().map(|&n| n as i32).collect();
        let mut r = self.device.alloc::<i32>(self.world)?;
        self.all_to_all(&self.device.upload(&s)?, &ones, &mut r, &ones)?;
        Ok(r.to_vec()?.iter().map(|&n| n as usize).collect())
    }

    // ANCHOR: nccl_all_to_all
    fn all_to_all<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
        recv: &mut DeviceBuffer<T>,
        recv_counts: &[usize],
    ) -> Result<(), ParallelError> {
        check_all_to_all(self.world, send.len(), send_counts, recv.len(), recv_counts)?;
        let ty = nccl_type(T::KIND);
        self.collective("ncclSend/ncclRecv", || {
            result::group_start().map_err(|e| err("ncclGroupStart", e))?;
            let (mut s_at, mut r_at) = (0, 0);
            for peer in 0..self.world {
                let (ns, nr) = (send_counts[peer], recv_counts[peer]);
                // SAFETY: the blocks lie inside the buffers (checked above); the group is
                // closed below whatever happens.
                unsafe {
                    if ns > 0 {
                        result::send(ptr(send, s_at), ns, ty, peer as i32, self.comm, stream())
                            .map_err(|e| err("ncclSend", e))?;
                    }
                    if nr > 0 {
                        result::recv(ptr(recv, r_at), nr, ty, peer as i32, self.comm, stream())
                            .map_err(|e| err("ncclRecv", e))?;
                    }
                }
                (s_at, r_at) = (s_at + ns, r_at + nr);
            }
            result::group_end()
                .map(|_| ())
                .map_err(|e| err("ncclGroupEnd", e))
        })
    }
    // ANCHOR_END: nccl_all_to_all
}
