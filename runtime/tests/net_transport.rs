//! The NET transport over SocketNet on loopback: executor FIFO ends on both ranks, proxies
//! moving the slots, every byte checked; failures (peer dropped or killed, connect deadline,
//! abort) end the waits promptly with errors naming the peer.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use weft_runtime::conn::{
    AbortFlag, ConnError, FifoLayout, FifoRecvEnd, FifoSendEnd, WaitPolicy, Waiter,
};
use weft_runtime::net::Net;
use weft_runtime::net::socket::{SocketConfig, SocketNet};
use weft_runtime::transport::ConnSpec;
use weft_runtime::transport::net::{NetOptions, NetTransport, NetTransportError};

#[path = "common/loopback.rs"]
mod loopback;
use loopback::socket_net as net;

fn options(step_bytes: usize, timeout: Duration, abort: AbortFlag) -> NetOptions {
    NetOptions {
        layout: FifoLayout::new(8, step_bytes).unwrap(),
        waiter: Waiter {
            policy: WaitPolicy::default().with_timeout(timeout),
            abort,
            peer_pid: None,
            board: None,
        },
        connect_timeout: Duration::from_secs(20),
        linger: Duration::from_millis(500),
        ..NetOptions::default()
    }
}

fn transport(step_bytes: usize, timeout: Duration, abort: AbortFlag) -> NetTransport<SocketNet> {
    NetTransport::new(net(), options(step_bytes, timeout, abort)).unwrap()
}

#[path = "common/random.rs"]
mod random;
use random::message;

/// Sends `count` messages of stream `seed`.
fn send_stream(end: &mut FifoSendEnd, seed: u64, count: u64) -> Result<(), ConnError> {
    let max = end.slice_bytes();
    for i in 0..count {
        end.send(&message(seed, i, max))?;
    }
    Ok(())
}

/// Receives `count` messages of stream `seed`, asserting every byte and size.
fn recv_stream(end: &mut FifoRecvEnd, seed: u64, count: u64) -> Result<(), ConnError> {
    let max = end.slice_bytes();
    let mut out = vec![0u8; max];
    for i in 0..count {
        let n = end.recv_into(&mut out)?;
        let expected = message(seed, i, max);
        assert_eq!(n, expected.len(), "message {i} of stream {seed:#x}: size");
        assert!(
            out[..n] == expected[..],
            "message {i} of stream {seed:#x}: bytes differ"
        );
    }
    Ok(())
}

/// Connects `channels` connections from rank `a` to rank `b` of two transports, doing the
/// handshake in the documented order (the infos would travel through bootstrap).
fn connect<A: Net, B: Net>(
    from: &NetTransport<A>,
    from_rank: u32,
    to: &NetTransport<B>,
    to_rank: u32,
    channel: u32,
) -> (FifoSendEnd, FifoRecvEnd) {
    let (rsetup, rinfo) = to
        .recv_setup(ConnSpec {
            rank: to_rank,
            peer: from_rank,
            channel,
        })
        .unwrap();
    let (ssetup, sinfo) = from
        .send_setup(ConnSpec {
            rank: from_rank,
            peer: to_rank,
            channel,
        })
        .unwrap();
    let send = from.send_connect(ssetup, &rinfo).unwrap();
    let recv = to.recv_connect(rsetup, &sinfo).unwrap();
    (send, recv)
}

#[test]
fn both_directions_many_channels_every_byte() {
    // Odd step size; 3000 messages per stream = 375 wraps of the 8-slot ring; three channels
    // each way, all on one proxy thread per rank.
    let t0 = transport(24_640, Duration::from_secs(60), AbortFlag::new());
    let t1 = transport(24_640, Duration::from_secs(60), AbortFlag::new());
    let mut workers = Vec::new();
    for channel in 0..3u32 {
        for (from, fr, to, tr) in [(&t0, 0, &t1, 1), (&t1, 1, &t0, 0)] {
            let (mut send, mut recv) = connect(from, fr, to, tr, channel);
            let seed = u64::from(channel) << 8 | u64::from(fr);
            workers.push(thread::spawn(move || send_stream(&mut send, seed, 3000)));
            workers.push(thread::spawn(move || recv_stream(&mut recv, seed, 3000)));
        }
    }
    for w in workers {
        w.join().unwrap().unwrap();
    }
    assert!(t0.proxy().wait_idle(Duration::from_secs(10)));
    assert!(t1.proxy().wait_idle(Duration::from_secs(10)));
}

#[test]
fn slow_reader_back_pressure_and_large_steps() {
    // 1 MiB + 64 steps (larger than the socket backend's inline limit, so data sockets carry
    // them); the reader pauses, so the sender runs out of credit again and again.
    let t0 = transport(1024 * 1024 + 64, Duration::from_secs(60), AbortFlag::new());
    let t1 = transport(1024 * 1024 + 64, Duration::from_secs(60), AbortFlag::new());
    let (mut send, mut recv) = connect(&t0, 0, &t1, 1, 5);
    let sender = thread::spawn(move || send_stream(&mut send, 77, 120));
    let max = recv.slice_bytes();
    let mut out = vec![0u8; max];
    for i in 0..120u64 {
        if i % 17 == 0 {
            thread::sleep(Duration::from_millis(20));
        }
        let n = recv.recv_into(&mut out).unwrap();
        let expected = message(77, i, max);
        assert_eq!(n, expected.len());
        assert!(out[..n] == expected[..], "message {i} differs");
    }
    sender.join().unwrap().unwrap();
}

fn assert_names_rank_1(err: &ConnError) {
    let text = err.to_string();
    assert!(
        text.contains("rank 1"),
        "error does not name the peer: {text}"
    );
}

#[test]
fn dropped_receiver_fails_the_senders_credit_wait() {
    let t0 = transport(64 * 1024, Duration::from_secs(30), AbortFlag::new());
    let t1 = transport(64 * 1024, Duration::from_secs(30), AbortFlag::new());
    let (mut send, recv) = connect(&t0, 0, &t1, 1, 0);
    // Fill the remote FIFO (nobody reads it) and ours, so sends are in flight.
    let started = Instant::now();
    let sender = thread::spawn(move || {
        let data = vec![0x5a; send.slice_bytes()];
        loop {
            if let Err(e) = send.send(&data) {
                return e;
            }
        }
    });
    thread::sleep(Duration::from_millis(300));
    drop(recv);
    drop(t1);
    let err = sender.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(err, ConnError::Failed { .. }), "{err}");
    assert_names_rank_1(&err);
}

#[test]
fn dropped_sender_ends_the_receivers_data_wait() {
    let t0 = transport(8192, Duration::from_secs(30), AbortFlag::new());
    let t1 = transport(8192, Duration::from_secs(30), AbortFlag::new());
    // Rank 1 sends to rank 0 and vanishes after 10 messages; rank 0 expects 20.
    let (mut send, mut recv) = connect(&t1, 1, &t0, 0, 2);
    send_stream(&mut send, 9, 10).unwrap();
    let started = Instant::now();
    let reader = thread::spawn(move || recv_stream(&mut recv, 9, 20));
    thread::sleep(Duration::from_millis(100));
    drop(send);
    drop(t1);
    let err = reader.join().unwrap().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(err, ConnError::PeerClosed { .. } | ConnError::Failed { .. }),
        "{err}"
    );
    assert_names_rank_1(&err);
}

#[test]
fn abort_wakes_every_wait_and_fails_the_peer() {
    let abort0 = AbortFlag::new();
    let t0 = transport(4096, Duration::from_secs(60), abort0.clone());
    let t1 = transport(4096, Duration::from_secs(60), AbortFlag::new());
    let (mut s01, mut r01) = connect(&t0, 0, &t1, 1, 0);
    let (mut s10, mut r10) = connect(&t1, 1, &t0, 0, 0);
    // Rank 0 waits for data that never comes, and for credit nobody gives.
    let w_recv = thread::spawn(move || r10.recv_into(&mut [0u8; 4096]).unwrap_err());
    let w_send = thread::spawn(move || {
        let data = vec![1u8; 4096];
        loop {
            if let Err(e) = s01.send(&data) {
                return e;
            }
        }
    });
    thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    abort0.abort();
    for err in [w_recv.join().unwrap(), w_send.join().unwrap()] {
        assert!(
            matches!(err, ConnError::Aborted { .. }),
            "expected a local abort: {err}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    // Rank 1's waits on both connections now fail too (its proxy sees the closed comms).
    // The data rank 0 sent before the abort may arrive first; drain until the error.
    let err = loop {
        if let Err(e) = r01.recv_into(&mut [0u8; 4096]) {
            break e;
        }
    };
    assert!(
        matches!(err, ConnError::PeerClosed { .. } | ConnError::Failed { .. }),
        "{err}"
    );
    let data = vec![2u8; 4096];
    let err = loop {
        if let Err(e) = s10.send(&data) {
            break e;
        }
    };
    assert!(matches!(err, ConnError::Failed { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn connect_deadline_fails_the_executor() {
    let mut opts = options(4096, Duration::from_secs(60), AbortFlag::new());
    opts.connect_timeout = Duration::from_millis(700);
    let t0 = NetTransport::new(net(), opts).unwrap();
    let t1 = transport(4096, Duration::from_secs(60), AbortFlag::new());
    // Rank 1 listens but never accepts (no recv_connect).
    let (_rsetup, rinfo) = t1
        .recv_setup(ConnSpec {
            rank: 1,
            peer: 0,
            channel: 0,
        })
        .unwrap();
    let (ssetup, _) = t0
        .send_setup(ConnSpec {
            rank: 0,
            peer: 1,
            channel: 0,
        })
        .unwrap();
    let mut send = t0.send_connect(ssetup, &rinfo).unwrap();
    let started = Instant::now();
    let err = loop {
        if let Err(e) = send.send(&[7u8; 100]) {
            break e;
        }
    };
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(err, ConnError::Failed { .. }), "{err}");
    assert!(err.to_string().contains("did not complete"), "{err}");
    assert_names_rank_1(&err);
}

#[test]
fn bad_connect_info_is_refused_with_its_length() {
    let t0 = transport(4096, Duration::from_secs(5), AbortFlag::new());
    let (ssetup, _) = t0
        .send_setup(ConnSpec {
            rank: 0,
            peer: 3,
            channel: 1,
        })
        .unwrap();
    let err = t0.send_connect(ssetup, &[0u8; 17]).unwrap_err();
    assert!(matches!(
        err,
        NetTransportError::BadConnectInfo { len: 17, .. }
    ));
    assert!(err.to_string().contains("rank 3"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Two processes: the test binary runs itself as rank 1.

const CHILD_ENV: &str = "WEFT_NET_TRANSPORT_CHILD";
const HANDLE_ENV: &str = "WEFT_NET_TRANSPORT_HANDLE";
const STEP: usize = 40_000 + 192;
const PROCESS_MESSAGES: u64 = 1500;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Rank 1 in a child process: connects both ways with rank 0 (the parent), then either
/// exchanges `PROCESS_MESSAGES` each way, or (mode "stream") sends until killed.
#[test]
fn child_rank() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return; // only meaningful when the parent test starts this binary as rank 1
    };
    let parent_handle = unhex(&std::env::var(HANDLE_ENV).unwrap());
    let t1 = transport(STEP, Duration::from_secs(60), AbortFlag::new());
    let (rsetup, rinfo) = t1
        .recv_setup(ConnSpec {
            rank: 1,
            peer: 0,
            channel: 0,
        })
        .unwrap();
    println!("HANDLE {}", hex(&rinfo));
    let (ssetup, _) = t1
        .send_setup(ConnSpec {
            rank: 1,
            peer: 0,
            channel: 0,
        })
        .unwrap();
    let mut send = t1.send_connect(ssetup, &parent_handle).unwrap();
    let mut recv = t1.recv_connect(rsetup, &[]).unwrap();
    if mode == "stream" {
        let data = vec![3u8; STEP];
        loop {
            send.send(&data).unwrap();
        }
    }
    let reader = thread::spawn(move || recv_stream(&mut recv, 0xA0, PROCESS_MESSAGES));
    send_stream(&mut send, 0xA1, PROCESS_MESSAGES).unwrap();
    reader.join().unwrap().unwrap();
    drop(send);
    assert!(t1.proxy().wait_idle(Duration::from_secs(10)));
    println!("CHILD OK");
}

struct Child {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

fn spawn_child(mode: &str, handle: &[u8]) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_rank", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .env(HANDLE_ENV, hex(handle))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    Child { child, lines }
}

fn child_handle(child: &mut Child) -> Vec<u8> {
    for line in child.lines.by_ref() {
        let line = line.unwrap();
        // libtest may print "test child_rank ... " in front of it.
        if let Some(at) = line.find("HANDLE ") {
            return unhex(line[at + 7..].trim());
        }
    }
    panic!("the child exited before printing its handle");
}

fn parent_connect(t0: &NetTransport<SocketNet>, mode: &str) -> (Child, FifoSendEnd, FifoRecvEnd) {
    let (rsetup, rinfo) = t0
        .recv_setup(ConnSpec {
            rank: 0,
            peer: 1,
            channel: 0,
        })
        .unwrap();
    let mut child = spawn_child(mode, &rinfo);
    let child_info = child_handle(&mut child);
    let (ssetup, _) = t0
        .send_setup(ConnSpec {
            rank: 0,
            peer: 1,
            channel: 0,
        })
        .unwrap();
    let send = t0.send_connect(ssetup, &child_info).unwrap();
    let recv = t0.recv_connect(rsetup, &[]).unwrap();
    (child, send, recv)
}

#[test]
fn two_processes_both_directions_every_byte() {
    let t0 = transport(STEP, Duration::from_secs(60), AbortFlag::new());
    let (mut child, mut send, mut recv) = parent_connect(&t0, "exchange");
    let reader = thread::spawn(move || recv_stream(&mut recv, 0xA1, PROCESS_MESSAGES));
    send_stream(&mut send, 0xA0, PROCESS_MESSAGES).unwrap();
    reader.join().unwrap().unwrap();
    drop(send);
    let rest: Vec<String> = child.lines.by_ref().map_while(Result::ok).collect();
    let status = child.child.wait().unwrap();
    assert!(status.success(), "child failed: {status}, output {rest:?}");
    assert!(rest.iter().any(|l| l.contains("CHILD OK")), "{rest:?}");
}

#[test]
fn killed_peer_process_fails_the_wait_naming_it() {
    let t0 = transport(STEP, Duration::from_secs(60), AbortFlag::new());
    let (mut child, send, mut recv) = parent_connect(&t0, "stream");
    let mut out = vec![0u8; STEP];
    for _ in 0..50 {
        assert_eq!(recv.recv_into(&mut out).unwrap(), STEP);
        assert!(out.iter().all(|&b| b == 3));
    }
    child.child.kill().unwrap(); // SIGKILL
    let started = Instant::now();
    let err = loop {
        match recv.recv_into(&mut out) {
            Ok(_) => continue, // what was already on the way
            Err(e) => break e,
        }
    };
    child.child.wait().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, ConnError::PeerClosed { .. } | ConnError::Failed { .. }),
        "{err}"
    );
    assert_names_rank_1(&err);
    drop(send);
}

#[test]
fn multi_step_slices_fail_with_a_clear_error() {
    let t0 = transport(4096, Duration::from_secs(20), AbortFlag::new());
    let t1 = transport(4096, Duration::from_secs(20), AbortFlag::new());
    let (mut send, _recv) = connect(&t0, 0, &t1, 1, 0);
    send.reload(weft_core::fifo::FifoGeometry::simple(2, 2).unwrap())
        .unwrap();
    let err = loop {
        if let Err(e) = send.send(&[1u8; 5000]) {
            break e;
        }
    };
    assert!(matches!(err, ConnError::Failed { .. }), "{err}");
    assert!(err.to_string().contains("one step per slice"), "{err}");
}

#[path = "common/checking_net.rs"]
mod checking;

#[test]
fn in_flight_send_slots_are_never_overwritten() {
    let socket = || {
        SocketNet::new(SocketConfig {
            ifname: Some("=lo".into()),
            threads: 1,
            ..SocketConfig::default()
        })
        .unwrap()
    };
    let n0 = Arc::new(checking::CheckingNet::new(socket()));
    let n1 = Arc::new(checking::CheckingNet::new(socket()));
    let opts = || options(3008, Duration::from_secs(60), AbortFlag::new());
    let t0 = NetTransport::new(Arc::clone(&n0), opts()).unwrap();
    let t1 = NetTransport::new(Arc::clone(&n1), opts()).unwrap();
    let (mut send, mut recv) = connect(&t0, 0, &t1, 1, 0);
    let reader = thread::spawn(move || recv_stream(&mut recv, 0x55, 2000));
    // The sender rewrites every slot it gets as fast as it can.
    send_stream(&mut send, 0x55, 2000).unwrap();
    reader.join().unwrap().unwrap();
    drop(send);
    assert!(t0.proxy().wait_idle(Duration::from_secs(10)));
    let checked = n0.sends_checked.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(checked, 2000);
    assert_eq!(
        n0.overwritten.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "a slot changed while its send was in flight"
    );
}

#[test]
fn a_backend_that_blocks_cannot_hang_the_close() {
    let socket = || {
        SocketNet::new(SocketConfig {
            ifname: Some("=lo".into()),
            threads: 1,
            ..SocketConfig::default()
        })
        .unwrap()
    };
    let n0 = Arc::new(checking::CheckingNet::new(socket()));
    let opts = || options(4096, Duration::from_secs(60), AbortFlag::new());
    let linger = opts().linger;
    let t0 = NetTransport::new(Arc::clone(&n0), opts()).unwrap();
    let t1 = NetTransport::new(net(), opts()).unwrap();
    let (mut send, mut recv) = connect(&t0, 0, &t1, 1, 0);
    // Fewer messages than FIFO slots: no reader thread needed.
    send_stream(&mut send, 0x77, 6).unwrap();
    recv_stream(&mut recv, 0x77, 6).unwrap();
    // From now on the sender's backend blocks in `test`, with a send in flight.
    n0.stall.store(true, std::sync::atomic::Ordering::Release);
    send_stream(&mut send, 0x78, 1).unwrap();
    drop(send);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    let closer = thread::spawn(move || {
        drop(t0);
        done_tx.send(()).unwrap();
    });
    let bound = linger + weft_runtime::proxy::STOP_GRACE + Duration::from_secs(3);
    let closed = done_rx.recv_timeout(bound);
    // Let the thread left behind finish before the test ends.
    n0.stall.store(false, std::sync::atomic::Ordering::Release);
    assert!(closed.is_ok(), "closing hung behind a blocking backend");
    assert!(
        started.elapsed() >= linger,
        "the close did not give the link its linger"
    );
    closer.join().unwrap();
    drop(recv);
    drop(t1);
}

/// Four ranks in a ring (threads, each with its own bootstrap and proxy, on whatever cores
/// there are): connect infos go through bootstrap, every rank calls `send_connect` then
/// `recv_connect` from one thread (the connects complete on the proxies, so this order
/// cannot deadlock), then each streams to its next rank while receiving from its previous.
#[test]
fn four_ranks_ring_through_bootstrap() {
    use weft_runtime::bootstrap::{Bootstrap, BootstrapOptions, UniqueId};
    const N: usize = 4;
    const MESSAGES: u64 = 600;
    let opts = BootstrapOptions::loopback(Duration::from_secs(30));
    let id = UniqueId::new(&opts).unwrap();
    let ranks: Vec<_> = (0..N)
        .map(|rank| {
            let (id, opts) = (id, opts.clone());
            thread::spawn(move || {
                let mut boot = Bootstrap::init(&id, rank, N, &opts).unwrap();
                let (next, prev) = ((rank + 1) % N, (rank + N - 1) % N);
                let t = transport(12_352, Duration::from_secs(60), AbortFlag::new());
                let spec = |peer: usize| ConnSpec {
                    rank: rank as u32,
                    peer: peer as u32,
                    channel: 0,
                };
                let (rsetup, rinfo) = t.recv_setup(spec(prev)).unwrap();
                let (ssetup, sinfo) = t.send_setup(spec(next)).unwrap();
                boot.send(prev, 7, &rinfo).unwrap(); // to the rank that sends to us
                boot.send(next, 8, &sinfo).unwrap(); // to the rank we send to
                let next_rinfo = boot.recv(next, 7).unwrap();
                let prev_sinfo = boot.recv(prev, 8).unwrap();
                let mut send = t.send_connect(ssetup, &next_rinfo).unwrap();
                let mut recv = t.recv_connect(rsetup, &prev_sinfo).unwrap();
                let sender =
                    thread::spawn(move || send_stream(&mut send, 0xB0 + rank as u64, MESSAGES));
                recv_stream(&mut recv, 0xB0 + prev as u64, MESSAGES).unwrap();
                sender.join().unwrap().unwrap();
                boot.barrier().unwrap();
                assert!(t.proxy().wait_idle(Duration::from_secs(10)));
            })
        })
        .collect();
    for r in ranks {
        r.join().unwrap();
    }
}

#[test]
fn accept_deadline_fails_the_receiving_executor() {
    let mut opts = options(4096, Duration::from_secs(60), AbortFlag::new());
    opts.connect_timeout = Duration::from_millis(700);
    let t1 = NetTransport::new(net(), opts).unwrap();
    // Rank 0 never connects.
    let (rsetup, _rinfo) = t1
        .recv_setup(ConnSpec {
            rank: 1,
            peer: 0,
            channel: 4,
        })
        .unwrap();
    let mut recv = t1.recv_connect(rsetup, &[]).unwrap();
    let started = Instant::now();
    let err = recv.recv_into(&mut [0u8; 4096]).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(err, ConnError::Failed { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("rank 0 did not connect"), "{text}");
    assert!(text.contains("channel 4"), "{text}");
}

#[test]
fn transport_and_setups_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<NetTransport<SocketNet>>();
    send::<weft_runtime::transport::net::NetRecvSetup<SocketNet>>();
    send::<weft_runtime::transport::net::NetSendSetup>();
}

#[test]
fn connections_made_after_an_abort_fail_at_once() {
    let abort = AbortFlag::new();
    let t0 = transport(4096, Duration::from_secs(60), abort.clone());
    let t1 = transport(4096, Duration::from_secs(60), AbortFlag::new());
    abort.abort();
    assert!(t0.proxy().wait_idle(Duration::from_secs(5)));
    // Rank 1 receives from rank 0, whose proxy has stopped: rank 1's accept never sees a
    // connection, but rank 0's executor end is failed at once, and its own wait says abort.
    let (mut send, _recv) = connect(&t0, 0, &t1, 1, 0);
    let started = Instant::now();
    let err = send.send(&[1u8; 10]).unwrap_err();
    assert!(matches!(err, ConnError::Aborted { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(t0.proxy().links(), 0);
}

/// The handshake through the `Transport` trait, as the communicator drives every transport.
#[test]
fn through_the_transport_trait() {
    use weft_runtime::transport::{PeerInfo, Transport};
    fn handshake<T: Transport>(a: &T, b: &T) -> (FifoSendEnd, FifoRecvEnd) {
        let (rsetup, rinfo) = b
            .recv_setup(ConnSpec {
                rank: 1,
                peer: 0,
                channel: 6,
            })
            .unwrap();
        let (ssetup, sinfo) = a
            .send_setup(ConnSpec {
                rank: 0,
                peer: 1,
                channel: 6,
            })
            .unwrap();
        let recv = b.recv_connect(rsetup, &sinfo).unwrap();
        let send = a.send_connect(ssetup, &rinfo).unwrap();
        (send, recv)
    }
    let t0 = transport(8192, Duration::from_secs(30), AbortFlag::new());
    let t1 = transport(8192, Duration::from_secs(30), AbortFlag::new());
    let info = |rank| PeerInfo {
        rank,
        host_hash: 1,
        pid: 1,
        shm_dev: 1,
    };
    assert!(Transport::can_connect(&t0, &info(0), &info(1)));
    assert_eq!(Transport::name(&t0), "NET");
    let (mut send, mut recv) = handshake(&t0, &t1);
    let reader = thread::spawn(move || recv_stream(&mut recv, 0xC1, 300));
    send_stream(&mut send, 0xC1, 300).unwrap();
    reader.join().unwrap().unwrap();
    t0.free_send(send);
}

#[test]
fn stopped_peer_process_ends_in_the_wait_deadline() {
    // A SIGSTOPped peer keeps its sockets open (the kernel still acknowledges), so only the
    // executor's deadline can end the wait: it must, naming the peer.
    let t0 = transport(STEP, Duration::from_millis(1500), AbortFlag::new());
    let (mut child, send, mut recv) = parent_connect(&t0, "stream");
    let mut out = vec![0u8; STEP];
    for _ in 0..20 {
        recv.recv_into(&mut out).unwrap();
    }
    let pid = child.child.id() as libc::pid_t;
    // SAFETY: signalling our own child process by its pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let started = Instant::now();
    let err = loop {
        match recv.recv_into(&mut out) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    let waited = started.elapsed();
    child.child.kill().unwrap();
    child.child.wait().unwrap();
    assert!(matches!(err, ConnError::Timeout { .. }), "{err}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_names_rank_1(&err);
    drop(send);
}
