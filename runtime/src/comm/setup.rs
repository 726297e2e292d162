//! Init of a [`HostComm`], step by step, as NCCL's `ncclCommInitRank` (the steps are
//! listed in the module documentation of [`crate::comm`]).

use std::sync::{Arc, Mutex};

use weft_core::fifo::NCCL_STEPS;
use weft_core::fifo::ll::LL_DATA_BYTES;
use weft_core::sched::Collective;
use weft_core::tune::TuningModel;
use weft_core::wire::bootstrap::bus_id_from_str;

use super::connect::{self, Planned, TransportChoice, TransportKind, Transports};
use super::error::CommError;
use super::host::{HostComm, P2pConns};
use super::peers::{self, Peer, Settings};
use super::{
    CommOptions, MAX_CHANNELS, MIN_STEP_BYTES, NET_STEP_BYTES, channels, rings, wait_policy_for,
};
use crate::bootstrap::{Bootstrap, UniqueId};
use crate::conn::{
    AbortFlag, DEFAULT_LL_LINES, DEFAULT_STEP_BYTES, FifoLayout, WaitPolicy, Waiter,
};
use crate::exec::{ExecChannel, ExecError, Executor, RingConns, Tuning};
use crate::net::any::AnyNet;
use crate::net::external;
use crate::net::ib::{IbConfig, IbNet};
use crate::net::mesh::MeshNet;
use crate::net::socket::{SocketConfig, SocketNet};
use crate::transport::net::{NetOptions, NetTransport};
use crate::transport::shm::ShmTransport;

/// The connections of every channel's ring, as the executor takes them, and the transport
/// of each channel's (send, recv) connection (`None` on a single rank).
type RingChannels = (
    Vec<ExecChannel>,
    Vec<Option<(TransportKind, TransportKind)>>,
);

impl HostComm {
    /// Joins the communicator of `id` as `rank` of `nranks` (see the module documentation
    /// of [`crate::comm`]). Every rank must call it; it returns once all are connected.
    pub fn init(
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        opts: &CommOptions,
    ) -> Result<HostComm, CommError> {
        check_arguments(rank, nranks, opts)?;
        // What differs from the defaults, as NCCL_DEBUG=INFO lists it at init.
        opts.settings.log_changed_once();
        // The calling thread runs channel 0 of every call: its waits must wake on time.
        crate::exec::pool::tighten_timer_slack();
        let ll_lines = opts.ll_lines.unwrap_or(DEFAULT_LL_LINES);
        let mut bootstrap = Bootstrap::init(id, rank, nranks, &opts.bootstrap)?;
        let me = this_rank(rank, opts, ll_lines);
        let peers = gather_peers(&mut bootstrap, rank, &me)?;
        let status = crate::status::join(&mut bootstrap, rank, nranks)?;
        let rings = agree_on_rings(&mut bootstrap, rank, &peers, opts)?;

        let abort = AbortFlag::new();
        let any_net = nranks > 1 && rings_cross_net(&rings, &peers, opts, &abort);
        let waiter = Waiter {
            policy: wait_policy(opts, &peers, &me, any_net),
            abort: abort.clone(),
            peer_pid: None,
            board: Some(status.board.clone()),
        };
        let step_bytes = opts.step_bytes.unwrap_or(if any_net {
            NET_STEP_BYTES
        } else {
            DEFAULT_STEP_BYTES
        });
        let layout = fifo_layout(step_bytes)?;
        let tuning = host_tuning(opts, nranks, any_net, ll_lines, step_bytes)?;
        let mut transports = build_transports(opts, layout, &waiter, ll_lines, &abort)?;

        let me = peers.get(rank).copied().unwrap_or(me);
        let (channels, channel_kinds) = connect_rings(
            &mut bootstrap,
            &mut transports,
            rank,
            nranks,
            &me,
            &peers,
            &rings,
        )?;
        bootstrap.all_gather_for(&[], "init's last barrier")?;
        let mut executor = Executor::new(rank as u32, nranks, channels, step_bytes, abort.clone());
        executor.set_tuning(tuning);
        Ok(HostComm {
            rank,
            nranks,
            executor,
            p2p: P2pConns::default(),
            transports,
            peers,
            rings,
            channel_kinds,
            step_bytes,
            abort,
            failed: None,
            bootstrap,
            status,
        })
    }
}

/// Refuses a rank outside `0..nranks` and a channel count outside `1..=MAX_CHANNELS`.
fn check_arguments(rank: usize, nranks: usize, opts: &CommOptions) -> Result<(), CommError> {
    if nranks == 0 || rank >= nranks || u32::try_from(nranks).is_err() {
        return Err(CommError::InvalidArgument(format!(
            "rank {rank} of {nranks} ranks: need 0 <= rank < nranks"
        )));
    }
    if let Some(n) = opts.nchannels {
        if !(1..=MAX_CHANNELS).contains(&n) {
            return Err(CommError::InvalidArgument(format!(
                "{n} channels: use 1 to {MAX_CHANNELS}"
            )));
        }
    }
    Ok(())
}

/// What this rank tells the others: its device (with its PCI bus id, which the topology
/// search maps ranks to GPUs by) and the settings every rank must share.
fn this_rank(rank: usize, opts: &CommOptions, ll_lines: usize) -> Peer {
    let me = Peer::local(
        rank as u32,
        opts.device,
        Settings {
            transport: opts.transport.number(),
            pid: std::process::id(),
            nchannels: opts.nchannels.unwrap_or(0),
            step_bytes: opts.step_bytes.map_or(0, |b| b as u64),
            cpus: std::thread::available_parallelism()
                .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
            protocols: opts.protocols.to_bits(),
            ll_lines: u32::try_from(ll_lines).unwrap_or(u32::MAX),
        },
    );
    match (opts.device, opts.bus_id) {
        (Some(_), Some(bus_id)) => me.with_bus_id(bus_id),
        // The topology search maps ranks to GPUs by bus id; without one (no CUDA driver)
        // every rank keeps the plain ring.
        (Some(dev), None) => match crate::topo::gpu::bus_id_of(dev)
            .and_then(|b| bus_id_from_str(b.as_bytes()).map_err(|e| format!("{b}: {e}")))
        {
            Ok(bus_id) => me.with_bus_id(bus_id),
            Err(e) => {
                log::info!("rank {rank}: no PCI bus id for device {dev}: {e}");
                me
            }
        },
        (None, _) => me,
    }
}

/// Every rank's [`Peer`], by rank, checked ([`peers::check`]: two ranks on one device of
/// one host, settings that differ).
fn gather_peers(bootstrap: &mut Bootstrap, rank: usize, me: &Peer) -> Result<Vec<Peer>, CommError> {
    let gathered = bootstrap.all_gather_for(&me.encode()?, "init's all_gather of the ranks")?;
    let peers = gathered
        .iter()
        .enumerate()
        .map(|(r, bytes)| Peer::decode(r, bytes))
        .collect::<Result<Vec<Peer>, CommError>>()?;
    peers::check(rank, &peers)?;
    Ok(peers)
}

/// The channels' rings rank 0 planned for all ([`channels::agree_on_channels_with`]).
fn agree_on_rings(
    bootstrap: &mut Bootstrap,
    rank: usize,
    peers: &[Peer],
    opts: &CommOptions,
) -> Result<Vec<Vec<u32>>, CommError> {
    let plan = channels::agree_on_channels_with(
        bootstrap,
        peers,
        match &opts.topo_file {
            Some(path) => channels::TopoInput::File(path),
            None => channels::TopoInput::Host,
        },
        &opts.settings,
    )?;
    if rank == 0 {
        log::info!(
            "{} channels ({}, {} before NCCL_MIN/MAX_NCHANNELS): {}",
            plan.nchannels(),
            plan.source,
            plan.found,
            plan.note
        );
        for line in plan.lines() {
            log::info!("{line}");
        }
    }
    Ok(plan.rings)
}

/// Whether some ring edge goes over NET. Every rank looks at every ring edge, so all pick
/// the same step size.
fn rings_cross_net(
    rings: &[Vec<u32>],
    peers: &[Peer],
    opts: &CommOptions,
    abort: &AbortFlag,
) -> bool {
    // Only `choose` is asked of the probe: its SHM transport never waits, but refuses
    // every pair as the real one will when SHM is disabled.
    let probe_shm = ShmTransport::new(FifoLayout::default(), WaitPolicy::default(), abort.clone())
        .with_disabled(opts.settings.transport.shm_disable);
    let probe = Transports::new(opts.transport, probe_shm, Box::new(|| Err(String::new())));
    rings.iter().any(|ring| {
        ring.iter()
            .zip(ring.iter().cycle().skip(1))
            .any(|(&a, &b)| {
                peers
                    .get(a as usize)
                    .zip(peers.get(b as usize))
                    .is_some_and(|(a, b)| probe.choose(a, b) == TransportKind::Net)
            })
    })
}

/// How FIFO waits spin, yield and sleep: the options' policy, else one for the ranks of
/// this host and its CPUs ([`wait_policy_for`]); either with the options' deadline.
fn wait_policy(opts: &CommOptions, peers: &[Peer], me: &Peer, any_net: bool) -> WaitPolicy {
    let local_ranks = peers.iter().filter(|p| p.same_host(me)).count();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    opts.wait
        .unwrap_or_else(|| wait_policy_for(local_ranks, any_net, cpus))
        .with_timeout(opts.timeout)
}

/// The FIFO of every connection: 8 steps of `step_bytes`.
fn fifo_layout(step_bytes: usize) -> Result<FifoLayout, CommError> {
    if step_bytes < MIN_STEP_BYTES {
        return Err(CommError::InvalidArgument(format!(
            "FIFO steps of {step_bytes} bytes: at least {MIN_STEP_BYTES} (NCCL's 512-byte \
             grain; WEFT_BUFFSIZE / NCCL_BUFFSIZE of at least 4096)"
        )));
    }
    FifoLayout::new(NCCL_STEPS, step_bytes)
        .map_err(|e| CommError::InvalidArgument(format!("FIFO of {step_bytes}-byte steps: {e}")))
}

/// How calls choose their protocol; an error when the protocol settings leave some
/// collective nothing to run (at init, not mid-job).
fn host_tuning(
    opts: &CommOptions,
    nranks: usize,
    any_net: bool,
    ll_lines: usize,
    step_bytes: usize,
) -> Result<Tuning, CommError> {
    let tuning = Tuning {
        enable: opts.protocols,
        // Every rank computes this alike: `any_net` from the shared peer table, the LL
        // size checked equal on every rank.
        ll_step_bytes: if nranks > 1 && !any_net {
            ll_lines.saturating_mul(LL_DATA_BYTES)
        } else {
            0
        },
        model: TuningModel::HOST_SHM,
    };
    for c in [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast { root: 0 },
        Collective::Reduce { root: 0 },
    ] {
        tuning.choose(c, 0, nranks, step_bytes)?;
    }
    Ok(tuning)
}

/// The names of weft's own networks, which `NCCL_NET` may select instead of a plugin.
const OWN_NETS: [&str; 3] = ["IB", "Socket", "Mesh"];

/// The NET backend `opts` chooses, for host and GPU communicators alike: verbs
/// (`WEFT_TRANSPORT=ib`) or the multi-subnet mesh (`mesh`) when forced; else an NCCL net
/// plugin when `NCCL_NET_PLUGIN` (or NCCL's default `libnccl-net.so`) gives one that
/// initialises, unless `NCCL_NET` names another network; else sockets on its interfaces.
pub(crate) fn open_net(opts: &CommOptions) -> Result<AnyNet, String> {
    let settings = &opts.settings.net;
    Ok(match opts.transport {
        TransportChoice::Ib => {
            AnyNet::Ib(IbNet::new(IbConfig::from_settings(settings)).map_err(|e| e.to_string())?)
        }
        TransportChoice::Mesh => {
            AnyNet::Mesh(MeshNet::from_settings(settings).map_err(|e| e.to_string())?)
        }
        _ => match external::open_requested(
            settings.nccl_net_plugin.as_deref(),
            settings.nccl_net.as_deref(),
            &OWN_NETS,
        )
        .map_err(|e| e.to_string())?
        {
            Some(plugin) => AnyNet::External(plugin),
            None => {
                let mut config =
                    SocketConfig::from_settings(&settings.socket).map_err(|e| e.to_string())?;
                if opts.socket_ifname.is_some() {
                    config.ifname = opts.socket_ifname.clone();
                }
                AnyNet::Socket(SocketNet::new(config).map_err(|e| e.to_string())?)
            }
        },
    })
}

/// The transports connections are built over: SHM (with an LL buffer per step of
/// `ll_lines` lines), and NET, made on first use from the options' backend: verbs or the
/// mesh when forced, else an NCCL net plugin when `NCCL_NET_PLUGIN` (or NCCL's default
/// `libnccl-net.so`) gives one that initialises, else sockets.
fn build_transports(
    opts: &CommOptions,
    layout: FifoLayout,
    waiter: &Waiter,
    ll_lines: usize,
    abort: &AbortFlag,
) -> Result<Transports, CommError> {
    let net_options = NetOptions {
        layout,
        waiter: waiter.clone(),
        connect_timeout: opts.timeout,
        ..NetOptions::default()
    };
    // Made on first use (a communicator of one host may never need NET), from the
    // settings the options carry.
    let for_net = opts.clone();
    let make_net = move || {
        NetTransport::new(Arc::new(open_net(&for_net)?), net_options.clone())
            .map_err(|e| e.to_string())
    };
    // Only SHM connections get an LL buffer: the NET proxy moves SIMPLE slots only.
    let shm_layout = layout.with_ll_lines(ll_lines).map_err(|e| {
        CommError::InvalidArgument(format!("LL buffer of {ll_lines} lines per step: {e}"))
    })?;
    let transport = &opts.settings.transport;
    let shm = ShmTransport::new(shm_layout, waiter.policy, abort.clone())
        .with_board(waiter.board.clone())
        .with_dir(&transport.shm_dir)
        .with_disabled(transport.shm_disable);
    Ok(Transports::new(opts.transport, shm, Box::new(make_net)))
}

/// Per channel, a send connection to the ring's next rank and a receive connection from
/// its previous one (none on a single rank), each over the transport
/// [`Transports::choose`] picks, built with NCCL's handshake ([`connect::handshake`]).
fn connect_rings(
    bootstrap: &mut Bootstrap,
    transports: &mut Transports,
    rank: usize,
    nranks: usize,
    me: &Peer,
    peers: &[Peer],
    rings: &[Vec<u32>],
) -> Result<RingChannels, CommError> {
    let mut channels = Vec::with_capacity(rings.len());
    let mut channel_kinds = Vec::with_capacity(rings.len());
    for (c, ring) in rings.iter().enumerate() {
        let ring_arc: Arc<[u32]> = ring.as_slice().into();
        if nranks == 1 {
            channels.push(ExecChannel {
                ring: ring_arc,
                conns: None,
            });
            channel_kinds.push(None);
            continue;
        }
        let sched_ring = weft_core::sched::Ring::new(ring).map_err(ExecError::from)?;
        let pos = sched_ring.position(rank as u32).unwrap_or(0);
        let (next, prev) = (
            sched_ring.rank_after(pos, 1),
            sched_ring.rank_before(pos, 1),
        );
        let peer = |r: u32| peers.get(r as usize).copied().unwrap_or(*me);
        let (send_kind, recv_kind) = (
            transports.choose(me, &peer(next)),
            transports.choose(me, &peer(prev)),
        );
        transports.check(send_kind, me, &peer(next))?;
        transports.check(recv_kind, me, &peer(prev))?;
        let (tag_send, tag_recv) = connect::ring_tags(c as u32);
        let channel = c as u32;
        let (mut sends, mut recvs) = connect::handshake(
            rank as u32,
            bootstrap,
            transports,
            &[Planned {
                peer: next,
                channel,
                kind: send_kind,
                tag: tag_send,
            }],
            &[Planned {
                peer: prev,
                channel,
                kind: recv_kind,
                tag: tag_recv,
            }],
        )?;
        let (Some(send), Some(recv)) = (sends.pop(), recvs.pop()) else {
            return Err(CommError::InvalidArgument(
                "handshake returned no connection".to_string(),
            ));
        };
        log::info!(
            "{} : {prev} -> {rank} via {}, {rank} -> {next} via {}",
            rings::describe(c, rings.len(), ring),
            recv_kind.name(),
            send_kind.name()
        );
        channels.push(ExecChannel {
            ring: ring_arc,
            conns: Some(Arc::new(Mutex::new(RingConns::new(send, recv)))),
        });
        channel_kinds.push(Some((send_kind, recv_kind)));
    }
    Ok((channels, channel_kinds))
}
