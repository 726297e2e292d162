//! The rings of a GPU communicator's channels, the same on every rank: NCCL's ring search
//! over this host's topology (`crate::comm::channels`, the same rings `weft topo` prints),
//! decided by rank 0 for all; where the search cannot run (no topology, ranks sharing a
//! GPU, ranks on several hosts), [`DEFAULT_CHANNELS`] plain rings ([`NET_DEFAULT_CHANNELS`]
//! over several hosts), as many as `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS` allow. Then
//! the program's own bounds (ncclConfig_t's `minCTAs` / `maxCTAs`), and rank 0's count
//! wherever environments differ. Over several hosts every ring visits each host's ranks
//! together, entering and leaving each host through a different rank on each channel
//! ([`host_rings`]).

use weft_core::abi::MAX_CHANNELS;
use weft_core::wire::bootstrap::bus_id_from_str;

use super::peers::{GpuPeer, several_hosts};
use crate::bootstrap::Bootstrap;
use crate::comm::channels::{SOURCE_SEARCH, TopoInput, agree_on_channels_with, bound_channels};
use crate::comm::peers::{Peer, Settings};
use crate::comm::{ChannelBounds, CommError, CommOptions};
use crate::config::TopologySettings;
use crate::gpu::GpuError;

/// Channels a GPU communicator builds when the topology search cannot run.
pub const DEFAULT_CHANNELS: u32 = 16;
/// Channels of a communicator over several hosts, where NET connections carry every
/// ring: NCCL's count for one NIC per host. Each is a connection per direction per host
/// boundary, with its FIFOs in pinned host memory.
pub const NET_DEFAULT_CHANNELS: u32 = 2;

/// The channels every rank agreed on, and what the search said beside them.
#[derive(Debug)]
pub(super) struct ChannelRings {
    /// The ring of each channel.
    pub(super) rings: Vec<Vec<u32>>,
    /// The search's verdict on P2P (`NCCL_P2P_LEVEL` / `NCCL_P2P_DISABLE` against the path
    /// between two ranks' GPUs): a pair that may not use it, if any, and how far apart
    /// they are.
    pub(super) p2p_blocked: Option<(u32, u32, String)>,
    /// The heads the NVLS search found (empty: it did not run or found none).
    pub(super) nvls_heads: Vec<u32>,
}

/// The rings of the communicator's channels (see the module documentation). Collective:
/// every rank calls it with the same peers.
pub(super) fn channel_rings(
    bootstrap: &mut Bootstrap,
    peers: &[GpuPeer],
    opts: &CommOptions,
) -> Result<ChannelRings, GpuError> {
    let explicit = opts.nchannels.unwrap_or(0);
    let (rings, p2p_blocked, nvls_heads, searched) =
        agreed_rings(bootstrap, peers, explicit, &opts.settings)?;
    // The searched rings run on two blocks each unless some rank set the count: decided
    // alike everywhere (rank 0 planned the rings, but each rank has its own settings).
    let set_here = channel_count_set(explicit, &opts.settings.topology);
    let set_anywhere = bootstrap
        .all_gather_for(
            &[u8::from(set_here)],
            "init's all_gather of the channel settings",
        )?
        .iter()
        .any(|b| b.first() != Some(&0));
    let rings = if searched && !set_anywhere {
        two_blocks_per_ring(rings)
    } else {
        rings
    };
    agree_on_bounds(bootstrap, opts.channel_bounds)?;
    let rings = match opts.channel_bounds {
        Some(b) => {
            let bounded = bound_channels(rings, b.min, b.max);
            log::info!(
                "weft: {} channel(s) within the communicator's bounds {}..={}",
                bounded.len(),
                b.min,
                b.max
            );
            bounded
        }
        None => rings,
    };
    Ok(ChannelRings {
        rings: rank_zeros_count(bootstrap, rings, peers)?,
        p2p_blocked,
        nvls_heads,
    })
}

/// The rings rank 0 planned (the search's, or plain ones), the search's P2P verdict, the
/// NVLS heads, and whether the rings are the search's.
#[allow(clippy::type_complexity)]
fn agreed_rings(
    bootstrap: &mut Bootstrap,
    peers: &[GpuPeer],
    explicit: u32,
    settings: &crate::config::Settings,
) -> Result<(Vec<Vec<u32>>, Option<(u32, u32, String)>, Vec<u32>, bool), GpuError> {
    let comm_peers: Vec<Peer> = peers
        .iter()
        .enumerate()
        .map(|(r, p)| {
            let settings = Settings {
                transport: 0,
                pid: p.pid,
                nchannels: explicit,
                step_bytes: p.step_bytes,
                cpus: 1,
                protocols: weft_core::tune::ProtocolEnable::default().to_bits(),
                ll_lines: 0,
            };
            let mut peer = Peer::local(r as u32, Some(p.device as i32), settings);
            peer.info.host_hash = p.host_hash;
            peer.with_bus_id(bus_id_from_str(p.bus_id.as_bytes()).unwrap_or(0))
        })
        .collect();
    let plain = |why: &str| {
        let count = if explicit > 0 {
            explicit
        } else {
            // As set (before NCCL's clamping); a count no u32 holds is no bound.
            let bound = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
            let max = bound(settings.topology.max_nchannels).unwrap_or(MAX_CHANNELS);
            let min = bound(settings.topology.min_nchannels).unwrap_or(1);
            let default = if several_hosts(peers) {
                NET_DEFAULT_CHANNELS
            } else {
                DEFAULT_CHANNELS
            };
            default.min(max).max(min)
        }
        .clamp(1, MAX_CHANNELS);
        log::info!("weft: {count} plain ring channel(s): {why}");
        plain_rings(peers, count as usize)
    };
    match agree_on_channels_with(bootstrap, &comm_peers, TopoInput::Host, settings) {
        Ok(plan) if plan.source == SOURCE_SEARCH || explicit > 0 => {
            log::info!(
                "weft: {} channel(s) from the {} ({})",
                plan.nchannels(),
                plan.source,
                plan.note
            );
            for line in plan.lines() {
                log::info!("{line}");
            }
            // Over several hosts the plan's rings are plain ones in rank order (the search
            // is per host): visit each host's ranks together instead.
            let rings = if several_hosts(peers) {
                host_rings(peers, plan.rings.len())
            } else {
                plan.rings
            };
            Ok((
                rings,
                plan.p2p_blocked,
                plan.nvls_heads,
                plan.source == SOURCE_SEARCH,
            ))
        }
        Ok(plan) => Ok((plain(&plan.note), None, plan.nvls_heads, false)),
        Err(CommError::Bootstrap(e)) => Err(GpuError::Bootstrap(e)),
        Err(e) => Ok((plain(&e.to_string()), None, Vec::new(), false)),
    }
}

/// `count` plain rings: in rank order on one host; over several hosts, [`host_rings`].
/// Every rank builds the same ones from the same peers.
fn plain_rings(peers: &[GpuPeer], count: usize) -> Vec<Vec<u32>> {
    if several_hosts(peers) {
        return host_rings(peers, count);
    }
    let n = u32::try_from(peers.len()).unwrap_or(u32::MAX);
    (0..count).map(|_| (0..n).collect()).collect()
}

/// `count` rings that visit the ranks host by host (hosts in the order of their first rank),
/// so that each crosses between hosts once per host boundary, as NCCL's inter-node rings
/// do, whatever order the program gave the ranks. Inside a host, channel `c` starts `c`
/// ranks further along its rank order: the rank that sends to the next host (and the one
/// that receives from the previous) changes from channel to channel, so every rank's proxy
/// thread carries a share of the NET traffic instead of one rank per host carrying all of
/// it (and each receiving rank's kernel reads fewer channels from pinned host memory).
fn host_rings(peers: &[GpuPeer], count: usize) -> Vec<Vec<u32>> {
    let mut hosts: Vec<(u64, Vec<u32>)> = Vec::new();
    for (r, p) in peers.iter().enumerate() {
        let r = u32::try_from(r).unwrap_or(u32::MAX);
        match hosts.iter_mut().find(|(h, _)| *h == p.host_hash) {
            Some((_, ranks)) => ranks.push(r),
            None => hosts.push((p.host_hash, vec![r])),
        }
    }
    (0..count)
        .map(|c| {
            hosts
                .iter()
                .flat_map(|(_, ranks)| {
                    let shift = c % ranks.len();
                    ranks[shift..].iter().chain(&ranks[..shift]).copied()
                })
                .collect()
        })
        .collect()
}

/// Refuses a communicator whose ranks bound their channels differently (ncclConfig_t's
/// minCTAs / maxCTAs): a rank that bounded the agreed plan differently would fall back to
/// plain rings while the others keep the searched ones (whose orders differ), and their
/// neighbours would not match.
fn agree_on_bounds(
    bootstrap: &mut Bootstrap,
    bounds: Option<ChannelBounds>,
) -> Result<(), GpuError> {
    let encode = |b: Option<ChannelBounds>| -> [u8; 8] {
        let (min, max) = b.map_or((0, 0), |b| (b.min, b.max));
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&min.to_be_bytes());
        out[4..].copy_from_slice(&max.to_be_bytes());
        out
    };
    let mine = encode(bounds);
    for (r, theirs) in bootstrap
        .all_gather_for(&mine, "init's all_gather of the channel bounds")?
        .iter()
        .enumerate()
    {
        if theirs.as_slice() != mine.as_slice() {
            let show = |b: &[u8]| match (b.get(..4), b.get(4..8)) {
                (Some([0, 0, 0, 0]), Some([0, 0, 0, 0])) => "none".to_string(),
                (Some(lo), Some(hi)) => format!(
                    "{}..={}",
                    u32::from_be_bytes(lo.try_into().unwrap_or_default()),
                    u32::from_be_bytes(hi.try_into().unwrap_or_default())
                ),
                _ => "malformed".to_string(),
            };
            return Err(GpuError::InvalidArgument(format!(
                "rank {r} bounds its channels to {} and this rank to {} (ncclConfig_t's \
                 minCTAs / maxCTAs): every rank of a communicator must pass the same",
                show(theirs),
                show(&mine)
            )));
        }
    }
    Ok(())
}

/// `rings`, or as many plain rings ([`plain_rings`]) as rank 0 has where its count differs:
/// plain rings are counted from each rank's own NCCL_MIN/MAX_NCHANNELS, and ranks with
/// different environments would lay out their windows differently. (Rank 0's own rings
/// are plain ones then too: only the plain path counts per rank.)
fn rank_zeros_count(
    bootstrap: &mut Bootstrap,
    rings: Vec<Vec<u32>>,
    peers: &[GpuPeer],
) -> Result<Vec<Vec<u32>>, GpuError> {
    let counts = bootstrap.all_gather_for(
        &(rings.len() as u32).to_be_bytes(),
        "init's all_gather of the ring counts",
    )?;
    let first = counts
        .first()
        .and_then(|c| c.as_slice().try_into().ok())
        .map_or(0, u32::from_be_bytes) as usize;
    if first == rings.len() {
        return Ok(rings);
    }
    log::warn!(
        "weft: this rank would build {} channels, rank 0 {first}: using rank 0's (set \
         NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS alike on every rank)",
        rings.len()
    );
    Ok(plain_rings(peers, first.clamp(1, MAX_CHANNELS as usize)))
}

/// Whether this rank set its channel count (an explicit count, `WEFT_NCHANNELS`,
/// `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS`, or their other names): then the searched
/// rings are not doubled.
fn channel_count_set(explicit: u32, topology: &TopologySettings) -> bool {
    explicit > 0 || topology.channel_count_set()
}

/// The searched rings, each run by two blocks (channel `c + n` takes channel `c`'s ring, as
/// `NCCL_MIN_NCHANNELS` repeats them), at most [`MAX_CHANNELS`]: the communicator's channels
/// unless some rank set the count ([`channel_count_set`]; ncclConfig_t's bounds apply after
/// this). weft's ring kernel moves less per block than NCCL's: on two H100 with NCCL's 24
/// channels its all-reduce reached 0.86-0.92x NCCL's bus bandwidth from 64 MiB, with 48
/// 1.02-1.06x up to 1 GiB (2026-11-25).
fn two_blocks_per_ring(rings: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    if rings.is_empty() {
        return rings;
    }
    let n = rings.len() as u32;
    let doubled = bound_channels(rings, (2 * n).min(MAX_CHANNELS), MAX_CHANNELS);
    log::info!(
        "weft: {} channel(s): the search's {n} rings, each on two blocks (NCCL_MIN_NCHANNELS / \
         NCCL_MAX_NCHANNELS set the count)",
        doubled.len()
    );
    doubled
}

#[cfg(test)]
mod test {
    use super::*;

    fn on_hosts(hosts: &[u64]) -> Vec<GpuPeer> {
        hosts
            .iter()
            .enumerate()
            .map(|(r, &host_hash)| GpuPeer {
                host_hash,
                pid: r as u32,
                device: r as u32,
                bus_id: String::new(),
                nchannels: 0,
                step_bytes: 0,
                min_slices: 0,
            })
            .collect()
    }

    #[test]
    fn rings_over_hosts_enter_and_leave_each_host_through_each_rank_in_turn() {
        // Ranks given out of host order: 0 and 2 on host 7, 1 and 3 on host 9.
        let rings = host_rings(&on_hosts(&[7, 9, 7, 9]), 3);
        assert_eq!(
            rings,
            vec![vec![0, 2, 1, 3], vec![2, 0, 3, 1], vec![0, 2, 1, 3]]
        );
        // One rank per host: every channel the same ring.
        assert_eq!(
            host_rings(&on_hosts(&[1, 2]), 2),
            vec![vec![0, 1], vec![0, 1]]
        );
        // Unequal hosts: each rotates by its own size; every ring holds every rank once.
        let rings = host_rings(&on_hosts(&[1, 1, 1, 2]), 4);
        assert_eq!(rings[1], vec![1, 2, 0, 3]);
        for ring in &rings {
            let mut sorted = ring.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![0, 1, 2, 3]);
        }
        // Plain rings: rank order on one host (every channel alike, as rank 0's fallback
        // count builds them on every rank), the host rings over several.
        assert_eq!(
            plain_rings(&on_hosts(&[5, 5, 5]), 2),
            vec![vec![0, 1, 2]; 2]
        );
        assert_eq!(
            plain_rings(&on_hosts(&[7, 9, 7, 9]), 2),
            host_rings(&on_hosts(&[7, 9, 7, 9]), 2)
        );
    }

    #[test]
    fn searched_rings_run_on_two_blocks_unless_the_count_was_set() {
        let rings: Vec<Vec<u32>> = (0..24).map(|c| vec![c % 2, 1 - c % 2]).collect();
        let doubled = two_blocks_per_ring(rings.clone());
        assert_eq!(doubled.len(), 48);
        for (c, ring) in doubled.iter().enumerate() {
            assert_eq!(ring, &rings[c % 24], "channel {c}");
        }
        // At most MAX_CHANNELS.
        let many: Vec<Vec<u32>> = (0..40).map(|_| vec![0, 1]).collect();
        assert_eq!(two_blocks_per_ring(many).len(), MAX_CHANNELS as usize);
        // A count the user set.
        let none = TopologySettings::default();
        assert!(!channel_count_set(0, &none));
        assert!(channel_count_set(24, &none));
        for var in [
            "NCCL_MIN_NCHANNELS",
            "NCCL_MAX_NCHANNELS",
            "WEFT_MAX_NCHANNELS",
            "WEFT_NCHANNELS",
        ] {
            let set = |v: &str| (v == var).then(|| "24".to_string());
            let settings = crate::config::Settings::from_lookup(&set).unwrap();
            assert!(channel_count_set(0, &settings.topology), "{var}");
        }
    }
}
