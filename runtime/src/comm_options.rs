//! [`CommOptions::from_settings`]: a communicator's options from weft-config's settings.
//!
//! It belongs beside [`CommOptions`] in `comm/mod.rs`, and sits here only while that file
//! is being reworked elsewhere (issue 23); `CommOptions::from_lookup` there still has its
//! own parsers of the same variables, to be replaced by this.

use weft_config::{Settings, table};

use crate::bootstrap::BootstrapOptions;
use crate::comm::CommOptions;
use crate::conn::WaitPolicy;
use crate::conn::layout::{ll_lines_of, ring_step_bytes};

impl CommOptions {
    /// Defaults overridden by `settings`: `WEFT_NCHANNELS`, `WEFT_TRANSPORT`,
    /// `WEFT_TIMEOUT` (which sets the bootstrap's deadline too), `WEFT_WAIT_SPINS`,
    /// `WEFT_WAIT_YIELDS`, `WEFT_BUFFSIZE` / `NCCL_BUFFSIZE`, `WEFT_PROTO` / `NCCL_PROTO`,
    /// `WEFT_LL_BUFFSIZE` / `NCCL_LL_BUFFSIZE`, `WEFT_ALGO`, `WEFT_MIN_SLICES`,
    /// `NCCL_P2P_READ_ENABLE`, `NCCL_P2P_LL_THRESHOLD`, and the bootstrap's
    /// ([`BootstrapOptions::from_settings`]).
    ///
    /// Logs the settings that differ from their defaults, once per process, as
    /// `NCCL_DEBUG=INFO` does at init ([`Settings::log_changed_once`]).
    pub fn from_settings(settings: &Settings) -> CommOptions {
        settings.log_changed_once();
        let t = &settings.transport;
        let mut bootstrap = BootstrapOptions::from_settings(settings);
        if settings.origin(&table::TIMEOUT.info).is_some() {
            bootstrap.timeout = t.timeout;
        }
        let wait = (t.wait_spins.is_some() || t.wait_yields.is_some()).then(|| {
            let base = WaitPolicy::default();
            WaitPolicy {
                spins: t.wait_spins.unwrap_or(base.spins),
                yields: t.wait_yields.unwrap_or(base.yields),
                ..base
            }
        });
        CommOptions {
            nchannels: settings.topology.nchannels,
            transport: t.transport,
            timeout: t.timeout,
            step_bytes: t.buffsize.map(ring_step_bytes),
            wait,
            protocols: t.protocols,
            ll_lines: t.ll_buffsize.map(ll_lines_of),
            algo: settings.gpu.algo,
            p2p_ll_threshold: t.p2p_ll_threshold,
            min_slices: settings.gpu.min_slices,
            p2p_read: t.p2p_read,
            bootstrap,
            ..CommOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use weft_core::abi::Protocol;
    use weft_core::sched::Collective;
    use weft_core::tune::{ProtocolEnable, ProtocolSet};

    use super::*;
    use crate::comm::TransportChoice;

    fn options(pairs: &[(&'static str, &'static str)]) -> CommOptions {
        let pairs = pairs.to_vec();
        let lookup = move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        CommOptions::from_settings(&Settings::from_lookup(&lookup).unwrap())
    }

    /// What `comm::test::options_from_the_environment` asks of `CommOptions::from_lookup`.
    #[test]
    fn options_from_settings() {
        let o = options(&[
            ("WEFT_NCHANNELS", "3"),
            ("WEFT_TRANSPORT", "net"),
            ("WEFT_TIMEOUT", "2.5"),
            ("NCCL_BUFFSIZE", "4194304"),
            ("WEFT_WAIT_YIELDS", "7"),
            ("WEFT_MIN_SLICES", "4"),
            ("NCCL_P2P_READ_ENABLE", "1"),
        ]);
        assert_eq!(o.nchannels, Some(3));
        assert_eq!(o.transport, TransportChoice::Net);
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.bootstrap.timeout, Duration::from_millis(2500));
        assert_eq!(o.step_bytes, Some(512 * 1024));
        assert_eq!(o.wait.map(|w| (w.spins, w.yields)), Some((256, 7)));
        assert_eq!(o.min_slices, Some(4));
        assert_eq!(o.p2p_read, Some(true));
        assert_eq!(o.protocols, ProtocolEnable::default());
        assert_eq!(o.ll_lines, None);
        let both = options(&[("NCCL_P2P_READ_ENABLE", "1"), ("WEFT_P2P_READ_ENABLE", "0")]);
        assert_eq!(both.p2p_read, Some(false), "the WEFT_ name wins");
        let none = options(&[]);
        assert_eq!(
            (
                none.p2p_read,
                none.min_slices,
                none.algo,
                none.wait.is_some()
            ),
            (None, None, None, false)
        );
        assert_eq!(none.timeout, crate::comm::DEFAULT_TIMEOUT);
        assert_eq!(none.bootstrap, BootstrapOptions::default());
        // The bootstrap's own deadline holds unless WEFT_TIMEOUT is set.
        let b = options(&[("WEFT_BOOTSTRAP_TIMEOUT", "7")]);
        assert_eq!(b.bootstrap.timeout, Duration::from_secs(7));
        assert_eq!(b.timeout, crate::comm::DEFAULT_TIMEOUT);
    }

    #[test]
    fn protocols_and_ll_buffer_from_settings() {
        let only = |p: Protocol| ProtocolSet::of(&[p]);
        let o = options(&[("NCCL_PROTO", "^ll"), ("NCCL_LL_BUFFSIZE", "262144")]);
        assert_eq!(
            o.protocols.for_collective(Collective::AllReduce),
            ProtocolSet::of(&[Protocol::Ll128, Protocol::Simple])
        );
        // 256 KiB for 8 steps of 8-byte lines: 4096 lines per step.
        assert_eq!(o.ll_lines, Some(4096));
        let o = options(&[
            ("NCCL_PROTO", "Simple"),
            ("WEFT_PROTO", "LL;allgather:Simple"),
            ("WEFT_LL_BUFFSIZE", "100000"),
        ]);
        assert_eq!(
            o.protocols
                .for_collective(Collective::Broadcast { root: 0 }),
            only(Protocol::Ll)
        );
        assert_eq!(
            o.protocols.for_collective(Collective::AllGather),
            only(Protocol::Simple)
        );
        assert_eq!(o.ll_lines, Some(1536));
        assert_eq!(options(&[("NCCL_LL_BUFFSIZE", "0")]).ll_lines, Some(0));
        assert_eq!(options(&[]).p2p_ll_threshold, None);
        assert_eq!(
            options(&[
                ("NCCL_P2P_LL_THRESHOLD", "16384"),
                ("WEFT_P2P_LL_THRESHOLD", "0")
            ])
            .p2p_ll_threshold,
            Some(0)
        );
        assert_eq!(
            options(&[("WEFT_ALGO", "TwoShot")]).algo,
            Some(weft_core::algo::GpuAlgo::TwoShot)
        );
    }

    /// The values `CommOptions::from_lookup` refuses are refused when the settings are read,
    /// each error naming its variable.
    #[test]
    fn bad_values_are_refused_by_the_settings() {
        for (var, value) in [
            ("WEFT_NCHANNELS", "0"),
            ("WEFT_NCHANNELS", "65"),
            ("WEFT_TRANSPORT", "carrier-pigeon"),
            ("WEFT_TIMEOUT", "-1"),
            ("WEFT_BUFFSIZE", "12"),
            ("NCCL_PROTO", "LL,Simpel"),
            ("WEFT_PROTO", "allreduc:LL"),
            ("NCCL_LL_BUFFSIZE", "lots"),
            ("WEFT_ALGO", "tree"),
            ("WEFT_MIN_SLICES", "0"),
            ("WEFT_MIN_SLICES", "9"),
            ("NCCL_P2P_READ_ENABLE", "yes"),
            ("NCCL_P2P_LL_THRESHOLD", "16k"),
            ("WEFT_WAIT_SPINS", "many"),
        ] {
            let err = Settings::from_lookup(&|k| (k == var).then(|| value.to_string()))
                .expect_err("a bad value is an error");
            assert!(
                err.to_string().contains(&format!("{var}={value:?}")),
                "{err}"
            );
        }
    }
}
