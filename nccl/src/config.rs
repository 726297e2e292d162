//! `ncclConfig_t`: its layout (NCCL 2.28's `ncclConfig_v22800`) and what weft makes of
//! each field. A field left at `NCCL_CONFIG_UNDEF_*` takes the default; a field set to
//! something weft does not do is refused with `ncclInvalidUsage` naming it, never
//! silently ignored. Hints that change no result (names, the network's traffic class,
//! resource sharing between split communicators) are taken and logged.

use std::ffi::{CStr, c_char, c_int, c_uint};

use weft_runtime::comm::{ChannelBounds, MAX_CHANNELS};

use crate::result::ApiError;

/// `NCCL_CONFIG_UNDEF_INT`.
pub const UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_CONFIG_INITIALIZER`'s magic.
pub const CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_CTA_POLICY_DEFAULT`.
pub const CTA_POLICY_DEFAULT: c_int = 0;

/// `ncclConfig_t` (NCCL 2.28).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NcclConfig {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
}

impl Default for NcclConfig {
    /// `NCCL_CONFIG_INITIALIZER`.
    fn default() -> Self {
        NcclConfig {
            size: size_of::<NcclConfig>(),
            magic: CONFIG_MAGIC,
            version: crate::NCCL_VERSION_CODE as c_uint,
            blocking: UNDEF_INT,
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: UNDEF_INT,
            traffic_class: UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: UNDEF_INT,
            cta_policy: UNDEF_INT,
            shrink_share: UNDEF_INT,
            nvls_ctas: UNDEF_INT,
            n_channels_per_net_peer: UNDEF_INT,
            nvlink_centric_sched: UNDEF_INT,
        }
    }
}

/// What a communicator takes from its config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommSettings {
    /// `commName`, for log lines.
    pub name: Option<String>,
    /// `minCTAs` / `maxCTAs`: bounds on the communicator's channels (one CTA each).
    pub channel_bounds: Option<ChannelBounds>,
    /// Hints taken without effect, each with why, for the INFO log.
    pub notes: Vec<String>,
    /// NCCL's INFO line for each field the caller set (`Comm config Max CTAs set to 4`), in
    /// NCCL's order: scripts and tests look for them.
    pub set_lines: Vec<String>,
    /// `netName`, as given.
    pub net_name: Option<String>,
    /// `blocking` 0: init (a split's or shrink's child's too) and finalize return
    /// `ncclInProgress` and run in the background (`ncclCommGetAsyncError` says when they
    /// are done); every other call completes before it returns, which NCCL allows.
    pub nonblocking: bool,
}

/// Reads `config` (NULL: every default).
///
/// # Safety
///
/// `config`, when not null, must point to an `ncclConfig_t` of at least the `size` it
/// states (older NCCL versions' smaller structs are read up to their size), and its
/// string fields must be null or NUL-terminated.
pub unsafe fn read(config: *const NcclConfig) -> Result<CommSettings, ApiError> {
    if config.is_null() {
        return parse(&NcclConfig::default(), None, None);
    }
    // Only the header fields are known to be there until `size` says more.
    let mut header = [0u8; 16];
    // SAFETY: the caller's promise covers at least size, magic and version (16 bytes);
    // no reference to the whole struct is made, since an older one may be smaller.
    unsafe { std::ptr::copy_nonoverlapping(config.cast::<u8>(), header.as_mut_ptr(), 16) };
    let size = usize::from_ne_bytes(header[0..8].try_into().unwrap_or_default());
    let magic = c_uint::from_ne_bytes(header[8..12].try_into().unwrap_or_default());
    if magic != CONFIG_MAGIC {
        return Err(ApiError::invalid_argument(format!(
            "config magic {magic:#x} is not {CONFIG_MAGIC:#x}: initialise ncclConfig_t with \
             NCCL_CONFIG_INITIALIZER"
        )));
    }
    let mut full = NcclConfig::default();
    let n = size.min(size_of::<NcclConfig>());
    // SAFETY: the caller's struct holds `size` bytes; we copy at most that and at most
    // ours, into a struct of plain integers and pointers (any bytes are valid).
    unsafe {
        std::ptr::copy_nonoverlapping(
            config.cast::<u8>(),
            (&mut full as *mut NcclConfig).cast::<u8>(),
            n,
        )
    };
    // SAFETY: the caller promises NUL-terminated strings; null is checked.
    let text = |p: *const c_char| (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) });
    let net = text(full.net_name).map(|s| s.to_string_lossy().into_owned());
    let name = text(full.comm_name).map(|s| s.to_string_lossy().into_owned());
    parse(&full, net, name)
}

/// The checks of [`read`] on a struct already copied (strings already read).
pub fn parse(
    c: &NcclConfig,
    net_name: Option<String>,
    comm_name: Option<String>,
) -> Result<CommSettings, ApiError> {
    let set = |v: c_int| v != UNDEF_INT;
    // NCCL's INFO line for each field set, in its order (init.cc's NCCL_CONFIG_DEFAULT).
    let int = |v: c_int| set(v).then(|| v.to_string());
    let fields = [
        ("Blocking", int(c.blocking)),
        ("CGA cluster size", int(c.cga_cluster_size)),
        ("Min CTAs", int(c.min_ctas)),
        ("Max CTAs", int(c.max_ctas)),
        ("Net name", net_name.clone()),
        ("Split share", int(c.split_share)),
        ("Traffic class", int(c.traffic_class)),
        ("Comm name", comm_name.clone()),
        ("Collnet enable", int(c.collnet_enable)),
        ("CTA policy flags", int(c.cta_policy)),
        ("shrinkShare", int(c.shrink_share)),
        ("nvlsCTAs", int(c.nvls_ctas)),
        ("nChannelsPerNetPeer", int(c.n_channels_per_net_peer)),
        ("nvlinkCentricSched", int(c.nvlink_centric_sched)),
    ];
    let set_lines: Vec<String> = fields
        .into_iter()
        .filter_map(|(name, v)| Some(format!("Comm config {name} set to {}", v?)))
        .collect();
    let refuse = |field: &str, value: c_int, why: &str| {
        Err(ApiError::invalid_usage(format!(
            "ncclConfig_t.{field} = {value}: {why}; leave it at NCCL_CONFIG_UNDEF_INT"
        )))
    };
    let mut notes = Vec::new();
    let nonblocking = match c.blocking {
        UNDEF_INT | 1 => false,
        // A non-blocking communicator may complete a call before returning (NCCL's
        // contract: ncclSuccess means done); weft's init and finalize run in the background.
        0 => {
            notes.push(
                "blocking 0: init and finalize return ncclInProgress and run in the \
                 background; every other call completes before it returns (ncclSuccess)"
                    .to_string(),
            );
            true
        }
        v => return refuse("blocking", v, "must be 0 or 1"),
    };
    if set(c.collnet_enable) && c.collnet_enable != 0 {
        return refuse("collnetEnable", c.collnet_enable, "weft has no CollNet");
    }
    // minCTAs / maxCTAs bound the communicator's channels (one CTA per channel in weft's
    // kernels, as in NCCL's), after NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS. As NCCL: a
    // value past the channel limit is cut to it, and a minimum above the maximum is lowered
    // to it, each said at INFO.
    let mut channel_bound = |field: &str, v: c_int| -> Result<Option<u32>, ApiError> {
        if !set(v) {
            return Ok(None);
        }
        if v < 1 {
            return Err(ApiError::invalid_argument(format!(
                "ncclConfig_t.{field} = {v}: at least 1 CTA, or NCCL_CONFIG_UNDEF_INT"
            )));
        }
        let n = u32::try_from(v).unwrap_or(u32::MAX);
        if n > MAX_CHANNELS {
            notes.push(format!("{field} {v} cut to weft's {MAX_CHANNELS} channels"));
        }
        Ok(Some(n.min(MAX_CHANNELS)))
    };
    let min = channel_bound("minCTAs", c.min_ctas)?;
    let max = channel_bound("maxCTAs", c.max_ctas)?;
    let channel_bounds = match (min, max) {
        (None, None) => None,
        (min, max) => {
            let max = max.unwrap_or(MAX_CHANNELS);
            let min = min.unwrap_or(1);
            if min > max {
                notes.push(format!(
                    "minCTAs {min} above maxCTAs {max}: lowered to {max}"
                ));
            }
            notes.push(format!(
                "ring channels between {} and {max} (minCTAs / maxCTAs); send/receive and \
                 WEFT_ALGO's one-/two-shot and NVLS keep their own counts",
                min.min(max)
            ));
            Some(ChannelBounds {
                min: min.min(max),
                max,
            })
        }
    };
    for (field, v) in [
        ("nvlsCTAs", c.nvls_ctas),
        ("nChannelsPerNetPeer", c.n_channels_per_net_peer),
    ] {
        if set(v) {
            return refuse(
                field,
                v,
                "weft's NVLS and NET paths take no channel count from the config",
            );
        }
    }
    if set(c.cta_policy) && c.cta_policy != CTA_POLICY_DEFAULT {
        return refuse(
            "CTAPolicy",
            c.cta_policy,
            "weft has the default CTA policy only",
        );
    }
    if set(c.shrink_share) && c.shrink_share != 0 {
        notes.push(
            "shrinkShare 1 taken as a hint: a shrunk communicator gets its own resources".into(),
        );
    }
    // nccl-tests sets it on every 2.28 communicator: a scheduling hint, no result changes.
    if set(c.nvlink_centric_sched) && c.nvlink_centric_sched != 0 {
        notes.push(format!(
            "nvlinkCentricSched {} taken as a hint: weft schedules its rings as usual",
            c.nvlink_centric_sched
        ));
    }
    if set(c.cga_cluster_size) {
        notes.push(format!(
            "cgaClusterSize {} taken as a hint: weft's kernels launch without clusters",
            c.cga_cluster_size
        ));
    }
    if set(c.split_share) && c.split_share != 0 {
        notes.push(
            "splitShare 1 taken as a hint: a split communicator gets its own resources".into(),
        );
    }
    if set(c.traffic_class) {
        notes.push(format!(
            "trafficClass {} taken without effect: weft's GPU path uses no network",
            c.traffic_class
        ));
    }
    if let Some(net) = &net_name {
        notes.push(format!(
            "netName {net:?} taken without effect: weft's GPU path uses no network"
        ));
    }
    Ok(CommSettings {
        name: comm_name,
        channel_bounds,
        notes,
        set_lines,
        net_name,
        nonblocking,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE};

    #[test]
    fn layout_is_ncclconfig_v22800() {
        use std::mem::offset_of;
        assert_eq!(size_of::<NcclConfig>(), 80);
        assert_eq!(offset_of!(NcclConfig, magic), 8);
        assert_eq!(offset_of!(NcclConfig, blocking), 16);
        assert_eq!(offset_of!(NcclConfig, net_name), 32);
        assert_eq!(offset_of!(NcclConfig, comm_name), 48);
        assert_eq!(offset_of!(NcclConfig, nvlink_centric_sched), 76);
    }

    #[test]
    fn defaults_and_null_are_accepted() {
        assert_eq!(
            parse(&NcclConfig::default(), None, None).unwrap(),
            CommSettings::default()
        );
        assert_eq!(
            // SAFETY: null is allowed.
            unsafe { read(std::ptr::null()) }.unwrap(),
            CommSettings::default()
        );
    }

    #[test]
    fn each_field_set_gets_nccls_info_line() {
        // What PyTorch's test_pass_nccl_options_config sets, and reads back from the log.
        let c = NcclConfig {
            max_ctas: 4,
            min_ctas: 2,
            cga_cluster_size: 2,
            split_share: 1,
            ..NcclConfig::default()
        };
        let s = parse(&c, Some("Socket".into()), Some("pg".into())).unwrap();
        assert_eq!(
            s.set_lines,
            [
                "Comm config CGA cluster size set to 2",
                "Comm config Min CTAs set to 2",
                "Comm config Max CTAs set to 4",
                "Comm config Net name set to Socket",
                "Comm config Split share set to 1",
                "Comm config Comm name set to pg",
            ]
        );
        assert_eq!(s.net_name.as_deref(), Some("Socket"));
        assert!(
            parse(&NcclConfig::default(), None, None)
                .unwrap()
                .set_lines
                .is_empty()
        );
    }

    #[test]
    fn unsupported_fields_are_refused_by_name() {
        type Setter = fn(&mut NcclConfig);
        let cases: [(Setter, &str); 3] = [
            (|c| c.collnet_enable = 1, "collnetEnable"),
            (|c| c.cta_policy = 2, "CTAPolicy"),
            (|c| c.nvls_ctas = 4, "nvlsCTAs"),
        ];
        for (set, field) in cases {
            let mut c = NcclConfig::default();
            set(&mut c);
            let e = parse(&c, None, None).unwrap_err();
            assert_eq!(e.code, NCCL_INVALID_USAGE, "{field}");
            assert!(e.message.contains(field), "{}", e.message);
        }
        let mut c = NcclConfig {
            blocking: 7,
            ..NcclConfig::default()
        };
        assert!(
            parse(&c, None, None)
                .unwrap_err()
                .message
                .contains("0 or 1")
        );
        c.blocking = 1;
        assert!(parse(&c, None, None).is_ok());
        assert!(!parse(&c, None, None).unwrap().nonblocking);
        // Non-blocking is taken: init in the background, every other call synchronous.
        c.blocking = 0;
        let s = parse(&c, None, None).unwrap();
        assert!(s.nonblocking);
        assert!(
            s.notes.iter().any(|n| n.contains("blocking 0")),
            "{:?}",
            s.notes
        );
    }

    #[test]
    fn min_and_max_ctas_bound_the_channels_as_nccls_do() {
        let bounds = |min: c_int, max: c_int| {
            let c = NcclConfig {
                min_ctas: min,
                max_ctas: max,
                ..NcclConfig::default()
            };
            parse(&c, None, None).map(|s| (s.channel_bounds, s.notes))
        };
        let b = |min, max| Some(ChannelBounds { min, max });
        assert_eq!(bounds(UNDEF_INT, UNDEF_INT).unwrap().0, None);
        assert_eq!(bounds(2, 8).unwrap().0, b(2, 8));
        assert_eq!(bounds(UNDEF_INT, 4).unwrap().0, b(1, 4));
        assert_eq!(bounds(16, UNDEF_INT).unwrap().0, b(16, MAX_CHANNELS));
        // Past the limit: cut, and said.
        let (cut, notes) = bounds(UNDEF_INT, 1000).unwrap();
        assert_eq!(cut, b(1, MAX_CHANNELS));
        assert!(
            notes.iter().any(|n| n.contains("maxCTAs 1000 cut")),
            "{notes:?}"
        );
        // A minimum above the maximum is lowered to it, as NCCL does.
        let (low, notes) = bounds(12, 4).unwrap();
        assert_eq!(low, b(4, 4));
        assert!(
            notes.iter().any(|n| n.contains("lowered to 4")),
            "{notes:?}"
        );
        let e = bounds(0, UNDEF_INT).unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("minCTAs = 0"), "{}", e.message);
    }

    #[test]
    fn hints_are_taken_and_noted() {
        let c = NcclConfig {
            cga_cluster_size: 4,
            split_share: 1,
            nvlink_centric_sched: 1,
            ..NcclConfig::default()
        };
        let s = parse(&c, Some("IB".into()), Some("pg0".into())).unwrap();
        assert_eq!(s.name.as_deref(), Some("pg0"));
        assert_eq!(s.notes.len(), 4, "{:?}", s.notes);
        assert!(s.notes.iter().any(|n| n.contains("cgaClusterSize 4")));
    }

    #[test]
    fn a_bad_magic_and_an_old_small_struct() {
        let mut c = NcclConfig {
            magic: 0,
            ..NcclConfig::default()
        };
        // SAFETY: `c` is a whole struct.
        let e = unsafe { read(&c) }.unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("NCCL_CONFIG_INITIALIZER"));
        // A struct of an older NCCL: fields past its size are not read (blocking = 0
        // beyond `size` must not count).
        c.magic = CONFIG_MAGIC;
        c.size = 16;
        c.blocking = 0;
        // SAFETY: `c` holds more than the 16 bytes it states.
        assert!(unsafe { read(&c) }.is_ok());
    }
}
