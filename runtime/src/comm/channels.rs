//! How many channels a communicator has, and the ring each runs on.
//!
//! [`plan_channels`] follows NCCL's `initTransportsRank` where it can:
//!
//! - **One host, a GPU per rank** (every peer reports a device and its PCI bus id): the
//!   host's topology (`WEFT_TOPO_FILE` / `NCCL_TOPO_FILE`, else detection) gets NCCL's
//!   treatment of a communicator's GPUs: each GPU used by a rank takes that rank's number,
//!   the others leave the search (NCCL's `keep` / `ncclTopoTrimXml`). The ring and tree
//!   searches run as `weft topo` runs them ([`TopoView`]), and the rings are NCCL's after
//!   its post-processing ([`comm_rings`]: `min(ring, tree)` graph channels, doubled): 24
//!   channels of `0 1 2 3` on 4x H200, as `NCCL_DEBUG=INFO` prints.
//! - **Several hosts, or ranks without a GPU** (the CPU executor): the plain ring
//!   `0 1 .. n-1` on every channel, one channel per CPU per local rank
//!   ([`peers::default_channels`], at most [`DEFAULT_MAX_CHANNELS`]). NCCL searches each
//!   host and then joins the hosts' rings through NICs; weft's search of inter-node graphs
//!   exists (`weft topo --hosts`), but joining per-host results into a communicator's rings
//!   is not done yet, so several hosts keep the plain ring.
//!
//! Then, in both cases, `NCCL_MAX_NCHANNELS` (`WEFT_MAX_NCHANNELS`) keeps the first channels
//! and `NCCL_MIN_NCHANNELS` (`WEFT_MIN_NCHANNELS`) repeats them, channel `c` taking the ring
//! of channel `c - n` (NCCL's `copyChannels`). An explicit count (`WEFT_NCHANNELS`,
//! `--channels`) acts as both and wins over them.
//!
//! All ranks must build the same channels. The topology and the environment are each
//! rank's own (ranks may see different GPUs through `CUDA_VISIBLE_DEVICES`, or be started
//! with different variables), so [`agree_on_channels_with`] has rank 0 plan from the all-gathered
//! peers and broadcast the result; the others check and adopt it. NCCL instead detects on
//! every rank, fuses the XML of the host's ranks and takes the minimum channel count over
//! ranks; one broadcast gives the same guarantee with less machinery.

use std::fmt::Write as _;
use std::path::Path;

use weft_core::algo::GpuAlgo;
use weft_core::nvls::Heads;
use weft_core::search::comm_rings;
use weft_core::topo::NodeKind;
use weft_core::topo::model::busid_to_u64;
use weft_core::topo::system_xml::topology_from_xml;
use weft_core::topo::xml::XmlNode;
use weft_core::wire::bootstrap::PEER_HOST_ONLY;

use super::error::CommError;
use super::peers::{self, Peer};
use super::{DEFAULT_MAX_CHANNELS, MAX_CHANNELS, rings};
use crate::bootstrap::Bootstrap;
use crate::config::{self, TopologySettings};
use crate::topo::DetectOptions;
use crate::topo::source::{TopoError, local_topology, path_options};
use crate::topo::view::TopoView;

/// [`ChannelPlan::source`] when the rings come from NCCL's search over the topology.
pub const SOURCE_SEARCH: &str = "search";
/// [`ChannelPlan::source`] for the plain ring `0 1 .. n-1` and a CPU-based count.
pub const SOURCE_PLAIN: &str = "plain";

/// Where [`plan_channels`] gets the host's topology when it needs one.
#[derive(Debug, Clone, Copy)]
pub enum TopoInput<'a> {
    /// `WEFT_TOPO_FILE` / `NCCL_TOPO_FILE` of the lookup, else detection on this machine
    /// (sysfs, CUDA driver, NVML), as `weft topo` does.
    Host,
    /// This NCCL topology XML file (`--file` of `weft topo`).
    File(&'a Path),
    /// This NCCL topology XML (a file the caller read, an earlier detection's `xml`).
    Xml(&'a XmlNode),
}

/// The channels of a communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelPlan {
    /// One ring per channel, each a permutation of the communicator's ranks `0..n`.
    pub rings: Vec<Vec<u32>>,
    /// [`SOURCE_SEARCH`] or [`SOURCE_PLAIN`].
    pub source: &'static str,
    /// Channels before `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS` / an explicit count.
    pub found: u32,
    /// Why this source, for the log: the graph NCCL would print, or why no search ran.
    pub note: String,
    /// From the search: a pair of ranks whose GPUs may not use P2P under `NCCL_P2P_LEVEL`
    /// / `NCCL_P2P_DISABLE` (NCCL's `ncclTopoCheckP2p` on the path between them), and the
    /// path type; `None` when every pair may, or when no search ran.
    pub p2p_blocked: Option<(u32, u32, String)>,
    /// The NVLS heads (ranks, in the NVLS graph's channel order) when the NVLS search ran
    /// and found them: only when `WEFT_ALGO=nvls` asks for NVLS and `NCCL_NVLS_ENABLE` is
    /// not 0 (the search is costly and nothing else uses it); empty otherwise.
    pub nvls_heads: Vec<u32>,
}

impl ChannelPlan {
    pub fn nchannels(&self) -> usize {
        self.rings.len()
    }

    /// NCCL's `NCCL_DEBUG=INFO` lines: `Channel 00/24 : 0 1 2 3`, one per channel.
    pub fn lines(&self) -> Vec<String> {
        let n = self.rings.len();
        self.rings
            .iter()
            .enumerate()
            .map(|(c, r)| rings::describe(c, n, r))
            .collect()
    }
}

/// The channel count bounds of the settings, as NCCL reads them from its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    min: u32,
    max: u32,
}

impl Limits {
    /// `WEFT_MIN_NCHANNELS` / `NCCL_MIN_NCHANNELS` / `NCCL_MIN_NRINGS` (default 0) and the
    /// `MAX` ones (default 64), clamped as NCCL's `ncclMinNchannels` / `ncclMaxNchannels`
    /// clamp them (min to 0..=64, max to 1..=64).
    fn of(settings: &TopologySettings) -> Limits {
        let max_all = i64::from(MAX_CHANNELS);
        let clamp = |v: i64, lo: i64| u32::try_from(v.clamp(lo, max_all)).unwrap_or(MAX_CHANNELS);
        Limits {
            min: clamp(settings.min_nchannels.unwrap_or(0), 0),
            max: clamp(settings.max_nchannels.unwrap_or(max_all), 1),
        }
    }

    /// NCCL's `ncclTopoPostset` tail: keep at most `max` channels, then repeat them up to
    /// `min` (channel `c` takes the ring of channel `c - n`, `n` the count kept).
    fn apply(self, mut rings: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
        rings.truncate(self.max as usize);
        let kept = rings.len();
        for c in kept..(self.min as usize) {
            let Some(r) = c.checked_sub(kept).and_then(|k| rings.get(k)).cloned() else {
                break;
            };
            rings.push(r);
        }
        rings
    }
}

/// `rings` within `min..=max` channels as NCCL bounds them (at most `max`, the first kept;
/// then repeated up to `min`): what `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS` do to a
/// plan, for bounds that come from elsewhere (`ncclConfig_t`'s `minCTAs` / `maxCTAs`).
pub fn bound_channels(rings: Vec<Vec<u32>>, min: u32, max: u32) -> Vec<Vec<u32>> {
    Limits {
        min: min.min(MAX_CHANNELS),
        max: max.clamp(1, MAX_CHANNELS),
    }
    .apply(rings)
}

/// Why the search does not apply to these peers, or `None` when it does.
fn no_search_reason(peers: &[Peer]) -> Option<String> {
    if let Some((r, _)) = peers
        .iter()
        .enumerate()
        .find(|(_, p)| p.info.cuda_device < 0 || p.info.flags & PEER_HOST_ONLY != 0)
    {
        return Some(format!("rank {r} has no GPU (host memory)"));
    }
    let mut hosts: Vec<u64> = peers.iter().map(|p| p.info.host_hash).collect();
    hosts.sort_unstable();
    hosts.dedup();
    if hosts.len() > 1 {
        return Some(format!(
            "ranks on {} hosts (the search is per host; joining hosts' rings is not done yet)",
            hosts.len()
        ));
    }
    if let Some((r, _)) = peers.iter().enumerate().find(|(_, p)| p.info.bus_id == 0) {
        return Some(format!("rank {r} did not report its GPU's PCI bus id"));
    }
    None
}

/// The plain rings and the CPU-based count.
fn plain(peers: &[Peer], note: String) -> ChannelPlan {
    let found = peers::default_channels(peers, DEFAULT_MAX_CHANNELS);
    ChannelPlan {
        rings: rings::rings(peers, found),
        source: SOURCE_PLAIN,
        found,
        note,
        p2p_blocked: None,
        nvls_heads: Vec::new(),
    }
}

/// NCCL's treatment of a topology for a communicator: the `<gpu>` whose bus id rank `r`
/// reported gets `rank="r"`, every other GPU loses its rank (the loader then leaves it out,
/// as NCCL's trim does). Returns the rank of each bus id found, or why the mapping failed.
fn assign_ranks(xml: &mut XmlNode, peers: &[Peer]) -> Result<(), String> {
    fn walk(x: &mut XmlNode, peers: &[Peer], found: &mut [u32]) {
        let busid = (x.name == "pci")
            .then(|| x.attr("busid").map(busid_to_u64))
            .flatten();
        for child in &mut x.children {
            if child.name == "gpu" {
                let rank = busid.and_then(|b| peers.iter().position(|p| p.info.bus_id == b));
                child.attrs.retain(|(k, _)| k != "rank");
                if let Some(r) = rank {
                    child.attrs.push(("rank".to_string(), r.to_string()));
                    if let Some(n) = found.get_mut(r) {
                        *n = n.saturating_add(1);
                    }
                }
            } else {
                walk(child, peers, found);
            }
        }
    }
    let mut found = vec![0u32; peers.len()];
    walk(xml, peers, &mut found);
    for (r, n) in found.iter().enumerate() {
        let busid = peers.get(r).map_or(0, |p| p.info.bus_id);
        let (text, len) = weft_core::wire::bootstrap::bus_id_to_str(busid);
        let name = String::from_utf8_lossy(text.get(..len).unwrap_or_default()).into_owned();
        match n {
            1 => {}
            0 => return Err(format!("rank {r}'s GPU {name} is not in the topology")),
            _ => {
                return Err(format!(
                    "rank {r}'s GPU {name} is in the topology {n} times"
                ));
            }
        }
    }
    Ok(())
}

/// The rings of NCCL's search for ranks that each use one GPU of `xml`'s host, or why
/// there are none.
fn search(
    mut xml: XmlNode,
    peers: &[Peer],
    settings: &config::Settings,
) -> Result<ChannelPlan, String> {
    assign_ranks(&mut xml, peers)?;
    let (topo, _warnings) = topology_from_xml(&xml).map_err(|e| format!("topology: {e}"))?;
    let gpus = topo.of_kind(NodeKind::Gpu).len();
    if gpus != peers.len() {
        return Err(format!(
            "{gpus} GPUs of the topology for {} ranks",
            peers.len()
        ));
    }
    let mut notes = Vec::new();
    let path_opts = path_options(settings, &mut notes);
    for n in &notes {
        log::log!(n.level, "{}", n.text);
    }
    // One host (NCCL's nNodes = 1). The rings do not depend on the NVLS graph: it is
    // searched only for an NVLS communicator (WEFT_ALGO=nvls), for its heads, and not when
    // NCCL_NVLS_ENABLE=0 (as NCCL).
    let want_nvls = settings.gpu.algo == Some(GpuAlgo::Nvls) && settings.gpu.nvls_enable;
    let view = TopoView::new(topo, Some(1), want_nvls, &path_opts);
    let Some((ring, tree, nvls)) = &view.graphs else {
        return Err("no GPU in the topology".to_string());
    };
    let gpu_nodes = view.topo.of_kind(NodeKind::Gpu);
    let rank_of = |i: usize| {
        view.topo
            .nodes
            .get(i)
            .and_then(|n| n.gpu())
            .and_then(|g| u32::try_from(g.rank).ok())
    };
    let p2p_blocked = gpu_nodes.iter().enumerate().find_map(|(k, &a)| {
        gpu_nodes.iter().skip(k + 1).find_map(|&b| {
            (!view.paths.p2p_allowed(&view.topo, a, b, &path_opts)).then(|| {
                let kind = format!("{:?}", view.paths.kind(a, b));
                (rank_of(a).unwrap_or(0), rank_of(b).unwrap_or(0), kind)
            })
        })
    });
    let graph_channels = ring.nchannels().min(tree.nchannels());
    let mut rings = Vec::new();
    for r in comm_rings(ring, graph_channels, 1) {
        let r: Vec<u32> = r.iter().filter_map(|&x| u32::try_from(x).ok()).collect();
        if r.len() != peers.len() || weft_core::sched::Ring::new(&r).is_err() {
            return Err(format!(
                "the search gave {r:?}, not a ring of all {} ranks",
                peers.len()
            ));
        }
        rings.push(r);
    }
    if rings.is_empty() {
        return Err("the search found no channel".to_string());
    }
    let mut note = format!("ring graph: {}", ring.summary());
    if let Some(f) = ring.fallback {
        let _ = write!(note, " (NCCL's fallback {f:?})");
    }
    let nvls_heads: Vec<u32> = if want_nvls {
        match Heads::from_graph(nvls) {
            Ok(h) => h
                .ranks()
                .iter()
                .filter_map(|&r| u32::try_from(r).ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    } else {
        Vec::new()
    };
    if want_nvls {
        let _ = write!(note, "; NVLS heads {nvls_heads:?}");
    }
    Ok(ChannelPlan {
        found: u32::try_from(rings.len()).unwrap_or(MAX_CHANNELS),
        rings,
        source: SOURCE_SEARCH,
        note,
        p2p_blocked,
        nvls_heads,
    })
}

/// A topology file as XML, with NCCL_TOPO_FILE's error messages.
fn read_xml(path: &Path) -> Result<XmlNode, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        TopoError::Read {
            path: path.to_path_buf(),
            source: e,
        }
        .to_string()
    })?;
    log::info!("channels: topology loaded from {}", path.display());
    XmlNode::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The channels for the communicator of `peers` (every rank's, as all-gathered at init),
/// planned on this rank with its topology and `settings` (see the module documentation).
/// Peers report their GPU as `info.cuda_device` (any value >= 0) and `info.bus_id`
/// (NCCL's integer form, [`weft_core::wire::bootstrap::bus_id_from_str`]).
///
/// Errors: no peers, a malformed topology variable in `settings` (read leniently, so that
/// rank 0 reports it to every rank), a topology file that cannot be read or parsed. A
/// topology that does not hold every rank's GPU, or a detection that fails, falls back to
/// the plain rings (the note says why).
pub fn plan_channels(
    peers: &[Peer],
    topo: TopoInput<'_>,
    settings: &config::Settings,
) -> Result<ChannelPlan, CommError> {
    let fail = |detail: String| CommError::Channels { rank: 0, detail };
    let Some(first) = peers.first() else {
        return Err(CommError::InvalidArgument(
            "no peers to plan channels for".into(),
        ));
    };
    settings
        .check_groups(&[config::Group::Topology])
        .map_err(|e| fail(e.to_string()))?;
    let limits = match first.settings.nchannels {
        0 => Limits::of(&settings.topology),
        n => Limits { min: n, max: n },
    };
    let mut plan = match no_search_reason(peers) {
        Some(why) => plain(peers, why),
        None => {
            let xml = match topo {
                TopoInput::Xml(x) => Ok(x.clone()),
                TopoInput::Host | TopoInput::File(_) => {
                    let file = match topo {
                        TopoInput::File(p) => Some(p.to_path_buf()),
                        _ => settings.topology.topo_file.clone(),
                    };
                    match file {
                        // The file's own XML, not its loaded form: the loader drops GPUs
                        // without a rank attribute, which may be ours.
                        Some(path) => Ok(read_xml(&path).map_err(fail)?),
                        None => match local_topology(None, &settings.topology, &mut |notes| {
                            DetectOptions::host(settings, notes)
                        }) {
                            Ok(local) => {
                                log::info!("channels: topology {}", local.source);
                                Ok(local.xml)
                            }
                            Err(e) => Err(format!("detection failed: {e}")),
                        },
                    }
                }
            };
            match xml.and_then(|x| search(x, peers, settings)) {
                Ok(p) => p,
                Err(why) => {
                    log::warn!("channels: no topology search ({why}); using the plain ring");
                    plain(peers, why)
                }
            }
        }
    };
    plan.rings = limits.apply(std::mem::take(&mut plan.rings));
    if plan.rings.is_empty() {
        return Err(fail("no channel left".into()));
    }
    Ok(plan)
}

/// "WFCP": a channel plan on the wire.
const PLAN_MAGIC: u32 = 0x5746_4350;
const PLAN_VERSION: u16 = 3;
/// magic u32, version u16, status u8, source u8, nchannels u16, nranks u32, found u32,
/// note length u16; then the note, nchannels x nranks u32 ranks, and the P2P verdict:
/// u8 (1: a pair is blocked), two u32 ranks, u16 length and the path type's name; then the
/// NVLS heads: u8 count, count u32 ranks.
const PLAN_HEAD: usize = 4 + 2 + 1 + 1 + 2 + 4 + 4 + 2;

/// Rank 0's plan, or its error, as bytes for [`decode_plan`].
fn encode_plan(plan: &Result<ChannelPlan, CommError>, nranks: usize) -> Vec<u8> {
    let (status, source, rings, found, note, blocked, heads) = match plan {
        Ok(p) => (
            0u8,
            u8::from(p.source == SOURCE_SEARCH),
            p.rings.as_slice(),
            p.found,
            p.note.as_str(),
            p.p2p_blocked.as_ref(),
            p.nvls_heads.as_slice(),
        ),
        Err(CommError::Channels { detail, .. }) => {
            (1, 0, &[][..], 0, detail.as_str(), None, &[][..])
        }
        Err(_) => (1, 0, &[][..], 0, "planning failed", None, &[][..]),
    };
    let mut note = note.as_bytes();
    note = note
        .get(..note.len().min(usize::from(u16::MAX)))
        .unwrap_or_default();
    let nranks_field = if status == 0 { nranks } else { 0 };
    let mut out = Vec::with_capacity(PLAN_HEAD + note.len() + rings.len() * nranks * 4);
    out.extend_from_slice(&PLAN_MAGIC.to_be_bytes());
    out.extend_from_slice(&PLAN_VERSION.to_be_bytes());
    out.push(status);
    out.push(source);
    out.extend_from_slice(&(rings.len() as u16).to_be_bytes());
    out.extend_from_slice(&(nranks_field as u32).to_be_bytes());
    out.extend_from_slice(&found.to_be_bytes());
    out.extend_from_slice(&(note.len() as u16).to_be_bytes());
    out.extend_from_slice(note);
    for r in rings {
        for x in r {
            out.extend_from_slice(&x.to_be_bytes());
        }
    }
    if status == 0 {
        let (a, b, kind) = blocked.map_or((0, 0, ""), |(a, b, k)| (*a, *b, k.as_str()));
        out.push(u8::from(blocked.is_some()));
        out.extend_from_slice(&a.to_be_bytes());
        out.extend_from_slice(&b.to_be_bytes());
        let kind = kind
            .as_bytes()
            .get(..kind.len().min(64))
            .unwrap_or_default();
        out.extend_from_slice(&(kind.len() as u16).to_be_bytes());
        out.extend_from_slice(kind);
        let heads = heads
            .get(..heads.len().min(usize::from(u8::MAX)))
            .unwrap_or_default();
        out.push(heads.len() as u8);
        for h in heads {
            out.extend_from_slice(&h.to_be_bytes());
        }
    }
    out
}

/// Parses and checks what rank 0 broadcast for `nranks` ranks.
fn decode_plan(bytes: &[u8], nranks: usize) -> Result<ChannelPlan, CommError> {
    let bad = |what: String| CommError::Channels {
        rank: 0,
        detail: format!("its plan: {what} (a different weft version?)"),
    };
    let field = |at: usize, n: usize| {
        bytes
            .get(at..at + n)
            .ok_or_else(|| bad(format!("{} bytes", bytes.len())))
    };
    let be16 = |b: &[u8]| u16::from_be_bytes(b.try_into().unwrap_or([0; 2]));
    let be32 = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap_or([0; 4]));
    if be32(field(0, 4)?) != PLAN_MAGIC {
        return Err(bad("no plan".into()));
    }
    let version = be16(field(4, 2)?);
    if version != PLAN_VERSION {
        return Err(bad(format!("version {version}")));
    }
    let status = field(6, 1)?.first().copied().unwrap_or(1);
    let source = field(7, 1)?.first().copied().unwrap_or(0);
    let nchannels = usize::from(be16(field(8, 2)?));
    let their_nranks = be32(field(10, 4)?) as usize;
    let found = be32(field(14, 4)?);
    let note_len = usize::from(be16(field(18, 2)?));
    let note = String::from_utf8_lossy(field(PLAN_HEAD, note_len)?).into_owned();
    if status != 0 {
        return Err(CommError::Channels {
            rank: 0,
            detail: note,
        });
    }
    if their_nranks != nranks {
        return Err(bad(format!("for {their_nranks} ranks, not {nranks}")));
    }
    if !(1..=MAX_CHANNELS as usize).contains(&nchannels) {
        return Err(bad(format!("{nchannels} channels")));
    }
    let start = PLAN_HEAD + note_len;
    let verdict = start + nchannels * nranks * 4;
    let kind_len = usize::from(be16(field(verdict + 9, 2)?));
    let heads_at = verdict + 11 + kind_len;
    let nheads = usize::from(field(heads_at, 1)?.first().copied().unwrap_or(0));
    let want = heads_at + 1 + nheads * 4;
    if bytes.len() != want {
        return Err(bad(format!("{} bytes, expected {want}", bytes.len())));
    }
    let p2p_blocked = (field(verdict, 1)?.first() == Some(&1)).then(|| -> Result<_, CommError> {
        Ok((
            be32(field(verdict + 1, 4)?),
            be32(field(verdict + 5, 4)?),
            String::from_utf8_lossy(field(verdict + 11, kind_len)?).into_owned(),
        ))
    });
    let p2p_blocked = p2p_blocked.transpose()?;
    let mut rings = Vec::with_capacity(nchannels);
    for c in 0..nchannels {
        let ring: Vec<u32> = (0..nranks)
            .map(|i| field(start + (c * nranks + i) * 4, 4).map(be32))
            .collect::<Result<_, _>>()?;
        weft_core::sched::Ring::new(&ring)
            .map_err(|e| bad(format!("channel {c}: {ring:?}: {e}")))?;
        rings.push(ring);
    }
    let nvls_heads: Vec<u32> = (0..nheads)
        .map(|h| field(heads_at + 1 + h * 4, 4).map(be32))
        .collect::<Result<_, _>>()?;
    if nvls_heads.iter().any(|&h| h as usize >= nranks) {
        return Err(bad(format!("NVLS heads {nvls_heads:?}")));
    }
    Ok(ChannelPlan {
        rings,
        source: if source == 1 {
            SOURCE_SEARCH
        } else {
            SOURCE_PLAIN
        },
        found,
        note,
        p2p_blocked,
        nvls_heads,
    })
}

/// [`plan_channels`] on rank 0, broadcast to every rank, which all return the same plan
/// (rank 0's error, when it has one, on every rank). `peers` are the all-gathered peers.
pub fn agree_on_channels_with(
    bootstrap: &mut Bootstrap,
    peers: &[Peer],
    topo: TopoInput<'_>,
    settings: &config::Settings,
) -> Result<ChannelPlan, CommError> {
    let nranks = bootstrap.nranks();
    let all: Vec<usize> = (0..nranks).collect();
    let mine = if bootstrap.rank() == 0 {
        encode_plan(&plan_channels(peers, topo, settings), nranks)
    } else {
        Vec::new()
    };
    let bytes = bootstrap.broadcast(0, &all, &mine)?;
    decode_plan(&bytes, nranks)
}

#[cfg(test)]
#[path = "channels_tests.rs"]
mod tests;
