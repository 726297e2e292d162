//! The collective kernels of one GPU, compiled on first use.
//!
//! One NVRTC module per element type (weft-kernels' `collectives.cu` with `WEFT_DTYPE`), for
//! the device's own architecture, loaded into the device's primary context. weft-cuda keeps
//! the compiled machine code (CUBIN) on disk, so a process compiles a type only the first
//! time any process of the machine uses it, and loads it without the driver's JIT; `weft
//! kernels` fills that cache ahead of time, with no GPU needed.
//!
//! The fp8 modules use the fp8 conversion instructions of compute capability 8.9 and newer;
//! on older GPUs they are refused here with an error saying so (collectives that only move
//! fp8 data run the uint8 module instead, see `GpuComm`).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use weft_config::KernelSettings;
use weft_core::abi::{DataType, Protocol, RedOp};
use weft_cuda::{CompileOptions, Context, Function, Module};

use super::error::GpuError;

/// The entry points of one element type's module.
#[derive(Debug, Clone)]
pub struct TypeKernels {
    /// Indexed by `RedOp as usize`.
    ring: Vec<Function>,
    /// The LL ring kernels, indexed by `RedOp as usize`.
    ring_ll: Vec<Function>,
    /// The gathered all-reduce's reduction, indexed by `RedOp as usize`.
    gathered: Vec<Function>,
    p2p: Function,
    threads: u32,
}

impl TypeKernels {
    /// The ring kernel for `op` under `protocol` (LL, or SIMPLE for anything else).
    pub fn ring(&self, op: RedOp, protocol: Protocol) -> &Function {
        match protocol {
            Protocol::Ll => &self.ring_ll[op as usize],
            _ => &self.ring[op as usize],
        }
    }

    /// The gathered all-reduce's reduction for `op` (see `Planned::Gathered`).
    pub fn gathered(&self, op: RedOp) -> &Function {
        &self.gathered[op as usize]
    }

    /// The point-to-point kernel.
    pub fn p2p(&self) -> &Function {
        &self.p2p
    }

    /// Threads per block the module was compiled for: launch exactly this many.
    pub fn threads(&self) -> u32 {
        self.threads
    }
}

/// Which source a peer-pointer module comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerSource {
    /// `direct.cu`: one-shot and two-shot all-reduce.
    Direct,
    /// `nvls.cu`: NVLS, multicast and unicast forms.
    Nvls,
}

impl PeerSource {
    /// The CUDA source's file name and text.
    pub fn source(self) -> (&'static str, &'static str) {
        match self {
            PeerSource::Direct => (weft_kernels::DIRECT_NAME, weft_kernels::DIRECT),
            PeerSource::Nvls => (weft_kernels::NVLS_NAME, weft_kernels::NVLS),
        }
    }
}

/// The element types whose modules calls on `dtypes` load: each type's own, and for an fp8
/// type also uint8's, which its copies run (all-gather, broadcast, send/receive). Sorted,
/// each once.
pub fn module_types(dtypes: &[DataType]) -> Vec<DataType> {
    let mut types: Vec<DataType> = dtypes
        .iter()
        .flat_map(|&d| {
            if d.is_fp8() {
                vec![DataType::Uint8, d]
            } else {
                vec![d]
            }
        })
        .collect();
    types.sort_by_key(|d| *d as usize);
    types.dedup();
    types
}

/// Compiles (or takes from the on-disk cache) the machine code of source `name` for `dtype`
/// on a GPU of compute capability `arch`, with the measurement knobs of `tuning`
/// (`WEFT_KERNEL_UNROLL`, `WEFT_KERNEL_THREADS`); needs no GPU.
pub fn compile_module(
    name: &str,
    text: &str,
    dtype: DataType,
    arch: (u32, u32),
    tuning: &KernelSettings,
) -> Result<weft_cuda::Compiled, GpuError> {
    compile_module_from(name, text, dtype, arch, tuning, false)
}

/// [`compile_module`], past the kernel bundle when `past_bundle`.
fn compile_module_from(
    name: &str,
    text: &str,
    dtype: DataType,
    arch: (u32, u32),
    tuning: &KernelSettings,
    past_bundle: bool,
) -> Result<weft_cuda::Compiled, GpuError> {
    let opts = module_options(dtype, arch, tuning);
    let started = std::time::Instant::now();
    let compiled = if past_bundle {
        weft_cuda::nvrtc::compile_without_bundle(name, text, weft_kernels::HEADERS, &opts)?
    } else {
        weft_cuda::compile(name, text, weft_kernels::HEADERS, &opts)?
    };
    log::info!(
        "weft: {name} {} kernels for sm_{}{} {}",
        dtype.name(),
        arch.0,
        arch.1,
        if compiled.from_bundle {
            "taken from the kernel bundle".to_string()
        } else if compiled.from_cache {
            "loaded from the kernel cache".to_string()
        } else {
            format!(
                "compiled with NVRTC in {:.1} s",
                started.elapsed().as_secs_f64()
            )
        }
    );
    Ok(compiled)
}

/// What NVRTC compiles a module for `dtype` on `arch` with: the type's definitions and the
/// measurement knobs of `tuning` (`WEFT_KERNEL_UNROLL`, `WEFT_KERNEL_THREADS`), as machine
/// code.
fn module_options(dtype: DataType, arch: (u32, u32), tuning: &KernelSettings) -> CompileOptions {
    let mut defines = weft_kernels::defines(dtype);
    // A tuning knob for measurements: 16-byte packs in flight per thread.
    if let Some(u) = tuning.unroll {
        defines.push(("WEFT_UNROLL".to_string(), u.to_string()));
    }
    let threads = tuning.threads;
    if threads != weft_kernels::THREADS {
        defines.push(("WEFT_THREADS".to_string(), threads.to_string()));
    }
    CompileOptions {
        arch,
        cubin: true,
        defines,
        extra: Vec::new(),
    }
}

/// Whether the kernel bundle has `name`'s machine code for `dtype` on `arch`.
fn in_bundle(
    name: &str,
    text: &str,
    dtype: DataType,
    arch: (u32, u32),
    tuning: &KernelSettings,
) -> bool {
    weft_cuda::nvrtc::bundled(
        name,
        text,
        weft_kernels::HEADERS,
        &module_options(dtype, arch, tuning),
    )
}

/// Compiles every `(source, dtype)` pair for `arch` into the on-disk cache, several at once
/// (one NVRTC compilation takes seconds and uses one core): the first use of a type then
/// only loads it. Pairs the architecture cannot run (fp8 reductions before sm_89) are
/// skipped. Returns the modules, in the order of `pairs` (`from_cache` false for those
/// compiled now). `past_bundle`: NVRTC and the cache only, as for writing a bundle.
pub fn precompile(
    pairs: &[(&'static str, &'static str, DataType)],
    arch: (u32, u32),
    tuning: &KernelSettings,
    past_bundle: bool,
) -> Result<Vec<weft_cuda::Compiled>, GpuError> {
    // Ranks of one process prepare together: the second waits here and then finds
    // everything in the cache instead of compiling it all a second time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let pairs: Vec<_> = pairs
        .iter()
        .filter(|(_, _, d)| weft_kernels::compiles_for(*d, arch))
        .collect();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(pairs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Mutex<Vec<Option<weft_cuda::Compiled>>> = Mutex::new(vec![None; pairs.len()]);
    let first_error: Mutex<Option<GpuError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    // After a failure the call fails: the rest would only cost time.
                    if first_error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_some()
                    {
                        return;
                    }
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((name, text, dtype)) = pairs.get(i) else {
                        return;
                    };
                    match compile_module_from(name, text, *dtype, arch, tuning, past_bundle) {
                        Ok(c) => done.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(c),
                        Err(e) => {
                            let mut slot =
                                first_error.lock().unwrap_or_else(PoisonError::into_inner);
                            slot.get_or_insert(e);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = first_error
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(e);
    }
    Ok(done
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .flatten()
        .collect())
}

/// Whether files can be created in `dir` (made if missing): a probe file, removed again.
fn writable_dir(dir: &std::path::Path) -> bool {
    let probe = dir.join(format!(".weft-probe-{}", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok() && std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    if !ok {
        log::warn!(
            "weft: the kernel cache {} cannot be written: kernels compile one at a time as \
             they load (set WEFT_CACHE_DIR to a writable directory)",
            dir.display()
        );
    }
    ok
}

/// Fewest threads per block of the NVLS module: its three warp groups (scatter, gather,
/// reduce) need 8 warps between them (`static_assert` in nvls.cu).
pub const NVLS_MIN_THREADS: u32 = 256;
const _: () = assert!(weft_kernels::THREADS >= NVLS_MIN_THREADS);

/// Refuses a thread count `source`'s module cannot be compiled for, before NVRTC fails on it
/// with a bare `static_assert`. The direct module's loops stride over any block size.
pub fn check_peer_threads(source: PeerSource, threads: u32) -> Result<(), GpuError> {
    if source == PeerSource::Nvls && threads < NVLS_MIN_THREADS {
        return Err(GpuError::InvalidArgument(format!(
            "WEFT_KERNEL_THREADS={threads}: the NVLS kernels need at least {NVLS_MIN_THREADS} \
             threads per block (8 warps for their scatter, gather and reduce groups); raise it \
             or unset it (default {})",
            weft_kernels::THREADS
        )));
    }
    Ok(())
}

/// The entry points of one peer-pointer module (one element type).
#[derive(Debug, Clone)]
pub struct PeerKernels {
    /// Indexed by `RedOp as usize`.
    by_op: Vec<Function>,
    threads: u32,
}

impl PeerKernels {
    pub fn get(&self, op: RedOp) -> &Function {
        &self.by_op[op as usize]
    }

    /// Threads per block the module was compiled for: launch exactly this many.
    pub fn threads(&self) -> u32 {
        self.threads
    }
}

/// The modules of one context, by element type.
#[derive(Debug)]
pub struct Kernels {
    ctx: Arc<Context>,
    arch: (u32, u32),
    /// What they are compiled with (threads per block, unrolling).
    tuning: KernelSettings,
    loaded: Mutex<Vec<Option<Arc<TypeKernels>>>>,
    /// `direct.cu` then `nvls.cu` modules, by element type.
    peer: Mutex<[Vec<Option<Arc<PeerKernels>>>; 2]>,
}

impl Kernels {
    /// The modules of `ctx` compiled as `tuning` says, shared by every communicator on that
    /// context (as NCCL loads its kernels once per process): a split, a shrink or another
    /// process group's communicator on the GPU loads nothing again, and the modules go when
    /// the last of them does.
    pub fn shared(ctx: &Arc<Context>, tuning: &KernelSettings) -> Result<Arc<Kernels>, GpuError> {
        static LIVE: Mutex<Vec<Weak<Kernels>>> = Mutex::new(Vec::new());
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|k| k.strong_count() > 0);
        let same = |k: &Arc<Kernels>| k.ctx.raw() == ctx.raw() && k.tuning == *tuning;
        if let Some(kernels) = live.iter().filter_map(Weak::upgrade).find(same) {
            return Ok(kernels);
        }
        let kernels = Arc::new(Kernels::with_settings(ctx, tuning)?);
        live.push(Arc::downgrade(&kernels));
        Ok(kernels)
    }

    /// The modules of `ctx`, compiled as `tuning` says.
    pub fn with_settings(ctx: &Arc<Context>, tuning: &KernelSettings) -> Result<Self, GpuError> {
        let arch = ctx.device().compute_capability()?;
        Ok(Kernels {
            ctx: ctx.clone(),
            arch,
            tuning: tuning.clone(),
            loaded: Mutex::new(vec![None; DataType::ALL.len()]),
            peer: Mutex::new([
                vec![None; DataType::ALL.len()],
                vec![None; DataType::ALL.len()],
            ]),
        })
    }

    /// The one-/two-shot or NVLS kernels of `dtype`, compiled and loaded on first use.
    pub fn peer(&self, source: PeerSource, dtype: DataType) -> Result<Arc<PeerKernels>, GpuError> {
        self.check_supported(dtype)?;
        if let Some(Some(k)) = self.peer.lock().unwrap_or_else(PoisonError::into_inner)
            [source as usize]
            .get(dtype as usize)
        {
            return Ok(k.clone());
        }
        // Compiled and loaded without the table's lock (see `get`).
        let (name, text) = source.source();
        check_peer_threads(source, self.tuning.threads)?;
        let (module, threads) = self.compile(name, text, dtype)?;
        let by_op = by_op(
            &module,
            match source {
                PeerSource::Direct => weft_kernels::direct_entry,
                PeerSource::Nvls => weft_kernels::nvls_entry,
            },
        )?;
        self.check_threads(&by_op, threads)?;
        let kernels = Arc::new(PeerKernels { by_op, threads });
        let mut loaded = self.peer.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(first_in(
            loaded[source as usize].get_mut(dtype as usize),
            kernels,
        ))
    }

    /// Refuses `dtype` where this GPU cannot run its kernels (fp8 reductions before compute
    /// capability 8.9), saying why.
    pub fn check_supported(&self, dtype: DataType) -> Result<(), GpuError> {
        if self.supports(dtype) {
            return Ok(());
        }
        Err(GpuError::InvalidArgument(format!(
            "{dtype} reductions need compute capability {}.{} or newer (the fp8 \
             conversion instructions); this is GPU {}, sm_{}{}. All-gather, broadcast \
             and send/receive take {dtype} on any GPU; reduce in half or bfloat16 here",
            weft_kernels::FP8_MIN_ARCH.0,
            weft_kernels::FP8_MIN_ARCH.1,
            self.ctx.device().ordinal(),
            self.arch.0,
            self.arch.1
        )))
    }

    /// Compiles (or takes from the cache) and loads `text` for `dtype`; returns the module
    /// and the threads per block it was compiled for.
    fn compile(
        &self,
        name: &str,
        text: &str,
        dtype: DataType,
    ) -> Result<(Arc<Module>, u32), GpuError> {
        let compiled = compile_module(name, text, dtype, self.arch, &self.tuning)?;
        let module = match Module::load(&self.ctx, &compiled.image) {
            // The bundle's NVRTC may be newer than this machine's driver: this machine's
            // NVRTC, where there is one, makes code the driver takes.
            Err(e) if compiled.from_bundle => {
                log::warn!(
                    "weft: the kernel bundle's {name} {} for sm_{}{} did not load ({e}); \
                     compiling it with this machine's NVRTC",
                    dtype.name(),
                    self.arch.0,
                    self.arch.1
                );
                let again = compile_module_from(name, text, dtype, self.arch, &self.tuning, true)?;
                Module::load(&self.ctx, &again.image)?
            }
            loaded => loaded?,
        };
        Ok((module, self.tuning.threads))
    }

    fn check_threads(&self, functions: &[Function], threads: u32) -> Result<(), GpuError> {
        for f in functions {
            let max = f.max_threads_per_block()?;
            if max < threads {
                return Err(GpuError::InvalidArgument(format!(
                    "kernel {} runs at most {max} threads per block on this GPU, and weft's \
                     kernels need {} (too many registers for sm_{}{}?)",
                    f.name(),
                    threads,
                    self.arch.0,
                    self.arch.1
                )));
            }
        }
        Ok(())
    }

    /// Loads now every module the kernel bundle holds for this GPU (each type's collectives,
    /// and `peer`'s), as NCCL loads all its kernels at init: loading a module waits for the
    /// device to be idle, so a module loaded at a call's launch would wait for whatever
    /// kernel still runs, and hold the calling thread (and the communicator) until it ends.
    /// On two H200 (2026-11-28) a PyTorch rank whose receive waited on an absent sender
    /// blocked in its next all_reduce's launch, loading the float32 module, until the
    /// receive's deadline. Milliseconds per module from the bundle (1.9-4.4 ms per type on
    /// an H200); types the bundle lacks (NVRTC would compile them, seconds each) stay
    /// loaded at first use, and so does the rest once `budget` is spent (a bundle whose
    /// modules fail to load falls back to NVRTC).
    pub fn preload_bundled(
        &self,
        peer: Option<PeerSource>,
        budget: std::time::Duration,
    ) -> Result<(), GpuError> {
        let started = std::time::Instant::now();
        for &d in DataType::ALL {
            if started.elapsed() > budget {
                log::warn!(
                    "weft: loading the kernel bundle's modules took over {budget:?}; the \
                     types from {} on load at their first call",
                    d.name()
                );
                break;
            }
            if !self.supports(d) {
                continue;
            }
            // Another communicator of the context may have loaded them (`shared`): then
            // nothing, not even the bundle lookup's hashing of the sources.
            let bundled =
                |(name, text): (&str, &str)| in_bundle(name, text, d, self.arch, &self.tuning);
            let collectives = (weft_kernels::COLLECTIVES_NAME, weft_kernels::COLLECTIVES);
            if !self.is_loaded(d) && bundled(collectives) {
                self.get(d)?;
            }
            if let Some(source) =
                peer.filter(|s| !self.peer_is_loaded(*s, d) && bundled(s.source()))
            {
                self.peer(source, d)?;
            }
        }
        Ok(())
    }

    /// Loads the modules calls on `dtypes` run (see [`module_types`]; fp8 reductions only
    /// where this GPU has them), with `peer`'s too. Those not loaded yet are first compiled
    /// into the on-disk cache on all cores (one NVRTC compilation takes seconds), when there
    /// is a cache they can be kept in; else each compiles as it loads, one at a time.
    pub fn prepare(&self, dtypes: &[DataType], peer: Option<PeerSource>) -> Result<(), GpuError> {
        let types: Vec<DataType> = module_types(dtypes)
            .into_iter()
            .filter(|d| self.supports(*d))
            .collect();
        let mut missing = Vec::new();
        for &d in &types {
            if !self.is_loaded(d) {
                missing.push((weft_kernels::COLLECTIVES_NAME, weft_kernels::COLLECTIVES, d));
            }
            if let Some(source) = peer.filter(|s| !self.peer_is_loaded(*s, d)) {
                let (name, text) = source.source();
                missing.push((name, text, d));
            }
        }
        // Modules the kernel bundle has load from it one by one (milliseconds each); the
        // others compile here first, on every core.
        missing.retain(|(name, text, d)| !in_bundle(name, text, *d, self.arch, &self.tuning));
        if !missing.is_empty() && weft_cuda::nvrtc::cache_dir().is_some_and(|d| writable_dir(&d)) {
            precompile(&missing, self.arch, &self.tuning, false)?;
        }
        for d in types {
            self.get(d)?;
            if let Some(source) = peer {
                self.peer(source, d)?;
            }
        }
        Ok(())
    }

    fn is_loaded(&self, dtype: DataType) -> bool {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        matches!(loaded.get(dtype as usize), Some(Some(_)))
    }

    fn peer_is_loaded(&self, source: PeerSource, dtype: DataType) -> bool {
        let loaded = self.peer.lock().unwrap_or_else(PoisonError::into_inner);
        matches!(loaded[source as usize].get(dtype as usize), Some(Some(_)))
    }

    /// The GPU's compute capability, the architecture the modules are compiled for.
    pub fn arch(&self) -> (u32, u32) {
        self.arch
    }

    /// Whether this GPU has the kernels of `dtype` (fp8 needs compute capability 8.9).
    pub fn supports(&self, dtype: DataType) -> bool {
        weft_kernels::compiles_for(dtype, self.arch)
    }

    /// The kernels of `dtype`, compiled and loaded on first use.
    pub fn get(&self, dtype: DataType) -> Result<Arc<TypeKernels>, GpuError> {
        self.check_supported(dtype)?;
        if let Some(Some(k)) = self
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(dtype as usize)
        {
            return Ok(k.clone());
        }
        // Compiled and loaded without the table's lock: every communicator of the context
        // shares it (`shared`), and a load waits for the device to be idle, which must not
        // hold up another communicator's launch of a type already loaded.
        let (module, threads) = self.compile(
            weft_kernels::COLLECTIVES_NAME,
            weft_kernels::COLLECTIVES,
            dtype,
        )?;
        let ring = by_op(&module, weft_kernels::ring_entry)?;
        let ring_ll = by_op(&module, weft_kernels::ring_ll_entry)?;
        let gathered = by_op(&module, weft_kernels::gathered_entry)?;
        let p2p = module.function(weft_kernels::P2P_ENTRY)?;
        self.check_threads(&ring, threads)?;
        self.check_threads(&ring_ll, threads)?;
        self.check_threads(&gathered, threads)?;
        self.check_threads(std::slice::from_ref(&p2p), threads)?;
        let kernels = Arc::new(TypeKernels {
            ring,
            ring_ll,
            gathered,
            p2p,
            threads,
        });
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(first_in(loaded.get_mut(dtype as usize), kernels))
    }
}

/// A module's entry point for every operator, by `RedOp as usize` (`entry` names each).
fn by_op(
    module: &Arc<Module>,
    entry: fn(RedOp) -> &'static str,
) -> Result<Vec<Function>, GpuError> {
    Ok(RedOp::ALL
        .iter()
        .map(|op| module.function(entry(*op)))
        .collect::<Result<Vec<Function>, _>>()?)
}

/// What a table `slot` holds once `loaded` goes in: a module loaded by another thread
/// meanwhile stays (the first one in), else `loaded`.
fn first_in<T>(slot: Option<&mut Option<Arc<T>>>, loaded: Arc<T>) -> Arc<T> {
    match slot {
        Some(Some(first)) => first.clone(),
        Some(slot) => {
            *slot = Some(loaded.clone());
            loaded
        }
        None => loaded,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nvls_refuses_fewer_than_256_threads_naming_the_variable() {
        let e = check_peer_threads(PeerSource::Nvls, 128)
            .unwrap_err()
            .to_string();
        assert!(e.contains("WEFT_KERNEL_THREADS=128"), "{e}");
        assert!(check_peer_threads(PeerSource::Nvls, 256).is_ok());
        assert!(check_peer_threads(PeerSource::Direct, 64).is_ok());
    }

    #[test]
    fn the_default_thread_count_is_the_kernels_own() {
        assert_eq!(KernelSettings::default().threads, weft_kernels::THREADS);
    }
}
