//! GPUDirect RDMA: whether the NIC can reach GPU memory, and whether received GPU data must
//! be flushed. Two ways in, as NCCL's `net_ib` has them:
//!
//! - **peer memory**: the `nvidia-peermem` kernel module (or the older `nv_peer_mem`) lets
//!   `ibv_reg_mr` pin a CUDA pointer; its presence is a file in sysfs;
//! - **dma-buf**: CUDA exports the memory as a dma-buf fd and `ibv_reg_dmabuf_mr` registers
//!   it (rdma-core 34+, kernel 5.12+); probed by a registration of fd -1, which a kernel with
//!   support refuses with `EBADF` and one without with `EOPNOTSUPP` / `EPROTONOSUPPORT`.
//!
//! Then the switches (weft-config's): `NCCL_NET_GDR_LEVEL=0` / `LOC` (NCCL: GPUDirect on no
//! path) reports host memory only (a level NCCL would not take is ignored with a warning), `NCCL_DMABUF_ENABLE=0` no dma-buf, `NCCL_GDR_FLUSH_DISABLE=1` no flush.
//! `NCCL_NET_GDR_READ` (GPUDirect for sends) is NCCL's topology decision, not the
//! backend's, and is not read here. `WEFT_IB_FORCE_FLUSH=1` is for tests only: it flushes
//! receives into host memory too, so that the flush path runs where there is no GPU.
//!
//! Everything here is pure (sysfs and errno come in as arguments) so that it is tested
//! without a device.

use weft_core::topo::model::PathType;

use crate::PtrSupport;

/// The files whose presence means a peer-memory module is loaded (NCCL checks the same,
/// plus the `nvidia-peermem` spelling some DKMS builds use).
pub const PEERMEM_FILES: &[&str] = &[
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/kernel/mm/memory_peers/nvidia-peermem/version",
    "/sys/module/nvidia_peermem/version",
];

/// Whether a peer-memory module is loaded, given a test for a file's existence.
pub fn peermem_loaded(exists: &dyn Fn(&str) -> bool) -> bool {
    PEERMEM_FILES.iter().any(|f| exists(f))
}

/// What a probe registration of dma-buf fd -1 answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaBufProbe {
    /// The loaded libibverbs has no `ibv_reg_dmabuf_mr` (before rdma-core 34).
    NoSymbol,
    /// The call failed with this errno (`EBADF`: the kernel would take a real fd).
    Errno(i32),
    /// The call succeeded (never with fd -1; treated as support).
    Registered,
}

/// Whether the probe's answer means that dma-buf registration works.
pub fn dmabuf_supported(probe: DmaBufProbe) -> bool {
    match probe {
        DmaBufProbe::NoSymbol => false,
        DmaBufProbe::Errno(e) => e != libc::EOPNOTSUPP && e != libc::EPROTONOSUPPORT,
        DmaBufProbe::Registered => true,
    }
}

/// The GPUDirect switches from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GdrSettings {
    /// `NCCL_NET_GDR_LEVEL=0` / `LOC`: no GPUDirect at all.
    pub gdr_off: bool,
    /// `NCCL_DMABUF_ENABLE=0`.
    pub dmabuf_off: bool,
    /// `NCCL_GDR_FLUSH_DISABLE=1`.
    pub flush_off: bool,
    /// `WEFT_IB_FORCE_FLUSH=1` (tests only): flush host-memory receives too.
    pub force_flush: bool,
}

impl GdrSettings {
    /// The switches of weft-config's GPUDirect settings (and the tests' forced flush).
    pub fn from_settings(settings: &weft_config::NetSettings) -> Self {
        GdrSettings {
            // Every other level is a distance NCCL's topology compares; for the backend
            // they all mean "on".
            gdr_off: settings.gdr.level == Some(PathType::Loc),
            dmabuf_off: !settings.gdr.dmabuf,
            flush_off: settings.gdr.flush_disable,
            force_flush: settings.ib.force_flush,
        }
    }
}

/// What one device can do with GPU memory, decided once per device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GdrSupport {
    /// `ibv_reg_mr` takes CUDA pointers (peer memory).
    pub peermem: bool,
    /// `ibv_reg_dmabuf_mr` works.
    pub dmabuf: bool,
    /// Receives into GPU memory are flushed (a GPUDirect way in, and the flush not off).
    pub flush: bool,
    /// Receives into host memory are flushed too (`WEFT_IB_FORCE_FLUSH`, tests only).
    pub force_flush: bool,
}

impl GdrSupport {
    /// The decision from what was found and the switches.
    pub fn decide(peermem: bool, dmabuf: bool, s: &GdrSettings) -> Self {
        let peermem = peermem && !s.gdr_off;
        let dmabuf = dmabuf && !s.gdr_off && !s.dmabuf_off;
        GdrSupport {
            peermem,
            dmabuf,
            flush: (peermem || dmabuf) && !s.flush_off,
            force_flush: s.force_flush,
        }
    }

    /// NCCL's `ptrSupport`: host, plus CUDA with either way in, plus DMABUF.
    pub fn ptr_support(&self) -> PtrSupport {
        let mut p = PtrSupport::HOST;
        if self.peermem || self.dmabuf {
            p = p | PtrSupport::CUDA;
        }
        if self.dmabuf {
            p = p | PtrSupport::DMABUF;
        }
        p
    }

    /// Whether a receive comm needs the loopback flush QP at all.
    pub fn needs_flush_qp(&self) -> bool {
        self.flush || self.force_flush
    }

    /// Whether a completed receive into memory of `kind` must be flushed.
    pub fn flushes(&self, kind: crate::PtrKind) -> bool {
        match kind {
            crate::PtrKind::Cuda => self.flush,
            crate::PtrKind::Host => self.force_flush,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PtrKind;

    /// The switches with `pairs` set.
    fn switches(pairs: &[(&str, &str)]) -> Result<GdrSettings, weft_config::ConfigError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        weft_config::Settings::from_lookup(&lookup).map(|s| GdrSettings::from_settings(&s.net))
    }

    #[test]
    fn any_peermem_file_means_the_module_is_loaded() {
        assert!(!peermem_loaded(&|_| false));
        for f in PEERMEM_FILES {
            assert!(peermem_loaded(&|p| p == *f), "{f}");
        }
        assert!(!peermem_loaded(&|p| p == "/sys/module/nvidia/version"));
    }

    #[test]
    fn the_dmabuf_probe_reads_errno_as_nccl_does() {
        assert!(dmabuf_supported(DmaBufProbe::Errno(libc::EBADF)));
        assert!(dmabuf_supported(DmaBufProbe::Registered));
        assert!(!dmabuf_supported(DmaBufProbe::Errno(libc::EOPNOTSUPP)));
        assert!(!dmabuf_supported(DmaBufProbe::Errno(libc::EPROTONOSUPPORT)));
        assert!(!dmabuf_supported(DmaBufProbe::NoSymbol));
    }

    #[test]
    fn switches_come_from_nccl_names() {
        let s = switches(&[]).unwrap();
        assert_eq!(s, GdrSettings::default());
        let s = switches(&[
            ("NCCL_NET_GDR_LEVEL", "LOC"),
            ("NCCL_DMABUF_ENABLE", "0"),
            ("NCCL_GDR_FLUSH_DISABLE", "1"),
            ("WEFT_IB_FORCE_FLUSH", "1"),
        ])
        .unwrap();
        assert_eq!(
            s,
            GdrSettings {
                gdr_off: true,
                dmabuf_off: true,
                flush_off: true,
                force_flush: true
            }
        );
        for (level, off) in [
            ("LOC", true),
            ("0", true),
            ("PHB", false),
            ("PXN", false),
            ("SYS", false),
            ("2", false),
            ("near", false),
        ] {
            let s = switches(&[("NCCL_NET_GDR_LEVEL", level)]).unwrap();
            assert_eq!(s.gdr_off, off, "NCCL_NET_GDR_LEVEL={level}");
        }
        let e = switches(&[("NCCL_GDR_FLUSH_DISABLE", "yes")]).unwrap_err();
        assert!(
            e.to_string().contains("NCCL_GDR_FLUSH_DISABLE=\"yes\""),
            "{e}"
        );
    }

    #[test]
    fn ptr_support_and_flush_follow_the_ways_in_and_the_switches() {
        let none = GdrSettings::default();
        let d = GdrSupport::decide(false, false, &none);
        assert_eq!((d.ptr_support(), d.flush), (PtrSupport::HOST, false));
        assert!(!d.flushes(PtrKind::Cuda) && !d.flushes(PtrKind::Host));
        let d = GdrSupport::decide(true, false, &none);
        assert_eq!(d.ptr_support(), PtrSupport::HOST | PtrSupport::CUDA);
        assert!(d.flushes(PtrKind::Cuda) && !d.flushes(PtrKind::Host));
        let d = GdrSupport::decide(false, true, &none);
        assert_eq!(
            d.ptr_support(),
            PtrSupport::HOST | PtrSupport::CUDA | PtrSupport::DMABUF
        );
        assert!(d.flush);
        let d = GdrSupport::decide(
            true,
            true,
            &GdrSettings {
                dmabuf_off: true,
                ..none
            },
        );
        assert_eq!(d.ptr_support(), PtrSupport::HOST | PtrSupport::CUDA);
        let d = GdrSupport::decide(
            true,
            true,
            &GdrSettings {
                gdr_off: true,
                ..none
            },
        );
        assert_eq!((d.ptr_support(), d.flush), (PtrSupport::HOST, false));
        let d = GdrSupport::decide(
            true,
            false,
            &GdrSettings {
                flush_off: true,
                ..none
            },
        );
        assert!(!d.flushes(PtrKind::Cuda) && !d.needs_flush_qp());
        let d = GdrSupport::decide(
            false,
            false,
            &GdrSettings {
                force_flush: true,
                ..none
            },
        );
        assert_eq!(d.ptr_support(), PtrSupport::HOST);
        assert!(d.flushes(PtrKind::Host) && d.needs_flush_qp() && !d.flushes(PtrKind::Cuda));
    }
}
