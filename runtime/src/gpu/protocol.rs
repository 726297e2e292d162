//! A GPU communicator's protocol settings, and what its kernels offer the chooser
//! (`weft_core::algo::Chooser`, which decides for the CPU executor too).
//!
//! Collectives: the chooser's tuner with NCCL's model of a ring on NVLink
//! ([`TuningModel::nvlink`]) over the protocols `NCCL_PROTO` / `WEFT_PROTO` enable for the
//! collective, as NCCL's tuner picks; then `WEFT_ALGO` or the peer-pointer rule for the
//! algorithm. Send/receive: NCCL's rule (`enqueue.cc`), LL when the message is at most
//! `NCCL_P2P_LL_THRESHOLD` bytes per channel it uses. A call's plan asks the chooser's two
//! steps apart: the protocol first (it sizes the ring's chunks and channels, and a setting
//! that leaves none refuses every call), the algorithm after the call's arguments are checked
//! and a one-rank call became a copy, the order every call had before the chooser existed.
//!
//! **Where LL runs without being asked.** On P2P windows (device memory) the model is offered
//! LL and send/receive use NCCL's 16 KiB threshold without any setting, as NCCL does: the LL
//! kernels passed every GPU test on two H100 over NVLink (every collective, type and op;
//! interleaved with SIMPLE; across the flag's wrap; send/receive groups), and with the model
//! offered LL, all-gather, reduce-scatter and broadcast took 11-13 us instead of 13-16 from
//! 8 B to 256 KiB and send/receive 8 us instead of 10 up to 4 KiB, never slower beyond noise
//! (2026-11-25, docs/benchmarks.md). On SHM windows (host memory: `NCCL_P2P_DISABLE=1`, or
//! GPUs P2P cannot join) the same kernels have not run on a GPU, so there LL stays opt-in
//! ([`LlOffer::WhenAsked`]): offered only when `NCCL_PROTO` / `WEFT_PROTO` is set to
//! something other than its default, and send/receive use it only when
//! `NCCL_P2P_LL_THRESHOLD` / `WEFT_P2P_LL_THRESHOLD` is set.
//!
//! Every rank must choose alike, or the two ends of a connection run different protocols
//! and wait on each other until the timeout: the choice depends only on the call, the rank
//! and channel counts and these settings, which [`GpuProtocols::encode`] lets the
//! communicator compare across ranks at init.

use weft_core::abi::Protocol;
use weft_core::algo::{Algo, Call, Chooser, LlOffer, Offer, PeerCaps, Settings};
use weft_core::fifo::NCCL_STEPS;
use weft_core::fifo::ll::{LL_DATA_BYTES, LL_LINE_BYTES, LlGeometry, NCCL_LL_LINES_PER_STEP};
use weft_core::sched::Collective;
use weft_core::tune::{ProtocolEnable, ProtocolSet, TuningModel};

use crate::comm::CommOptions;

pub use weft_core::algo::NCCL_P2P_LL_THRESHOLD;

/// The protocol settings of a GPU communicator: the same on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProtocols {
    /// `NCCL_PROTO` / `WEFT_PROTO`, per collective.
    pub enable: ProtocolEnable,
    /// 8-byte lines per LL step of every connection (0: no LL buffers, LL never runs).
    pub ll_lines: usize,
    /// Send/receive go LL up to this many bytes per channel; `None`: unset (NCCL's 16 KiB
    /// where [`GpuProtocols::ll_by_default`], else never).
    pub p2p_ll_threshold: Option<usize>,
    /// Whether LL runs without a protocol setting: on P2P windows, not on SHM ones (see the
    /// module documentation). The communicator sets it once every rank agreed on the
    /// windows; [`GpuProtocols::from_options`] leaves it off.
    pub ll_by_default: bool,
}

impl GpuProtocols {
    /// The settings `opts` asks for: its protocols, its LL buffer (`NCCL_LL_BUFFSIZE`; NCCL's
    /// 512 KiB by default) and its send/receive threshold.
    pub fn from_options(opts: &CommOptions) -> Self {
        GpuProtocols {
            enable: opts.protocols,
            ll_lines: opts.ll_lines.unwrap_or(NCCL_LL_LINES_PER_STEP),
            p2p_ll_threshold: opts.p2p_ll_threshold,
            ll_by_default: false,
        }
    }

    /// Bytes of each connection's LL buffer (8 steps of lines), 0 for none.
    pub fn ll_buffer_bytes(&self) -> usize {
        self.ll_lines
            .saturating_mul(LL_LINE_BYTES)
            .saturating_mul(NCCL_STEPS)
    }

    /// Payload bytes of one LL step.
    pub fn ll_step_data_bytes(&self) -> usize {
        self.ll_lines.saturating_mul(LL_DATA_BYTES)
    }

    /// Checks that the LL buffer is one the kernels can cut: 8 slots of whole line pairs.
    pub fn validate(&self) -> Result<(), String> {
        if self.ll_lines == 0 {
            return Ok(());
        }
        // The kernels' connection info holds a buffer's size in 32 bits: a larger buffer
        // would reach them as a wrong size.
        if u32::try_from(self.ll_buffer_bytes()).is_err() {
            return Err(format!(
                "an LL buffer of {} lines per step is {} bytes, 4 GiB or more, which the \
                 kernels cannot address (their connection info holds 32-bit sizes); set \
                 NCCL_LL_BUFFSIZE below 4 GiB (NCCL's default is 512 KiB), or 0 for none",
                self.ll_lines,
                self.ll_buffer_bytes()
            ));
        }
        LlGeometry::for_buffer(self.ll_buffer_bytes())
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "an LL buffer of {} lines per step: {e}; set NCCL_LL_BUFFSIZE to a multiple \
                     of 2048 (8 steps of 128 lines), or 0 for none",
                    self.ll_lines
                )
            })
    }

    /// Whether LL runs: never without an LL buffer; by default on P2P windows, when asked
    /// on SHM ones (see the module documentation).
    pub fn ll_offer(&self) -> LlOffer {
        match (self.ll_lines, self.ll_by_default) {
            (0, _) => LlOffer::NoBuffer,
            (_, false) => LlOffer::WhenAsked,
            (_, true) => LlOffer::ByDefault,
        }
    }

    /// The chooser of a communicator with these settings, `nchannels` ring channels, the
    /// algorithm `WEFT_ALGO` forces and what its peer region offers. The kernels have no
    /// one-shot through the FIFOs: theirs reads peers' memory.
    pub fn chooser(&self, algo: Option<Algo>, nchannels: u32, peers: PeerCaps) -> Chooser {
        Chooser {
            settings: Settings {
                protocols: self.enable,
                algo,
                p2p_ll_threshold: self.p2p_ll_threshold,
            },
            offer: Offer {
                model: TuningModel::nvlink(nchannels),
                ll: self.ll_offer(),
                fifo_one_shot: None,
                peers,
            },
        }
    }

    /// The protocols the kernels may run here for an automatic choice (see the module
    /// documentation: LL where it runs by default, or once a protocol setting asked for it).
    pub fn available(&self) -> ProtocolSet {
        self.ll_offer().runnable(&self.enable)
    }

    /// The protocol of `collective` moving `bytes` (NCCL's `nBytes`: the whole output of an
    /// all-gather, the whole input of a reduce-scatter) over `nranks` ranks and a
    /// communicator of `nchannels` channels, the ring's (the chooser's tuner); an error
    /// naming the setting when it leaves nothing the kernels run.
    pub fn choose(
        &self,
        collective: Collective,
        bytes: u64,
        nranks: usize,
        nchannels: u32,
    ) -> Result<Protocol, String> {
        let call = Call {
            collective,
            bytes,
            nranks,
        };
        self.chooser(None, nchannels, PeerCaps::NONE)
            .tuned(&call)
            .map(|c| c.protocol)
            .map_err(|e| {
                format!(
                    "NCCL_PROTO enables {} for {}, but the GPU kernels can run {} on this \
                     communicator (LL needs an LL buffer, NCCL_LL_BUFFSIZE not 0; LL128 is not \
                     implemented): enable Simple",
                    e.enabled,
                    collective.name(),
                    e.runnable
                )
            })
    }

    /// Send/receive's LL threshold in bytes per channel: the setting, else NCCL's where LL
    /// runs by default; `None`: never LL (the chooser's `p2p_ll_threshold`).
    pub fn p2p_threshold(&self) -> Option<usize> {
        self.chooser(None, 1, PeerCaps::NONE).p2p_ll_threshold()
    }

    /// The protocol of a send or receive of `bytes` spread over `nchannels` channels (the
    /// chooser's `p2p_protocol`). Both ends compute it from the same byte count.
    pub fn p2p(&self, bytes: usize, nchannels: u32) -> Protocol {
        self.chooser(None, nchannels, PeerCaps::NONE)
            .p2p_protocol(bytes, nchannels)
    }

    /// The settings as bytes, for comparing across ranks.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(18);
        out.extend_from_slice(&self.enable.to_bits().to_be_bytes());
        out.extend_from_slice(&(self.ll_lines as u64).to_be_bytes());
        let threshold = self.p2p_ll_threshold.map_or(u64::MAX, |t| t as u64);
        out.extend_from_slice(&threshold.to_be_bytes());
        out
    }

    /// What another rank's [`GpuProtocols::encode`] says, for an error message.
    pub fn describe(bytes: &[u8]) -> String {
        let Some(enable) = bytes.get(0..2).and_then(|b| b.try_into().ok()) else {
            return "a malformed record".to_string();
        };
        let word = |at: usize| {
            bytes
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_be_bytes)
        };
        let threshold = match word(10) {
            u64::MAX => "unset".to_string(),
            t => t.to_string(),
        };
        format!(
            "NCCL_PROTO={}, {} LL lines per step, NCCL_P2P_LL_THRESHOLD {threshold}",
            ProtocolEnable::from_bits(u16::from_be_bytes(enable)),
            word(2)
        )
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn with(proto: &str, threshold: Option<usize>) -> GpuProtocols {
        GpuProtocols {
            enable: ProtocolEnable::parse(proto).unwrap(),
            ll_lines: NCCL_LL_LINES_PER_STEP,
            p2p_ll_threshold: threshold,
            ll_by_default: false,
        }
    }

    const ALL: [Collective; 5] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast { root: 1 },
        Collective::Reduce { root: 0 },
    ];

    #[test]
    fn the_chooser_is_offered_ll_as_the_windows_allow() {
        let mut p = with("", Some(4096));
        assert_eq!(p.ll_offer(), LlOffer::WhenAsked);
        p.ll_by_default = true;
        assert_eq!(p.ll_offer(), LlOffer::ByDefault);
        let peers = PeerCaps {
            peer_mapped: true,
            nvls_heads: false,
        };
        let c = p.chooser(Some(Algo::TwoShot), 24, peers);
        assert_eq!(
            c.settings,
            Settings {
                protocols: p.enable,
                algo: Some(Algo::TwoShot),
                p2p_ll_threshold: Some(4096),
            }
        );
        assert_eq!(c.offer.model, TuningModel::nvlink(24));
        assert_eq!(c.offer.fifo_one_shot, None);
        assert_eq!(c.offer.peers, peers);
        p.ll_lines = 0;
        assert_eq!(p.ll_offer(), LlOffer::NoBuffer);
    }

    #[test]
    fn an_ll_buffer_of_4_gib_or_more_is_refused() {
        let mut p = with("LL", None);
        // 8 steps of 8-byte lines: 2^26 lines per step make exactly 4 GiB.
        p.ll_lines = 1 << 26;
        let e = p.validate().unwrap_err();
        assert!(e.contains("NCCL_LL_BUFFSIZE"), "{e}");
        p.ll_lines = usize::MAX;
        assert!(p.validate().unwrap_err().contains("NCCL_LL_BUFFSIZE"));
        p.ll_lines = (1 << 26) - 128;
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn on_p2p_windows_ll_runs_without_a_setting_as_in_nccl() {
        let p = GpuProtocols {
            ll_by_default: true,
            ..GpuProtocols::from_options(&CommOptions::default())
        };
        assert_eq!(
            p.available(),
            ProtocolSet::of(&[Protocol::Simple, Protocol::Ll])
        );
        // The model's choice: LL for small calls, SIMPLE for large ones.
        for c in ALL {
            assert_eq!(p.choose(c, 8, 2, 48), Ok(Protocol::Ll), "{c:?}");
            assert_eq!(p.choose(c, 1 << 30, 2, 48), Ok(Protocol::Simple), "{c:?}");
        }
        // Send/receive: NCCL's 16 KiB per channel.
        assert_eq!(p.p2p(NCCL_P2P_LL_THRESHOLD, 1), Protocol::Ll);
        assert_eq!(p.p2p(NCCL_P2P_LL_THRESHOLD + 1, 1), Protocol::Simple);
        // A setting still wins: NCCL_PROTO=Simple, a threshold of 0.
        let simple = GpuProtocols {
            enable: ProtocolEnable::parse("Simple").unwrap(),
            p2p_ll_threshold: Some(0),
            ..p
        };
        for c in ALL {
            assert_eq!(simple.choose(c, 8, 2, 48), Ok(Protocol::Simple), "{c:?}");
        }
        assert_eq!(simple.p2p(8, 1), Protocol::Simple);
        // No LL buffer (NCCL_LL_BUFFSIZE=0): never LL.
        let none = GpuProtocols { ll_lines: 0, ..p };
        assert_eq!(
            none.choose(Collective::AllGather, 8, 2, 48),
            Ok(Protocol::Simple)
        );
        assert_eq!(none.p2p(8, 1), Protocol::Simple);
    }

    /// SHM windows: the LL kernels have not run over host memory on a GPU.
    #[test]
    fn on_shm_windows_without_a_setting_every_call_runs_simple() {
        let p = GpuProtocols::from_options(&CommOptions::default());
        assert_eq!(p.ll_lines, NCCL_LL_LINES_PER_STEP);
        assert_eq!(p.ll_buffer_bytes(), 512 << 10);
        assert_eq!(p.ll_step_data_bytes(), 32 << 10);
        assert_eq!(p.validate(), Ok(()));
        for c in ALL {
            for bytes in [1u64, 8, 4096, 1 << 20, 1 << 30] {
                assert_eq!(
                    p.choose(c, bytes, 2, 24),
                    Ok(Protocol::Simple),
                    "{c:?} {bytes}"
                );
            }
        }
        assert_eq!(p.p2p(8, 1), Protocol::Simple);
        // The default spelled out is still the default.
        assert_eq!(with("LL,LL128,Simple", None).available(), p.available());
    }

    #[test]
    fn nccl_proto_ll_forces_ll_and_a_list_lets_the_model_choose() {
        let ll = with("LL", None);
        for c in ALL {
            assert_eq!(ll.choose(c, 1 << 30, 4, 24), Ok(Protocol::Ll), "{c:?}");
        }
        let both = with("LL,Simple", None);
        assert_eq!(
            both.choose(Collective::AllReduce, 8, 2, 24),
            Ok(Protocol::Ll)
        );
        assert_eq!(
            both.choose(Collective::AllReduce, 64 << 20, 2, 24),
            Ok(Protocol::Simple)
        );
        // Per collective, as NCCL parses it.
        let mixed = with("Simple;allgather:LL", None);
        assert_eq!(
            mixed.choose(Collective::AllGather, 1 << 20, 2, 8),
            Ok(Protocol::Ll)
        );
        assert_eq!(
            mixed.choose(Collective::AllReduce, 8, 2, 8),
            Ok(Protocol::Simple)
        );
        // No LL buffer: NCCL_PROTO=LL has nothing to run, and says so.
        let none = GpuProtocols { ll_lines: 0, ..ll };
        let err = none
            .choose(Collective::Broadcast { root: 0 }, 8, 2, 8)
            .unwrap_err();
        assert!(err.contains("NCCL_PROTO enables LL for Broadcast"), "{err}");
        assert!(err.contains("can run Simple"), "{err}");
        let err = with("LL128", None)
            .choose(Collective::AllReduce, 8, 2, 8)
            .unwrap_err();
        assert!(err.contains("LL128 is not implemented"), "{err}");
    }

    /// What driver/tests/gpu.rs relies on under `NCCL_PROTO=LL,Simple`: all-reduces up to
    /// 262 KB run LL and from 16 MB SIMPLE, on 2 to 8 GPUs with 16 or 24 channels.
    #[test]
    fn the_gpu_tests_sizes_fall_on_both_sides_of_the_crossover() {
        let both = with("LL,Simple", None);
        for nranks in 2..=8 {
            for nchannels in [16, 24] {
                for bytes in [4u64, 12_000, 262_156] {
                    assert_eq!(
                        both.choose(Collective::AllReduce, bytes, nranks, nchannels),
                        Ok(Protocol::Ll),
                        "{bytes} B on {nranks} x {nchannels}"
                    );
                }
                for bytes in [16_000_012u64, 32_000_004] {
                    assert_eq!(
                        both.choose(Collective::AllReduce, bytes, nranks, nchannels),
                        Ok(Protocol::Simple),
                        "{bytes} B on {nranks} x {nchannels}"
                    );
                }
            }
        }
    }

    #[test]
    fn send_recv_follow_nccls_threshold_once_it_is_set() {
        let p = with("", Some(NCCL_P2P_LL_THRESHOLD));
        assert_eq!(p.p2p(16384, 1), Protocol::Ll);
        assert_eq!(p.p2p(16385, 1), Protocol::Simple);
        assert_eq!(p.p2p(4 * 16384, 4), Protocol::Ll);
        let forced = with("", Some(usize::MAX));
        assert_eq!(forced.p2p(40_000_001, 4), Protocol::Ll);
        let no_buffer = GpuProtocols {
            ll_lines: 0,
            ..forced
        };
        assert_eq!(no_buffer.p2p(8, 1), Protocol::Simple);
    }

    #[test]
    fn records_differ_when_settings_do_and_describe_them() {
        let a = with("LL", Some(4096));
        let b = with("LL", None);
        assert_ne!(a.encode(), b.encode());
        assert_eq!(a.encode(), with("ll", Some(4096)).encode());
        assert_eq!(
            GpuProtocols::describe(&a.encode()),
            "NCCL_PROTO=LL, 8192 LL lines per step, NCCL_P2P_LL_THRESHOLD 4096"
        );
        assert!(GpuProtocols::describe(&b.encode()).ends_with("NCCL_P2P_LL_THRESHOLD unset"));
        assert_eq!(GpuProtocols::describe(&[1]), "a malformed record");
        let odd = GpuProtocols { ll_lines: 3, ..a };
        assert!(odd.validate().unwrap_err().contains("NCCL_LL_BUFFSIZE"));
    }
}
