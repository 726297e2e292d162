//! What every rank tells every other at init: NCCL's `PeerInfo` (host, process, device),
//! followed by the settings that all ranks must share, so that a rank started with other
//! settings is named at init instead of corrupting data or hanging in the first collective.

use weft_core::wire::bootstrap::{PEER_HOST_ONLY, PEER_INFO_LEN, PeerInfoRepr, PeerInfoView};

use super::error::CommError;
use crate::bootstrap::identity;

/// "WFTC": the settings block after the peer info.
const SETTINGS_MAGIC: u32 = 0x5746_5443;
const SETTINGS_VERSION: u16 = 2;
/// magic u32, version u16, transport u8, reserved u8, pid u32, nchannels u32, step u64,
/// cpus u32, protocols u16, ll_lines u32.
const SETTINGS_LEN: usize = 4 + 2 + 1 + 1 + 4 + 4 + 8 + 4 + 2 + 4;

/// The settings every rank must agree on, plus this rank's pid (for dead-peer detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `TransportChoice` as a number.
    pub transport: u8,
    pub pid: u32,
    /// Channels asked for explicitly, 0 for the default.
    pub nchannels: u32,
    /// Bytes per FIFO step asked for explicitly, 0 for the default.
    pub step_bytes: u64,
    /// CPUs this rank may run on (for the default channel count; not compared).
    pub cpus: u32,
    /// `NCCL_PROTO` as `weft_core::tune::ProtocolEnable::to_bits` (every rank must choose
    /// its protocols alike).
    pub protocols: u16,
    /// Lines per LL step of the SHM connections this rank creates (`WEFT_LL_BUFFSIZE` /
    /// `NCCL_LL_BUFFSIZE`; 0: no LL buffer).
    pub ll_lines: u32,
}

/// One rank as the others see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub info: PeerInfoRepr,
    pub settings: Settings,
}

impl Peer {
    /// This process as `rank`, on `device` (`None`: host memory only).
    pub fn local(rank: u32, device: Option<i32>, settings: Settings) -> Self {
        Peer {
            info: PeerInfoRepr {
                rank,
                cuda_device: device.unwrap_or(-1),
                nvml_device: -1,
                cuda_comp_cap: 0,
                host_hash: identity::host_hash(),
                pid_hash: identity::pid_hash(),
                bus_id: 0,
                shm_dev: identity::shm_dev(),
                flags: if device.is_none() { PEER_HOST_ONLY } else { 0 },
            },
            settings,
        }
    }

    /// The same peer on the GPU with PCI bus id `bus_id` (NCCL's integer form,
    /// [`weft_core::wire::bootstrap::bus_id_from_str`]): what the channel search matches
    /// against the topology's GPUs.
    pub fn with_bus_id(mut self, bus_id: u64) -> Self {
        self.info.bus_id = bus_id;
        self
    }

    pub fn encode(&self) -> Result<Vec<u8>, CommError> {
        let mut out = vec![0u8; PEER_INFO_LEN + SETTINGS_LEN];
        self.info
            .emit(&mut out)
            .map_err(|e| CommError::InvalidArgument(format!("peer info: {e}")))?;
        let s = &self.settings;
        let mut tail = Vec::with_capacity(SETTINGS_LEN);
        tail.extend_from_slice(&SETTINGS_MAGIC.to_be_bytes());
        tail.extend_from_slice(&SETTINGS_VERSION.to_be_bytes());
        tail.push(s.transport);
        tail.push(0);
        tail.extend_from_slice(&s.pid.to_be_bytes());
        tail.extend_from_slice(&s.nchannels.to_be_bytes());
        tail.extend_from_slice(&s.step_bytes.to_be_bytes());
        tail.extend_from_slice(&s.cpus.to_be_bytes());
        tail.extend_from_slice(&s.protocols.to_be_bytes());
        tail.extend_from_slice(&s.ll_lines.to_be_bytes());
        out.truncate(PEER_INFO_LEN);
        out.extend_from_slice(&tail);
        Ok(out)
    }

    /// Parses what rank `from` sent.
    pub fn decode(from: usize, bytes: &[u8]) -> Result<Self, CommError> {
        let bad = |what: String| {
            CommError::Bootstrap(crate::bootstrap::BootstrapError::Protocol {
                peer: crate::bootstrap::Peer::Rank(from, None),
                detail: format!("peer info: {what} (a different weft version?)"),
            })
        };
        let (head, tail) = bytes
            .split_at_checked(PEER_INFO_LEN)
            .ok_or_else(|| bad(format!("{} bytes, expected {}", bytes.len(), PEER_INFO_LEN)))?;
        let view = PeerInfoView::new_checked(head).map_err(|e| bad(e.to_string()))?;
        let info = PeerInfoRepr::parse(&view);
        if info.rank as usize != from {
            return Err(bad(format!("says it is rank {}", info.rank)));
        }
        let field = |at: usize, n: usize| -> Result<&[u8], CommError> {
            tail.get(at..at + n)
                .ok_or_else(|| bad(format!("settings of {} bytes", tail.len())))
        };
        let be32 = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap_or([0; 4]));
        if tail.len() != SETTINGS_LEN || be32(field(0, 4)?) != SETTINGS_MAGIC {
            return Err(bad("no settings block".to_string()));
        }
        let version = u16::from_be_bytes(field(4, 2)?.try_into().unwrap_or([0; 2]));
        if version != SETTINGS_VERSION {
            return Err(bad(format!("settings version {version}")));
        }
        let settings = Settings {
            transport: field(6, 1)?.first().copied().unwrap_or(0),
            pid: be32(field(8, 4)?),
            nchannels: be32(field(12, 4)?),
            step_bytes: u64::from_be_bytes(field(16, 8)?.try_into().unwrap_or([0; 8])),
            cpus: be32(field(24, 4)?),
            protocols: u16::from_be_bytes(field(28, 2)?.try_into().unwrap_or([0; 2])),
            ll_lines: be32(field(30, 4)?),
        };
        Ok(Peer { info, settings })
    }

    pub fn same_host(&self, other: &Peer) -> bool {
        self.info.host_hash == other.info.host_hash
    }
}

/// The default channel count, the same on every rank (it depends only on the gathered
/// peers): a channel is a thread per rank, so one per CPU per local rank; more only add
/// switching (measured with `weft perf all-reduce`, 512 KiB to 32 MiB, on 2 CPUs: 2 ranks
/// and 4 ranks are both fastest with 1 channel). The host with the fewest CPUs per rank
/// decides, between 1 and `max`.
pub fn default_channels(peers: &[Peer], max: u32) -> u32 {
    let per_host = peers.iter().map(|p| {
        let local = peers.iter().filter(|q| q.same_host(p)).count().max(1);
        let cpus = usize::try_from(p.settings.cpus).unwrap_or(1).max(1);
        u32::try_from(cpus / local).unwrap_or(u32::MAX)
    });
    per_host.min().unwrap_or(1).clamp(1, max.max(1))
}

/// Checks what all ranks must share, and that no two ranks of a host share a device.
pub fn check(me: usize, peers: &[Peer]) -> Result<(), CommError> {
    let Some(mine) = peers.get(me) else {
        return Err(CommError::InvalidArgument(format!(
            "rank {me} missing from the peer table"
        )));
    };
    // 0 means "not set" for the counts: say "the default" rather than 0.
    let count = |v: u64| {
        if v == 0 {
            "the default".to_string()
        } else {
            v.to_string()
        }
    };
    let transport = |v: u8| {
        match v {
            1 => "shm",
            2 => "net",
            _ => "auto",
        }
        .to_string()
    };
    for (rank, p) in peers.iter().enumerate() {
        let (a, b) = (&mine.settings, &p.settings);
        let protocols = |bits: u16| weft_core::tune::ProtocolEnable::from_bits(bits).to_string();
        let pairs: [(&'static str, String, String); 5] = [
            (
                "transport (--transport / WEFT_TRANSPORT)",
                transport(a.transport),
                transport(b.transport),
            ),
            (
                "channel count (WEFT_NCHANNELS)",
                count(u64::from(a.nchannels)),
                count(u64::from(b.nchannels)),
            ),
            (
                "FIFO step bytes (WEFT_BUFFSIZE / NCCL_BUFFSIZE)",
                count(a.step_bytes),
                count(b.step_bytes),
            ),
            (
                "protocols (NCCL_PROTO / WEFT_PROTO)",
                protocols(a.protocols),
                protocols(b.protocols),
            ),
            (
                "LL lines per step (WEFT_LL_BUFFSIZE / NCCL_LL_BUFFSIZE)",
                a.ll_lines.to_string(),
                b.ll_lines.to_string(),
            ),
        ];
        for (what, mine, theirs) in pairs {
            if mine != theirs {
                return Err(CommError::Inconsistent {
                    what,
                    rank,
                    mine,
                    theirs,
                });
            }
        }
    }
    for (i, a) in peers.iter().enumerate() {
        if a.info.cuda_device < 0 {
            continue;
        }
        for (j, b) in peers.iter().enumerate().skip(i + 1) {
            if a.same_host(b) && a.info.cuda_device == b.info.cuda_device {
                return Err(CommError::DuplicateDevice {
                    rank: j,
                    other: i,
                    device: a.info.cuda_device,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    fn settings() -> Settings {
        Settings {
            transport: 0,
            pid: 1234,
            nchannels: 2,
            step_bytes: 0,
            cpus: 8,
            protocols: weft_core::tune::ProtocolEnable::default().to_bits(),
            ll_lines: 2048,
        }
    }

    #[test]
    fn round_trip_and_truncations() {
        let p = Peer::local(3, Some(1), settings());
        let bytes = p.encode().unwrap();
        assert_eq!(Peer::decode(3, &bytes).unwrap(), p);
        for n in 0..bytes.len() {
            assert!(Peer::decode(3, &bytes[..n]).is_err(), "truncated to {n}");
        }
        // Claiming another rank is refused.
        assert!(Peer::decode(2, &bytes).is_err());
    }

    #[test]
    fn inconsistent_settings_and_duplicate_devices() {
        let a = Peer::local(0, None, settings());
        let mut b = Peer::local(1, None, settings());
        assert!(check(0, &[a, b]).is_ok());
        b.settings.nchannels = 3;
        let err = check(0, &[a, b]).unwrap_err();
        assert!(
            matches!(err, CommError::Inconsistent { rank: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("channel count"));
        assert!(err.to_string().contains("= 3, this rank with 2"), "{err}");
        b.settings.nchannels = 0;
        let err = check(0, &[a, b]).unwrap_err();
        assert!(
            err.to_string().contains("the default, this rank with 2"),
            "{err}"
        );
        b.settings.nchannels = 2;
        b.settings.protocols = weft_core::tune::ProtocolEnable::parse("^LL")
            .unwrap()
            .to_bits();
        let err = check(0, &[a, b]).unwrap_err();
        assert!(
            err.to_string().contains("NCCL_PROTO")
                && err
                    .to_string()
                    .contains("= LL128,Simple, this rank with LL,LL128,Simple"),
            "{err}"
        );
        b.settings.protocols = a.settings.protocols;
        b.settings.ll_lines = 0;
        let err = check(0, &[a, b]).unwrap_err();
        assert!(err.to_string().contains("WEFT_LL_BUFFSIZE"), "{err}");
        let c = Peer::local(0, Some(0), settings());
        let d = Peer::local(1, Some(0), settings());
        let err = check(1, &[c, d]).unwrap_err();
        assert!(matches!(
            err,
            CommError::DuplicateDevice {
                rank: 1,
                other: 0,
                device: 0
            }
        ));
        let mut e = d;
        e.info.host_hash ^= 1;
        assert!(check(1, &[c, e]).is_ok());
    }

    #[test]
    fn default_channels_follow_the_tightest_host() {
        let mut peers: Vec<Peer> = (0..4).map(|r| Peer::local(r, None, settings())).collect();
        // 4 ranks on one host of 8 CPUs: 2 channels; of 2 CPUs: 1; of 16: 4.
        assert_eq!(default_channels(&peers, 4), 2);
        for (cpus, want) in [(2, 1), (16, 4), (64, 4)] {
            for p in &mut peers {
                p.settings.cpus = cpus;
            }
            assert_eq!(default_channels(&peers, 4), want, "{cpus} CPUs");
        }
        // Another host with fewer CPUs per rank decides.
        peers[3].info.host_hash ^= 1;
        peers[3].settings.cpus = 3;
        assert_eq!(default_channels(&peers, 4), 3);
    }
}
