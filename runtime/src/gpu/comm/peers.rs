//! The ranks' GPUs: the record each rank all-gathers at init (host, process, GPU and the
//! settings every rank must share), and what a rank concludes from everyone's: whether
//! it reaches every other GPU's memory (P2P), and whether NCCL would run P2P in read mode.

use weft_cuda::Device;

use crate::gpu::GpuError;

/// "WGPU": the record each rank all-gathers at init.
const PEER_MAGIC: u32 = 0x5747_5056;
/// The record of builds before `min_slices` joined it (2026-11-27): told apart so that
/// mixing builds is named as such.
const PEER_MAGIC_V1: u32 = 0x5747_5055;

/// What each rank tells the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GpuPeer {
    pub(super) host_hash: u64,
    pub(super) pid: u32,
    pub(super) device: u32,
    pub(super) bus_id: String,
    pub(super) nchannels: u32,
    pub(super) step_bytes: u64,
    pub(super) min_slices: u32,
}

impl GpuPeer {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&PEER_MAGIC.to_be_bytes());
        out.extend_from_slice(&self.host_hash.to_be_bytes());
        out.extend_from_slice(&self.pid.to_be_bytes());
        out.extend_from_slice(&self.device.to_be_bytes());
        out.extend_from_slice(&self.nchannels.to_be_bytes());
        out.extend_from_slice(&self.step_bytes.to_be_bytes());
        out.extend_from_slice(&self.min_slices.to_be_bytes());
        out.extend_from_slice(self.bus_id.as_bytes());
        out
    }

    pub(super) fn decode(rank: usize, b: &[u8]) -> Result<Self, GpuError> {
        let bad = || GpuError::InvalidArgument(format!("rank {rank} sent a malformed GPU record"));
        let u32_at = |at: usize| -> Result<u32, GpuError> {
            Ok(u32::from_be_bytes(
                b.get(at..at + 4)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?,
            ))
        };
        let u64_at = |at: usize| -> Result<u64, GpuError> {
            Ok(u64::from_be_bytes(
                b.get(at..at + 8)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?,
            ))
        };
        if u32_at(0)? == PEER_MAGIC_V1 {
            return Err(GpuError::InvalidArgument(format!(
                "rank {rank} runs an older weft build (its GPU record has no slice count): \
                 run the same build on every rank"
            )));
        }
        if u32_at(0)? != PEER_MAGIC {
            return Err(GpuError::InvalidArgument(format!(
                "rank {rank} is not a GPU rank (it joined with another weft communicator kind)"
            )));
        }
        Ok(GpuPeer {
            host_hash: u64_at(4)?,
            pid: u32_at(12)?,
            device: u32_at(16)?,
            nchannels: u32_at(20)?,
            step_bytes: u64_at(24)?,
            min_slices: u32_at(32)?,
            bus_id: String::from_utf8_lossy(b.get(36..).unwrap_or_default()).into_owned(),
        })
    }
}

/// `WEFT_TEST_SHARE_GPU` set to something other than blanks or `0`: ranks may share a GPU.
/// Read from the process, not from the settings: it is a switch for weft's own tests on
/// one-GPU machines, not a setting of weft's users (weft-config does not list it).
fn gpu_sharing_allowed() -> bool {
    std::env::var("WEFT_TEST_SHARE_GPU").is_ok_and(|v| !matches!(v.trim(), "" | "0"))
}

/// Checks that all ranks run with the same explicit settings and that no two of one host
/// share a GPU; returns whether this rank can reach the GPU memory of every other rank of
/// its host directly (P2P: not disabled by `p2p_disabled`, `NCCL_P2P_DISABLE`; peer access
/// possible; the peer's GPU visible here). Ranks of other hosts are reached over NET.
/// `WEFT_TEST_SHARE_GPU=1` lets ranks share a GPU: only for testing the protocol on
/// machines with one GPU (the ranks' kernels must then fit on the GPU together).
pub(super) fn check_peers(
    me: usize,
    peers: &[GpuPeer],
    p2p_disabled: bool,
) -> Result<bool, GpuError> {
    let mine = &peers[me];
    let mut reach = true;
    if p2p_disabled && peers.len() > 1 {
        log::info!("weft: P2P disabled (NCCL_P2P_DISABLE): device data goes through SHM");
        reach = false;
    }
    for (q, p) in peers.iter().enumerate() {
        if q == me {
            continue;
        }
        if p.step_bytes != mine.step_bytes
            || p.nchannels != mine.nchannels
            || p.min_slices != mine.min_slices
        {
            return Err(GpuError::InvalidArgument(format!(
                "rank {q} runs with {} channels, {}-byte FIFO steps and at least {} slices per \
                 step, this rank with {}, {} and {} (0 channels: the default): start every rank \
                 with the same WEFT_NCHANNELS, NCCL_BUFFSIZE and WEFT_MIN_SLICES",
                p.nchannels,
                p.step_bytes,
                p.min_slices,
                mine.nchannels,
                mine.step_bytes,
                mine.min_slices
            )));
        }
        if p.host_hash != mine.host_hash {
            // Another host: NET (`super::net`), whatever this host's GPUs can reach.
            continue;
        }
        if p.bus_id == mine.bus_id && !gpu_sharing_allowed() {
            return Err(GpuError::InvalidArgument(format!(
                "ranks {me} and {q} both use GPU {} (one rank per GPU, as NCCL's \"Duplicate GPU detected\")",
                p.bus_id
            )));
        }
        if p.bus_id == mine.bus_id {
            // Ranks sharing a GPU (tests on one-GPU machines): same memory, no P2P needed.
            continue;
        }
        let here = Device::get(mine.device as usize)?;
        match local_device_of(&p.bus_id)? {
            Some(d) if here.can_access_peer(&d)? => {}
            Some(_) => {
                log::info!(
                    "weft: GPU {} cannot access GPU {} (rank {q}) directly: device data goes through SHM",
                    mine.bus_id,
                    p.bus_id
                );
                reach = false;
            }
            None => {
                log::info!(
                    "weft: rank {q}'s GPU {} is not visible here (CUDA_VISIBLE_DEVICES?): device data goes through SHM",
                    p.bus_id
                );
                reach = false;
            }
        }
    }
    Ok(reach)
}

/// Whether the ranks are on more than one host (connections between hosts go over NET).
pub(super) fn several_hosts(peers: &[GpuPeer]) -> bool {
    peers.windows(2).any(|w| w[0].host_hash != w[1].host_hash)
}

/// NCCL's default for P2P read mode (`ncclTopoCheckP2p`): GPUs of compute capability 8.0
/// (Ampere) joined by NVLink, here every pair `rank` has with a GPU this process can see
/// (CUDA's native-atomics P2P attribute standing for NVLink). A peer's GPU this process
/// cannot see (`CUDA_VISIBLE_DEVICES` isolating each process) or a failed query answers no:
/// every rank must still reach the vote that follows, and write mode is always correct.
pub(super) fn read_by_default(dev: &Device, rank: usize, peers: &[GpuPeer]) -> bool {
    let ampere = |d: &Device| d.compute_capability().is_ok_and(|cc| cc == (8, 0));
    if !ampere(dev) {
        return false;
    }
    let host = peers.get(rank).map(|p| p.host_hash);
    peers.iter().enumerate().all(|(q, p)| {
        q == rank
            || Some(p.host_hash) != host
            || match local_device_of(&p.bus_id) {
                Ok(Some(d)) => ampere(&d) && dev.nvlink_to(&d).unwrap_or(false),
                Ok(None) => false,
                Err(e) => {
                    log::info!("weft: P2P read mode off: looking up rank {q}'s GPU failed: {e}");
                    false
                }
            }
    })
}

/// The device of this process with PCI bus id `bus_id`.
fn local_device_of(bus_id: &str) -> Result<Option<Device>, GpuError> {
    for i in 0..weft_cuda::device_count()? {
        let d = Device::get(i)?;
        if d.pci_bus_id()?.eq_ignore_ascii_case(bus_id) {
            return Ok(Some(d));
        }
    }
    Ok(None)
}

/// NCCL's INFO line per ring connection this rank sends on (`Channel 00/0 : 0[0] -> 1[1]
/// via P2P/IPC/read`), from channel `c`'s ring order in `rings`: `SHM/direct` for windows
/// in shared host memory, `P2P/direct pointer` to a GPU of this process, `P2P/IPC` to
/// another process's; `/read` in read mode; `[send] via NET/Socket/0` (`net`: each
/// channel's name of its NET device) to a rank of another host, and `[receive] via
/// NET/Socket/0` from one. Ranks are `rank[CUDA ordinal]` as in NCCL.
pub(super) fn connection_lines(
    rank: usize,
    peers: &[GpuPeer],
    rings: &[Vec<u32>],
    via_host: bool,
    read: bool,
    net: Option<&dyn Fn(u32) -> String>,
) -> Vec<String> {
    let dev = |r: usize| peers.get(r).map_or(0, |p| p.device);
    let mut out = Vec::new();
    for (c, ring) in rings.iter().enumerate() {
        let Some(at) = ring.iter().position(|&r| r as usize == rank) else {
            continue;
        };
        let next = ring[(at + 1) % ring.len()] as usize;
        if next == rank {
            continue;
        }
        let read = if read { "/read" } else { "" };
        let host = |r: usize| peers.get(r).map(|p| p.host_hash);
        let net_of = |peer: usize| {
            net.filter(|_| host(peer) != host(rank))
                .map(|name| name(c as u32))
        };
        let how = if let Some(net) = net_of(next) {
            format!("[send] via {net}")
        } else if via_host {
            "via SHM/direct".to_string()
        } else if peers.get(next).map(|p| (p.host_hash, p.pid))
            == peers.get(rank).map(|p| (p.host_hash, p.pid))
        {
            format!("via P2P/direct pointer{read}")
        } else {
            format!("via P2P/IPC{read}")
        };
        out.push(format!(
            "Channel {c:02}/0 : {rank}[{}] -> {next}[{}] {how}",
            dev(rank),
            dev(next)
        ));
        // NCCL also names the receiving end of a NET connection.
        let prev = ring[(at + ring.len() - 1) % ring.len()] as usize;
        if let Some(net) = net_of(prev) {
            out.push(format!(
                "Channel {c:02}/0 : {prev}[{}] -> {rank}[{}] [receive] via {net}",
                dev(prev),
                dev(rank)
            ));
        }
    }
    out
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn connection_lines_have_nccls_form() {
        let peer = |pid: u32, device: u32| GpuPeer {
            host_hash: 7,
            pid,
            device,
            bus_id: String::new(),
            nchannels: 0,
            step_bytes: 0,
            min_slices: 1,
        };
        // Ranks 0 and 1 in one process on GPUs 0 and 1, rank 2 in another on GPU 0.
        let peers = [peer(10, 0), peer(10, 1), peer(11, 0)];
        let rings = vec![vec![0, 1, 2], vec![2, 1, 0]];
        assert_eq!(
            connection_lines(1, &peers, &rings, false, true, None),
            [
                "Channel 00/0 : 1[1] -> 2[0] via P2P/IPC/read",
                "Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer/read",
            ]
        );
        assert_eq!(
            connection_lines(2, &peers, &rings, true, false, None),
            [
                "Channel 00/0 : 2[0] -> 0[0] via SHM/direct",
                "Channel 01/0 : 2[0] -> 1[1] via SHM/direct",
            ]
        );
        // Rank 2 on another host: NET, as NCCL says it.
        let mut far = peers.clone();
        far[2].host_hash = 8;
        // Each channel names its own device (here: the channel's number).
        let net = |c: u32| format!("NET/Socket/{c}");
        assert_eq!(
            connection_lines(1, &far, &rings, false, false, Some(&net)),
            [
                "Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0",
                "Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer",
                "Channel 01/0 : 2[0] -> 1[1] [receive] via NET/Socket/1",
            ]
        );
        // One rank: nothing to connect.
        assert!(connection_lines(0, &peers[..1], &[vec![0]], false, false, None).is_empty());
    }

    #[test]
    fn peer_record_round_trips() {
        let p = GpuPeer {
            host_hash: 0x1234_5678_9abc_def0,
            pid: 4242,
            device: 1,
            bus_id: "0000:19:00.0".to_string(),
            nchannels: 0,
            step_bytes: 512 << 10,
            min_slices: 3,
        };
        assert_eq!(GpuPeer::decode(3, &p.encode()).unwrap(), p);
        let mut bad = p.encode();
        bad[0] ^= 1;
        assert!(
            GpuPeer::decode(3, &bad)
                .unwrap_err()
                .to_string()
                .contains("rank 3")
        );
        assert!(GpuPeer::decode(2, &p.encode()[..20]).is_err());
        let mut old = p.encode();
        old[..4].copy_from_slice(&PEER_MAGIC_V1.to_be_bytes());
        let err = GpuPeer::decode(1, &old).unwrap_err().to_string();
        assert!(err.contains("rank 1 runs an older weft build"), "{err}");
    }
}
