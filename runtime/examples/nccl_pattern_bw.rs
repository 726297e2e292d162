//! The socket NET backend under NCCL's proxy pattern: a 2-rank ring all-reduce, simulated.
//!
//! Each rank has one "GPU" thread and one proxy thread (NCCL runs one proxy thread per rank)
//! over `C` channels, each with a send and a receive connection of `SLOTS` slots of `STEP`
//! bytes. Per channel and loop iteration the GPU runs the 2-rank all-reduce sequence: send its
//! own chunk, receive the peer's chunk and send the reduced chunk, receive the final chunk
//! (each `CHUNK_STEPS` steps). The GPU writes a send slot only when the proxy has completed the
//! isend that last used it, and frees a receive slot (after an optional consumer delay) once it
//! used the data. The proxy posts an isend when a step is ready, an irecv only when the GPU
//! freed the slot, at most `SLOTS` in flight per connection, and tests the oldest request of
//! each connection in a loop, as NCCL's `net.cc` proxy does.
//!
//! ```text
//! cargo run --release -p weft-runtime --example nccl_pattern_bw -- [CONFIGS] [channels] [MiB] [delay_us] [reps]
//! target/release/examples/nccl_pattern_bw 4x1,4x4 2 2048 0 3
//! ```
//!
//! `WEFT_SOCKET_SPIN_US` and the other `WEFT_SOCKET_*` settings apply (the interface is `lo`).
//! Then a ping-pong between two endpoints (8 B and one step) gives the median round trip: the
//! latency of one hop, which bounds a ring whose steps depend on each other; and a receive
//! posted 1 ms after its send is timed from the post to completion.
//! Prints GB/s per rank and direction (for a 2-rank all-reduce this is NCCL's busbw). Every
//! received step carries its sender, channel and step number, checked by the receiving GPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weft_runtime::net::socket::{
    SocketConfig, SocketMemHandle, SocketNet, SocketRecvComm, SocketSendComm,
};
use weft_runtime::net::{Net, RecvBuffer};

mod common;
use common::pair;

const SLOTS: usize = 8;
const STEP: usize = 512 << 10;
const CHUNK_STEPS: u64 = 4;
const TAG: u32 = 7;

type Req = <SocketNet as Net>::Request;

/// One direction of one channel: the slots and the head/tail counters shared by GPU and proxy.
struct Fifo {
    buf: Box<[u8]>,
    /// Steps made available: by the GPU (send side) or the proxy (receive side).
    tail: AtomicU64,
    /// Steps consumed: by the proxy (send side) or the GPU (receive side).
    head: AtomicU64,
}

impl Fifo {
    fn new() -> Arc<Fifo> {
        Arc::new(Fifo {
            buf: vec![0u8; SLOTS * STEP].into_boxed_slice(),
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
        })
    }

    fn slot_addr(&self, step: u64) -> usize {
        self.buf.as_ptr() as usize + (step as usize % SLOTS) * STEP
    }
}

fn stamp(rank: usize, channel: usize, step: u64) -> u64 {
    ((rank as u64) << 56) | ((channel as u64) << 48) | step
}

/// The GPU of one rank: all channels' state machines in one thread.
fn gpu(
    rank: usize,
    sends: &[Arc<Fifo>],
    recvs: &[Arc<Fifo>],
    iters: u64,
    delay: Duration,
    abort: &AtomicBool,
) {
    let peer = 1 - rank;
    let per_iter = 3 * CHUNK_STEPS;
    // Per channel: position in the op sequence (in steps of the sequence), sent and received.
    let mut pos = vec![0u64; sends.len()];
    let mut sent = vec![0u64; sends.len()];
    let mut got = vec![0u64; sends.len()];
    let total = iters * per_iter;
    while pos.iter().any(|&p| p < total) {
        if abort.load(Ordering::Relaxed) {
            return;
        }
        let mut progressed = false;
        for c in 0..sends.len() {
            if pos[c] >= total {
                continue;
            }
            let phase = (pos[c] % per_iter) / CHUNK_STEPS;
            let needs_recv = phase >= 1;
            let needs_send = phase <= 1;
            let (sf, rf) = (&sends[c], &recvs[c]);
            if needs_recv && rf.tail.load(Ordering::Acquire) <= got[c] {
                continue;
            }
            if needs_send && sent[c] >= sf.head.load(Ordering::Acquire) + SLOTS as u64 {
                continue;
            }
            if needs_recv {
                let addr = rf.slot_addr(got[c]);
                // SAFETY: the proxy completed the receive of step `got[c]` (tail > got) and
                // posts no receive into this slot before head passes it.
                let word = unsafe { std::ptr::read_unaligned(addr as *const u64) };
                assert_eq!(
                    word,
                    stamp(peer, c, got[c]),
                    "rank {rank} channel {c}: wrong data"
                );
                if !delay.is_zero() {
                    let until = Instant::now() + delay;
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
                got[c] += 1;
                rf.head.store(got[c], Ordering::Release);
            }
            if needs_send {
                let addr = sf.slot_addr(sent[c]);
                // SAFETY: the isend that last used this slot completed (sent < head + SLOTS),
                // and the proxy posts none for it before tail passes this step.
                unsafe { std::ptr::write_unaligned(addr as *mut u64, stamp(rank, c, sent[c])) };
                sent[c] += 1;
                sf.tail.store(sent[c], Ordering::Release);
            }
            pos[c] += 1;
            progressed = true;
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
}

/// The proxy of one rank: one thread over every connection of the rank.
fn proxy(
    net: &SocketNet,
    sends: &mut [(SocketSendComm, Arc<Fifo>)],
    recvs: &mut [(SocketRecvComm, Arc<Fifo>)],
    steps: u64,
    abort: &AtomicBool,
) {
    let mr = SocketMemHandle { addr: 0, size: 0 };
    let n = sends.len();
    let mut s_posted = vec![0u64; n];
    let mut s_done = vec![0u64; n];
    let mut s_reqs: Vec<Vec<Option<Req>>> =
        (0..n).map(|_| (0..SLOTS).map(|_| None).collect()).collect();
    let mut r_posted = vec![0u64; n];
    let mut r_done = vec![0u64; n];
    let mut r_reqs: Vec<Vec<Option<Req>>> =
        (0..n).map(|_| (0..SLOTS).map(|_| None).collect()).collect();
    let per_dir = steps;
    let deadline = Instant::now() + Duration::from_secs(300);
    while s_done.iter().chain(&r_done).any(|&d| d < per_dir) {
        if abort.load(Ordering::Relaxed) {
            return;
        }
        assert!(Instant::now() < deadline, "pattern run timed out");
        let mut progressed = false;
        for c in 0..n {
            let (comm, fifo) = &mut sends[c];
            let ready = fifo.tail.load(Ordering::Acquire);
            if s_posted[c] < ready && s_posted[c] < s_done[c] + SLOTS as u64 {
                let addr = fifo.slot_addr(s_posted[c]);
                // SAFETY: the slot stays untouched by the GPU until this request completes.
                let r =
                    unsafe { net.isend(comm, addr as *const u8, STEP, TAG, &mr) }.expect("isend");
                if let Some(r) = r {
                    s_reqs[c][s_posted[c] as usize % SLOTS] = Some(r);
                    s_posted[c] += 1;
                    progressed = true;
                }
            }
            if s_done[c] < s_posted[c] {
                let slot = s_done[c] as usize % SLOTS;
                let req = s_reqs[c][slot].as_mut().expect("posted");
                if net.test(req).expect("send test").is_some() {
                    s_reqs[c][slot] = None;
                    s_done[c] += 1;
                    fifo.head.store(s_done[c], Ordering::Release);
                    progressed = true;
                }
            }
            let (comm, fifo) = &mut recvs[c];
            let freed = fifo.head.load(Ordering::Acquire);
            if r_posted[c] < per_dir && r_posted[c] < freed + SLOTS as u64 {
                let rb = [RecvBuffer {
                    data: fifo.slot_addr(r_posted[c]) as *mut u8,
                    size: STEP,
                    tag: TAG,
                    mr: &mr,
                }];
                // SAFETY: the GPU freed this slot and reads it only after the receive completes.
                let r = unsafe { net.irecv(comm, &rb) }.expect("irecv");
                if let Some(r) = r {
                    r_reqs[c][r_posted[c] as usize % SLOTS] = Some(r);
                    r_posted[c] += 1;
                    progressed = true;
                }
            }
            if r_done[c] < r_posted[c] {
                let slot = r_done[c] as usize % SLOTS;
                let req = r_reqs[c][slot].as_mut().expect("posted");
                if let Some(done) = net.test(req).expect("recv test") {
                    assert_eq!(done.sizes(), &[STEP]);
                    r_reqs[c][slot] = None;
                    r_done[c] += 1;
                    fifo.tail.store(r_done[c], Ordering::Release);
                    progressed = true;
                }
            }
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
}

/// One-hop latency: a message of `size` bytes goes A -> B, then B -> A, `rounds` times, with
/// the receives posted ahead (as NCCL's proxy does when slots are free). Returns the median
/// round trip in microseconds.
fn ping_pong(net: &SocketNet, size: usize, rounds: usize) -> f64 {
    let (mut ab_s, mut ab_r) = pair(net);
    let (mut ba_s, mut ba_r) = pair(net);
    let mr = SocketMemHandle { addr: 0, size: 0 };
    let mut a_buf = vec![1u8; size];
    let mut b_buf = vec![2u8; size];
    let (a_addr, b_addr) = (a_buf.as_mut_ptr() as usize, b_buf.as_mut_ptr() as usize);
    let wait = |r: &mut Req| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if net.test(r).expect("test").is_some() {
                return;
            }
            assert!(Instant::now() < deadline, "ping-pong timed out");
            // Yield: where threads outnumber cores, a pure spin starves the helper threads.
            std::thread::yield_now();
        }
    };
    let mut times = Vec::with_capacity(rounds);
    std::thread::scope(|scope| {
        let (ab_r, ba_s) = (&mut ab_r, &mut ba_s);
        scope.spawn(move || {
            for _ in 0..rounds {
                let rb = [RecvBuffer {
                    data: b_addr as *mut u8,
                    size,
                    tag: TAG,
                    mr: &mr,
                }];
                // SAFETY: `b_buf` outlives the scope; one request uses it at a time.
                let mut r = unsafe { net.irecv(ab_r, &rb) }
                    .expect("irecv")
                    .expect("posted");
                wait(&mut r);
                // SAFETY: as above.
                let mut s = unsafe { net.isend(ba_s, b_addr as *const u8, size, TAG, &mr) }
                    .expect("isend")
                    .expect("posted");
                wait(&mut s);
            }
        });
        for _ in 0..rounds {
            let rb = [RecvBuffer {
                data: a_addr as *mut u8,
                size,
                tag: TAG,
                mr: &mr,
            }];
            // SAFETY: `a_buf` outlives the scope; the receive and the send use it in turn
            // (the send reads it, the receive that follows writes it after the peer got it).
            let mut r = unsafe { net.irecv(&mut ba_r, &rb) }
                .expect("irecv")
                .expect("posted");
            let start = Instant::now();
            // SAFETY: as above.
            let mut s = unsafe { net.isend(&mut ab_s, a_addr as *const u8, size, TAG, &mr) }
                .expect("isend")
                .expect("posted");
            wait(&mut s);
            wait(&mut r);
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    });
    for c in [ab_s, ba_s] {
        net.close_send(c).expect("close");
    }
    for c in [ab_r, ba_r] {
        net.close_recv(c).expect("close");
    }
    drop((a_buf, b_buf));
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A receive posted late: A sends `size` bytes, B posts its receive only `late` later (the
/// data had time to arrive) and times it from the post to completion. Returns the median in
/// microseconds: what a message costs when NCCL's proxy posts the receive after the sender
/// already sent.
fn late_receive(net: &SocketNet, size: usize, rounds: usize, late: Duration) -> f64 {
    let (mut s, mut r) = pair(net);
    let mr = SocketMemHandle { addr: 0, size: 0 };
    let src = vec![3u8; size];
    let mut dst = vec![0u8; size];
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        // One thread drives both ends (no thread start inside the timing); the helper threads
        // move the bytes during the sleep, where the protocol lets them.
        // SAFETY: `src` outlives the request, which completes below.
        let mut sq = unsafe { net.isend(&mut s, src.as_ptr(), size, TAG, &mr) }
            .expect("isend")
            .expect("posted");
        std::thread::sleep(late);
        let rb = [RecvBuffer {
            data: dst.as_mut_ptr(),
            size,
            tag: TAG,
            mr: &mr,
        }];
        let start = Instant::now();
        // SAFETY: `dst` outlives the request, which completes below.
        let mut rq = unsafe { net.irecv(&mut r, &rb) }
            .expect("irecv")
            .expect("posted");
        let (mut sent, mut got) = (false, false);
        let deadline = start + Duration::from_secs(30);
        while !(sent && got) {
            assert!(Instant::now() < deadline, "late receive timed out");
            if !sent {
                sent = net.test(&mut sq).expect("send test").is_some();
            }
            if !got && net.test(&mut rq).expect("recv test").is_some() {
                got = true;
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
            std::thread::yield_now();
        }
    }
    assert!(dst == src, "late receive: data differs");
    net.close_send(s).expect("close");
    net.close_recv(r).expect("close");
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let configs = args.first().map_or("4x1", String::as_str).to_string();
    let channels: usize = args.get(1).map_or(2, |v| v.parse().expect("channels"));
    let mib: u64 = args.get(2).map_or(1024, |v| v.parse().expect("MiB"));
    let delay = Duration::from_micros(args.get(3).map_or(0, |v| v.parse().expect("delay us")));
    let reps: usize = args.get(4).map_or(3, |v| v.parse().expect("reps"));
    // Bytes per rank and direction = iters * 2 chunks * CHUNK_STEPS * STEP * channels.
    let per_iter = 2 * CHUNK_STEPS * STEP as u64 * channels as u64;
    let iters = ((mib << 20) / per_iter).max(1);
    let bytes = iters * per_iter;
    println!(
        "# nccl_pattern_bw: 2 ranks, {channels} channels, {SLOTS} x {} KiB slots, consumer delay {} us, {} MiB per rank and direction",
        STEP >> 10,
        delay.as_micros(),
        bytes >> 20
    );
    for config in configs.split(',') {
        let (t, s) = config.split_once('x').expect("CONFIGS like 4x1,4x4");
        let net = SocketNet::new(SocketConfig {
            ifname: Some("=lo".into()),
            threads: t.parse().expect("threads"),
            sockets_per_thread: s.parse().expect("sockets per thread"),
            // WEFT_SOCKET_SPIN_US and the other settings from the environment.
            ..SocketConfig::from_env().expect("socket settings")
        })
        .expect("socket net");
        let mut results = Vec::new();
        for _ in 0..reps {
            // rank r sends to 1-r on every channel.
            let mut conns: Vec<(Vec<SocketSendComm>, Vec<SocketRecvComm>)> =
                vec![(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
            for _ in 0..channels {
                for r in 0..2 {
                    let (s, rc) = pair(&net);
                    conns[r].0.push(s);
                    conns[1 - r].1.push(rc);
                }
            }
            let abort = AtomicBool::new(false);
            let start = Instant::now();
            let finished = std::thread::scope(|scope| {
                let mut handles = Vec::new();
                for (rank, (s, r)) in conns.into_iter().enumerate() {
                    let sf: Vec<Arc<Fifo>> = (0..channels).map(|_| Fifo::new()).collect();
                    let rf: Vec<Arc<Fifo>> = (0..channels).map(|_| Fifo::new()).collect();
                    let mut sp: Vec<_> = s.into_iter().zip(sf.iter().cloned()).collect();
                    let mut rp: Vec<_> = r.into_iter().zip(rf.iter().cloned()).collect();
                    let (net, abort) = (&net, &abort);
                    let steps = iters * 2 * CHUNK_STEPS;
                    scope.spawn(move || gpu(rank, &sf, &rf, iters, delay, abort));
                    handles.push(scope.spawn(move || {
                        proxy(net, &mut sp, &mut rp, steps, abort);
                        (sp, rp)
                    }));
                }
                let finished: Vec<_> = handles
                    .into_iter()
                    .map(|h| h.join().expect("proxy"))
                    .collect();
                finished
            });
            let t = start.elapsed().as_secs_f64();
            for (sp, rp) in finished {
                for (c, _) in sp {
                    net.close_send(c).expect("close send");
                }
                for (c, _) in rp {
                    net.close_recv(c).expect("close recv");
                }
            }
            results.push(bytes as f64 / t / 1e9);
        }
        let rtt_small = ping_pong(&net, 8, 400);
        let rtt_step = ping_pong(&net, STEP, 200);
        println!(
            "  {config:>5}  ping-pong median round trip: 8 B {rtt_small:.0} us, {} KiB {rtt_step:.0} us",
            STEP >> 10
        );
        let late = late_receive(&net, STEP, 100, Duration::from_millis(1));
        println!(
            "  {config:>5}  receive posted 1 ms after the send: {} KiB done {late:.0} us after the post (median)",
            STEP >> 10
        );
        let text: Vec<String> = results.iter().map(|g| format!("{g:.2}")).collect();
        let best = results.iter().cloned().fold(0.0, f64::max);
        println!(
            "  {config:>5}  GB/s per rank and direction: {}  (best {best:.2})",
            text.join(" ")
        );
    }
}
