//! Kernel bundles: machine code compiled ahead of time, so that a job's first collective on a
//! fresh machine loads its kernels instead of spending seconds per module in NVRTC.
//!
//! A bundle is a packed kernel cache: entries named as the cache's files
//! (`collectives_cu-<key>.cubin`), each compressed on its own (DEFLATE; CUBINs shrink about
//! 4.5 times), with the NVRTC version that compiled them. [`compile`](crate::compile) looks a
//! module up in the bundle first, under the key it would have had with that version: a hit
//! needs no NVRTC at all, a miss (another architecture, another tuning, kernels changed since
//! the bundle was made) goes on to the disk cache and NVRTC as before.
//!
//! Where the bundle comes from, first found wins:
//! 1. `WEFT_KERNEL_BUNDLE` at run time: a bundle file (`weft kernels --bundle FILE` writes
//!    one), or `0` for none (NVRTC and the cache only, as without a bundle);
//! 2. the bundle built into this binary: `WEFT_KERNEL_BUNDLE` naming a file when weft-cuda is
//!    compiled embeds it (`scripts/build-kernel-bundle.sh`); without it nothing is embedded.
//!
//! Format (little-endian): the magic `WEFTKB1\0`; NVRTC's major and minor version and the
//! entry count (`u32` each); per entry the name's length (`u16`) and bytes, then the offset
//! in the data (`u64`), the compressed and the original length (`u64` each); then the data.
//! Every length and offset is checked when a bundle is read: a damaged bundle is a warning
//! and no bundle, never a crash.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

const MAGIC: &[u8; 8] = b"WEFTKB1\0";
/// The largest image an entry may claim (a CUBIN of weft's is a few MiB): a damaged length
/// must not make a reader allocate gigabytes.
const MAX_IMAGE: u64 = 256 << 20;

/// A bundle read from bytes (see the module documentation).
#[derive(Debug)]
pub struct KernelBundle {
    nvrtc_version: (i32, i32),
    entries: HashMap<String, Entry>,
    /// The whole bundle; entries' offsets count from `data_start`.
    bytes: Cow<'static, [u8]>,
    data_start: usize,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: usize,
    packed: usize,
    len: usize,
}

/// Reads the bundle's fields in order, each bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("cut short in {what} at byte {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self, what: &str) -> Result<u16, String> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

impl KernelBundle {
    /// Reads a bundle (borrowed when `'static`, as the built-in one is); the error says
    /// what is wrong where.
    pub fn parse(bytes: impl Into<Cow<'static, [u8]>>) -> Result<KernelBundle, String> {
        let bytes = bytes.into();
        let mut r = Reader {
            bytes: &bytes,
            at: 0,
        };
        if r.take(MAGIC.len(), "the magic")? != MAGIC {
            return Err("not a weft kernel bundle (no WEFTKB1 magic)".to_string());
        }
        let major = r.u32("NVRTC's version")?;
        let minor = r.u32("NVRTC's version")?;
        let count = r.u32("the entry count")?;
        let mut index = Vec::new();
        for i in 0..count {
            let what = format!("entry {i}");
            let name_len = r.u16(&what)?;
            let name = std::str::from_utf8(r.take(usize::from(name_len), &what)?)
                .map_err(|_| format!("{what}: its name is not UTF-8"))?
                .to_string();
            let offset = r.u64(&what)?;
            let packed = r.u64(&what)?;
            let len = r.u64(&what)?;
            if len > MAX_IMAGE {
                return Err(format!("{what} ({name}) claims {len} bytes"));
            }
            index.push((name, offset, packed, len));
        }
        let data_start = r.at;
        let data = &bytes[data_start..];
        let mut entries = HashMap::with_capacity(index.len());
        for (name, offset, packed, len) in index {
            let fits = offset
                .checked_add(packed)
                .is_some_and(|end| end <= data.len() as u64);
            if !fits {
                return Err(format!(
                    "entry {name}: bytes {offset}+{packed} lie past the data's {}",
                    data.len()
                ));
            }
            let entry = Entry {
                offset: offset as usize,
                packed: packed as usize,
                len: len as usize,
            };
            if entries.insert(name.clone(), entry).is_some() {
                return Err(format!("entry {name} appears twice"));
            }
        }
        Ok(KernelBundle {
            nvrtc_version: (major as i32, minor as i32),
            entries,
            bytes,
            data_start,
        })
    }

    /// Packs `entries` (cache file name, image), compiled by NVRTC `nvrtc_version`.
    pub fn write(nvrtc_version: (i32, i32), entries: &[(String, Vec<u8>)]) -> Vec<u8> {
        let packed: Vec<Vec<u8>> = entries
            .iter()
            .map(|(_, image)| miniz_oxide::deflate::compress_to_vec(image, 9))
            .collect();
        let mut out = MAGIC.to_vec();
        out.extend((nvrtc_version.0 as u32).to_le_bytes());
        out.extend((nvrtc_version.1 as u32).to_le_bytes());
        out.extend((entries.len() as u32).to_le_bytes());
        let mut offset = 0u64;
        for ((name, image), p) in entries.iter().zip(&packed) {
            out.extend((name.len() as u16).to_le_bytes());
            out.extend(name.as_bytes());
            out.extend(offset.to_le_bytes());
            out.extend((p.len() as u64).to_le_bytes());
            out.extend((image.len() as u64).to_le_bytes());
            offset += p.len() as u64;
        }
        for p in packed {
            out.extend(p);
        }
        out
    }

    /// The NVRTC version the entries were compiled with (part of their keys).
    pub fn nvrtc_version(&self) -> (i32, i32) {
        self.nvrtc_version
    }

    /// How many entries the bundle holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the bundle holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether an entry is stored as `name` (nothing unpacked).
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The image stored as `name` (a cache file name), unpacked; `None` when absent or
    /// damaged (a warning says which).
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let e = self.entries.get(name)?;
        let start = self.data_start + e.offset;
        let packed = &self.bytes[start..start + e.packed];
        match miniz_oxide::inflate::decompress_to_vec_with_limit(packed, e.len) {
            Ok(image) if image.len() == e.len => Some(image),
            _ => {
                log::warn!("weft-cuda: the kernel bundle's entry {name} is damaged; compiling it");
                None
            }
        }
    }
}

/// The bundle built into this binary (empty when none was).
static EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels.bundle"));

/// The process's bundle (see the module documentation), read at the first call.
pub fn process_bundle() -> Option<&'static KernelBundle> {
    static BUNDLE: OnceLock<Option<KernelBundle>> = OnceLock::new();
    BUNDLE
        .get_or_init(|| {
            let named = crate::nvrtc::process_settings().bundle.as_ref();
            let (bytes, from) = match named {
                Some(off) if off.as_os_str() == "0" => return None,
                Some(path) => match std::fs::read(path) {
                    Ok(b) => (Cow::Owned(b), path.to_string_lossy().into_owned()),
                    Err(e) => {
                        log::warn!(
                            "weft-cuda: WEFT_KERNEL_BUNDLE={}: {e}; kernels compile with NVRTC",
                            path.to_string_lossy()
                        );
                        return None;
                    }
                },
                None if EMBEDDED.is_empty() => return None,
                None => (Cow::Borrowed(EMBEDDED), "built in".to_string()),
            };
            match KernelBundle::parse(bytes) {
                Ok(b) => {
                    log::info!(
                        "weft-cuda: kernel bundle ({from}): {} modules compiled by NVRTC {}.{}",
                        b.len(),
                        b.nvrtc_version.0,
                        b.nvrtc_version.1
                    );
                    Some(b)
                }
                Err(e) => {
                    log::warn!("weft-cuda: kernel bundle ({from}) ignored: {e}");
                    None
                }
            }
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(String, Vec<u8>)> {
        vec![
            (
                "a_cu-00.cubin".to_string(),
                b"\x7fELF one image".repeat(300),
            ),
            ("b_cu-11.cubin".to_string(), Vec::new()),
            (
                "c_cu-22.cubin".to_string(),
                (0..=255u8).cycle().take(70_000).collect(),
            ),
        ]
    }

    #[test]
    fn entries_come_back_as_written() {
        let bytes = KernelBundle::write((13, 0), &sample());
        let b = KernelBundle::parse(bytes).unwrap();
        assert_eq!(b.nvrtc_version(), (13, 0));
        assert_eq!(b.len(), 3);
        for (name, image) in sample() {
            assert_eq!(b.get(&name).as_ref(), Some(&image), "{name}");
        }
        assert_eq!(b.get("d_cu-33.cubin"), None);
    }

    #[test]
    fn every_cut_and_flipped_byte_is_an_error_or_a_miss_never_a_panic() {
        let bytes = KernelBundle::write((12, 8), &sample());
        for cut in 0..bytes.len() {
            if let Ok(b) = KernelBundle::parse(bytes[..cut].to_vec()) {
                // Only a bundle cut inside the data can read; its entries then fail alone.
                for (name, _) in sample() {
                    let _ = b.get(&name);
                }
            }
        }
        for at in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[at] ^= 0x5a;
            if let Ok(b) = KernelBundle::parse(bad) {
                for (name, _) in sample() {
                    let _ = b.get(&name);
                }
            }
        }
        let e = KernelBundle::parse(&b"not a bundle at all"[..]).unwrap_err();
        assert!(e.contains("magic"), "{e}");
    }

    #[test]
    fn a_bundle_cut_inside_its_index_names_where() {
        let bytes = KernelBundle::write((13, 0), &sample());
        let e = KernelBundle::parse(bytes[..30].to_vec()).unwrap_err();
        assert!(e.contains("entry 0"), "{e}");
    }
}
