//! weft-cuda on a GPU: memory, copies, streams, events, host-mapped flags, module load and
//! launch, graphs, peer access and VMM sharing between two GPUs. Without a GPU (CI), the
//! tests check that the absence is a clear error, never a panic, and say what they skipped.

use std::ffi::c_void;

use weft_cuda::nvrtc::compile_with_cache;
use weft_cuda::{
    CompileOptions, Context, Device, DeviceBuffer, Event, Graph, HostMapped, Module,
    ShareableBuffer, Stream, device_count, vmm_supported,
};

fn gpus() -> usize {
    match device_count() {
        Ok(n) => {
            if n == 0 {
                eprintln!("skipped: no GPU (CUDA sees 0 devices)");
            }
            n
        }
        Err(e) => {
            let text = e.to_string();
            // The absence of a driver must say which library and what to do.
            assert!(text.contains("libcuda"), "unclear error: {text}");
            eprintln!("skipped: no GPU ({text})");
            0
        }
    }
}

const KERNEL: &str = r#"
extern "C" __global__ void triple(unsigned int* out, unsigned int n, unsigned int* flag) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3u;
  if (i == 0) *(volatile unsigned int*)flag = 0xfeedu;
}
"#;

#[test]
fn no_gpu_is_an_error_not_a_panic() {
    let n = gpus();
    if n == 0 {
        assert!(Device::get(0).is_err());
    }
}

#[test]
fn memory_streams_events_launches_and_graphs() {
    if gpus() == 0 {
        return;
    }
    let dev = Device::get(0).unwrap();
    let ctx = Context::primary(dev).unwrap();
    eprintln!(
        "GPU 0: {} {} sm_{:?}, {} SMs",
        dev.name().unwrap(),
        dev.pci_bus_id().unwrap(),
        dev.compute_capability().unwrap(),
        dev.multiprocessor_count().unwrap()
    );
    let n: u32 = 1_000_003;
    let buf = DeviceBuffer::alloc(&ctx, n as usize * 4).unwrap();
    buf.fill(0xa5).unwrap();
    let flag = HostMapped::alloc(&ctx, 64).unwrap();
    assert_eq!(flag.read_u32(0), Some(0));
    let arch = dev.compute_capability().unwrap();
    let opts = CompileOptions {
        arch,
        cubin: false,
        defines: vec![],
        extra: vec![],
    };
    let ptx = compile_with_cache("triple.cu", KERNEL, &[], &opts, None)
        .unwrap()
        .image;
    let module = Module::load(&ctx, &ptx).unwrap();
    let f = module.function("triple").unwrap();
    assert!(
        module
            .function("absent")
            .unwrap_err()
            .to_string()
            .contains("absent")
    );
    let stream = Stream::new(&ctx).unwrap();
    let (start, stop) = (
        Event::new(&ctx, true).unwrap(),
        Event::new(&ctx, true).unwrap(),
    );
    let (mut out, mut count, mut flag_ptr) = (buf.ptr(), n, flag.device_ptr());
    let mut args = [
        (&mut out as *mut u64).cast::<c_void>(),
        (&mut count as *mut u32).cast::<c_void>(),
        (&mut flag_ptr as *mut u64).cast::<c_void>(),
    ];
    start.record(&stream).unwrap();
    // SAFETY: three arguments of the kernel's types; the buffers outlive the synchronize.
    unsafe { f.launch((n.div_ceil(256), 1, 1), (256, 1, 1), 0, &stream, &mut args) }.unwrap();
    stop.record(&stream).unwrap();
    stream.synchronize().unwrap();
    assert!(stream.is_done().unwrap() && stop.is_done().unwrap());
    assert!(Event::elapsed_ms(&start, &stop).unwrap() > 0.0);
    let mut host = vec![0u8; n as usize * 4];
    buf.copy_to_host(&mut host).unwrap();
    for (i, w) in host.chunks_exact(4).enumerate() {
        assert_eq!(
            u32::from_ne_bytes(w.try_into().unwrap()),
            i as u32 * 3,
            "element {i}"
        );
    }
    assert_eq!(flag.read_u32(0), Some(0xfeed));
    // A graph of two launches replays them.
    buf.fill(0).unwrap();
    let graph = Graph::capture(&stream, |s| {
        for _ in 0..2 {
            // SAFETY: as above.
            unsafe { f.launch((n.div_ceil(256), 1, 1), (256, 1, 1), 0, s, &mut args) }?;
        }
        Ok::<(), weft_cuda::CudaError>(())
    })
    .unwrap();
    buf.copy_to_host(&mut host).unwrap();
    assert!(
        host.iter().all(|&b| b == 0),
        "capturing must not run anything"
    );
    graph.launch(&stream).unwrap();
    stream.synchronize().unwrap();
    buf.copy_to_host(&mut host).unwrap();
    assert_eq!(u32::from_ne_bytes(host[12..16].try_into().unwrap()), 9);
    // Copies past the end are refused.
    assert!(buf.copy_from_host(&vec![0u8; n as usize * 4 + 1]).is_err());
}

#[test]
fn peer_access_and_vmm_sharing_between_two_gpus() {
    if gpus() < 2 {
        eprintln!("skipped: needs two GPUs");
        return;
    }
    let (d0, d1) = (Device::get(0).unwrap(), Device::get(1).unwrap());
    let (c0, c1) = (Context::primary(d0).unwrap(), Context::primary(d1).unwrap());
    eprintln!(
        "GPU 0 -> 1 peer access: {}",
        d0.can_access_peer(&d1).unwrap()
    );
    if !vmm_supported(&d1).unwrap() {
        eprintln!("skipped: VMM with POSIX fds unsupported");
        return;
    }
    c0.enable_peer_access(&c1).unwrap();
    c0.enable_peer_access(&c1).unwrap(); // already enabled is fine
    let owner = ShareableBuffer::alloc(&c1, 1 << 20).unwrap();
    let fd = owner.export_fd().unwrap();
    use std::os::fd::AsFd;
    let seen = ShareableBuffer::import(&c0, fd.as_fd(), owner.len()).unwrap();
    // Write through GPU 0's mapping, read through GPU 1's buffer.
    let stream = Stream::new(&c0).unwrap();
    let src = DeviceBuffer::alloc(&c0, 4096).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    src.copy_from_host(&pattern).unwrap();
    // SAFETY: both ranges hold 4096 bytes until the synchronize.
    unsafe { weft_cuda::copy_async(seen.ptr(), src.ptr(), 4096, &stream) }.unwrap();
    stream.synchronize().unwrap();
    let check = DeviceBuffer::alloc(&c1, 4096).unwrap();
    let s1 = Stream::new(&c1).unwrap();
    // SAFETY: as above.
    unsafe { weft_cuda::copy_async(check.ptr(), owner.ptr(), 4096, &s1) }.unwrap();
    s1.synchronize().unwrap();
    let mut back = vec![0u8; 4096];
    check.copy_to_host(&mut back).unwrap();
    assert_eq!(back, pattern);
}
