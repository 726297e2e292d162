//! `weft kernels`: fills the kernel cache ahead of time.
//!
//! weft compiles its CUDA kernels at run time (NVRTC, seconds per element type) and keeps the
//! machine code on disk; a job's first collective on a type otherwise pays for it. This
//! compiles every module for an architecture on every core, with no GPU needed, so that a
//! container image or a shared cache directory can carry them; with `--bundle` it also
//! packs them into a kernel bundle (`weft_cuda::bundle`), which a build embeds in libnccl and
//! `weft` (`scripts/build-kernel-bundle.sh`) or `WEFT_KERNEL_BUNDLE` names at run time.

use std::process::ExitCode;

use weft_core::abi::DataType;
use weft_runtime::gpu::kernels::{PeerSource, module_types, precompile};

const USAGE: &str = "\
usage: weft kernels [--arch MAJOR.MINOR ...] [--dtype NAME ...] [--bundle FILE]

Compiles weft's CUDA kernels (ring, one-/two-shot and NVLS modules, every element type)
into the kernel cache: $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft/kernels, else
~/.cache/weft/kernels. Needs NVRTC (libnvrtc.so, or $WEFT_NVRTC), not a GPU. The cache
must be used with the same NVRTC version and WEFT_KERNEL_THREADS / WEFT_KERNEL_UNROLL.

  --arch 9.0     compute capability to compile for (repeatable; default: every GPU seen)
  --dtype float  only this element type (repeatable; default: all of them)
  --bundle FILE  also write every module compiled into FILE, a kernel bundle: embedded
                 when weft is built with WEFT_KERNEL_BUNDLE=FILE, or read at run time
                 from WEFT_KERNEL_BUNDLE=FILE; then no NVRTC is needed for these
                 architectures
";

pub fn main(args: &[String]) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft kernels: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let mut archs: Vec<(u32, u32)> = Vec::new();
    let mut dtypes: Vec<DataType> = Vec::new();
    let mut bundle: Option<std::path::PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs {what}\n\n{USAGE}"))
        };
        match a.as_str() {
            "--arch" => {
                let v = value("a compute capability such as 9.0")?;
                let parsed = v
                    .split_once('.')
                    .and_then(|(m, n)| Some((m.parse().ok()?, n.parse().ok()?)))
                    .ok_or_else(|| format!("--arch {v}: expected MAJOR.MINOR, such as 9.0"))?;
                archs.push(parsed);
            }
            "--dtype" => {
                let v = value("an element type")?;
                dtypes.push(DataType::from_name(v.trim()).ok_or_else(|| {
                    format!(
                        "--dtype {v}: one of {}",
                        DataType::ALL
                            .iter()
                            .map(|d| d.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?);
            }
            "--bundle" => bundle = Some(value("a file to write")?.into()),
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    let tuning = weft_cuda::nvrtc::process_settings();
    let Some(cache) = weft_cuda::nvrtc::cache_dir_of(tuning) else {
        return Err(
            "no kernel cache: WEFT_KERNEL_CACHE=0, or none of WEFT_CACHE_DIR, XDG_CACHE_HOME, \
             HOME is set"
                .to_string(),
        );
    };
    if archs.is_empty() {
        archs = gpu_archs().map_err(|e| {
            format!(
                "no --arch given and the GPUs could not be asked ({e}): name one, e.g. --arch 9.0"
            )
        })?;
    }
    if dtypes.is_empty() {
        dtypes = DataType::ALL.to_vec();
    }
    let sources = [
        (weft_kernels::COLLECTIVES_NAME, weft_kernels::COLLECTIVES),
        PeerSource::Direct.source(),
        PeerSource::Nvls.source(),
    ];
    // fp8 types bring the uint8 modules their copies run.
    let types = module_types(&dtypes);
    let pairs: Vec<_> = sources
        .iter()
        .flat_map(|&(name, text)| types.iter().map(move |&d| (name, text, d)))
        .collect();
    if let Some(b) = weft_cuda::bundle::process_bundle() {
        println!(
            "kernel bundle in use ({}): {} modules compiled by NVRTC {}.{}",
            if tuning.bundle.is_some() {
                "WEFT_KERNEL_BUNDLE"
            } else {
                "built in"
            },
            b.len(),
            b.nvrtc_version().0,
            b.nvrtc_version().1
        );
    }
    let mut entries = Vec::new();
    for arch in archs {
        let started = std::time::Instant::now();
        let runnable = pairs
            .iter()
            .filter(|(_, _, d)| weft_kernels::compiles_for(*d, arch))
            .count();
        let modules = precompile(&pairs, arch, tuning, true).map_err(|e| e.to_string())?;
        let compiled = modules.iter().filter(|m| !m.from_cache).count();
        entries.extend(modules.into_iter().map(|m| (m.cache_name, m.image)));
        println!(
            "sm_{}{}: {runnable} modules, {compiled} compiled now, {} already cached, {:.1} s ({})",
            arch.0,
            arch.1,
            runnable - compiled,
            started.elapsed().as_secs_f64(),
            cache.display()
        );
    }
    if let Some(path) = bundle {
        let version = weft_cuda::nvrtc::nvrtc_version().map_err(|e| e.to_string())?;
        let bytes = weft_cuda::bundle::KernelBundle::write(version, &entries);
        std::fs::write(&path, &bytes).map_err(|e| format!("--bundle {}: {e}", path.display()))?;
        let raw: usize = entries.iter().map(|(_, image)| image.len()).sum();
        println!(
            "bundle {}: {} modules, {:.1} MiB ({:.1} MiB unpacked), NVRTC {}.{}",
            path.display(),
            entries.len(),
            bytes.len() as f64 / (1 << 20) as f64,
            raw as f64 / (1 << 20) as f64,
            version.0,
            version.1
        );
    }
    Ok(())
}

/// The distinct compute capabilities of the GPUs this process sees.
fn gpu_archs() -> Result<Vec<(u32, u32)>, weft_cuda::CudaError> {
    let mut archs = Vec::new();
    for i in 0..weft_cuda::device_count()? {
        let cc = weft_cuda::Device::get(i)?.compute_capability()?;
        if !archs.contains(&cc) {
            archs.push(cc);
        }
    }
    if archs.is_empty() {
        return Err(weft_cuda::CudaError::InvalidArgument(
            "CUDA sees no GPU".to_string(),
        ));
    }
    Ok(archs)
}
