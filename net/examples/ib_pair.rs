//! Two processes on two hosts drive the verbs backend as NCCL's proxy would, and check every
//! byte: messages of 1 B to 16 MiB (odd sizes too), several in flight, grouped receives with
//! tags matched out of order, over 1 and 3 QPs per connection. Run by `tests/vm/ib-pair.sh`
//! in two Soft-RoCE VMs (scripts/rdma-vms.sh); the handle travels through a shared folder.
//!
//! ```sh
//! ib_pair recv DIR      # on one host: listens, writes DIR/handle-<n>, receives, checks
//! ib_pair send DIR      # on the other: reads the handle, connects, sends
//! ib_pair ring DIR I N  # host I of N, over the mesh backend: receives from host I-1 and
//!                       # sends to host I+1 at once (every link of a ring, both backends' checks)
//! ```
//! Exit status 0 when every byte arrived as sent; the first error otherwise, with its
//! message (which names the device, port, GID and peer).
//!
//! After every completed receive the receiver calls `iflush` with the received sizes: on
//! host memory it must answer "nothing to flush"; with `WEFT_IB_FORCE_FLUSH=1` (test only:
//! host receives are flushed as GPU ones would be) it must post the loopback RDMA READ, whose
//! completion is tested and whose bytes must be the last bytes of the received data; at the
//! end a flush of a range outside its registration must fail the comm with a message that
//! names the flush (`tests/vm/ib-pair.sh flush`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weft_net::ib::{IbConfig, IbNet};
use weft_net::mesh::MeshNet;
use weft_net::{CommRef, Net, NetError, NetHandle, PtrKind, RecvBuffer};

const DEADLINE: Duration = Duration::from_secs(240);

/// The sizes every connection carries, in this order.
const SIZES: &[usize] = &[
    1,
    7,
    128,
    129,
    1000,
    4096,
    65_537,
    262_144,
    1_048_579,
    4 << 20,
    16 << 20,
];
/// Grouped receives: (tags of the receive group, order in which the sender sends them).
const GROUPS: &[(&[u32], &[usize])] = &[
    (&[5, 9, 2], &[2, 0, 1]),
    (&[1, 2, 3, 4, 5, 6, 7, 8], &[7, 6, 5, 4, 3, 2, 1, 0]),
];

fn fill(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

fn check(seed: u64, got: &[u8], what: &str) -> Result<(), String> {
    let mut want = vec![0u8; got.len()];
    fill(seed, &mut want);
    match got.iter().zip(&want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            got.len(),
            got[i],
            want[i]
        )),
    }
}

fn until<T>(what: &str, mut f: impl FnMut() -> Result<Option<T>, NetError>) -> Result<T, String> {
    let start = Instant::now();
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) if start.elapsed() > DEADLINE => {
                return Err(format!("{what}: not done within {} s", DEADLINE.as_secs()));
            }
            Ok(None) => std::thread::yield_now(),
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

fn handle_path(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("handle-{n}"))
}

/// How the receiver checks `iflush`: `forced` when WEFT_IB_FORCE_FLUSH=1 makes host receives
/// flush; `read_back(comm, len)` gives the last bytes the latest flush read.
struct FlushCheck<'a, C> {
    forced: bool,
    read_back: &'a (dyn Fn(&C, usize) -> Option<Vec<u8>> + Sync),
}

/// Flushes a completed receive of `size` bytes in `buf` (registered as `mr`) and checks the
/// answer: nothing to flush on host memory, or (forced) a completed RDMA READ of its last bytes.
fn flush_and_check<N: Net>(
    net: &N,
    comm: &mut N::RecvComm,
    buf: &mut [u8],
    size: usize,
    mr: &N::MemHandle,
    flush: &FlushCheck<'_, N::RecvComm>,
    what: &str,
) -> Result<(), String> {
    let rb = [RecvBuffer {
        data: buf.as_mut_ptr(),
        size,
        tag: 0,
        mr,
    }];
    // SAFETY: the buffer stays untouched until the flush completes.
    let posted = unsafe { net.iflush(comm, &rb) }.map_err(|e| format!("iflush of {what}: {e}"))?;
    match (posted, flush.forced) {
        (None, false) => Ok(()),
        (Some(_), false) => Err(format!(
            "iflush of {what} (host memory) posted a flush without WEFT_IB_FORCE_FLUSH"
        )),
        (None, true) => Err(format!(
            "iflush of {what} flushed nothing although WEFT_IB_FORCE_FLUSH=1"
        )),
        (Some(mut req), true) => {
            until(&format!("flush of {what}"), || net.test(&mut req))?;
            let len = size.min(8);
            let got = (flush.read_back)(comm, len)
                .ok_or_else(|| format!("flush of {what}: the comm has no flush QP"))?;
            if got != buf[size - len..size] {
                return Err(format!(
                    "flush of {what}: the RDMA READ fetched {got:02x?}, the buffer ends with {:02x?}",
                    &buf[size - len..size]
                ));
            }
            Ok(())
        }
    }
}

/// A forced flush of a range outside its registration: the loopback READ must fail with a
/// completion error that names the flush, and the comm with it (within the deadline).
fn flush_fault<N: Net>(net: &N, comm: &mut N::RecvComm) -> Result<String, String> {
    // Four pages; only the second is registered, the flush names the third (ours, so the
    // pointer is valid memory, but outside the registration the NIC checks).
    let mut pages = vec![0u8; 5 * 4096];
    let base = pages.as_mut_ptr();
    let first = base.wrapping_add(base.align_offset(4096));
    // SAFETY: `first + 4096 .. first + 8192` lies inside `pages`, which outlives the
    // registration (deregistered below).
    let mr = unsafe {
        net.reg_mr(
            CommRef::Recv(comm),
            first.wrapping_add(4096),
            4096,
            PtrKind::Host,
        )
    }
    .map_err(|e| e.to_string())?;
    let rb = [RecvBuffer {
        data: first.wrapping_add(2 * 4096),
        size: 100,
        tag: 0,
        mr: &mr,
    }];
    // SAFETY: the range is inside `pages`; the NIC only reads, and refuses this one.
    let posted = unsafe { net.iflush(comm, &rb) };
    let result = match posted {
        Err(e) => Err(format!(
            "iflush outside the registration failed to post: {e}"
        )),
        Ok(None) => Err("iflush outside the registration flushed nothing".to_string()),
        Ok(Some(mut req)) => match until("flush outside the registration", || net.test(&mut req)) {
            Ok(_) => Err("a flush outside its registration completed".to_string()),
            Err(e)
                if e.contains("GPUDirect flush")
                    && e.contains("failed: IBV_WC_")
                    && e.contains("loopback flush QP") =>
            {
                Ok(e)
            }
            Err(e) => Err(format!("the failed flush does not say so: {e}")),
        },
    };
    net.dereg_mr(mr).map_err(|e| e.to_string())?;
    result
}

/// `tail_kept(comm)`: whether the bytes of a buffer past its message must stay untouched
/// (not on a mesh connection of several rails: a part may land there before it is moved).
fn receiver<N: Net>(
    net: &N,
    dir: &Path,
    n: usize,
    tail_kept: impl Fn(&N::RecvComm) -> bool,
    flush: &FlushCheck<'_, N::RecvComm>,
) -> Result<(), String> {
    let (handle, mut listen) = net.listen(0).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!("handle-{n}.tmp"));
    std::fs::write(&tmp, handle.as_bytes()).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, handle_path(dir, n)).map_err(|e| e.to_string())?;
    let mut comm = until("accept", || net.accept(&mut listen))?;
    let check_tail = tail_kept(&comm);
    let max = *SIZES.iter().max().unwrap_or(&1);
    // Eight buffers in flight, like NCCL's slots.
    let mut bufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; max]).collect();
    let mut mrs = Vec::new();
    for b in &mut bufs {
        // SAFETY: the buffer outlives its registration (deregistered below).
        let mr =
            unsafe { net.reg_mr(CommRef::Recv(&comm), b.as_mut_ptr(), b.len(), PtrKind::Host) };
        mrs.push(mr.map_err(|e| e.to_string())?);
    }
    // Single receives, up to 8 in flight, each buffer poisoned before its receive.
    let mut inflight = std::collections::VecDeque::new();
    for (m, &size) in SIZES.iter().enumerate() {
        let slot = m % bufs.len();
        bufs[slot].fill(0xa5);
        let rb = [RecvBuffer {
            data: bufs[slot].as_mut_ptr(),
            size: max,
            tag: m as u32,
            mr: &mrs[slot],
        }];
        // SAFETY: the buffer is not touched until the request completes.
        let req = until("irecv", || unsafe { net.irecv(&mut comm, &rb) })?;
        inflight.push_back((m, slot, size, req));
        if inflight.len() == bufs.len() || m + 1 == SIZES.len() {
            while let Some((m, slot, size, mut req)) = inflight.pop_front() {
                let done = until(&format!("receive {m} ({size} bytes)"), || {
                    net.test(&mut req)
                })?;
                if done.sizes() != [size] {
                    return Err(format!(
                        "receive {m}: sizes {:?}, expected [{size}]",
                        done.sizes()
                    ));
                }
                check(m as u64, &bufs[slot][..size], &format!("message {m}"))?;
                if check_tail && bufs[slot][size..].iter().any(|&b| b != 0xa5) {
                    return Err(format!("message {m}: bytes written past its {size} bytes"));
                }
                flush_and_check(
                    net,
                    &mut comm,
                    &mut bufs[slot],
                    size,
                    &mrs[slot],
                    flush,
                    &format!("message {m}"),
                )?;
            }
        }
    }
    // Grouped receives with tags.
    for (g, (tags, _)) in GROUPS.iter().enumerate() {
        let group: Vec<RecvBuffer<'_, _>> = tags
            .iter()
            .enumerate()
            .map(|(i, &tag)| {
                bufs[i].fill(0xa5);
                RecvBuffer {
                    data: bufs[i].as_mut_ptr(),
                    size: max,
                    tag,
                    mr: &mrs[i],
                }
            })
            .collect();
        // SAFETY: as above.
        let mut req = until("grouped irecv", || unsafe { net.irecv(&mut comm, &group) })?;
        let done = until(&format!("group {g}"), || net.test(&mut req))?;
        for (i, &tag) in tags.iter().enumerate() {
            let size = 1000 * tag as usize + 13;
            if done.sizes()[i] != size {
                return Err(format!(
                    "group {g} tag {tag}: size {}, expected {size}",
                    done.sizes()[i]
                ));
            }
            check(
                1000 + u64::from(tag),
                &bufs[i][..size],
                &format!("group {g} tag {tag}"),
            )?;
        }
        // NCCL flushes a group by its last non-empty buffer.
        let last = tags.len() - 1;
        let size = done.sizes()[last];
        flush_and_check(
            net,
            &mut comm,
            &mut bufs[last],
            size,
            &mrs[last],
            flush,
            &format!("group {g}"),
        )?;
    }
    // The sender's last sends may complete on its side only after our receives did: wait
    // for its word before closing, or its last `test` would meet a closed peer.
    let sent = sent_path(dir, n);
    let start = Instant::now();
    while !sent.exists() {
        if start.elapsed() > DEADLINE {
            return Err(format!(
                "the sender never said its sends completed ({})",
                sent.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if flush.forced {
        let words = flush_fault(net, &mut comm)?;
        println!("flush fault: {words}");
    }
    for mr in mrs {
        net.dereg_mr(mr).map_err(|e| e.to_string())?;
    }
    net.close_recv(comm).map_err(|e| e.to_string())?;
    net.close_listen(listen).map_err(|e| e.to_string())?;
    Ok(())
}

/// `describe(comm)` is printed once connected (the mesh's rails).
fn sender<N: Net>(
    net: &N,
    dir: &Path,
    n: usize,
    describe: impl Fn(&N::SendComm) -> String,
) -> Result<(), String> {
    let path = handle_path(dir, n);
    let start = Instant::now();
    let bytes = loop {
        if let Ok(b) = std::fs::read(&path) {
            break b;
        }
        if start.elapsed() > DEADLINE {
            return Err(format!(
                "no handle at {} within {} s",
                path.display(),
                DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut handle = NetHandle::default();
    handle.0.copy_from_slice(&bytes);
    let mut state = None;
    let mut comm = until("connect", || net.connect(0, &handle, &mut state))?;
    let words = describe(&comm);
    if !words.is_empty() {
        println!("connected to {n}: {words}");
    }
    let msgs: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(m, &size)| {
            let mut v = vec![0u8; size];
            fill(m as u64, &mut v);
            v
        })
        .collect();
    let mut mrs = Vec::new();
    for m in &msgs {
        // SAFETY: the message outlives its registration.
        let mr = unsafe {
            net.reg_mr(
                CommRef::Send(&comm),
                m.as_ptr().cast_mut(),
                m.len(),
                PtrKind::Host,
            )
        };
        mrs.push(mr.map_err(|e| e.to_string())?);
    }
    let mut reqs = Vec::new();
    for (m, msg) in msgs.iter().enumerate() {
        // SAFETY: the message is not modified until the request completes.
        let req = until("isend", || unsafe {
            net.isend(&mut comm, msg.as_ptr(), msg.len(), m as u32, &mrs[m])
        })?;
        reqs.push((m, req));
        if reqs.len() == 8 || m + 1 == msgs.len() {
            for (m, mut req) in reqs.drain(..) {
                let done = until(&format!("send {m}"), || net.test(&mut req))?;
                if done.sizes() != [msgs[m].len()] {
                    return Err(format!("send {m}: sizes {:?}", done.sizes()));
                }
            }
        }
    }
    for (tags, order) in GROUPS {
        let parts: Vec<(u32, Vec<u8>)> = order
            .iter()
            .map(|&i| {
                let tag = tags[i];
                let mut v = vec![0u8; 1000 * tag as usize + 13];
                fill(1000 + u64::from(tag), &mut v);
                (tag, v)
            })
            .collect();
        let mut part_mrs = Vec::new();
        for (_, v) in &parts {
            // SAFETY: the part outlives its registration.
            let mr = unsafe {
                net.reg_mr(
                    CommRef::Send(&comm),
                    v.as_ptr().cast_mut(),
                    v.len(),
                    PtrKind::Host,
                )
            };
            part_mrs.push(mr.map_err(|e| e.to_string())?);
        }
        let mut reqs = Vec::new();
        for ((tag, v), mr) in parts.iter().zip(&part_mrs) {
            // SAFETY: as above.
            reqs.push(until("grouped isend", || unsafe {
                net.isend(&mut comm, v.as_ptr(), v.len(), *tag, mr)
            })?);
        }
        for mut req in reqs {
            until("grouped send", || net.test(&mut req))?;
        }
        for mr in part_mrs {
            net.dereg_mr(mr).map_err(|e| e.to_string())?;
        }
    }
    for mr in mrs {
        net.dereg_mr(mr).map_err(|e| e.to_string())?;
    }
    // Every send completed here: the receiver may close (it waits for this word).
    std::fs::write(sent_path(dir, n), b"sent").map_err(|e| e.to_string())?;
    // Give the receiver time to test its last request before the socket closes.
    std::thread::sleep(Duration::from_millis(500));
    net.close_send(comm).map_err(|e| e.to_string())?;
    Ok(())
}

/// The file by which the sender of connection `n` says that every send of it completed.
fn sent_path(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("sent-{n}"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(role), Some(dir)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: ib_pair send|recv DIR");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    if role == "ring" {
        ring(&dir, args.get(3), args.get(4));
        return;
    }
    // Connection 0 with the environment's settings, connection 1 over 3 QPs.
    let runs: [(usize, Option<usize>); 2] = [(0, None), (1, Some(3))];
    for (n, qps) in runs {
        let mut config = match IbConfig::from_env() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("ib_pair: {e}");
                std::process::exit(1);
            }
        };
        if let Some(q) = qps {
            config.qps_per_connection = q;
        }
        let started = Instant::now();
        let result = IbNet::new(config.clone())
            .map_err(|e| e.to_string())
            .and_then(|net| {
                println!(
                    "{role} {n}: {} ({} QPs, ptrSupport {:#x})",
                    net.describe(0).unwrap_or_default(),
                    config.qps_per_connection,
                    net.properties(0).map_or(0, |p| p.ptr_support.bits())
                );
                let read_back = |c: &_, len| net.last_flush_read(c, len);
                let flush = FlushCheck {
                    forced: config.gdr.force_flush,
                    read_back: &read_back,
                };
                if role == "send" {
                    sender(&net, &dir, n, |_| String::new())
                } else {
                    receiver(&net, &dir, n, |_| true, &flush)
                }
            });
        match result {
            Ok(()) => println!(
                "{role} {n}: ok, {} messages of 1 B to 16 MiB and {} grouped receives checked in {:.1} s",
                SIZES.len(),
                GROUPS.len(),
                started.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!("ib_pair {role} {n}: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// Host `me` of `n` on a ring over the mesh backend: a receiver thread for the link from host
/// me-1 (handle `ring-<me>`) and a sender for the link to host me+1, at once.
fn ring(dir: &Path, me: Option<&String>, n: Option<&String>) {
    let (Some(me), Some(n)) = (
        me.and_then(|s| s.parse::<usize>().ok()),
        n.and_then(|s| s.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: ib_pair ring DIR INDEX COUNT");
        std::process::exit(2);
    };
    let net = match MeshNet::from_env() {
        Ok(net) => net,
        Err(e) => {
            eprintln!("ib_pair ring {me}: {e}");
            std::process::exit(1);
        }
    };
    let started = Instant::now();
    let next = (me + 1) % n;
    // The mesh backend has no flush of its own: iflush must answer "nothing to flush".
    let none = |_: &_, _| None;
    let flush = FlushCheck {
        forced: false,
        read_back: &none,
    };
    let result = std::thread::scope(|s| {
        let recv = s.spawn(|| receiver(&net, dir, 100 + me, |c| c.rails().len() == 1, &flush));
        let send = sender(&net, dir, 100 + next, |c| c.rails().join("; "));
        let recv = recv
            .join()
            .unwrap_or_else(|_| Err("the receiver thread panicked".into()));
        send.map_err(|e| format!("sending to host {next}: {e}"))
            .and(recv.map_err(|e| format!("receiving from host {}: {e}", (me + n - 1) % n)))
    });
    match result {
        Ok(()) => println!(
            "ring {me}: ok, to host {next} and from host {}: {} messages of 1 B to 16 MiB and {} grouped receives each way, checked in {:.1} s",
            (me + n - 1) % n,
            SIZES.len(),
            GROUPS.len(),
            started.elapsed().as_secs_f64()
        ),
        Err(e) => {
            eprintln!("ib_pair ring {me}: {e}");
            std::process::exit(1);
        }
    }
}
