//! NVLS in its multicast form: the peer region ([`super::peer`]) as VMM memory on every
//! rank, bound to one NVLink SHARP multicast object, so that `nvls.cu` reduces and
//! broadcasts with `multimem` instructions through the object's address.
//!
//! Chosen only where `WEFT_ALGO=nvls` and the process opted in (`WEFT_NVLS=1`, and
//! `NCCL_NVLS_ENABLE` not `0`: [`weft_cuda::multicast::OptIn`]); without the opt-in NVLS
//! runs its unicast form, unchanged. Creating a multicast object can take a shared host's
//! GPUs out of service (DESIGN.md, "GPU machines"): no weft test or script opts in, and
//! nothing here runs on the shared GPU machines. What can be tested without a GPU is kept
//! pure and tested here: the choice of form ([`nvls_form`]), the sizes, the creating rank
//! and the order of the steps ([`MulticastPlan`]).
//!
//! The setup, in NCCL's order (`src/transport/nvls.cc`), each step on every rank of the
//! group unless it says otherwise ([`MulticastPlan::steps`] lists them, and
//! [`MulticastRegion::open`] runs that list):
//!
//! 1. allocate the region as VMM memory ([`ShareableBuffer`]), rounded up to the
//!    multicast and allocation granularities, and zero it;
//! 2. every rank but the creator opens its file-descriptor inbox ([`super::fd_passing`]);
//! 3. all-gather the plan: every rank must have the same sizes, creator and group (and
//!    every inbox is open once this returns);
//! 4. the creator (the group's first rank) creates the object for the group's devices and
//!    sends its POSIX file descriptor to every other rank (`SCM_RIGHTS` over the inboxes,
//!    ranks of the creator's own process included: they receive a duplicate); the others
//!    receive it, with a deadline, and import the object;
//! 5. each adds its own device; barrier (every device is added before any memory is bound:
//!    `cuMulticastBindMem` would block until then, with no deadline, where NCCL lets it; the
//!    barrier turns a rank that never got here into a bootstrap error naming it);
//! 6. each binds its allocation at offset 0 and maps the object; barrier (every rank bound
//!    before any kernel's `multimem` access).
//!
//! Teardown is the reverse, by `Drop`: the multicast mapping, the object (unbinding this
//! rank's memory), then the allocation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_cuda::multicast::{self, MulticastMapping, MulticastObject, OptIn};
use weft_cuda::{Context, ShareableBuffer};

use weft_config::GpuSettings;

use super::error::GpuError;
use super::fd_passing::{FdInbox, FdRendezvous};
use super::peer::RegionPlan;
use crate::bootstrap::Bootstrap;

/// Which form NVLS runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvlsForm {
    /// Every `multimem` access replaced by one access per rank over peer mappings (CUDA
    /// IPC or pointers): no multicast object. What runs without the opt-in.
    Unicast,
    /// A multicast object over VMM memory ([`MulticastRegion`]).
    Multicast,
}

/// The form of `WEFT_ALGO=nvls` from the value of `WEFT_NVLS` (`None`: unset) and whether
/// `NCCL_NVLS_ENABLE` allows NVLS (it is not 0). Without `WEFT_NVLS=1`, the unicast form.
/// With it, the multicast form, unless `NCCL_NVLS_ENABLE=0`: then an error (the opt-in's
/// refusal, saying what to unset), rather than quietly running the other form than the one
/// asked for.
pub fn nvls_form(weft_nvls: Option<&str>, nvls_enable: bool) -> Result<NvlsForm, String> {
    let asked = weft_nvls.map(str::trim) == Some("1");
    match multicast::decide(weft_nvls, nvls_enable) {
        Ok(()) => Ok(NvlsForm::Multicast),
        Err(refusal) if asked => Err(refusal.to_string()),
        Err(_) => Ok(NvlsForm::Unicast),
    }
}

/// [`nvls_form`] of `settings`.
pub fn nvls_form_of(settings: &GpuSettings) -> Result<NvlsForm, String> {
    nvls_form(settings.nvls.as_deref(), settings.nvls_enable)
}

/// Two ranks on one GPU, if any (by PCI bus id, in rank order): a multicast object takes
/// each device once, so its form needs a GPU per rank (tests that share one GPU between
/// ranks run the unicast form).
pub fn ranks_sharing_a_gpu<S: AsRef<str>>(bus_ids: &[S]) -> Option<(usize, usize)> {
    bus_ids.iter().enumerate().find_map(|(b, id)| {
        bus_ids[..b]
            .iter()
            .position(|other| other.as_ref() == id.as_ref())
            .map(|a| (a, b))
    })
}

/// What [`MulticastPlan::encode`]'s words are.
const PLAN_FIELDS: [&str; 4] = [
    "the creating rank (the NVLS group's first)",
    "the devices of the NVLS group",
    "the multicast object's bytes",
    "the granularity (cuMulticastGetGranularity and cuMemGetAllocationGranularity of \
     each rank's GPU: GPUs of different kinds?)",
];

/// The multicast object of a communicator, the same on every rank of its NVLS group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MulticastPlan {
    /// The group in rank order (the NVLS heads, sorted): every rank of one host.
    pub group: Vec<usize>,
    /// The rank that creates the object and sends its handle: the group's first.
    pub creator: usize,
    /// Bytes of the object and of each rank's allocation: the peer region's, rounded up
    /// to `granularity`.
    pub bytes: u64,
    /// The least common multiple of the multicast object's (recommended) and the
    /// allocation's granularity: every size and offset bound is a multiple of it.
    pub granularity: u64,
}

/// One step of [`MulticastRegion::open`] on one rank, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MulticastStep {
    /// Allocate this rank's VMM memory and zero it.
    Allocate,
    /// Bind this rank's inbox for the object's file descriptor.
    OpenInbox,
    /// All-gather the plan and refuse any difference (also: every inbox is open).
    AgreeOnPlan,
    /// Create the object (the creator only).
    Create,
    /// Send the object's file descriptor to this rank.
    SendHandle { to: usize },
    /// Receive the object's file descriptor from this rank, by the deadline.
    ReceiveHandle { from: usize },
    /// Import the object from the received descriptor.
    Import,
    /// Add this rank's device to the object.
    AddDevice,
    /// A bootstrap barrier.
    Barrier,
    /// Bind this rank's allocation at offset 0 of the object.
    Bind,
    /// Map the object: the multicast address the kernels take.
    Map,
}

impl MulticastPlan {
    /// The object for `region` (a NVLS plan) on `nranks` ranks, with this GPU's multicast
    /// granularity `mc_granularity` (recommended, for the group's devices and the region's
    /// size) and allocation granularity `alloc_granularity`.
    pub fn new(
        region: &RegionPlan,
        nranks: usize,
        mc_granularity: u64,
        alloc_granularity: u64,
    ) -> Result<MulticastPlan, GpuError> {
        let Some((_, heads)) = &region.nvls else {
            return Err(GpuError::InvalidArgument(format!(
                "a multicast object for WEFT_ALGO={}: only NVLS has one",
                region.algo
            )));
        };
        let mut group: Vec<usize> = heads
            .ranks()
            .iter()
            .filter_map(|&r| usize::try_from(r).ok())
            .collect();
        group.sort_unstable();
        group.dedup();
        if group != (0..nranks).collect::<Vec<_>>() {
            return Err(GpuError::InvalidArgument(format!(
                "NVLS multicast group {group:?} for {nranks} ranks: weft's NVLS needs every rank \
                 in one group (one NVSwitch host)"
            )));
        }
        let bad_granularity = |which: &str, g: u64| {
            GpuError::InvalidArgument(format!(
                "the {which} granularity is {g} bytes: expected a power of two (what the CUDA \
                 driver reports); a driver this old or new is not supported by weft's NVLS"
            ))
        };
        if !mc_granularity.is_power_of_two() {
            return Err(bad_granularity("multicast", mc_granularity));
        }
        if !alloc_granularity.is_power_of_two() {
            return Err(bad_granularity("allocation", alloc_granularity));
        }
        // Both are powers of two: their least common multiple is the larger.
        let granularity = mc_granularity.max(alloc_granularity);
        let bytes = region
            .bytes
            .max(1)
            .checked_next_multiple_of(granularity)
            .ok_or_else(|| {
                GpuError::InvalidArgument(format!(
                    "a multicast object of {} bytes rounded to {granularity} overflows",
                    region.bytes
                ))
            })?;
        let creator = group.first().copied().unwrap_or(0);
        Ok(MulticastPlan {
            group,
            creator,
            bytes,
            granularity,
        })
    }

    /// Devices of the object.
    pub fn ndevices(&self) -> u32 {
        self.group.len() as u32
    }

    /// The plan as bytes, for comparing across ranks: eight big-endian bytes per field, in
    /// `PLAN_FIELDS` order.
    pub fn encode(&self) -> Vec<u8> {
        [
            self.creator as u64,
            u64::from(self.ndevices()),
            self.bytes,
            self.granularity,
        ]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
    }

    /// `None` when another rank's [`MulticastPlan::encode`] equals this one's; otherwise
    /// what differs.
    pub fn mismatch(&self, theirs: &[u8]) -> Option<String> {
        let mine = self.encode();
        if mine == theirs {
            return None;
        }
        super::peer::first_difference(&PLAN_FIELDS, &mine, theirs)
            .or_else(|| Some(format!("a {}-byte plan there", theirs.len())))
    }

    /// The steps of `rank`, in the order [`MulticastRegion::open`] runs them.
    pub fn steps(&self, rank: usize) -> Vec<MulticastStep> {
        use MulticastStep::*;
        let mut s = vec![Allocate];
        if rank != self.creator {
            s.push(OpenInbox);
        }
        s.push(AgreeOnPlan);
        if rank == self.creator {
            s.push(Create);
            s.extend(
                self.group
                    .iter()
                    .filter(|&&r| r != rank)
                    .map(|&to| SendHandle { to }),
            );
        } else {
            s.push(ReceiveHandle { from: self.creator });
            s.push(Import);
        }
        s.extend([AddDevice, Barrier, Bind, Map, Barrier]);
        s
    }
}

/// This rank's part of the multicast object, set up and bound. Fields drop in order:
/// the mapping, the object (unbinding this rank's memory, releasing the handle), the
/// allocation: the setup's reverse.
#[derive(Debug)]
pub struct MulticastRegion {
    mapping: MulticastMapping,
    _object: MulticastObject,
    buffer: ShareableBuffer,
    plan: MulticastPlan,
}

impl MulticastRegion {
    /// Runs [`MulticastPlan::steps`] for `rank`: collective over every rank of `region`'s
    /// NVLS group, which all call it with the same plan. `id`: the communicator's unique
    /// id (its bytes name the inboxes); `timeout`: how long any rank waits for another.
    pub fn open(
        opt_in: OptIn,
        ctx: &Arc<Context>,
        bootstrap: &mut Bootstrap,
        id: &[u8],
        rank: usize,
        region: &RegionPlan,
        timeout: Duration,
    ) -> Result<MulticastRegion, GpuError> {
        let dev = ctx.device();
        let gpu = dev.ordinal();
        if !multicast::multicast_supported(&dev)? {
            return Err(GpuError::InvalidArgument(format!(
                "WEFT_NVLS=1 but GPU {gpu} has no NVLink multicast \
                 (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0, or the driver predates CUDA \
                 12.1): NVLS multicast needs NVSwitch-connected Hopper or newer; unset \
                 WEFT_NVLS to run NVLS in its unicast form"
            )));
        }
        if !weft_cuda::vmm_supported(&dev)? {
            return Err(GpuError::InvalidArgument(format!(
                "WEFT_NVLS=1 but GPU {gpu} cannot allocate VMM memory exportable as a file \
                 descriptor: unset WEFT_NVLS to run NVLS in its unicast form"
            )));
        }
        let nranks = region.nvls.as_ref().map_or(0, |(_, h)| h.len());
        let mc_gran = multicast::granularity(&dev, nranks as u32, region.bytes as usize, true)?;
        let alloc_gran = weft_cuda::allocation_granularity(&dev, false)?;
        let plan = MulticastPlan::new(region, nranks, mc_gran, alloc_gran)?;
        let rendezvous = FdRendezvous::new(id);
        let bytes = plan.bytes as usize;

        let mut buffer: Option<ShareableBuffer> = None;
        let mut inbox: Option<FdInbox> = None;
        let mut object: Option<MulticastObject> = None;
        let mut handle: Option<std::os::fd::OwnedFd> = None;
        let mut mapping: Option<MulticastMapping> = None;
        let mut deadline = Instant::now() + timeout;
        let missing = |what: &str| {
            GpuError::InvalidArgument(format!(
                "NVLS multicast setup on rank {rank}: {what} missing (a step out of order; a \
                 weft bug)"
            ))
        };
        for step in plan.steps(rank) {
            match step {
                MulticastStep::Allocate => {
                    let b = ShareableBuffer::alloc(ctx, bytes)?;
                    b.fill(0)?;
                    buffer = Some(b);
                }
                MulticastStep::OpenInbox => {
                    inbox = Some(rendezvous.inbox(rank).map_err(fd_error)?);
                }
                MulticastStep::AgreeOnPlan => {
                    let plans = bootstrap.all_gather_for(
                        &plan.encode(),
                        "init's all_gather of the NVLS multicast plans",
                    )?;
                    if let Some((q, why)) =
                        super::peer::first_disagreement(&plans, |p| plan.mismatch(p))
                    {
                        return Err(GpuError::InvalidArgument(format!(
                            "NVLS multicast: rank {q}'s object differs from rank {rank}'s in \
                             {why}"
                        )));
                    }
                    // Every rank is here now: the handle's deadline starts from this point.
                    deadline = Instant::now() + timeout;
                }
                MulticastStep::Create => {
                    let o = MulticastObject::create(opt_in, ctx, plan.ndevices(), bytes)?;
                    handle = Some(o.export_fd()?);
                    object = Some(o);
                }
                MulticastStep::SendHandle { to } => {
                    let fd = handle
                        .as_ref()
                        .ok_or_else(|| missing("the exported handle"))?;
                    rendezvous
                        .send(rank, to, std::os::fd::AsFd::as_fd(fd), deadline)
                        .map_err(fd_error)?;
                }
                MulticastStep::ReceiveHandle { from } => {
                    let from_inbox = inbox.take().ok_or_else(|| missing("the inbox"))?;
                    handle = Some(from_inbox.recv(from, deadline).map_err(fd_error)?);
                }
                MulticastStep::Import => {
                    let fd = handle
                        .take()
                        .ok_or_else(|| missing("the received handle"))?;
                    object = Some(MulticastObject::import(
                        opt_in,
                        ctx,
                        std::os::fd::AsFd::as_fd(&fd),
                        bytes,
                    )?);
                }
                MulticastStep::AddDevice => {
                    // The descriptor has done its work (sent, or imported).
                    handle = None;
                    object
                        .as_ref()
                        .ok_or_else(|| missing("the object"))?
                        .add_device(&dev)?;
                }
                MulticastStep::Barrier => bootstrap.barrier()?,
                MulticastStep::Bind => {
                    let b = buffer.as_ref().ok_or_else(|| missing("the allocation"))?;
                    object
                        .as_mut()
                        .ok_or_else(|| missing("the object"))?
                        .bind(0, b, 0, bytes)?;
                }
                MulticastStep::Map => {
                    let o = object.as_ref().ok_or_else(|| missing("the object"))?;
                    mapping = Some(o.map(plan.granularity)?);
                }
            }
        }
        log::info!(
            "weft: rank {rank}: NVLS multicast object of {bytes} bytes over {} GPUs bound \
             ({} rank {})",
            plan.ndevices(),
            if rank == plan.creator {
                "created here, sent to every"
            } else {
                "received from"
            },
            if rank == plan.creator {
                "other".to_string()
            } else {
                plan.creator.to_string()
            }
        );
        // Declared in drop order; an error above dropped whatever was set up, in reverse.
        Ok(MulticastRegion {
            mapping: mapping.ok_or_else(|| missing("the mapping"))?,
            _object: object.ok_or_else(|| missing("the object"))?,
            buffer: buffer.ok_or_else(|| missing("the allocation"))?,
            plan,
        })
    }

    /// This rank's allocation as its own device addresses it (the region's base).
    pub fn unicast_ptr(&self) -> u64 {
        self.buffer.ptr()
    }

    /// The object's multicast address here (the base of the `multimem` accesses).
    pub fn multicast_ptr(&self) -> u64 {
        self.mapping.ptr()
    }

    pub fn plan(&self) -> &MulticastPlan {
        &self.plan
    }
}

/// A failure to pass the object's handle, as the communicator reports it.
fn fd_error(e: super::fd_passing::FdPassingError) -> GpuError {
    match e.peer() {
        Some(peer) => GpuError::Unreachable {
            peer,
            detail: format!("passing the NVLS multicast object's handle failed: {e}"),
        },
        None => GpuError::InvalidArgument(format!(
            "passing the NVLS multicast object's handle failed on this rank: {e}"
        )),
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use weft_config::Settings;
    use weft_core::algo::GpuAlgo;

    fn region(nranks: usize, heads: &[u32]) -> RegionPlan {
        RegionPlan::for_settings(GpuAlgo::Nvls, nranks, heads, 90, &Settings::default()).unwrap()
    }

    #[test]
    fn without_the_opt_in_nvls_runs_unicast() {
        for weft in [None, Some("0"), Some(""), Some("yes")] {
            for nccl in [false, true] {
                assert_eq!(
                    nvls_form(weft, nccl),
                    Ok(NvlsForm::Unicast),
                    "{weft:?} {nccl:?}"
                );
            }
        }
    }

    #[test]
    fn the_opt_in_chooses_multicast() {
        assert_eq!(nvls_form(Some("1"), true), Ok(NvlsForm::Multicast));
        assert_eq!(nvls_form(Some(" 1 "), true), Ok(NvlsForm::Multicast));
        // As the settings carry them: NCCL_NVLS_ENABLE=1 or 2 allows it, 0 refuses.
        for (enable, multicast) in [("1", true), ("2", true), ("0", false)] {
            let env = move |k: &str| match k {
                "WEFT_NVLS" => Some("1".to_string()),
                "NCCL_NVLS_ENABLE" => Some(enable.to_string()),
                _ => None,
            };
            let gpu = Settings::from_lookup(&env).unwrap().gpu;
            assert_eq!(nvls_form_of(&gpu) == Ok(NvlsForm::Multicast), multicast);
        }
    }

    #[test]
    fn nccl_nvls_enable_0_refuses_the_opt_in_saying_what_to_do() {
        let e = nvls_form(Some("1"), false).unwrap_err();
        assert!(e.contains("NCCL_NVLS_ENABLE=0 is set"), "{e}");
        assert!(e.contains("unset NCCL_NVLS_ENABLE"), "{e}");
        assert!(e.contains("without WEFT_NVLS=1"), "{e}");
    }

    #[test]
    fn the_environment_of_tests_chooses_unicast_or_refuses() {
        // No test sets WEFT_NVLS=1: whatever NCCL_NVLS_ENABLE is, never multicast here.
        let process = Settings::from_env_or_defaults();
        assert_ne!(nvls_form_of(&process.gpu), Ok(NvlsForm::Multicast));
    }

    #[test]
    fn ranks_sharing_a_gpu_are_found() {
        assert_eq!(ranks_sharing_a_gpu(&["0000:18:00.0", "0000:2a:00.0"]), None);
        assert_eq!(
            ranks_sharing_a_gpu(&[
                "0000:18:00.0",
                "0000:2a:00.0",
                "0000:3b:00.0",
                "0000:2a:00.0"
            ]),
            Some((1, 3))
        );
        assert_eq!(ranks_sharing_a_gpu::<&str>(&[]), None);
    }

    #[test]
    fn sizes_are_rounded_to_both_granularities() {
        let r = region(4, &[]);
        // The region is 64 KiB of flags and steps, then data and counters: not a multiple
        // of 2 MiB plus 64 KiB.
        assert_eq!(r.bytes % (2 << 20), 64 << 10);
        let p = MulticastPlan::new(&r, 4, 2 << 20, 2 << 20).unwrap();
        assert_eq!(p.granularity, 2 << 20);
        assert_eq!(p.bytes, r.bytes.next_multiple_of(2 << 20));
        assert!(p.bytes >= r.bytes && p.bytes - r.bytes < (2 << 20));
        // Granularities that differ: the larger (their lcm, both being powers of two).
        let p = MulticastPlan::new(&r, 4, 512 << 20, 2 << 20).unwrap();
        assert_eq!(p.granularity, 512 << 20);
        assert_eq!(p.bytes % (512 << 20), 0);
        let p = MulticastPlan::new(&r, 4, 4096, 2 << 20).unwrap();
        assert_eq!(p.granularity, 2 << 20);
        let e = MulticastPlan::new(&r, 4, 3 << 20, 2 << 20).unwrap_err();
        assert!(e.to_string().contains("multicast granularity"), "{e}");
        let e = MulticastPlan::new(&r, 4, 2 << 20, 0).unwrap_err();
        assert!(e.to_string().contains("allocation granularity"), "{e}");
    }

    #[test]
    fn the_first_rank_of_the_group_creates() {
        let p = MulticastPlan::new(&region(4, &[2, 0, 3, 1]), 4, 2 << 20, 2 << 20).unwrap();
        assert_eq!(p.group, vec![0, 1, 2, 3]);
        assert_eq!((p.creator, p.ndevices()), (0, 4));
        let p = MulticastPlan::new(&region(2, &[]), 2, 2 << 20, 2 << 20).unwrap();
        assert_eq!((p.creator, p.ndevices()), (0, 2));
        let one =
            RegionPlan::for_settings(GpuAlgo::OneShot, 2, &[], 90, &Settings::default()).unwrap();
        let e = MulticastPlan::new(&one, 2, 2 << 20, 2 << 20).unwrap_err();
        assert!(e.to_string().contains("only NVLS"), "{e}");
    }

    #[test]
    fn the_steps_follow_nccls_order() {
        use MulticastStep::*;
        let p = MulticastPlan::new(&region(3, &[]), 3, 2 << 20, 2 << 20).unwrap();
        assert_eq!(
            p.steps(0),
            vec![
                Allocate,
                AgreeOnPlan,
                Create,
                SendHandle { to: 1 },
                SendHandle { to: 2 },
                AddDevice,
                Barrier,
                Bind,
                Map,
                Barrier
            ]
        );
        for r in [1, 2] {
            assert_eq!(
                p.steps(r),
                vec![
                    Allocate,
                    OpenInbox,
                    AgreeOnPlan,
                    ReceiveHandle { from: 0 },
                    Import,
                    AddDevice,
                    Barrier,
                    Bind,
                    Map,
                    Barrier
                ]
            );
        }
        // Every rank takes part in the same collective steps, in the same order (else one
        // would wait on another's all-gather forever).
        let collective = |r| {
            p.steps(r)
                .into_iter()
                .filter(|s| matches!(s, AgreeOnPlan | Barrier))
                .collect::<Vec<_>>()
        };
        assert_eq!(collective(0), collective(1));
        // Every inbox is open before the plan's all-gather, every send after it; every
        // device is added before the barrier that precedes any bind.
        for r in 0..3 {
            let s = p.steps(r);
            let at = |x: MulticastStep| s.iter().position(|y| *y == x);
            let agree = at(AgreeOnPlan).unwrap();
            if let Some(open) = at(OpenInbox) {
                assert!(open < agree);
            }
            assert!(
                s.iter()
                    .enumerate()
                    .all(|(i, x)| !matches!(x, SendHandle { .. }) || i > agree)
            );
            assert!(at(AddDevice).unwrap() < at(Barrier).unwrap());
            assert!(at(Barrier).unwrap() < at(Bind).unwrap());
            assert!(at(Bind).unwrap() < at(Map).unwrap());
        }
        // A sender for every receiver.
        let sends: Vec<usize> = p
            .steps(0)
            .into_iter()
            .filter_map(|s| match s {
                SendHandle { to } => Some(to),
                _ => None,
            })
            .collect();
        let receivers: Vec<usize> = (0..3)
            .filter(|&r| p.steps(r).contains(&ReceiveHandle { from: 0 }))
            .collect();
        assert_eq!(sends, receivers);
    }

    #[test]
    fn plans_are_compared_across_ranks() {
        let r = region(2, &[]);
        let a = MulticastPlan::new(&r, 2, 2 << 20, 2 << 20).unwrap();
        assert_eq!(a.mismatch(&a.encode()), None);
        assert_eq!(a.encode().len(), 8 * PLAN_FIELDS.len());
        let b = MulticastPlan::new(&r, 2, 512 << 20, 2 << 20).unwrap();
        let why = a.mismatch(&b.encode()).unwrap();
        assert!(why.starts_with("the multicast object's bytes"), "{why}");
        let mut c = a.clone();
        c.granularity = 4 << 20;
        let why = a.mismatch(&c.encode()).unwrap();
        assert!(why.contains("granularity"), "{why}");
        assert!(why.contains("4194304 there, 2097152 here"), "{why}");
        let mut d = a.clone();
        d.creator = 1;
        assert!(a.mismatch(&d.encode()).unwrap().contains("creating rank"));
        assert!(a.mismatch(&[1, 2]).is_some());
    }
}
