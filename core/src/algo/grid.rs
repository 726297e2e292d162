//! The chooser over a grid of inputs, against what the two choosers it replaced answered.
//!
//! Before [`super::Chooser`], the CPU executor (`exec::Tuning` in weft-runtime) and the GPU
//! path (`gpu::protocol::GpuProtocols`, and `algo::choose` for the algorithm) each chose for
//! themselves. A throwaway test ran this grid through them (commit ac59877) and recorded
//! the answers in the text this module builds, one line per combination of everything but
//! the size, each line the runs of equal answers along the size axis (`S1@27`: from the
//! 27th size on, SIMPLE one-shot). [`RECORDED`] is that text's line count and FNV-1a hash:
//! the chooser, wired as each executor wires it, must answer the same at every point.
//! A few lines are also spelled out, so that a change shows where it bites.
//!
//! Codes: protocol `L` (LL), `S` (SIMPLE), `8` (LL128); algorithm `r` ring, `1` one-shot,
//! `2` two-shot, `n` NVLS; `E<enabled>/<runnable>` the protocol sets' bits of a
//! [`NoProtocol`] error; an [`AlgoError`] as its `Debug` without spaces.

use core::fmt::Write as _;
use std::format;
use std::string::String;
use std::vec::Vec;

use super::*;
use crate::tune::ProtocolCosts;

/// Lines and FNV-1a 64 hash of the grid's text as the replaced choosers answered it.
const RECORDED: (usize, u64) = (162_236, 0x30c6_cd60_86f8_4f7e);

/// `NCCL_PROTO` values: the default, each protocol alone, lists, negations, per collective.
const ENABLES: [&str; 12] = [
    "",
    "LL",
    "Simple",
    "LL128",
    "LL,Simple",
    "^LL",
    "^Simple",
    "LL,LL128",
    "LL;allreduce:Simple",
    "Simple;allgather:LL",
    "reduce:",
    "^LL128;allreduce:LL128",
];

const COLLS: [Collective; 5] = [
    Collective::AllReduce,
    Collective::ReduceScatter,
    Collective::AllGather,
    Collective::Broadcast { root: 0 },
    Collective::Reduce { root: 0 },
];

/// 0, then 1 B to 1.5 GiB: each power of two, one less, one more and half as much again;
/// 7 * 3^k; the GPU tests' sizes; both sides of 4 FIFO steps of 100000 bytes; 1 TiB.
fn sizes() -> Vec<u64> {
    let mut v = std::vec![0u64];
    for s in 0..=30u32 {
        let p = 1u64 << s;
        v.extend([p - 1, p, p + 1, p + p / 2]);
    }
    let mut x = 7u64;
    while x <= 1 << 30 {
        v.push(x);
        x *= 3;
    }
    v.extend([
        262_156,
        12_000,
        16_000_012,
        32_000_004,
        399_999,
        400_000,
        400_001,
        1 << 40,
    ]);
    v.sort_unstable();
    v.dedup();
    v
}

/// The host model, the CPU executor tests' two (a hop so dear that one-shot wins wherever
/// it may, with and without one-shot), and NVLink's on 8 channels.
fn models() -> [TuningModel; 4] {
    let costs = ProtocolCosts {
        base_ns: 0,
        hop_ns: 1_000_000,
        bus_mbps: u64::MAX / 4,
    };
    let test = |one_shot: bool| TuningModel {
        ring_ll: costs,
        ring_simple: costs,
        one_shot_ll: costs,
        one_shot_simple: costs,
        one_shot_max_bytes: if one_shot { u64::MAX } else { 0 },
    };
    [
        TuningModel::HOST_SHM,
        test(true),
        test(false),
        TuningModel::nvlink(8),
    ]
}

fn protocol_code(p: Protocol) -> char {
    match p {
        Protocol::Ll => 'L',
        Protocol::Ll128 => '8',
        Protocol::Simple => 'S',
    }
}

fn algo_code(a: Algo) -> char {
    match a {
        Algo::Ring => 'r',
        Algo::OneShot => '1',
        Algo::TwoShot => '2',
        Algo::Nvls => 'n',
    }
}

fn no_protocol_code(e: &NoProtocol) -> String {
    format!("E{}/{}", e.enabled.bits(), e.runnable.bits())
}

/// Appends `head: v0@0 v1@i ...`: where along the sizes each run of equal answers starts.
fn line<T: PartialEq>(
    out: &mut String,
    head: &str,
    answers: impl Iterator<Item = T>,
    code: impl Fn(&T) -> String,
) {
    out.push_str(head);
    out.push(':');
    let mut last: Option<T> = None;
    for (i, a) in answers.enumerate() {
        if last.as_ref() != Some(&a) {
            write!(out, " {}@{i}", code(&a)).unwrap();
            last = Some(a);
        }
    }
    out.push('\n');
}

/// The chooser as the CPU executor builds it (`exec::Tuning::chooser`).
fn cpu(enable: ProtocolEnable, ll_step_bytes: usize, model: TuningModel, step: usize) -> Chooser {
    Chooser {
        settings: Settings {
            protocols: enable,
            ..Settings::default()
        },
        offer: Offer {
            model,
            ll: if ll_step_bytes > 0 {
                LlOffer::ByDefault
            } else {
                LlOffer::NoBuffer
            },
            fifo_one_shot: Some(FifoSteps {
                simple_bytes: step,
                ll_bytes: ll_step_bytes,
            }),
            peers: PeerCaps::NONE,
        },
    }
}

/// The chooser as the GPU communicator builds it (`gpu::protocol::GpuProtocols::chooser`).
fn gpu(
    settings: Settings,
    ll_lines: usize,
    ll_by_default: bool,
    nchannels: u32,
    peers: PeerCaps,
) -> Chooser {
    Chooser {
        settings,
        offer: Offer {
            model: TuningModel::nvlink(nchannels),
            ll: match (ll_lines, ll_by_default) {
                (0, _) => LlOffer::NoBuffer,
                (_, false) => LlOffer::WhenAsked,
                (_, true) => LlOffer::ByDefault,
            },
            fifo_one_shot: None,
            peers,
        },
    }
}

fn grid_text() -> String {
    let sizes = sizes();
    let mut out = String::new();
    let enable = |i: usize| ProtocolEnable::parse(ENABLES[i]).unwrap();
    // The CPU executor: (algorithm, protocol) of every call.
    for ei in 0..ENABLES.len() {
        for ll in [0usize, 1000, 2048, 8192, 32768] {
            for step in [512usize, 4096, 100_000, 128 << 10, 512 << 10] {
                for (mi, model) in models().into_iter().enumerate() {
                    let chooser = cpu(enable(ei), ll, model, step);
                    for n in 1..=9usize {
                        for c in COLLS {
                            let head = format!("cpu e{ei} ll{ll} s{step} m{mi} n{n} {}", c.name());
                            let answers = sizes.iter().map(|&bytes| {
                                chooser.choose(&Call {
                                    collective: c,
                                    bytes,
                                    nranks: n,
                                })
                            });
                            line(&mut out, &head, answers, |a| match a {
                                Ok(ch) => {
                                    format!("{}{}", protocol_code(ch.protocol), algo_code(ch.algo))
                                }
                                Err(ChooseError::NoProtocol(e)) => no_protocol_code(e),
                                Err(e) => format!("{e:?}"),
                            });
                        }
                    }
                }
            }
        }
    }
    // The GPU's ring protocol.
    for ei in 0..ENABLES.len() {
        for ll_lines in [0usize, 128, 8192] {
            for by_default in [false, true] {
                let settings = Settings {
                    protocols: enable(ei),
                    ..Settings::default()
                };
                for n in 1..=9usize {
                    for ch in 1..=32u32 {
                        let chooser = gpu(settings, ll_lines, by_default, ch, PeerCaps::NONE);
                        for c in COLLS {
                            let head = format!(
                                "gpu e{ei} ll{ll_lines} d{} n{n} ch{ch} {}",
                                u8::from(by_default),
                                c.name()
                            );
                            let answers = sizes.iter().map(|&bytes| {
                                chooser
                                    .tuned(&Call {
                                        collective: c,
                                        bytes,
                                        nranks: n,
                                    })
                                    .map(|c| c.protocol)
                            });
                            line(&mut out, &head, answers, |a| match a {
                                Ok(p) => protocol_code(*p).into(),
                                Err(e) => no_protocol_code(e),
                            });
                        }
                    }
                }
            }
        }
    }
    // The GPU's send/receive protocol.
    for ei in [0usize, 1, 2] {
        let thresholds = [
            None,
            Some(0usize),
            Some(1),
            Some(4096),
            Some(16384),
            Some(usize::MAX),
        ];
        for threshold in thresholds {
            for ll_lines in [0usize, 128, 8192] {
                for by_default in [false, true] {
                    let settings = Settings {
                        protocols: enable(ei),
                        algo: None,
                        p2p_ll_threshold: threshold,
                    };
                    for ch in 1..=32u32 {
                        let chooser = gpu(settings, ll_lines, by_default, 1, PeerCaps::NONE);
                        let head = format!(
                            "p2p e{ei} t{threshold:?} ll{ll_lines} d{} ch{ch}",
                            u8::from(by_default)
                        );
                        let answers = sizes.iter().map(|&b| chooser.p2p_protocol(b as usize, ch));
                        line(&mut out, &head, answers, |p| protocol_code(*p).into());
                    }
                }
            }
        }
    }
    // The GPU's algorithm; `None` from the rule is the tuner's, the ring on the GPU.
    let forced = [
        None,
        Some(Algo::Ring),
        Some(Algo::OneShot),
        Some(Algo::TwoShot),
        Some(Algo::Nvls),
    ];
    for algo in forced {
        for n in (1..=9usize).chain([16, 64]) {
            for (peer_mapped, nvls_heads) in
                [(false, false), (false, true), (true, false), (true, true)]
            {
                let peers = PeerCaps {
                    peer_mapped,
                    nvls_heads,
                };
                let settings = Settings {
                    algo,
                    ..Settings::default()
                };
                let chooser = gpu(settings, 8192, true, 24, peers);
                for c in COLLS {
                    let head = format!(
                        "algo f{} n{n} m{} h{} {}",
                        algo.map_or('-', algo_code),
                        u8::from(peer_mapped),
                        u8::from(nvls_heads),
                        c.name()
                    );
                    let answers = sizes.iter().map(|&bytes| {
                        chooser.algorithm(&Call {
                            collective: c,
                            bytes,
                            nranks: n,
                        })
                    });
                    line(&mut out, &head, answers, |a| match a {
                        Ok(a) => algo_code(a.unwrap_or(Algo::Ring)).into(),
                        Err(e) => format!("{e:?}").replace(' ', ""),
                    });
                }
            }
        }
    }
    out
}

fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn the_chooser_answers_as_the_two_it_replaced_over_the_whole_grid() {
    let text = grid_text();
    // To see every difference, write the text out and compare it with the one the replaced
    // choosers give (the recording, run at the commit named above).
    if let Some(path) = std::env::var_os("WEFT_CHOOSER_GRID") {
        std::fs::write(path, &text).unwrap();
    }
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        // The host: LL one-shot, SIMPLE one-shot, SIMPLE ring as the all-reduce grows.
        "cpu e0 ll8192 s131072 m0 n2 AllReduce: L1@0 S1@27 Sr@52",
        "cpu e0 ll8192 s131072 m0 n2 Broadcast: Lr@0 Sr@32",
        // No LL buffer and NCCL_PROTO=LL: nothing to run.
        "cpu e1 ll0 s131072 m0 n2 AllReduce: E1/4@0",
        // NVLink, 24 channels: LL then SIMPLE.
        "gpu e0 ll8192 d1 n2 ch24 AllReduce: L@0 S@93",
        // SHM windows without a setting: SIMPLE only.
        "gpu e0 ll8192 d0 n2 ch24 AllReduce: S@0",
        // NCCL's 16 KiB per channel, on 4 channels.
        "p2p e0 tNone ll8192 d1 ch4: L@0 S@69",
        // Four mapped ranks: one-shot, two-shot, the ring.
        "algo f- n4 m1 h1 AllReduce: 1@0 2@87 r@101",
        // WEFT_ALGO refusals.
        "algo f1 n4 m0 h0 AllReduce: NotPeerMapped{algo:OneShot}@0",
        "algo f1 n4 m1 h1 AllGather: Collective{algo:OneShot,coll:AllGather}@0",
        "algo f1 n9 m1 h1 AllReduce: TooManyRanks{algo:OneShot,nranks:9}@0",
        "algo fn n4 m1 h0 AllReduce: NoNvlsHeads@0",
    ] {
        assert!(lines.contains(&want), "{want}");
    }
    assert_eq!((lines.len(), fnv1a(&text)), RECORDED);
}
