//! `ExternalNet` over real plugins: weft's own `libnccl-net-weft.so` (built here with
//! `cargo build -p weft-nccl-net`, its socket backend on loopback) through each table
//! version v8..v11, with a real exchange checked byte for byte; and stub plugins compiled
//! with `cc` for the failures (no table of a loadable version, a NULL entry, an init that
//! fails, a path that does not exist), each a clear error, none a hang.
//!
//! One `#[test]`: the plugin reads its settings from the process environment, which is set
//! once before anything runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use weft_net::external::library::{self, LoadError};
use weft_net::external::table::AbiVersion;
use weft_net::external::{ExternalNet, open_requested};
use weft_net::{CommRef, Net, NetErrorKind, PtrKind, PtrSupport, RecvBuffer};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("net/ is inside the workspace")
        .to_path_buf()
}

/// `<target>/<profile>`: the test executable lives in its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable under <target>/<profile>/deps")
        .to_path_buf()
}

/// weft's plugin, built for this profile; its path as `NCCL_NET_PLUGIN` would give it.
fn build_plugin() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "weft-nccl-net"])
        .current_dir(workspace_root())
        .status()
        .expect("run cargo build -p weft-nccl-net");
    assert!(status.success(), "cargo build -p weft-nccl-net failed");
    let lib = profile_dir().join("libnccl_net_weft.so");
    assert!(lib.exists(), "{} missing after the build", lib.display());
    lib
}

/// A stub plugin from C source, as `dir/name`.
fn compile_stub(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {}", src.display());
    out
}

/// A small, seeded generator (xorshift64*): random data and sizes without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
}

const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `f` until it yields, failing the test at the deadline instead of hanging.
fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not done after {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

/// listen / connect / accept, sends and (grouped) receives of random data, every byte
/// checked, then close: over `net`.
fn exchange(net: &ExternalNet, seed: u64) {
    assert!(net.devices() >= 1);
    let props = net.properties(0).unwrap();
    assert!(props.ptr_support.contains(PtrSupport::HOST), "{props:?}");
    assert!(props.max_recvs >= 1);
    let (handle, mut listen) = net.listen(0).unwrap();
    let mut connecting = None;
    let mut send = None;
    let mut recv = None;
    poll("connect and accept", || {
        if send.is_none() {
            send = net.connect(0, &handle, &mut connecting).unwrap();
        }
        if recv.is_none() {
            recv = net.accept(&mut listen).unwrap();
        }
        (send.is_some() && recv.is_some()).then_some(())
    });
    let (mut send, mut recv) = (send.unwrap(), recv.unwrap());

    let mut rng = Rng(seed);
    const CAP: usize = 300_007;
    let mut src = vec![0u8; CAP * 3];
    let mut dst = vec![0u8; CAP * 3];
    // SAFETY: both buffers outlive their registrations (deregistered below, before drop).
    let smr = unsafe {
        net.reg_mr(
            CommRef::Send(&send),
            src.as_mut_ptr(),
            src.len(),
            PtrKind::Host,
        )
    }
    .unwrap();
    // SAFETY: as above.
    let rmr = unsafe {
        net.reg_mr(
            CommRef::Recv(&recv),
            dst.as_mut_ptr(),
            dst.len(),
            PtrKind::Host,
        )
    }
    .unwrap();

    let groups = usize::try_from(props.max_recvs).unwrap().min(3);
    for round in 0..12 {
        // Every third round a grouped receive when the plugin takes one.
        let n = if round % 3 == 2 { groups } else { 1 };
        let sizes: Vec<usize> = (0..n)
            .map(|_| match rng.below(4) {
                0 => rng.below(64),
                1 => 1 + rng.below(4096),
                _ => 1 + rng.below(CAP - 1),
            })
            .collect();
        rng.fill(&mut src);
        dst.fill(0xa5);
        let bufs: Vec<RecvBuffer<'_, _>> = (0..n)
            .map(|i| RecvBuffer {
                data: dst[i * CAP..].as_mut_ptr(),
                size: CAP,
                tag: 7 + i as u32,
                mr: &rmr,
            })
            .collect();
        let mut rreq = poll("irecv posted", || {
            // SAFETY: dst stays allocated, registered and untouched until the test completes.
            unsafe { net.irecv(&mut recv, &bufs) }.unwrap()
        });
        let mut sreqs: Vec<_> = (0..n)
            .map(|i| {
                poll("isend posted", || {
                    let data = src[i * CAP..].as_ptr();
                    // SAFETY: src stays allocated, registered and unmodified until done.
                    unsafe { net.isend(&mut send, data, sizes[i], 7 + i as u32, &smr) }.unwrap()
                })
            })
            .collect();
        let mut sent = vec![None; n];
        let mut received = None;
        poll("test to completion", || {
            for (i, r) in sreqs.iter_mut().enumerate() {
                if sent[i].is_none() {
                    sent[i] = net.test(r).unwrap();
                }
            }
            if received.is_none() {
                received = net.test(&mut rreq).unwrap();
            }
            (received.is_some() && sent.iter().all(Option::is_some)).then_some(())
        });
        for (i, s) in sent.iter().enumerate() {
            assert_eq!(s.unwrap().sizes(), [sizes[i]], "round {round} send {i}");
        }
        let got = received.unwrap();
        assert_eq!(got.sizes(), sizes.as_slice(), "round {round}");
        for (i, &size) in sizes.iter().enumerate() {
            let at = i * CAP;
            assert!(
                dst[at..at + size] == src[at..at + size],
                "round {round} buffer {i}: {size} bytes differ"
            );
            assert!(
                dst[at + size..at + CAP].iter().all(|&b| b == 0xa5),
                "round {round} buffer {i}: written past {size} bytes"
            );
        }
        // A completed request is done for good.
        let again = net.test(&mut rreq).unwrap_err();
        assert_eq!(again.kind(), NetErrorKind::InvalidArgument, "{again}");
    }
    net.dereg_mr(smr).unwrap();
    net.dereg_mr(rmr).unwrap();
    net.close_send(send).unwrap();
    net.close_recv(recv).unwrap();
    net.close_listen(listen).unwrap();
}

/// A v8 table as an array of pointers: name, then 18 functions, each `ok` unless replaced.
fn v8_stub(init: &str, isend: &str) -> String {
    let mut entries = vec!["(void*)\"stub\"".to_string()];
    for i in 1..19 {
        entries.push(match i {
            1 => init.to_string(),
            10 => isend.to_string(),
            8 | 17 | 18 => "0".to_string(),
            _ => "(void*)ok".to_string(),
        });
    }
    format!(
        "static int ok(void) {{ return 0; }}\n\
         static int fail(void) {{ return 2; }}\n\
         void* ncclNetPlugin_v8[19] = {{ {} }};\n\
         static void* unused = (void*)fail;\n",
        entries.join(", ")
    )
}

#[test]
fn weft_plugin_through_every_abi_version_and_clear_failures() {
    // SAFETY: the only test of this binary, before any thread of it (or of the plugin) runs.
    unsafe { std::env::set_var("WEFT_NET_BACKEND", "socket") };
    // SAFETY: as above.
    unsafe { std::env::set_var("NCCL_SOCKET_IFNAME", "lo") };
    let plugin = build_plugin();
    let plugin_path = plugin.to_str().unwrap();

    // Through each table shape of the same library.
    for (i, version) in AbiVersion::PROBE_ORDER.into_iter().enumerate() {
        let lib = library::open_versions(plugin_path, &[version]).unwrap();
        assert_eq!(lib.table.version(), version);
        let net = ExternalNet::init(lib).unwrap();
        assert_eq!(net.name(), "weft");
        assert_eq!(net.abi_version(), version.number());
        exchange(&net, 0x9e37_79b9_7f4a_7c15 ^ i as u64);
    }

    // As the communicator chooses: NCCL_NET_PLUGIN=<path>, newest table (v11).
    let net = open_requested(Some(plugin_path), None, &["IB", "Socket"])
        .unwrap()
        .expect("the plugin loads");
    assert_eq!(net.abi_version(), 11);
    assert!(
        net.path().ends_with("libnccl_net_weft.so"),
        "{}",
        net.path()
    );
    exchange(&net, 42);
    drop(net);
    // NCCL_NET selects by name, without regard to case.
    assert!(
        open_requested(Some(plugin_path), Some("WEFT"), &["IB", "Socket"])
            .unwrap()
            .is_some()
    );
    assert!(
        open_requested(Some(plugin_path), Some("socket"), &["IB", "Socket"])
            .unwrap()
            .is_none()
    );
    assert!(
        open_requested(Some("none"), None, &["IB", "Socket"])
            .unwrap()
            .is_none()
    );

    // A path that does not exist: weft's own networks serve, unless NCCL_NET asks for it.
    let missing = "/nonexistent/libnccl-net-weft.so";
    assert!(
        open_requested(Some(missing), None, &["IB", "Socket"])
            .unwrap()
            .is_none()
    );
    let err = open_requested(Some(missing), Some("weft"), &["IB", "Socket"]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("Failed to initialize any NET plugin"),
        "{text}"
    );
    assert!(
        text.contains(missing) && text.contains("No such file or directory"),
        "{text}"
    );
    // A plugin named `weft` that loads, but NCCL_NET asks for another.
    let err = open_requested(Some(plugin_path), Some("ofi"), &["IB", "Socket"]).unwrap_err();
    assert!(err.to_string().contains("is the network weft"), "{err}");

    // A library without any ncclNetPlugin_vN.
    let err = open_requested(Some("libc.so.6"), Some("x"), &["IB", "Socket"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("External network plugin libc.so.6 is unsupported"),
        "{err}"
    );

    let dir = profile_dir().join(format!("external-plugin-stubs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // Only an older table than weft loads.
    let v7 = compile_stub(
        &dir,
        "libnccl-net-v7.so",
        "void* ncclNetPlugin_v7[19] = { (void*)\"old\" };\n",
    );
    match library::open(v7.to_str().unwrap()).unwrap_err() {
        LoadError::Unsupported { path, older } => {
            assert_eq!(older, ["ncclNetPlugin_v7"]);
            assert!(path.ends_with("libnccl-net-v7.so"), "{path}");
        }
        other => panic!("{other:?}"),
    }

    // A v8 table with a NULL isend: refused before any call.
    let null_isend = compile_stub(&dir, "libnccl-net-null.so", &v8_stub("(void*)ok", "0"));
    let err = library::open(null_isend.to_str().unwrap()).unwrap_err();
    assert!(
        matches!(err, LoadError::BadTable { entry: "isend", .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("ncclNetPlugin_v8.isend is NULL"),
        "{err}"
    );

    // An init that fails with ncclSystemError.
    let bad_init = compile_stub(
        &dir,
        "libnccl-net-badinit.so",
        &v8_stub("(void*)fail", "(void*)ok"),
    );
    let lib = library::open(bad_init.to_str().unwrap()).unwrap();
    assert_eq!(lib.table.version(), AbiVersion::V8);
    let err = ExternalNet::init(lib).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("NET plugin stub (") && text.contains("init returned ncclSystemError (2)"),
        "{text}"
    );
    // The same through the chooser: skipped (weft's own serve), an error if asked for by name.
    let path = bad_init.to_str().unwrap();
    assert!(
        open_requested(Some(path), None, &["IB", "Socket"])
            .unwrap()
            .is_none()
    );
    let err = open_requested(Some(path), Some("stub"), &["IB", "Socket"]).unwrap_err();
    assert!(
        err.to_string().contains("init returned ncclSystemError"),
        "{err}"
    );

    std::fs::remove_dir_all(&dir).unwrap();
}
