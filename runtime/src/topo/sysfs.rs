//! Reading a sysfs tree: where a PCI device lives, its attributes, and bus id spelling.
//!
//! Everything takes the directory that plays `/sys` as a parameter ([`SysRoot`]), so tests
//! run detection against a fake tree built in a temporary directory.

use std::path::{Path, PathBuf};

/// The directory that plays `/sys` (and the one that plays `/proc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysRoot {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl SysRoot {
    /// This machine's `/sys` and `/proc`.
    pub fn host() -> Self {
        SysRoot {
            sys: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
        }
    }

    /// A tree under `dir`: `dir/sys` and `dir/proc`.
    pub fn under(dir: &Path) -> Self {
        SysRoot {
            sys: dir.join("sys"),
            proc: dir.join("proc"),
        }
    }

    /// `rel` under the sysfs root (`rel` without a leading `/`).
    pub fn sys_path(&self, rel: &str) -> PathBuf {
        self.sys.join(rel)
    }

    /// The resolved directory of PCI device `busid` (NCCL's `ncclOsGetPciPath`), e.g.
    /// `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0`; `None` when sysfs does not have it.
    pub fn pci_path(&self, busid: &str) -> Option<PathBuf> {
        let busid = normalize_busid(busid)?;
        std::fs::canonicalize(self.sys.join("bus/pci/devices").join(&busid)).ok()
    }

    /// The PCI class of `busid` as sysfs writes it (`0x030200`).
    pub fn pci_class(&self, busid: &str) -> Option<String> {
        read_attr(&self.pci_path(busid)?, "class")
    }
}

/// The content of `dir/file` without its trailing newline; `None` when missing, unreadable
/// or empty (as NCCL's `ncclOsTopoGetStrFromSys`, which then leaves the attribute unset).
pub fn read_attr(dir: &Path, file: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(file)).ok()?;
    let text = text.trim_end_matches(['\n', '\r']).trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The last component of `path`, as text.
pub fn base_name(path: &Path) -> Option<&str> {
    path.file_name().and_then(|n| n.to_str())
}

/// Whether `s` is a PCI address `DDDD:BB:DD.F` (NCCL's `checkBDFFormat`): the components
/// of a sysfs device path that are PCI devices, as opposed to `pci0000:00` (a root complex).
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b':',
            10 => *c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A bus id in the form sysfs and NCCL's XML use, `0000:07:00.0` (lower case, 4-digit
/// domain), from any of the spellings CUDA and NVML return (`00000000:07:00.0`,
/// `0000:07:00.0`, upper case). `None` if it is not a bus id.
pub fn normalize_busid(s: &str) -> Option<String> {
    let s = s.trim();
    let (domain, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    if domain > 0xffff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// The number in front of ` GT/s` (C's `sscanf("%f GT/s")`); `None` if there is none.
pub fn link_speed_value(s: &str) -> Option<f32> {
    let num: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse().ok()
}

/// C's `strtol(s, NULL, 0)` for the values sysfs holds: decimal or `0x` hex, 0 otherwise.
pub fn c_strtol(s: &str) -> i64 {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => {
            let digits: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
            i64::from_str_radix(&digits, 16).unwrap_or(0)
        }
        None => {
            let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap_or(0)
        }
    };
    if neg { v.wrapping_neg() } else { v }
}

/// A CPU mask as sysfs writes it (`ffffffff,00000000`, most significant word first) as a
/// list of ranges (`32-63`), the way `nvidia-smi topo -m` shows affinity. `None` if the
/// text is not a mask.
pub fn cpumask_to_list(mask: &str) -> Option<String> {
    let mut cpus: Vec<u32> = Vec::new();
    let words: Vec<&str> = mask.trim().split(',').collect();
    for (i, word) in words.iter().rev().enumerate() {
        let bits = u32::from_str_radix(word.trim(), 16).ok()?;
        for b in 0..32u32 {
            if bits & (1 << b) != 0 {
                cpus.push(u32::try_from(i).ok()?.checked_mul(32)?.checked_add(b)?);
            }
        }
    }
    let mut out = String::new();
    let mut i = 0;
    while let Some(&start) = cpus.get(i) {
        let mut end = start;
        while cpus.get(i + 1) == Some(&(end + 1)) {
            end += 1;
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_and_busid_spellings() {
        assert!(is_bdf("0000:00:06.0"));
        assert!(is_bdf("0001:a0:1f.7"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:00:06"));
        assert!(!is_bdf("0000-00:06.0"));
        assert_eq!(
            normalize_busid("00000000:C1:00.0").as_deref(),
            Some("0000:c1:00.0")
        );
        assert_eq!(
            normalize_busid("0000:07:00.0").as_deref(),
            Some("0000:07:00.0")
        );
        assert_eq!(normalize_busid("fffffff:ff:ff.0"), None);
        assert_eq!(normalize_busid("07:00.0"), None);
    }

    #[test]
    fn sysfs_numbers_read_as_nccl_reads_them() {
        assert_eq!(link_speed_value("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(link_speed_value("2.5 GT/s"), Some(2.5));
        assert_eq!(link_speed_value("Unknown"), None);
        assert_eq!(c_strtol("16"), 16);
        assert_eq!(c_strtol("0x1f"), 31);
        assert_eq!(c_strtol("-1"), -1);
        assert_eq!(c_strtol(""), 0);
    }

    #[test]
    fn cpu_masks_become_ranges() {
        assert_eq!(cpumask_to_list("ffffffff").as_deref(), Some("0-31"));
        assert_eq!(
            cpumask_to_list("0000000f,f0000001").as_deref(),
            Some("0,28-35")
        );
        assert_eq!(cpumask_to_list("00000000,00000005").as_deref(), Some("0,2"));
        assert_eq!(cpumask_to_list("zz"), None);
    }
}
