//! The GPU path's NET connections (staged FIFOs, `proxy::staged`) between two hosts over a
//! chosen backend, with CPU threads playing both kernels and checking every byte and tag
//! (the receiving proxy checks each step's size). Run by `tests/vm/staged-pair.sh` in two
//! Soft-RoCE VMs (verbs and the mesh: the backends CI cannot reach on loopback); the listen
//! handles travel through a shared folder.
//!
//! ```sh
//! staged_pair recv DIR [ib|mesh|socket]   # listens, writes DIR/staged-handle-<c>, receives
//! staged_pair send DIR [ib|mesh|socket]   # reads the handles, connects, sends
//! ```
//! Exit status 0 when every step arrived as sent; the first error otherwise.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_runtime::conn::{AbortFlag, ConnId, Direction};
use weft_runtime::net::Net;
use weft_runtime::net::ib::IbNet;
use weft_runtime::net::mesh::MeshNet;
use weft_runtime::net::socket::SocketNet;
use weft_runtime::proxy::staged::{FirstFailure, Staging};
use weft_runtime::transport::staged::StagedNet;

#[path = "../tests/common/random.rs"]
mod random;
#[path = "../tests/common/staged_kernel.rs"]
mod staged_kernel;

/// Connections (channels), slots per FIFO, bytes per slot, steps per connection: 100 steps
/// of up to 128 KiB wrap each 8-slot FIFO twelve times.
const CHANNELS: u32 = 2;
const STEPS: usize = 8;
const STEP_BYTES: usize = 128 << 10;
const COUNT: u64 = 100;
const DEADLINE: Duration = Duration::from_secs(200);

fn handle_path(dir: &Path, c: u32) -> PathBuf {
    dir.join(format!("staged-handle-{c}"))
}

fn run<N: Net + 'static>(net: N, role: &str, dir: &Path) -> Result<(), String> {
    println!("staged_pair {role}: backend {}", net.name());
    let staged = StagedNet::new(
        Arc::new(net),
        0,
        AbortFlag::new(),
        DEADLINE,
        Duration::from_secs(10),
    )
    .map_err(|e| e.to_string())?;
    let failure = FirstFailure::default();
    let (me, peer, dir_kind) = if role == "send" {
        (0, 1, Direction::Send)
    } else {
        (1, 0, Direction::Recv)
    };
    let mut areas = Vec::new();
    for c in 0..CHANNELS {
        let area = Arc::new(Staging::on_heap(STEPS, STEP_BYTES, failure.hook(|| {}))?);
        let conn = ConnId {
            transport: "NET",
            rank: me,
            peer,
            channel: c,
            dir: dir_kind,
        };
        if role == "send" {
            let path = handle_path(dir, c);
            let start = Instant::now();
            while !path.exists() {
                if start.elapsed() > DEADLINE {
                    return Err(format!(
                        "no handle at {} after {DEADLINE:?}",
                        path.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let handle = std::fs::read(&path).map_err(|e| e.to_string())?;
            staged
                .send(conn, &handle, area.clone())
                .map_err(|e| e.to_string())?;
        } else {
            let handle = staged.recv(conn, area.clone()).map_err(|e| e.to_string())?;
            let tmp = dir.join(format!("staged-handle-{c}.tmp"));
            std::fs::write(&tmp, handle.as_bytes()).map_err(|e| e.to_string())?;
            std::fs::rename(&tmp, handle_path(dir, c)).map_err(|e| e.to_string())?;
        }
        areas.push(area);
    }
    let started = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = areas
            .iter()
            .enumerate()
            .map(|(c, area)| {
                let seed = 0xa11ce + c as u64;
                scope.spawn(move || {
                    if role == "send" {
                        staged_kernel::play_sender(area, seed, COUNT, DEADLINE)
                    } else {
                        staged_kernel::play_receiver(area, seed, COUNT, DEADLINE)
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect()
    });
    if let Some(cause) = failure.get() {
        return Err(cause);
    }
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    for area in &areas {
        area.close();
    }
    if !staged.wait_idle(Duration::from_secs(30)) {
        return Err("the proxy's links did not finish within 30 s of the end".into());
    }
    if let Some(cause) = failure.get() {
        return Err(cause);
    }
    println!(
        "staged_pair {role}: {CHANNELS} connections x {COUNT} steps, every byte and tag \
         checked, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(role), Some(dir)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: staged_pair send|recv DIR [ib|mesh|socket]");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    let result = match args.get(3).map_or("ib", String::as_str) {
        "ib" => IbNet::from_env()
            .map_err(|e| e.to_string())
            .and_then(|n| run(n, role, &dir)),
        "mesh" => MeshNet::from_env()
            .map_err(|e| e.to_string())
            .and_then(|n| run(n, role, &dir)),
        "socket" => SocketNet::from_env()
            .map_err(|e| e.to_string())
            .and_then(|n| run(n, role, &dir)),
        other => Err(format!("unknown backend {other}: ib, mesh or socket")),
    };
    if let Err(e) = result {
        eprintln!("staged_pair {role}: {e}");
        std::process::exit(1);
    }
}
