//! The chooser's rules one by one; [`super::grid`] holds it to the choosers it replaced.

use std::string::ToString;

use super::*;
use crate::tune::ProtocolEnable;

fn enable(text: &str) -> ProtocolEnable {
    ProtocolEnable::parse(text).unwrap()
}

fn set(ps: &[Protocol]) -> ProtocolSet {
    ProtocolSet::of(ps)
}

/// The CPU executor's chooser: the host model, LL steps of 8 KiB, SIMPLE steps of 128 KiB.
fn host(protocols: &str) -> Chooser {
    Chooser {
        settings: Settings {
            protocols: enable(protocols),
            ..Settings::default()
        },
        offer: Offer {
            model: TuningModel::HOST_SHM,
            ll: LlOffer::ByDefault,
            fifo_one_shot: Some(FifoSteps {
                simple_bytes: 128 << 10,
                ll_bytes: 8 << 10,
            }),
            peers: PeerCaps::NONE,
        },
    }
}

/// A GPU communicator's chooser: NVLink's model on 24 channels, every rank peer-mapped.
fn nvlink(algo: Option<Algo>, ll: LlOffer) -> Chooser {
    Chooser {
        settings: Settings {
            algo,
            ..Settings::default()
        },
        offer: Offer {
            model: TuningModel::nvlink(24),
            ll,
            fifo_one_shot: None,
            peers: PeerCaps {
                peer_mapped: true,
                nvls_heads: true,
            },
        },
    }
}

fn call(collective: Collective, bytes: u64, nranks: usize) -> Call {
    Call {
        collective,
        bytes,
        nranks,
    }
}

#[test]
fn a_call_weighs_nccls_bytes() {
    let c = |coll, count| Call::new(coll, count, 4, 3).bytes;
    assert_eq!(c(Collective::AllReduce, 10), 40);
    assert_eq!(c(Collective::AllGather, 10), 120);
    assert_eq!(c(Collective::ReduceScatter, 10), 120);
    assert_eq!(c(Collective::Broadcast { root: 2 }, 10), 40);
    assert_eq!(c(Collective::AllGather, usize::MAX), u64::MAX);
}

#[test]
fn the_cpu_executor_gets_the_tuners_shape_and_protocol() {
    let h = host("");
    let ar = |bytes| h.choose(&call(Collective::AllReduce, bytes, 2)).unwrap();
    assert_eq!(
        ar(8),
        Choice {
            algo: Algo::OneShot,
            protocol: Protocol::Ll
        }
    );
    assert_eq!(
        ar(4096),
        Choice {
            algo: Algo::OneShot,
            protocol: Protocol::Simple
        }
    );
    assert_eq!(
        ar(64 << 20),
        Choice {
            algo: Algo::Ring,
            protocol: Protocol::Simple
        }
    );
    // No peer memory: the rule never takes over.
    assert_eq!(h.algorithm(&call(Collective::AllReduce, 8, 2)), Ok(None));
    // One-shot only where the FIFO holds the message in half its steps: LL steps of 8 KiB
    // take 32 KiB, so NCCL_PROTO=LL runs the ring beyond.
    let ll = host("LL");
    let at = |bytes| ll.choose(&call(Collective::AllReduce, bytes, 2)).unwrap();
    assert_eq!(at(32 << 10).algo, Algo::OneShot);
    assert_eq!(
        at((32 << 10) + 1),
        Choice {
            algo: Algo::Ring,
            protocol: Protocol::Ll
        }
    );
}

#[test]
fn one_shot_fits_half_of_the_fifo() {
    let steps = FifoSteps {
        simple_bytes: 1000,
        ll_bytes: 0,
    };
    assert_eq!(steps.one_shot(0), set(&[Protocol::Simple]));
    assert_eq!(steps.one_shot(4000), set(&[Protocol::Simple]));
    assert_eq!(steps.one_shot(4001), ProtocolSet::NONE);
    let both = FifoSteps {
        simple_bytes: usize::MAX,
        ll_bytes: 10,
    };
    assert_eq!(both.one_shot(40), set(&[Protocol::Simple, Protocol::Ll]));
    assert_eq!(both.one_shot(u64::MAX), set(&[Protocol::Simple]));
}

#[test]
fn ll_runs_as_offered() {
    let default = ProtocolEnable::default();
    let simple = set(&[Protocol::Simple]);
    let both = set(&[Protocol::Simple, Protocol::Ll]);
    assert_eq!(LlOffer::NoBuffer.runnable(&enable("LL")), simple);
    assert_eq!(LlOffer::WhenAsked.runnable(&default), simple);
    // The default spelled out is still the default.
    assert_eq!(
        LlOffer::WhenAsked.runnable(&enable("LL,LL128,Simple")),
        simple
    );
    assert_eq!(LlOffer::WhenAsked.runnable(&enable("LL,Simple")), both);
    assert_eq!(LlOffer::WhenAsked.runnable(&enable("Simple")), both);
    assert_eq!(LlOffer::ByDefault.runnable(&default), both);

    let gpu = |ll| nvlink(None, ll);
    let small = call(Collective::AllGather, 8, 2);
    assert_eq!(
        gpu(LlOffer::ByDefault).tuned(&small).unwrap().protocol,
        Protocol::Ll
    );
    assert_eq!(
        gpu(LlOffer::WhenAsked).tuned(&small).unwrap().protocol,
        Protocol::Simple
    );
}

#[test]
fn settings_leaving_no_protocol_are_an_error_that_names_both_sets() {
    let mut gpu = nvlink(None, LlOffer::NoBuffer);
    gpu.settings.protocols = enable("LL");
    let e = gpu.tuned(&call(Collective::Broadcast { root: 0 }, 8, 2));
    assert_eq!(
        e,
        Err(NoProtocol {
            collective: Collective::Broadcast { root: 0 },
            enabled: set(&[Protocol::Ll]),
            runnable: set(&[Protocol::Simple]),
        })
    );
    assert_eq!(
        e.unwrap_err().to_string(),
        "NCCL_PROTO enables LL for Broadcast, but the executor runs Simple on this \
         communicator: enable Simple"
    );
    // LL128 is enabled but not modelled: nothing either.
    let mut h = host("LL128");
    assert!(matches!(
        h.choose(&call(Collective::AllReduce, 8, 2)),
        Err(ChooseError::NoProtocol(_))
    ));
    // The protocol is checked before a forced algorithm.
    h.settings.algo = Some(Algo::OneShot);
    assert!(matches!(
        h.choose(&call(Collective::AllReduce, 8, 2)),
        Err(ChooseError::NoProtocol(_))
    ));
}

#[test]
fn the_peer_rule_replaces_the_algorithm_and_keeps_the_tuners_protocol() {
    let gpu = nvlink(None, LlOffer::ByDefault);
    let at = |bytes, nranks| {
        gpu.choose(&call(Collective::AllReduce, bytes, nranks))
            .unwrap()
    };
    assert_eq!(
        at(8, 2),
        Choice {
            algo: Algo::OneShot,
            protocol: Protocol::Ll
        }
    );
    assert_eq!(at(2 << 20, 2).algo, Algo::TwoShot);
    assert_eq!(
        at((2 << 20) + 1, 2),
        gpu.tuned(&call(Collective::AllReduce, (2 << 20) + 1, 2))
            .unwrap()
    );
    assert_eq!(at(8, 9).algo, Algo::Ring);
    // Not an all-reduce: the tuner's ring.
    assert_eq!(gpu.algorithm(&call(Collective::AllGather, 8, 2)), Ok(None));
    // WEFT_ALGO: forced, checked, and the ring when it says ring.
    let forced = |algo| nvlink(Some(algo), LlOffer::ByDefault);
    assert_eq!(
        forced(Algo::Nvls)
            .choose(&call(Collective::AllGather, 1 << 30, 8))
            .unwrap(),
        Choice {
            algo: Algo::Nvls,
            protocol: Protocol::Simple
        }
    );
    assert_eq!(
        forced(Algo::Ring)
            .choose(&call(Collective::AllReduce, 8, 2))
            .unwrap(),
        Choice {
            algo: Algo::Ring,
            protocol: Protocol::Ll
        }
    );
    let e = forced(Algo::TwoShot)
        .choose(&call(Collective::Reduce { root: 1 }, 8, 2))
        .unwrap_err();
    assert_eq!(
        e,
        ChooseError::Algorithm(AlgoError::Collective {
            algo: Algo::TwoShot,
            coll: CollKind::Reduce
        })
    );
    assert!(e.to_string().contains("all-reduce only"), "{e}");
}

#[test]
fn send_and_receive_follow_nccls_threshold() {
    let with = |ll, threshold| {
        let mut c = nvlink(None, ll);
        c.settings.p2p_ll_threshold = threshold;
        c
    };
    let by_default = with(LlOffer::ByDefault, None);
    assert_eq!(by_default.p2p_ll_threshold(), Some(NCCL_P2P_LL_THRESHOLD));
    assert_eq!(by_default.p2p_protocol(16384, 1), Protocol::Ll);
    assert_eq!(by_default.p2p_protocol(16385, 1), Protocol::Simple);
    assert_eq!(by_default.p2p_protocol(4 * 16384, 4), Protocol::Ll);
    // A setting wins, either way.
    assert_eq!(
        with(LlOffer::ByDefault, Some(0)).p2p_protocol(8, 1),
        Protocol::Simple
    );
    assert_eq!(
        with(LlOffer::WhenAsked, Some(usize::MAX)).p2p_protocol(40_000_001, 4),
        Protocol::Ll
    );
    // Unasked, only where LL runs by default; never without LL buffers.
    assert_eq!(with(LlOffer::WhenAsked, None).p2p_ll_threshold(), None);
    assert_eq!(
        with(LlOffer::NoBuffer, Some(usize::MAX)).p2p_protocol(8, 1),
        Protocol::Simple
    );
}
