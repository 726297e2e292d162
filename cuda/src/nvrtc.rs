//! CUDA C++ to PTX, or to a GPU's machine code (CUBIN), with NVRTC, cached on disk.
//!
//! NVRTC is found as `$WEFT_NVRTC` (a path to libnvrtc.so.N) first, then weft-sys's usual
//! names. A compiled program is cached under `$WEFT_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/weft/kernels`, else `$HOME/.cache/weft/kernels`, keyed by a stable hash of
//! the source, every header, every option, the architecture and NVRTC's version; writes are
//! atomic (a temporary file renamed). `WEFT_KERNEL_CACHE=0` turns the cache off. A cache
//! that cannot be read or written is a warning, never an error.
//!
//! The `WEFT_` variables are weft-config's kernel settings, read from the process
//! environment once, at the first use ([`process_settings`]): NVRTC and the cache serve the
//! whole process, whichever communicator compiles.
//!
//! Machine code ([`CompileOptions::cubin`]) is what the driver loads as it is: PTX is
//! compiled again by the driver at every module load in a fresh process (its JIT cache
//! aside), which for weft's kernels costs seconds per module. The cached CUBIN also lets a
//! cache be filled ahead of time, on a machine without a GPU (`weft kernels`).

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use weft_config::KernelSettings;
use weft_sys::Nvrtc;
use weft_sys::nvrtc::{LIBNVRTC_CANDIDATES, nvrtcProgram, nvrtcResult};

use crate::error::{CudaError, Result};

/// The process environment's kernel settings, read at the first call (their bad values are
/// ignored with a warning: none of them can fail a compile).
pub fn process_settings() -> &'static KernelSettings {
    static SETTINGS: OnceLock<KernelSettings> = OnceLock::new();
    SETTINGS.get_or_init(|| weft_config::Settings::from_env_or_defaults().kernels)
}

/// NVRTC, loaded once (`$WEFT_NVRTC` first); a failure is remembered.
pub fn nvrtc() -> Result<&'static Nvrtc> {
    static SHARED: OnceLock<std::result::Result<Nvrtc, weft_sys::LoadError>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let mut candidates: Vec<String> = Vec::new();
            if let Some(p) = &process_settings().nvrtc {
                candidates.push(p.to_string_lossy().into_owned());
            }
            candidates.extend(LIBNVRTC_CANDIDATES.iter().map(|s| s.to_string()));
            Nvrtc::load_from(&candidates)
        })
        .as_ref()
        .map_err(|e| CudaError::Load(e.clone()))
}

/// NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    let n = nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    let r = unsafe { (n.nvrtcVersion)(&mut major, &mut minor) };
    nvrtc_check(n, r, "nvrtcVersion")?;
    Ok((major, minor))
}

/// For tests that need NVRTC: whether it loads; where it does not, a skip said on stderr, or
/// a panic when `WEFT_REQUIRE_NVRTC=1` (scripts/test sets it after installing NVRTC, so that
/// a test cannot pass by skipping there).
pub fn present_or_skip() -> bool {
    match nvrtc_version() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("WEFT_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                panic!("WEFT_REQUIRE_NVRTC=1 but NVRTC cannot be loaded: {e}");
            }
            eprintln!("skipped: NVRTC not found ({e}); scripts/test installs it");
            false
        }
    }
}

fn nvrtc_check(n: &Nvrtc, r: nvrtcResult, call: &'static str) -> Result<()> {
    if r.is_success() {
        return Ok(());
    }
    Err(CudaError::Call {
        call,
        code: r.0 as u32,
        text: n.describe(r),
        device: None,
        hint: None,
    })
}

/// How to compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// Compute capability: (9, 0) gives `--gpu-architecture=compute_90` (PTX), or
    /// `sm_90` with [`CompileOptions::cubin`].
    pub arch: (u32, u32),
    /// Machine code for exactly `arch` (CUBIN) instead of PTX.
    pub cubin: bool,
    /// `-D` definitions.
    pub defines: Vec<(String, String)>,
    /// Further options, passed as they are.
    pub extra: Vec<String>,
}

impl CompileOptions {
    /// Every option NVRTC gets: C++17, device code by default, no fused multiply-add (so
    /// that results match a CPU reference bit for bit), the architecture, the definitions
    /// and the extras.
    pub fn nvrtc_options(&self) -> Vec<String> {
        let mut o = vec![
            "--std=c++17".to_string(),
            "-default-device".to_string(),
            "--fmad=false".to_string(),
            format!(
                "--gpu-architecture={}_{}{}",
                if self.cubin { "sm" } else { "compute" },
                self.arch.0,
                self.arch.1
            ),
        ];
        o.extend(self.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        o.extend(self.extra.iter().cloned());
        o
    }
}

/// A compiled program.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// What `cuModuleLoadData` takes: PTX, NUL-terminated, or with
    /// [`CompileOptions::cubin`] an ELF image of machine code.
    pub image: Vec<u8>,
    /// NVRTC's log (warnings), empty from the cache.
    pub log: String,
    /// Taken from the disk cache or the kernel bundle, not compiled now.
    pub from_cache: bool,
    /// Taken from the kernel bundle ([`crate::bundle`]).
    pub from_bundle: bool,
    /// Its file name in a cache (and its entry's in a bundle): the source's name and key.
    pub cache_name: String,
}

/// Compiles `source` (named `name` in messages) with `headers` (`(include name, text)`),
/// through the on-disk cache (see the module documentation).
pub fn compile(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    opts: &CompileOptions,
) -> Result<Compiled> {
    compile_with_cache(name, source, headers, opts, cache_dir().as_deref())
}

/// The cache [`compile`] uses: [`cache_dir_of`] the process's settings.
pub fn cache_dir() -> Option<PathBuf> {
    cache_dir_of(process_settings())
}

/// The cache `settings` name: [`default_cache_dir_of`] them, unless `WEFT_KERNEL_CACHE=0`.
pub fn cache_dir_of(settings: &KernelSettings) -> Option<PathBuf> {
    if settings.cache {
        default_cache_dir_of(settings)
    } else {
        None
    }
}

/// The cache directory of the process's settings, if any can be named.
pub fn default_cache_dir() -> Option<PathBuf> {
    default_cache_dir_of(process_settings())
}

/// `WEFT_CACHE_DIR`, else under the user's cache directory (XDG's variables), if any.
pub fn default_cache_dir_of(settings: &KernelSettings) -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    settings
        .cache_dir
        .clone()
        .or_else(|| var("XDG_CACHE_HOME").map(|p| p.join("weft").join("kernels")))
        .or_else(|| var("HOME").map(|p| p.join(".cache").join("weft").join("kernels")))
}

/// [`compile`] with an explicit cache directory (`None`: no cache): machine code from the
/// kernel bundle ([`crate::bundle`]) when it has this module, else from the cache, else
/// compiled now. A module that compiled with warnings is not kept, so every compile of it
/// shows them.
pub fn compile_with_cache(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    opts: &CompileOptions,
    cache: Option<&Path>,
) -> Result<Compiled> {
    compile_from(name, source, headers, opts, cache, true)
}

/// [`compile`] past the kernel bundle: for an image of the bundle that the driver refused
/// (a driver older than the NVRTC that built the bundle), compiled again by this machine's
/// NVRTC.
pub fn compile_without_bundle(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    opts: &CompileOptions,
) -> Result<Compiled> {
    compile_from(name, source, headers, opts, cache_dir().as_deref(), false)
}

fn compile_from(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    opts: &CompileOptions,
    cache: Option<&Path>,
    use_bundle: bool,
) -> Result<Compiled> {
    let options = opts.nvrtc_options();
    let file_name = |version| entry_name(name, source, headers, opts, version);
    // The bundle first, for exactly this architecture: a hit needs no NVRTC at all.
    let bundle = crate::bundle::process_bundle().filter(|_| use_bundle && opts.cubin);
    let bundled = |minors: &[u32]| {
        let bundle = bundle?;
        minors.iter().find_map(|&minor| {
            bundle_entry(
                bundle,
                bundle_name(bundle, name, source, headers, opts, minor),
            )
        })
    };
    if let Some(hit) = bundled(&[opts.arch.1]) {
        return Ok(hit);
    }
    // Then the disk cache (its keys need NVRTC's version), then the bundle's code for an
    // earlier minor revision of this architecture, then NVRTC.
    let version = nvrtc_version();
    if let Ok(v) = version {
        let cache_name = file_name(v);
        if let Some(hit) = cache.and_then(|d| from_cache(&d.join(&cache_name), opts.cubin)) {
            return Ok(Compiled {
                image: hit,
                log: String::new(),
                from_cache: true,
                from_bundle: false,
                cache_name,
            });
        }
    }
    let earlier: Vec<u32> = (0..opts.arch.1).rev().collect();
    if let Some(hit) = bundled(&earlier) {
        return Ok(hit);
    }
    let cache_name = file_name(version?);
    let file = cache.map(|d| d.join(&cache_name));
    let mut compiled = compile_uncached(name, source, headers, &options, opts.cubin)?;
    compiled.cache_name = cache_name;
    // Only a module NVRTC compiled without a word is kept: a warning in kernel code is a
    // bug (the kernel tests fail on one), and a module compiled again shows it again.
    if let Some(f) = file.as_ref().filter(|_| compiled.log.trim().is_empty()) {
        if let Err(e) = store(f, &compiled.image) {
            log::warn!(
                "weft-cuda: could not write the kernel cache {}: {e}",
                f.display()
            );
        }
    }
    Ok(compiled)
}

/// The bundle's image under `entry` (a [`bundle_name`]), if it has a whole one.
fn bundle_entry(bundle: &crate::bundle::KernelBundle, entry: String) -> Option<Compiled> {
    let image = bundle.get(&entry).filter(|i| elf_is_whole(i))?;
    Some(Compiled {
        image,
        log: String::new(),
        from_cache: true,
        from_bundle: true,
        cache_name: entry,
    })
}

/// The bundle's entry name of `name` built for minor revision `minor` of `opts`'s
/// architecture (machine code runs on later minor revisions of its major one: sm_80's on
/// sm_86 and sm_89).
fn bundle_name(
    bundle: &crate::bundle::KernelBundle,
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    opts: &CompileOptions,
    minor: u32,
) -> String {
    let built_for = CompileOptions {
        arch: (opts.arch.0, minor),
        ..opts.clone()
    };
    entry_name(name, source, headers, &built_for, bundle.nvrtc_version())
}

/// The name of `name`'s compiled image in a cache or a bundle: the source's name and the key
/// of everything that went into it, NVRTC `version` included.
fn entry_name(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    opts: &CompileOptions,
    version: (i32, i32),
) -> String {
    let key = cache_key(source, headers, &opts.nvrtc_options(), version);
    let ext = if opts.cubin { "cubin" } else { "ptx" };
    format!("{}-{key}.{ext}", sanitize(name))
}

/// Whether the process's kernel bundle has machine code `compile` would take for this
/// module (its architecture, or an earlier minor revision of it): such a module needs no
/// NVRTC, and no compiling ahead of time.
pub fn bundled(name: &str, source: &str, headers: &[(&str, &str)], opts: &CompileOptions) -> bool {
    let Some(bundle) = crate::bundle::process_bundle().filter(|_| opts.cubin) else {
        return false;
    };
    (0..=opts.arch.1)
        .any(|minor| bundle.contains(&bundle_name(bundle, name, source, headers, opts, minor)))
}

/// A cached image at `file`, if whole (a CUBIN's ELF complete, PTX with its end).
fn from_cache(file: &Path, cubin: bool) -> Option<Vec<u8>> {
    let image = std::fs::read(file).ok()?;
    let whole = if cubin {
        elf_is_whole(&image)
    } else {
        image.last() == Some(&0) && image.starts_with(b"//")
    };
    if !whole {
        log::warn!(
            "weft-cuda: ignoring a damaged kernel cache file {}",
            file.display()
        );
        return None;
    }
    Some(image)
}

/// Whether `image` is a 64-bit ELF file whose section table and every section with bytes
/// lie within it: a cached CUBIN cut short (a partial copy of a cache) is then compiled
/// again instead of failing at `cuModuleLoadData`.
fn elf_is_whole(image: &[u8]) -> bool {
    let u16_at = |o: usize| {
        image
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        image
            .get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |o: usize| {
        image
            .get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    // ELF magic, 64-bit class, little-endian.
    if !image.starts_with(b"\x7fELF") || image.get(4) != Some(&2) || image.get(5) != Some(&1) {
        return false;
    }
    let (Some(shoff), Some(shentsize), Some(shnum)) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c))
    else {
        return false;
    };
    let len = image.len() as u64;
    let table_end = u64::from(shentsize)
        .checked_mul(u64::from(shnum))
        .and_then(|n| n.checked_add(shoff));
    if shentsize < 0x40 || table_end.is_none_or(|end| end > len) {
        return false;
    }
    const SHT_NOBITS: u32 = 8;
    (0..usize::from(shnum)).all(|i| {
        let h = shoff as usize + i * usize::from(shentsize);
        match (u32_at(h + 4), u64_at(h + 0x18), u64_at(h + 0x20)) {
            (Some(SHT_NOBITS), Some(_), Some(_)) => true,
            (Some(_), Some(off), Some(size)) => off.checked_add(size).is_some_and(|end| end <= len),
            _ => false,
        }
    })
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn store(file: &Path, image: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Unique per process and per call: threads of one process may compile the same key.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = file.with_extension(format!("tmp{}-{n}", std::process::id()));
    std::fs::write(&tmp, image)?;
    std::fs::rename(&tmp, file)
}

/// FNV-1a over everything that changes the output, twice with different offsets (128 bits):
/// stable across Rust versions and machines, unlike std's hashers.
pub fn cache_key(
    source: &str,
    headers: &[(&str, &str)],
    options: &[String],
    version: (i32, i32),
) -> String {
    let mut parts: Vec<&[u8]> = vec![source.as_bytes()];
    for (n, t) in headers {
        parts.push(n.as_bytes());
        parts.push(t.as_bytes());
    }
    for o in options {
        parts.push(o.as_bytes());
    }
    let v = format!("{}.{}", version.0, version.1);
    parts.push(v.as_bytes());
    let fnv = |mut h: u64| {
        for p in &parts {
            for b in p.iter().chain(&(p.len() as u64).to_le_bytes()) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    };
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    )
}

/// The program handle, destroyed on every path.
struct Program<'a> {
    n: &'a Nvrtc,
    raw: nvrtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once here.
        let _ = unsafe { (self.n.nvrtcDestroyProgram)(&mut self.raw) };
    }
}

fn compile_uncached(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    options: &[String],
    cubin: bool,
) -> Result<Compiled> {
    let n = nvrtc()?;
    let cstr = |s: &str, what: &str| {
        CString::new(s)
            .map_err(|_| CudaError::InvalidArgument(format!("{what} contains a NUL byte")))
    };
    let c_source = cstr(source, "the kernel source")?;
    let c_name = cstr(name, "the program name")?;
    let c_headers = headers
        .iter()
        .map(|(_, t)| cstr(t, "a header"))
        .collect::<Result<Vec<_>>>()?;
    let c_header_names = headers
        .iter()
        .map(|(h, _)| cstr(h, "a header name"))
        .collect::<Result<Vec<_>>>()?;
    let c_options = options
        .iter()
        .map(|o| cstr(o, "an option"))
        .collect::<Result<Vec<_>>>()?;
    let header_ptrs: Vec<*const c_char> = c_headers.iter().map(|c| c.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = c_header_names.iter().map(|c| c.as_ptr()).collect();
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|c| c.as_ptr()).collect();
    let mut program = Program {
        n,
        raw: std::ptr::null_mut(),
    };
    // SAFETY: every pointer array holds as many valid C strings as the count passed, all
    // alive for the call.
    let r = unsafe {
        (n.nvrtcCreateProgram)(
            &mut program.raw,
            c_source.as_ptr(),
            c_name.as_ptr(),
            c_int::try_from(headers.len()).unwrap_or(0),
            header_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    };
    nvrtc_check(n, r, "nvrtcCreateProgram")?;
    // SAFETY: a live program; `option_ptrs` holds that many C strings.
    let r = unsafe {
        (n.nvrtcCompileProgram)(
            program.raw,
            c_int::try_from(option_ptrs.len()).unwrap_or(0),
            option_ptrs.as_ptr(),
        )
    };
    let log = program_log(&program)?;
    if !r.is_success() {
        return Err(CudaError::Compile {
            program: name.to_string(),
            text: n.describe(r),
            log,
        });
    }
    let n = program.n;
    let image = if cubin {
        program_output(
            &program,
            (n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize"),
            (n.nvrtcGetCUBIN, "nvrtcGetCUBIN"),
        )?
    } else {
        let mut ptx = program_output(
            &program,
            (n.nvrtcGetPTXSize, "nvrtcGetPTXSize"),
            (n.nvrtcGetPTX, "nvrtcGetPTX"),
        )?;
        if ptx.last() != Some(&0) {
            ptx.push(0);
        }
        ptx
    };
    Ok(Compiled {
        image,
        log,
        from_cache: false,
        from_bundle: false,
        cache_name: String::new(),
    })
}

fn program_log(p: &Program<'_>) -> Result<String> {
    let buf = program_output(
        p,
        (p.n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"),
        (p.n.nvrtcGetProgramLog, "nvrtcGetProgramLog"),
    )?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// One output of a program (its log, PTX or CUBIN), through NVRTC's pair of calls for it:
/// the size, then the copy into a buffer of that size.
fn program_output(
    p: &Program<'_>,
    (size_of, size_name): (
        unsafe extern "C" fn(nvrtcProgram, *mut usize) -> nvrtcResult,
        &'static str,
    ),
    (copy, copy_name): (
        unsafe extern "C" fn(nvrtcProgram, *mut c_char) -> nvrtcResult,
        &'static str,
    ),
) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: a live program; `size` is a valid out-pointer.
    let r = unsafe { size_of(p.raw, &mut size) };
    nvrtc_check(p.n, r, size_name)?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` holds the `size` bytes NVRTC said it needs.
    let r = unsafe { copy(p.raw, buf.as_mut_ptr().cast()) };
    nvrtc_check(p.n, r, copy_name)?;
    Ok(buf)
}

#[cfg(test)]
mod test {
    use super::*;

    /// A 64-bit ELF of one section of `data_len` bytes at offset 64, its table after it.
    fn tiny_elf(data_len: u64) -> Vec<u8> {
        let mut e = vec![0u8; 64];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        e[5] = 1;
        let shoff = 64 + data_len;
        e[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        e[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        e[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes());
        e.extend(std::iter::repeat_n(0xab, data_len as usize));
        let mut sh = vec![0u8; 64];
        sh[4..8].copy_from_slice(&1u32.to_le_bytes()); // SHT_PROGBITS
        sh[0x18..0x20].copy_from_slice(&64u64.to_le_bytes());
        sh[0x20..0x28].copy_from_slice(&data_len.to_le_bytes());
        e.extend(sh);
        e
    }

    #[test]
    fn a_cut_short_elf_is_not_whole() {
        let whole = tiny_elf(100);
        assert!(elf_is_whole(&whole));
        // Cut anywhere: the section table (at the end) no longer fits.
        for cut in [whole.len() - 1, whole.len() - 64, 70, 64, 10] {
            assert!(!elf_is_whole(&whole[..cut]), "cut at {cut}");
        }
        // A section that claims more bytes than the file has.
        let mut lying = whole.clone();
        let h = 64 + 100;
        lying[h + 0x20..h + 0x28].copy_from_slice(&10_000u64.to_le_bytes());
        assert!(!elf_is_whole(&lying));
        assert!(!elf_is_whole(b"// PTX text"));
    }

    #[test]
    fn cache_keys_change_with_every_input() {
        let o = vec!["-DX=1".to_string()];
        let base = cache_key("src", &[("a.h", "A")], &o, (12, 8));
        assert_eq!(base.len(), 32);
        assert_eq!(base, cache_key("src", &[("a.h", "A")], &o, (12, 8)));
        assert_ne!(base, cache_key("src2", &[("a.h", "A")], &o, (12, 8)));
        assert_ne!(base, cache_key("src", &[("a.h", "B")], &o, (12, 8)));
        assert_ne!(base, cache_key("src", &[("b.h", "A")], &o, (12, 8)));
        assert_ne!(
            base,
            cache_key("src", &[("a.h", "A")], &["-DX=2".to_string()], (12, 8))
        );
        assert_ne!(base, cache_key("src", &[("a.h", "A")], &o, (13, 0)));
        // Boundaries count: moving a byte from one part to the next changes the key.
        assert_ne!(
            cache_key("ab", &[("c", "")], &[], (1, 0)),
            cache_key("a", &[("bc", "")], &[], (1, 0))
        );
    }

    #[test]
    fn options_pin_the_semantics() {
        let o = CompileOptions {
            arch: (9, 0),
            cubin: false,
            defines: vec![("WEFT_DTYPE".into(), "7".into())],
            extra: vec!["-lineinfo".into()],
        };
        assert_eq!(
            o.nvrtc_options(),
            [
                "--std=c++17",
                "-default-device",
                "--fmad=false",
                "--gpu-architecture=compute_90",
                "-DWEFT_DTYPE=7",
                "-lineinfo"
            ]
        );
    }
}
