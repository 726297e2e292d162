//! Where a process's topology comes from, as in NCCL's `ncclTopoGetSystem`:
//! `NCCL_TOPO_FILE` (or `WEFT_TOPO_FILE`) when set, detection otherwise; then
//! `NCCL_TOPO_DUMP_FILE` receives the XML. The communicator and `weft topo` both start here,
//! with their settings (weft-config).

use super::detect::{DetectError, DetectOptions, Note, detect};
use super::nic::NicProbe;
use std::path::{Path, PathBuf};
use weft_config::{Settings, TopologySettings, table};
use weft_core::topo::model::PathType;
use weft_core::topo::system_xml::{TopoXmlError, parse_topology, topology_to_xml};
use weft_core::topo::xml::XmlNode;
use weft_core::topo::{PathOptions, Topology};

/// Where the topology came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopoSource {
    /// Read from this file.
    File(PathBuf),
    /// Detected from this sysfs root.
    Detected(PathBuf),
}

impl std::fmt::Display for TopoSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopoSource::File(p) => write!(f, "loaded from {}", p.display()),
            TopoSource::Detected(p) => write!(f, "detected from {}", p.display()),
        }
    }
}

/// A topology with how it was obtained.
#[derive(Debug, Clone)]
pub struct LocalTopology {
    pub topology: Topology,
    /// The XML NCCL would dump: the detected tree, or the file's topology written back.
    pub xml: XmlNode,
    pub source: TopoSource,
    /// Network devices found by detection (empty for a file).
    pub nics: Vec<NicProbe>,
    /// What was ignored or missing (unknown XML attributes, no NVML...).
    pub notes: Vec<Note>,
    /// Where `NCCL_TOPO_DUMP_FILE` made us write the XML.
    pub dumped: Option<PathBuf>,
}

/// Why no topology could be had.
#[derive(Debug)]
pub enum TopoError {
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A topology file that does not load; names element, attribute, line and column.
    Parse {
        path: PathBuf,
        source: TopoXmlError,
    },
    Write {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    Detect(DetectError),
}

impl std::fmt::Display for TopoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopoError::Read { path, source } => write!(
                f,
                "cannot read topology file {}: {source} (check NCCL_TOPO_FILE / --file)",
                path.display()
            ),
            TopoError::Parse { path, source } => write!(f, "{}: {source}", path.display()),
            TopoError::Write { path, what, source } => {
                write!(f, "cannot write the {what} to {}: {source}", path.display())
            }
            TopoError::Detect(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TopoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TopoError::Read { source, .. } | TopoError::Write { source, .. } => Some(source),
            TopoError::Detect(e) => Some(e),
            TopoError::Parse { .. } => None,
        }
    }
}

/// Reads and loads a topology XML file.
pub fn load_file(path: &Path) -> Result<(Topology, Vec<Note>), TopoError> {
    let text = std::fs::read_to_string(path).map_err(|e| TopoError::Read {
        path: path.to_path_buf(),
        source: e,
    })?;
    let (topo, warnings) = parse_topology(&text).map_err(|e| TopoError::Parse {
        path: path.to_path_buf(),
        source: e,
    })?;
    let notes = warnings
        .iter()
        .map(|w| Note::warn(format!("{}: {w}", path.display())))
        .collect();
    Ok((topo, notes))
}

/// Writes `text` to `path`, naming `what` on failure.
pub fn write_file(path: &Path, what: &'static str, text: &str) -> Result<(), TopoError> {
    std::fs::write(path, text).map_err(|e| TopoError::Write {
        path: path.to_path_buf(),
        what,
        source: e,
    })
}

/// NCCL's path settings (`NCCL_P2P_LEVEL`, `NCCL_P2P_DISABLE`, `NCCL_NVB_DISABLE`,
/// `NCCL_NET_GDR_LEVEL`, `NCCL_NET_GDR_C2C`, `NCCL_NET_GDR_READ`, `NCCL_PXN_DISABLE`,
/// `NCCL_PXN_C2C`); a value of theirs NCCL would not take was ignored, and is said in
/// `notes`.
pub fn path_options(settings: &Settings, notes: &mut Vec<Note>) -> PathOptions {
    for var in [
        &table::NVB_DISABLE.info,
        &table::NET_GDR_C2C.info,
        &table::NET_GDR_READ.info,
        &table::PXN_DISABLE.info,
        &table::PXN_C2C.info,
        &table::P2P_DISABLE.info,
        &table::P2P_LEVEL.info,
        &table::NET_GDR_LEVEL.info,
    ] {
        if let Some(bad) = settings.bad_value_of(var) {
            notes.push(Note::warn(bad.to_string()));
        }
    }
    let t = &settings.topology;
    PathOptions {
        p2p_level: if settings.transport.p2p_disable {
            Some(PathType::Loc)
        } else {
            t.p2p_level
        },
        nvb_disable: t.nvb_disable,
        gdr_level: settings.net.gdr.level,
        gdr_c2c: t.gdr_c2c,
        gdr_read: t.gdr_read,
        pxn_disable: t.pxn_disable,
        pxn_c2c: t.pxn_c2c,
    }
}

/// This process's topology: `file` if given, else `settings`' topology file
/// (`WEFT_TOPO_FILE` / `NCCL_TOPO_FILE`), else detection with `detect_opts` (built on
/// demand, since probing CUDA and NVML takes time); then the XML goes to
/// `NCCL_TOPO_DUMP_FILE` when that is set.
pub fn local_topology(
    file: Option<&Path>,
    settings: &TopologySettings,
    detect_opts: &mut dyn FnMut(&mut Vec<Note>) -> DetectOptions,
) -> Result<LocalTopology, TopoError> {
    let mut notes = Vec::new();
    let file = file
        .map(Path::to_path_buf)
        .or_else(|| settings.topo_file.clone());
    let mut local = match file {
        Some(path) => {
            let (topology, file_notes) = load_file(&path)?;
            notes.extend(file_notes);
            LocalTopology {
                xml: topology_to_xml(&topology),
                topology,
                source: TopoSource::File(path),
                nics: Vec::new(),
                notes,
                dumped: None,
            }
        }
        None => {
            let opts = detect_opts(&mut notes);
            let d = detect(&opts).map_err(TopoError::Detect)?;
            notes.extend(d.notes);
            LocalTopology {
                xml: d.xml,
                topology: d.topology,
                source: TopoSource::Detected(opts.root.sys.clone()),
                nics: d.nics,
                notes,
                dumped: None,
            }
        }
    };
    if let Some(dump) = &settings.topo_dump_file {
        write_file(dump, "topology XML", &local.xml.write())?;
        local.dumped = Some(dump.clone());
    }
    for n in &local.notes {
        log::log!(n.level, "{}", n.text);
    }
    Ok(local)
}

/// [`local_topology`] on this machine with the process environment's settings.
pub fn host_topology() -> Result<LocalTopology, TopoError> {
    let settings = Settings::from_env_or_defaults();
    local_topology(None, &settings.topology, &mut |notes| {
        DetectOptions::host(&settings, notes)
    })
}

#[cfg(test)]
mod tests {
    use super::super::fake_sysfs::FakeSys;
    use super::super::nic::NicInputs;
    use super::*;

    fn fixture(name: &str) -> String {
        format!(
            "{}/../tests/fixtures/topo/{name}",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    #[test]
    fn file_wins_over_detection_and_dump_gets_the_xml() {
        let tmp = FakeSys::new("source");
        tmp.net("lo", None, &[("flags", "0x9")]);
        tmp.cpuinfo("GenuineIntel", 6, 85);
        let dump = tmp.dir.join("dump.xml");
        let root = tmp.root();
        let mut detect_calls = 0;
        let mut opts = |_: &mut Vec<Note>| {
            detect_calls += 1;
            DetectOptions {
                root: root.clone(),
                gpus: Vec::new(),
                nics: NicInputs {
                    addrs: vec![("lo".into(), "127.0.0.1".parse().unwrap())],
                    ..NicInputs::default()
                },
                host_hash: 0xabc,
                arch: "x86_64".into(),
            }
        };
        // Detection, dumped as NCCL_TOPO_DUMP_FILE says.
        let d = dump.to_str().unwrap().to_string();
        let env = |k: &str| (k == "NCCL_TOPO_DUMP_FILE").then(|| d.clone());
        let settings = Settings::from_lookup(&env).unwrap().topology;
        let local = local_topology(None, &settings, &mut opts).unwrap();
        assert_eq!(local.source, TopoSource::Detected(root.sys.clone()));
        assert_eq!(local.dumped.as_deref(), Some(dump.as_path()));
        let text = std::fs::read_to_string(&dump).unwrap();
        assert_eq!(text, local.xml.write());
        assert!(text.contains("<net name=\"lo\" dev=\"0\""), "{text}");
        // WEFT_TOPO_FILE before NCCL_TOPO_FILE, and no detection at all.
        let (dgx, pcie) = (fixture("dgx-h100.xml"), fixture("pcie-2socket.xml"));
        let env = |k: &str| match k {
            "WEFT_TOPO_FILE" => Some(pcie.clone()),
            "NCCL_TOPO_FILE" => Some(dgx.clone()),
            _ => None,
        };
        let settings = Settings::from_lookup(&env).unwrap().topology;
        let local = local_topology(None, &settings, &mut opts).unwrap();
        assert_eq!(local.source, TopoSource::File(pcie.clone().into()));
        assert_eq!(
            local.topology.of_kind(weft_core::topo::NodeKind::Gpu).len(),
            4
        );
        // An explicit file before both.
        let local = local_topology(Some(Path::new(&dgx)), &settings, &mut opts).unwrap();
        assert_eq!(
            local.topology.of_kind(weft_core::topo::NodeKind::Gpu).len(),
            8
        );
        assert_eq!(detect_calls, 1);
    }
}
