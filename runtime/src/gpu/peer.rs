//! The memory of the peer-pointer algorithms (one-shot and two-shot all-reduce, NVLS in
//! either form), and the `weft_peer_work` of a call.
//!
//! A communicator that `WEFT_ALGO` sets to one of them (or, unforced, any whose ranks map each
//! other's memory: the automatic one-shot) allocates, besides its FIFO window, a
//! *peer region* on every rank, zeroed, the same size on every rank and mapped into every
//! rank's process like the FIFO windows (the pointer between ranks of one process, a CUDA
//! IPC handle between processes):
//!
//! ```text
//! FLAGS_AT  one-/two-shot barrier flags: MAX_CHANNELS x PEER_FLAGS_STRIDE bytes
//! STEPS_AT  this rank's per-channel epochs / NVLS steps (read and written by its own kernels)
//! DATA_AT   one-/two-shot: the data window (WEFT_DIRECT_WINDOW bytes; the LL one-shot cuts
//!           it into PEER_LANES lanes, direct.cu)
//!           NVLS: core::nvls::Layout's buffers (data_alloc bytes), then its counters
//! ```
//!
//! NVLS has two forms. Without the opt-in (`WEFT_NVLS=1`), its *unicast* form runs over
//! this region as above. With it (refused under `NCCL_NVLS_ENABLE=0`), its *multicast* form:
//! the region is VMM memory bound to one NVLink SHARP multicast object
//! ([`super::multicast`]), the same layout at the same offsets, and the kernels reach every
//! rank's copy through the object's address (`mc_data`, `mc_credit`) with `multimem`
//! instructions instead of through peer mappings (the multicast form maps no peer's
//! region). Every rank must run the same form ([`RegionPlan::multicast`] is compared).

use weft_config::{Group, Settings};
use weft_core::abi::{
    CollKind, DataType, MAX_CHANNELS, PEER_ALGO_NVLS, PEER_ALGO_NVLS_UNICAST, PEER_ALGO_ONE_SHOT,
    PEER_ALGO_TWO_SHOT, PEER_FLAGS_STRIDE, PEER_LANES, PEER_MAX_RANKS, PeerWork, RedOp,
};
use weft_core::algo::GpuAlgo;
use weft_core::nvls;

use super::error::GpuError;

/// Offset of the barrier flags in a peer region.
pub const FLAGS_AT: u64 = 0;
/// Offset of this rank's per-channel step counters.
pub const STEPS_AT: u64 = MAX_CHANNELS as u64 * PEER_FLAGS_STRIDE;
/// Offset of the data (16-byte aligned, and well past the counters).
pub const DATA_AT: u64 = 64 << 10;
/// Bytes of a one-/two-shot data window unless `WEFT_DIRECT_WINDOW` says otherwise: a
/// call's input goes through it in rounds of this size.
pub const DEFAULT_DIRECT_WINDOW: u64 = 8 << 20;
/// Bytes of a one-shot call per block (see [`RegionPlan::channels`]).
pub const ONE_SHOT_BLOCK_BYTES: usize = 4 << 10;
/// The granularity NVLS's layout is rounded to (NCCL's `NVLS_MEM_ALIGN_SIZE`; the unicast
/// form needs no VMM, but keeps the multicast form's sizes, which rounds the whole region
/// further to the GPU's multicast granularity, `super::multicast::MulticastPlan`).
pub const NVLS_GRANULARITY: u64 = 2 << 20;

/// What [`RegionPlan::encode`]'s words are, each with the setting that decides it.
const PLAN_FIELDS: [&str; 8] = [
    "the algorithm (WEFT_ALGO)",
    "the one-/two-shot window (WEFT_DIRECT_WINDOW)",
    "the NVLS channels (NCCL_NVLS_NCHANNELS; unset, it depends on the GPU: set it alike on \
     every rank where GPUs differ)",
    "the NVLS chunk (NCCL_NVLS_CHUNKSIZE)",
    "the NVLS heads (the NVLS search's)",
    "the region's bytes (the same weft build on every rank?)",
    "the kernels' threads per block (WEFT_KERNEL_THREADS; the LL one-shot's pairs per thread)",
    "the NVLS form, 1 for multicast (WEFT_NVLS=1 and NCCL_NVLS_ENABLE: set them alike on \
     every rank)",
];

/// What one rank's peer region holds, the same on every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionPlan {
    pub algo: GpuAlgo,
    /// Bytes of the region.
    pub bytes: u64,
    /// One-/two-shot: bytes of the data window.
    pub direct_window: u64,
    /// NVLS: the layout and its heads (ranks).
    pub nvls: Option<(nvls::Layout, nvls::Heads)>,
    /// NVLS: offset of the counters.
    pub credit_at: u64,
    /// Threads per block of the kernels (`WEFT_KERNEL_THREADS`): the LL one-shot's form and
    /// which pairs each thread moves depend on it, so every rank must have the same.
    pub threads: u32,
    /// NVLS: the multicast form ([`super::multicast`]) rather than the unicast one. Set by
    /// the communicator after [`RegionPlan::for_settings`], from the opt-in.
    pub multicast: bool,
}

impl RegionPlan {
    /// The region of `algo` for `nranks` ranks on GPUs of compute capability `sm` (major *
    /// 10 + minor). `heads`: the NVLS search's, or empty (the unicast form then takes every
    /// rank in rank order, what the search gives on one NVSwitch host). `settings` give
    /// `WEFT_DIRECT_WINDOW`, `NCCL_NVLS_NCHANNELS`, `NCCL_NVLS_CHUNKSIZE` and
    /// `WEFT_KERNEL_THREADS`; a value of the GPU's variables they refused (settings read
    /// leniently keep it aside) is an error naming it, not a region planned from its default.
    pub fn for_settings(
        algo: GpuAlgo,
        nranks: usize,
        heads: &[u32],
        sm: u32,
        settings: &Settings,
    ) -> Result<RegionPlan, GpuError> {
        settings
            .check_groups(&[Group::Gpu])
            .map_err(|e| GpuError::InvalidArgument(e.to_string()))?;
        if nranks > PEER_MAX_RANKS {
            return Err(GpuError::InvalidArgument(format!(
                "WEFT_ALGO={algo} with {nranks} ranks: its kernels address at most \
                 {PEER_MAX_RANKS} ranks of one host; use ring"
            )));
        }
        let gpu = &settings.gpu;
        let threads = settings.kernels.threads;
        match algo {
            GpuAlgo::Ring => Err(GpuError::InvalidArgument(
                "the ring needs no peer region".to_string(),
            )),
            GpuAlgo::OneShot | GpuAlgo::TwoShot => {
                let window = gpu.direct_window / 16 * 16;
                Ok(RegionPlan {
                    algo,
                    bytes: DATA_AT + window,
                    direct_window: window,
                    nvls: None,
                    credit_at: 0,
                    threads,
                    multicast: false,
                })
            }
            GpuAlgo::Nvls => {
                let ranks: Vec<i32> = if heads.is_empty() {
                    (0..nranks as i32).collect()
                } else {
                    heads.iter().map(|&h| h as i32).collect()
                };
                let heads = nvls::Heads::new(&ranks)
                    .map_err(|e| GpuError::InvalidArgument(e.to_string()))?;
                // One node: one head per rank (the kernels' shape).
                let mut sorted = ranks.clone();
                sorted.sort_unstable();
                if sorted != (0..nranks as i32).collect::<Vec<i32>>() {
                    return Err(GpuError::InvalidArgument(format!(
                        "NVLS heads {ranks:?} for {nranks} ranks: weft's NVLS kernels need one \
                         head per rank (one NVSwitch host)"
                    )));
                }
                let nchannels = u64::from(
                    gpu.nvls_nchannels
                        .unwrap_or_else(|| nvls::default_channels(sm, false))
                        .min(MAX_CHANNELS),
                );
                let chunk = gpu.nvls_chunksize;
                let layout = nvls::Layout::new(
                    heads.len(),
                    nchannels,
                    chunk,
                    NVLS_GRANULARITY,
                    NVLS_GRANULARITY,
                )
                .map_err(|e| GpuError::InvalidArgument(e.to_string()))?;
                let credit_at = DATA_AT + layout.data_alloc;
                Ok(RegionPlan {
                    algo,
                    bytes: credit_at + layout.credit_alloc,
                    direct_window: 0,
                    nvls: Some((layout, heads)),
                    credit_at,
                    threads,
                    multicast: false,
                })
            }
        }
    }

    /// The plan as bytes, for comparing across ranks: every rank computes it from its own
    /// settings (`WEFT_DIRECT_WINDOW`, `NCCL_NVLS_NCHANNELS`, `NCCL_NVLS_CHUNKSIZE`) and
    /// its own GPU (the NVLS channel default), and a rank whose plan differs would write
    /// past a peer's region. Eight big-endian bytes per field, in `PLAN_FIELDS` order,
    /// then the heads (four bytes each).
    pub fn encode(&self) -> Vec<u8> {
        let (nchannels, chunk, nheads, heads) = match &self.nvls {
            Some((layout, heads)) => (
                layout.nchannels,
                layout.chunk_size,
                heads.len() as u64,
                heads.ranks().to_vec(),
            ),
            None => (0, 0, 0, Vec::new()),
        };
        let fields = [
            self.algo as u64,
            self.direct_window,
            nchannels,
            chunk,
            nheads,
            self.bytes,
            u64::from(self.threads),
            u64::from(self.multicast),
        ];
        let mut out = Vec::with_capacity(8 * fields.len() + 4 * heads.len());
        for f in fields {
            out.extend_from_slice(&f.to_be_bytes());
        }
        for h in heads {
            out.extend_from_slice(&h.to_be_bytes());
        }
        out
    }

    /// `None` when another rank's [`RegionPlan::encode`] equals this one's; otherwise what
    /// differs, naming the setting to make alike.
    pub fn mismatch(&self, theirs: &[u8]) -> Option<String> {
        let mine = self.encode();
        if mine == theirs {
            return None;
        }
        first_difference(&PLAN_FIELDS, &mine, theirs).or_else(|| {
            Some(
                "the NVLS heads (the NVLS search's ranks) differ; run the same weft build and \
                 topology settings (NCCL_TOPO_FILE) on every rank"
                    .to_string(),
            )
        })
    }

    /// Whether a one-shot call on `nranks` ranks runs the LL form (`direct.cu`'s
    /// `ll_lane_pairs`: each of the `PEER_LANES` lanes holds, per rank and half, at least one
    /// 16-byte pair per thread), whose blocks only ever touch their own lane, so that the
    /// calls of a fused launch can run side by side on lanes of their own. Not on an NVLS
    /// region.
    pub fn ll_one_shot(&self, nranks: usize) -> bool {
        let pairs = self.direct_window / u64::from(PEER_LANES) / 16 / 2 / nranks.max(1) as u64;
        self.nvls.is_none() && pairs >= u64::from(self.threads)
    }

    /// Channels (blocks) of a call of `count` elements of `dtype` run by `algo` (one-shot or
    /// two-shot on a one-/two-shot region, which serves both: the automatic choice takes
    /// one or the other by size; ignored on an NVLS region).
    pub fn channels(&self, algo: GpuAlgo, count: usize, dtype: DataType, nranks: usize) -> u32 {
        match &self.nvls {
            Some((layout, _)) => layout.nchannels as u32,
            // One-shot is latency-bound: a block per 4 KiB (a pair per thread of 512), so
            // that each thread handles few pairs one after the other (at 32 KiB on one
            // block, 8 pairs per thread, it took 6.4 us with CUDA graphs on two H100, at
            // 8 KiB 4.1; 256 KiB on 16 blocks 6.4), at most one per lane.
            None if algo == GpuAlgo::OneShot => {
                u32::try_from((count * dtype.size_of_elem()).div_ceil(ONE_SHOT_BLOCK_BYTES))
                    .unwrap_or(PEER_LANES)
                    .clamp(1, PEER_LANES)
            }
            // NCCL's 32 KiB of traffic per channel, at most one block per lane of the LL
            // one-shot's window.
            None => weft_core::sched::channels_for(
                weft_core::sched::Collective::AllReduce,
                count,
                dtype.size_of_elem(),
                nranks,
                PEER_LANES,
            ),
        }
    }

    /// The launch descriptor of a call run by `algo` (as in [`RegionPlan::channels`]) on
    /// rank `rank`, with every rank's region at
    /// `regions[r]` as mapped here (0: not mapped here, as the multicast form's peers; the
    /// descriptor then has 0 for them too). The multicast form then needs
    /// [`RegionPlan::set_multicast`].
    #[allow(clippy::too_many_arguments)]
    pub fn work(
        &self,
        algo: GpuAlgo,
        comm: u64,
        regions: &[u64],
        rank: usize,
        coll: CollKind,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        op: RedOp,
        red_op_arg: u64,
        nchannels: u32,
    ) -> PeerWork {
        let mut w = PeerWork {
            comm,
            send_buff: send,
            recv_buff: recv,
            count,
            red_op_arg,
            window_bytes: self.direct_window,
            steps: regions.get(rank).copied().unwrap_or(0) + STEPS_AT,
            coll: coll as u32,
            dtype: dtype as u32,
            redop: op as u32,
            nchannels,
            heads: [-1; PEER_MAX_RANKS],
            ..PeerWork::default()
        };
        let flags_at = if self.nvls.is_some() {
            self.credit_at
        } else {
            FLAGS_AT
        };
        for (r, &base) in regions.iter().enumerate().take(PEER_MAX_RANKS) {
            if base == 0 {
                continue;
            }
            w.peer_data[r] = base + DATA_AT;
            w.peer_flags[r] = base + flags_at;
        }
        match (&self.nvls, algo) {
            (Some((layout, heads)), _) => {
                w.algorithm = PEER_ALGO_NVLS_UNICAST;
                w.nheads = heads.len() as u32;
                for (h, &r) in heads.ranks().iter().enumerate().take(PEER_MAX_RANKS) {
                    w.heads[h] = r;
                }
                w.chunk_size = u32::try_from(layout.chunk_size).unwrap_or(u32::MAX);
                w.layout_channels = layout.nchannels as u32;
            }
            (None, GpuAlgo::TwoShot) => w.algorithm = PEER_ALGO_TWO_SHOT,
            (None, _) => w.algorithm = PEER_ALGO_ONE_SHOT,
        }
        w
    }

    /// Turns `w` (from [`RegionPlan::work`]) into the multicast form's: the object mapped
    /// here at `mc_base` covers the region at the same offsets.
    pub fn set_multicast(&self, w: &mut PeerWork, mc_base: u64) {
        w.algorithm = PEER_ALGO_NVLS;
        w.mc_data = mc_base + DATA_AT;
        w.mc_credit = mc_base + self.credit_at;
    }

    /// Why the multicast form cannot run `coll` on `dtype` with `op`, if it cannot: NVLink
    /// SHARP reduces only some types and operators (`weft_kernels::nvls_multimem_reduces`);
    /// an all-gather only stores, any type. `None` for the unicast form and the others.
    pub fn multicast_refusal(&self, coll: CollKind, dtype: DataType, op: RedOp) -> Option<String> {
        let reduces = matches!(coll, CollKind::AllReduce | CollKind::ReduceScatter);
        if !self.multicast || !reduces || weft_kernels::nvls_multimem_reduces(dtype, op) {
            return None;
        }
        Some(format!(
            "NVLS multicast cannot {} {dtype:?} with {op:?}: NVLink SHARP reduces 32- and \
             64-bit integers and half/bfloat16 with sum, min and max, float and double with \
             sum only; use WEFT_ALGO=ring, or NVLS's unicast form (unset WEFT_NVLS)",
            if coll == CollKind::AllReduce {
                "all-reduce"
            } else {
                "reduce-scatter"
            }
        ))
    }
}

/// The first rank whose plan in `plans` (an all-gather of every rank's encoded plan)
/// `mismatch` finds different from this rank's, with what differs.
pub(super) fn first_disagreement(
    plans: &[Vec<u8>],
    mismatch: impl Fn(&[u8]) -> Option<String>,
) -> Option<(usize, String)> {
    plans
        .iter()
        .enumerate()
        .find_map(|(q, theirs)| mismatch(theirs).map(|why| (q, why)))
}

/// The first of `fields` (big-endian u64 words, in order) where two encoded plans differ,
/// as "what: theirs there, mine here"; `None` when those words are equal (what follows them
/// may still differ).
pub(super) fn first_difference(fields: &[&str], mine: &[u8], theirs: &[u8]) -> Option<String> {
    let word = |b: &[u8], i: usize| {
        b.get(8 * i..8 * i + 8)
            .and_then(|w| w.try_into().ok())
            .map(u64::from_be_bytes)
    };
    let show = |v: Option<u64>| v.map_or("nothing".to_string(), |v| v.to_string());
    fields.iter().enumerate().find_map(|(i, what)| {
        let (a, b) = (word(mine, i), word(theirs, i));
        (a != b).then(|| format!("{what}: {} there, {} here", show(b), show(a)))
    })
}

#[cfg(test)]
mod test {
    use super::*;

    /// The settings of `pairs` (each a variable and its value), read leniently as libnccl
    /// reads the process's: a refused value is kept aside for the plan to report.
    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let lookup = |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        Settings::from_lookup_or_defaults(&lookup)
    }

    /// The plan of `algo` for `nranks` ranks on sm_`sm`, with the NVLS search's `heads`
    /// and `vars` set.
    fn plan_on(
        algo: GpuAlgo,
        nranks: usize,
        heads: &[u32],
        sm: u32,
        vars: &[(&str, &str)],
    ) -> Result<RegionPlan, GpuError> {
        RegionPlan::for_settings(algo, nranks, heads, sm, &settings(vars))
    }

    /// The plan of `algo` for `nranks` ranks on sm_90, no NVLS heads, with `vars` set.
    fn plan(algo: GpuAlgo, nranks: usize, vars: &[(&str, &str)]) -> Result<RegionPlan, GpuError> {
        plan_on(algo, nranks, &[], 90, vars)
    }

    #[test]
    fn one_shot_takes_a_block_per_4_kib_up_to_one_per_lane() {
        let one_shot = plan(GpuAlgo::OneShot, 2, &[]).unwrap();
        let f32 = DataType::Float32;
        assert_eq!(one_shot.channels(GpuAlgo::OneShot, 1, f32, 2), 1);
        assert_eq!(one_shot.channels(GpuAlgo::OneShot, 1024, f32, 2), 1);
        assert_eq!(one_shot.channels(GpuAlgo::OneShot, 1025, f32, 2), 2);
        assert_eq!(one_shot.channels(GpuAlgo::OneShot, 8 << 10, f32, 2), 8);
        assert_eq!(
            one_shot.channels(GpuAlgo::OneShot, 1 << 20, f32, 2),
            PEER_LANES
        );
        // Two-shot keeps NCCL's 32 KiB of traffic per channel.
        let two = plan(GpuAlgo::TwoShot, 2, &[]).unwrap();
        assert!(two.channels(GpuAlgo::TwoShot, 8 << 10, f32, 2) < 8);
        assert!(two.channels(GpuAlgo::TwoShot, 64 << 20, f32, 2) <= PEER_LANES);
    }

    #[test]
    fn ranks_with_other_kernel_threads_are_refused() {
        let one_shot = plan(GpuAlgo::OneShot, 2, &[]).unwrap();
        assert_eq!(one_shot.threads, weft_kernels::THREADS);
        let more = plan(GpuAlgo::OneShot, 2, &[("WEFT_KERNEL_THREADS", "1024")]).unwrap();
        assert_eq!(more.threads, 1024);
        let why = one_shot.mismatch(&more.encode()).unwrap();
        assert!(why.contains("WEFT_KERNEL_THREADS"), "{why}");
        assert!(why.contains("1024 there"), "{why}");
    }

    #[test]
    fn plans_are_compared_across_ranks_naming_the_setting() {
        let a = plan(GpuAlgo::Nvls, 4, &[]).unwrap();
        assert_eq!(a.mismatch(&a.encode()), None);
        let b = plan(GpuAlgo::Nvls, 4, &[("NCCL_NVLS_NCHANNELS", "3")]).unwrap();
        let why = a.mismatch(&b.encode()).unwrap();
        assert!(why.contains("NCCL_NVLS_NCHANNELS"), "{why}");
        assert!(why.contains("3 there"), "{why}");
        // The channel default depends on the GPU.
        let hopper = plan(GpuAlgo::Nvls, 4, &[]).unwrap();
        let blackwell = plan_on(GpuAlgo::Nvls, 4, &[], 100, &[]).unwrap();
        let why = hopper.mismatch(&blackwell.encode()).unwrap();
        assert!(why.contains("NCCL_NVLS_NCHANNELS"), "{why}");
        let c = plan(GpuAlgo::Nvls, 4, &[("NCCL_NVLS_CHUNKSIZE", "65536")]).unwrap();
        let why = a.mismatch(&c.encode()).unwrap();
        assert!(why.contains("NCCL_NVLS_CHUNKSIZE"), "{why}");
        let d = plan_on(GpuAlgo::Nvls, 4, &[3, 2, 1, 0], 90, &[]).unwrap();
        let why = a.mismatch(&d.encode()).unwrap();
        assert!(why.contains("heads"), "{why}");
        let one = plan(GpuAlgo::OneShot, 4, &[]).unwrap();
        let why = one.mismatch(&a.encode()).unwrap();
        assert!(why.contains("WEFT_ALGO"), "{why}");
        let w = plan(GpuAlgo::OneShot, 4, &[("WEFT_DIRECT_WINDOW", "1048576")]).unwrap();
        let why = one.mismatch(&w.encode()).unwrap();
        assert!(why.contains("WEFT_DIRECT_WINDOW"), "{why}");
        assert!(one.mismatch(&[1, 2, 3]).is_some());
    }

    #[test]
    fn region_pieces_do_not_overlap() {
        assert!(FLAGS_AT + MAX_CHANNELS as u64 * PEER_FLAGS_STRIDE <= STEPS_AT);
        assert!(STEPS_AT + MAX_CHANNELS as u64 * 8 <= DATA_AT);
        assert_eq!(DATA_AT % 16, 0);
    }

    /// The LL form needs a pair per thread per rank and half in each of the 32 lanes: the
    /// default window has it on two ranks, the barrier test's 256 KiB does not (128 pairs),
    /// and neither does an NVLS region.
    #[test]
    fn the_ll_one_shot_is_known_on_the_host() {
        let default = plan(GpuAlgo::OneShot, 2, &[]).unwrap();
        assert!(default.ll_one_shot(2));
        let small = plan(GpuAlgo::OneShot, 2, &[("WEFT_DIRECT_WINDOW", "262144")]).unwrap();
        assert!(!small.ll_one_shot(2));
        // Exactly the kernel's bound: window / 32 lanes / 16 bytes / 2 halves / nranks pairs.
        let w = u64::from(PEER_LANES) * 16 * 2 * 2 * u64::from(default.threads);
        let edge = RegionPlan {
            direct_window: w,
            ..default.clone()
        };
        assert!(edge.ll_one_shot(2));
        let below = RegionPlan {
            direct_window: w - 16,
            ..default
        };
        assert!(!below.ll_one_shot(2));
    }

    #[test]
    fn one_and_two_shot_regions() {
        let p = plan(GpuAlgo::OneShot, 2, &[]).unwrap();
        assert_eq!(p.bytes, DATA_AT + DEFAULT_DIRECT_WINDOW);
        assert_eq!(Settings::default().gpu.direct_window, DEFAULT_DIRECT_WINDOW);
        let p = plan(GpuAlgo::TwoShot, 8, &[("WEFT_DIRECT_WINDOW", "1000000")]).unwrap();
        assert_eq!(p.direct_window, 1_000_000 / 16 * 16);
        let w = p.work(
            GpuAlgo::TwoShot,
            0xc0,
            &[0x1000_0000, 0x2000_0000],
            1,
            CollKind::AllReduce,
            0xa,
            0xb,
            77,
            DataType::Float32,
            RedOp::Sum,
            0,
            3,
        );
        assert_eq!(w.algorithm, PEER_ALGO_TWO_SHOT);
        assert_eq!(w.steps, 0x2000_0000 + STEPS_AT);
        assert_eq!(w.peer_data[0], 0x1000_0000 + DATA_AT);
        assert_eq!(w.peer_flags[1], 0x2000_0000 + FLAGS_AT);
        assert_eq!(w.peer_data[2], 0);
        assert_eq!(w.window_bytes, p.direct_window);
        assert_eq!((w.count, w.nchannels, w.layout_channels), (77, 3, 0));
        // The automatic choice's region (one-shot) serves two-shot calls too.
        let auto = plan(GpuAlgo::OneShot, 2, &[]).unwrap();
        let f32 = DataType::Float32;
        let w = auto.work(
            GpuAlgo::TwoShot,
            0xc0,
            &[0x1000_0000, 0x2000_0000],
            0,
            CollKind::AllReduce,
            0xa,
            0xb,
            77,
            f32,
            RedOp::Sum,
            0,
            3,
        );
        assert_eq!(w.algorithm, PEER_ALGO_TWO_SHOT);
        assert_eq!(
            auto.channels(GpuAlgo::TwoShot, 1 << 19, f32, 2),
            plan(GpuAlgo::TwoShot, 2, &[])
                .unwrap()
                .channels(GpuAlgo::TwoShot, 1 << 19, f32, 2)
        );
        let e = plan(GpuAlgo::OneShot, 9, &[]).unwrap_err();
        assert!(e.to_string().contains("at most 8 ranks"), "{e}");
        let e = plan(GpuAlgo::OneShot, 2, &[("WEFT_DIRECT_WINDOW", "12")]).unwrap_err();
        assert!(e.to_string().contains("WEFT_DIRECT_WINDOW"), "{e}");
    }

    #[test]
    fn nvls_region_follows_core_nvls() {
        let p = plan(GpuAlgo::Nvls, 2, &[]).unwrap();
        let (layout, heads) = p.nvls.as_ref().unwrap();
        assert_eq!(heads.ranks(), &[0, 1]);
        // 2 heads x 16 channels x 2 buffers x 8 slots x 128 KiB.
        assert_eq!(layout.data_alloc, 64 << 20);
        assert_eq!(p.credit_at, DATA_AT + (64 << 20));
        assert_eq!(p.bytes, p.credit_at + NVLS_GRANULARITY);
        let regions = [0x7000_0000_0000u64, 0x7100_0000_0000];
        let w = p.work(
            GpuAlgo::TwoShot,
            0xc0,
            &regions,
            0,
            CollKind::ReduceScatter,
            1,
            2,
            5,
            DataType::Bfloat16,
            RedOp::Max,
            0,
            p.channels(GpuAlgo::Nvls, 5, DataType::Bfloat16, 2),
        );
        assert_eq!(w.algorithm, PEER_ALGO_NVLS_UNICAST);
        assert_eq!(
            (w.nheads, w.chunk_size, w.layout_channels),
            (2, 128 << 10, 16)
        );
        assert_eq!(w.nchannels, 16);
        assert_eq!(&w.heads[..3], &[0, 1, -1]);
        assert_eq!(w.peer_flags[1], regions[1] + p.credit_at);
        assert_eq!((w.mc_data, w.mc_credit), (0, 0));
        // Heads from the search, in its order; a set that is not every rank is refused.
        let p = plan_on(
            GpuAlgo::Nvls,
            4,
            &[2, 0, 3, 1],
            90,
            &[
                ("NCCL_NVLS_NCHANNELS", "4"),
                ("NCCL_NVLS_CHUNKSIZE", "65536"),
            ],
        )
        .unwrap();
        let (layout, heads) = p.nvls.as_ref().unwrap();
        assert_eq!(heads.ranks(), &[2, 0, 3, 1]);
        assert_eq!((layout.nchannels, layout.chunk_size), (4, 65536));
        let e = plan_on(GpuAlgo::Nvls, 4, &[0, 1], 90, &[]).unwrap_err();
        assert!(e.to_string().contains("one head per rank"), "{e}");
    }

    #[test]
    fn the_multicast_form_addresses_the_object_and_only_its_own_region() {
        let mut p = plan(GpuAlgo::Nvls, 4, &[]).unwrap();
        let unicast = p.clone();
        p.multicast = true;
        // Ranks that chose different forms are refused, naming the settings.
        let why = unicast.mismatch(&p.encode()).unwrap();
        assert!(why.contains("WEFT_NVLS=1"), "{why}");
        assert!(why.contains("1 there, 0 here"), "{why}");
        // The multicast form maps no peer's region: 0 there, and 0 in the descriptor.
        let own = 0x7000_0000_0000u64;
        let regions = [0, own, 0, 0];
        let mut w = p.work(
            GpuAlgo::Nvls,
            0xc0,
            &regions,
            1,
            CollKind::AllReduce,
            1,
            2,
            1000,
            DataType::Float32,
            RedOp::Sum,
            0,
            4,
        );
        let mc = 0x7f00_0000_0000u64;
        p.set_multicast(&mut w, mc);
        assert_eq!(w.algorithm, PEER_ALGO_NVLS);
        assert_eq!(w.mc_data, mc + DATA_AT);
        assert_eq!(w.mc_credit, mc + p.credit_at);
        assert_eq!(w.peer_data, [0, own + DATA_AT, 0, 0, 0, 0, 0, 0]);
        assert_eq!(w.peer_flags, [0, own + p.credit_at, 0, 0, 0, 0, 0, 0]);
        assert_eq!(w.steps, own + STEPS_AT);
        // The unicast form's descriptor is what it was.
        let all = [0x1000_0000u64, 0x2000_0000, 0x3000_0000, 0x4000_0000];
        let u = unicast.work(
            GpuAlgo::Nvls,
            0xc0,
            &all,
            1,
            CollKind::AllReduce,
            1,
            2,
            1000,
            DataType::Float32,
            RedOp::Sum,
            0,
            4,
        );
        assert_eq!(u.algorithm, PEER_ALGO_NVLS_UNICAST);
        assert_eq!((u.mc_data, u.mc_credit), (0, 0));
        assert_eq!(u.peer_data[3], 0x4000_0000 + DATA_AT);
    }

    #[test]
    fn the_multicast_form_refuses_what_nvlink_sharp_does_not_reduce() {
        let mut p = plan(GpuAlgo::Nvls, 2, &[]).unwrap();
        let (ar, rs, ag) = (
            CollKind::AllReduce,
            CollKind::ReduceScatter,
            CollKind::AllGather,
        );
        // The unicast form runs everything.
        assert_eq!(p.multicast_refusal(ar, DataType::Int8, RedOp::Prod), None);
        p.multicast = true;
        assert_eq!(p.multicast_refusal(ar, DataType::Float32, RedOp::Sum), None);
        assert_eq!(
            p.multicast_refusal(rs, DataType::Bfloat16, RedOp::Max),
            None
        );
        let why = p
            .multicast_refusal(ar, DataType::Float32, RedOp::Max)
            .unwrap();
        assert!(why.contains("all-reduce Float32 with Max"), "{why}");
        assert!(why.contains("unset WEFT_NVLS"), "{why}");
        let why = p
            .multicast_refusal(rs, DataType::Uint8, RedOp::Sum)
            .unwrap();
        assert!(why.contains("reduce-scatter"), "{why}");
        assert!(
            p.multicast_refusal(ar, DataType::Int32, RedOp::Avg)
                .is_some()
        );
        // An all-gather only stores.
        assert_eq!(p.multicast_refusal(ag, DataType::Uint8, RedOp::Sum), None);
    }
}
