//! Faults a real mesh meets, on two hosts: each must end in a clear error within the deadline,
//! naming the peer, never a hang. Run by `tests/vm/faults.sh` in Soft-RoCE VMs, which injects
//! the fault (a link taken down, a VM powered off, a wrong GID index, a stray TCP client).
//!
//! ```sh
//! ib_faults SCENARIO recv|send DIR [EXPECT...]
//! ```
//! Scenarios:
//! - `stream`: the receiver posts receives and the sender sends 4 MiB messages until either
//!   fails; the one that must fail (`EXPECT` words, all required in its error) exits 0 when
//!   its error came within [`FAULT_DEADLINE`] and says so; a transfer that never fails exits 1.
//!   `DIR/started` appears once data flows, for the script to inject the fault.
//! - `stray`: before the sender connects, two stray TCP clients reach the receiver's
//!   handshake port (one sends junk, one stays silent); the real connection must still work.
//! - `mesh-connect`: the sender connects through the mesh backend and must fail at once with
//!   `EXPECT` in the error (no shared subnet).
//! - `mesh-stale`: over the mesh backend, the sender first connects with the receiver's handle
//!   whose nonce it changed (a stale handle from an earlier listen): that connect must fail
//!   within the deadline with `EXPECT` in the error; then the real handle must carry a few
//!   messages. The receiver's log (warnings go to stderr) names the refused connector.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weft_net::any::AnyNet;
use weft_net::ib::IbNet;
use weft_net::ib::wire::ListenHandle;
use weft_net::mesh::MeshNet;
use weft_net::{CommRef, Net, NetError, NetHandle, PtrKind, RecvBuffer};

/// How long a fault may take to become an error.
/// (On the 2-core build machine a sender whose peer's link went down took up to 60 s, see
/// docs/rdma-vms.md.)
const FAULT_DEADLINE: Duration = Duration::from_secs(90);
const SETUP_DEADLINE: Duration = Duration::from_secs(120);
const MSG: usize = 4 << 20;

fn until<T>(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> Result<Option<T>, NetError>,
) -> Result<T, NetError> {
    let start = Instant::now();
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) if start.elapsed() > limit => {
                eprintln!(
                    "ib_faults: {what}: no result within {} s: a hang",
                    limit.as_secs()
                );
                std::process::exit(1);
            }
            Ok(None) => std::thread::yield_now(),
            Err(e) => return Err(e),
        }
    }
}

fn wait_file(path: &Path) -> Vec<u8> {
    let start = Instant::now();
    loop {
        if let Ok(b) = std::fs::read(path) {
            return b;
        }
        if start.elapsed() > SETUP_DEADLINE {
            eprintln!(
                "ib_faults: no {} within {} s",
                path.display(),
                SETUP_DEADLINE.as_secs()
            );
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn publish(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .is_err()
    {
        eprintln!("ib_faults: cannot write {}", path.display());
        std::process::exit(1);
    }
}

/// The outcome of a transfer that should fail: exit 0 if `err` says every `expect` word.
fn judge(role: &str, err: NetError, since: Instant, expect: &[String]) -> ! {
    let msg = err.to_string();
    let took = since.elapsed();
    println!("{role}: failed after {:.1} s: {msg}", took.as_secs_f64());
    let missing: Vec<&String> = expect
        .iter()
        .filter(|w| !msg.contains(w.as_str()))
        .collect();
    if took > FAULT_DEADLINE {
        eprintln!(
            "ib_faults {role}: the error took {:.1} s (limit {} s)",
            took.as_secs_f64(),
            FAULT_DEADLINE.as_secs()
        );
        std::process::exit(1);
    }
    if !missing.is_empty() {
        eprintln!("ib_faults {role}: the error does not say {missing:?}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Receives 4 MiB messages until an error, or `count` of them (then exits 0).
fn stream_recv(net: &AnyNet, dir: &Path, expect: &[String], must_fail: bool, count: Option<usize>) {
    let (handle, mut listen) = net.listen(0).unwrap_or_else(|e| fatal("listen", e));
    publish(&dir.join("handle"), handle.as_bytes());
    let since = Instant::now();
    let mut comm = match until("accept", SETUP_DEADLINE, || net.accept(&mut listen)) {
        Ok(c) => c,
        Err(e) if must_fail => judge("recv", e, since, expect),
        Err(e) => fatal("accept", e),
    };
    let mut buf = vec![0u8; MSG];
    // SAFETY: the buffer outlives the registration and the comm.
    let mr = unsafe { net.reg_mr(CommRef::Recv(&comm), buf.as_mut_ptr(), MSG, PtrKind::Host) }
        .unwrap_or_else(|e| fatal("reg_mr", e));
    let mut since = since;
    for i in 0.. {
        if count == Some(i) {
            println!("recv: {i} messages received");
            std::process::exit(0);
        }
        let rb = [RecvBuffer {
            data: buf.as_mut_ptr(),
            size: MSG,
            tag: 7,
            mr: &mr,
        }];
        // SAFETY: the buffer is not touched while the request is in flight.
        let posted = until("irecv", FAULT_DEADLINE, || unsafe {
            net.irecv(&mut comm, &rb)
        });
        let result =
            posted.and_then(|mut req| until("receive", FAULT_DEADLINE * 2, || net.test(&mut req)));
        match result {
            Ok(_) if i == 1 => {
                publish(&dir.join("started"), b"1");
                since = Instant::now();
            }
            Ok(_) => since = Instant::now(),
            Err(e) if must_fail => judge("recv", e, since, expect),
            Err(e) => {
                println!(
                    "recv: failed (allowed) after {:.1} s: {e}",
                    since.elapsed().as_secs_f64()
                );
                std::process::exit(0);
            }
        }
    }
}

fn connect(net: &AnyNet, dir: &Path) -> Result<weft_net::any::AnySendComm, NetError> {
    let bytes = wait_file(&dir.join("handle"));
    let mut handle = NetHandle::default();
    handle.0.copy_from_slice(&bytes);
    let mut state = None;
    until("connect", SETUP_DEADLINE, || {
        net.connect(0, &handle, &mut state)
    })
}

/// Sends 4 MiB messages until an error, or `count` of them (then exits 0).
fn stream_send(net: &AnyNet, dir: &Path, expect: &[String], must_fail: bool, count: Option<usize>) {
    let since = Instant::now();
    let mut comm = match connect(net, dir) {
        Ok(c) => c,
        Err(e) if must_fail => judge("send", e, since, expect),
        Err(e) => fatal("connect", e),
    };
    let buf = vec![0x5au8; MSG];
    // SAFETY: the buffer outlives the registration.
    let mr = unsafe {
        net.reg_mr(
            CommRef::Send(&comm),
            buf.as_ptr().cast_mut(),
            MSG,
            PtrKind::Host,
        )
    }
    .unwrap_or_else(|e| fatal("reg_mr", e));
    let mut since = Instant::now();
    for i in 0.. {
        if count == Some(i) {
            println!("send: {i} messages sent");
            // Let the receiver test its last request before this comm closes.
            std::thread::sleep(Duration::from_millis(500));
            std::process::exit(0);
        }
        // SAFETY: the buffer is not modified.
        let posted = until("isend", FAULT_DEADLINE * 2, || unsafe {
            net.isend(&mut comm, buf.as_ptr(), MSG, 7, &mr)
        });
        let result =
            posted.and_then(|mut req| until("send", FAULT_DEADLINE * 2, || net.test(&mut req)));
        if result.is_ok() {
            // Time to an error counts from the last message that went through.
            since = Instant::now();
        }
        if let Err(e) = result {
            if must_fail {
                judge("send", e, since, expect);
            }
            println!(
                "send: failed (allowed) after {:.1} s: {e}",
                since.elapsed().as_secs_f64()
            );
            std::process::exit(0);
        }
    }
}

fn stray(dir: &Path) {
    let bytes = wait_file(&dir.join("handle"));
    let mut raw = [0u8; 128];
    raw.copy_from_slice(&bytes);
    let Ok(h) = ListenHandle::parse(&raw) else {
        eprintln!("ib_faults: the handle does not parse");
        std::process::exit(1);
    };
    // One stray sends junk, one connects and stays silent for the rest of the run.
    if let Ok(mut s) = std::net::TcpStream::connect_timeout(&h.addr, Duration::from_secs(5)) {
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\nthis is not a verbs handshake, not at all.........................................................................................");
    }
    let silent = std::net::TcpStream::connect_timeout(&h.addr, Duration::from_secs(5));
    println!(
        "stray: two stray clients connected ({})",
        if silent.is_ok() {
            "one silent"
        } else {
            "silent one refused"
        }
    );
    std::mem::forget(silent);
}

/// Warnings of the backends on stderr: the listener's word on refused connectors is part of
/// what the fault tests check.
struct StderrWarnings;

impl log::Log for StderrWarnings {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("[{}] {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

static LOGGER: StderrWarnings = StderrWarnings;

fn fatal(what: &str, e: NetError) -> ! {
    eprintln!("ib_faults: {what}: {e}");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(scenario), Some(role), Some(dir)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!(
            "usage: ib_faults stream|stray|mesh-connect|mesh-stale recv|send DIR [EXPECT...]"
        );
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    let expect: Vec<String> = args[4..].to_vec();
    // FAULT_SIDE: the roles whose failure is the test (`recv`, `send` or `recv,send`).
    let must_fail = std::env::var("FAULT_SIDE").is_ok_and(|s| s.split(',').any(|r| r == role));
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    let mesh = scenario.starts_with("mesh-") || std::env::var("FAULT_MESH").is_ok();
    println!(
        "{role}: scenario {scenario}, failure {}",
        if must_fail { "expected" } else { "allowed" }
    );
    let net = if mesh {
        MeshNet::from_env().map(AnyNet::Mesh)
    } else {
        IbNet::from_env().map(AnyNet::Ib)
    }
    .unwrap_or_else(|e| fatal("open the backend", e));
    match (scenario.as_str(), role.as_str()) {
        ("stream", "recv") => stream_recv(&net, &dir, &expect, must_fail, None),
        ("stream", "send") => stream_send(&net, &dir, &expect, must_fail, None),
        ("stray", "send") => {
            stray(&dir);
            // Then the real sender: a few messages must go through.
            stream_send(&net, &dir, &expect, false, Some(3))
        }
        ("stray", "recv") => stream_recv(&net, &dir, &expect, false, Some(3)),
        ("mesh-connect", "recv") => {
            let (handle, _listen) = net.listen(0).unwrap_or_else(|e| fatal("listen", e));
            publish(&dir.join("handle"), handle.as_bytes());
            // Stay until the sender has tried.
            wait_file(&dir.join("tried"));
        }
        ("mesh-connect", "send") => {
            let since = Instant::now();
            let r = connect(&net, &dir);
            publish(&dir.join("tried"), b"1");
            match r {
                Ok(_) => {
                    eprintln!("ib_faults: a mesh connect without a shared subnet succeeded");
                    std::process::exit(1);
                }
                Err(e) => judge("send", e, since, &expect),
            }
        }
        ("mesh-stale", "recv") => stream_recv(&net, &dir, &expect, false, Some(3)),
        ("mesh-stale", "send") => {
            let bytes = wait_file(&dir.join("handle"));
            let mut stale = NetHandle::default();
            stale.0.copy_from_slice(&bytes);
            // The nonce is the handle's last 8 bytes (weft_net::mesh::handle).
            stale.0[127] ^= 0x5a;
            let since = Instant::now();
            let mut state = None;
            match until("stale connect", FAULT_DEADLINE, || {
                net.connect(0, &stale, &mut state)
            }) {
                Ok(_) => {
                    eprintln!("ib_faults: a connect with a stale nonce succeeded");
                    std::process::exit(1);
                }
                Err(e) => {
                    let msg = e.to_string();
                    println!(
                        "send: the stale handle failed after {:.1} s: {msg}",
                        since.elapsed().as_secs_f64()
                    );
                    let missing: Vec<&String> = expect
                        .iter()
                        .filter(|w| !msg.contains(w.as_str()))
                        .collect();
                    if since.elapsed() > FAULT_DEADLINE || !missing.is_empty() {
                        eprintln!("ib_faults send: the error does not say {missing:?} in time");
                        std::process::exit(1);
                    }
                }
            }
            stream_send(&net, &dir, &[], false, Some(3))
        }
        _ => {
            eprintln!("ib_faults: unknown scenario {scenario} / role {role}");
            std::process::exit(2);
        }
    }
}
