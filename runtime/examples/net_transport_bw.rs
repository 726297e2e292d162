//! Loopback bandwidth of the NET transport between two processes: the executor's FIFO ends
//! on both sides, the proxy threads moving the slots over SocketNet.
//!
//! ```text
//! cargo run --release -p weft-runtime --example net_transport_bw -- [MiB per size] [step KiB]
//! NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=2 cargo run --release ... (backend settings)
//! ```
//!
//! This process is rank 0 (sender); it starts itself again as rank 1 (receiver), which
//! listens and prints its handle. For each transfer size the first transfer carries random
//! data checked byte for byte; the timed ones follow. A transfer of S bytes is
//! ceil(S / step) posts of at most one step. The receiver times from its first timed post
//! to its last and prints the table.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_runtime::config::Settings;
use weft_runtime::conn::{AbortFlag, FifoLayout, FifoRecvEnd, FifoSendEnd};
use weft_runtime::net::Net;
use weft_runtime::net::socket::{SocketConfig, SocketNet};
use weft_runtime::transport::ConnSpec;
use weft_runtime::transport::net::{NetOptions, NetTransport};

mod common;
use common::fill;

const SIZES: [usize; 8] = [
    4096,
    65_536,
    262_144,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];
const CHILD_ENV: &str = "WEFT_NET_BW_RANK1";

fn iters(size: usize, mib: usize) -> usize {
    ((mib << 20) / size).clamp(4, 100_000)
}

fn transport(step_kib: usize) -> NetTransport<SocketNet> {
    let settings = Settings::from_env().expect("environment");
    let mut config = SocketConfig::from_settings(&settings.net.socket).expect("socket settings");
    if config.ifname.is_none() {
        config.ifname = Some("=lo".into());
    }
    let net = Arc::new(SocketNet::new(config).expect("loopback interface"));
    let options = NetOptions {
        layout: FifoLayout::new(8, step_kib * 1024).expect("step size"),
        ..NetOptions::from_settings(AbortFlag::new(), &settings.transport).expect("environment")
    };
    NetTransport::new(net, options).expect("proxy thread")
}

fn send_transfer(send: &mut FifoSendEnd, data: &[u8]) {
    let step = send.slice_bytes();
    for piece in data.chunks(step) {
        send.send(piece).expect("send");
    }
    if data.is_empty() {
        send.send(&[]).expect("send");
    }
}

fn recv_transfer(recv: &mut FifoRecvEnd, out: &mut [u8]) {
    let step = recv.slice_bytes();
    for piece in out.chunks_mut(step) {
        let n = recv.recv_into(piece).expect("recv");
        assert_eq!(n, piece.len(), "piece size");
    }
}

fn rank1(mib: usize, step_kib: usize) {
    let t = transport(step_kib);
    let spec = ConnSpec {
        rank: 1,
        peer: 0,
        channel: 0,
    };
    let (setup, info) = t.recv_setup(spec).expect("recv_setup");
    let hex: String = info.iter().map(|b| format!("{b:02x}")).collect();
    println!("HANDLE {hex}");
    std::io::stdout().flush().ok();
    let mut recv = t.recv_connect(setup, &[]).expect("recv_connect");
    println!(
        "# NET transport over {} (step {} KiB, 8 slots), 2 processes, loopback",
        t.proxy().net().name(),
        step_kib
    );
    println!(
        "{:>12} {:>8} {:>10} {:>9}",
        "size", "iters", "time(us)", "GB/s"
    );
    for (i, &size) in SIZES.iter().enumerate() {
        let n = iters(size, mib);
        let mut expected = vec![0u8; size];
        fill(&mut expected, i as u64 + 1);
        let mut out = vec![0u8; size];
        recv_transfer(&mut recv, &mut out);
        assert!(out == expected, "size {size}: data differs");
        let start = Instant::now();
        for _ in 0..n {
            recv_transfer(&mut recv, &mut out);
        }
        let secs = start.elapsed().as_secs_f64();
        let gbs = (size * n) as f64 / secs / 1e9;
        println!(
            "{size:>12} {n:>8} {:>10.1} {gbs:>9.2}",
            secs * 1e6 / n as f64
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(512);
    let step_kib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(512);
    if std::env::var(CHILD_ENV).is_ok() {
        rank1(mib, step_kib);
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .args([mib.to_string(), step_kib.to_string()])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start rank 1");
    let mut lines = BufReader::new(child.stdout.take().expect("pipe")).lines();
    let info: Vec<u8> = loop {
        let line = lines
            .next()
            .expect("rank 1 exited before its handle")
            .expect("read");
        if let Some(hex) = line.strip_prefix("HANDLE ") {
            break (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
                .collect();
        }
    };
    let t = transport(step_kib);
    let (setup, _) = t
        .send_setup(ConnSpec {
            rank: 0,
            peer: 1,
            channel: 0,
        })
        .expect("send_setup");
    let mut send = t.send_connect(setup, &info).expect("send_connect");
    for (i, &size) in SIZES.iter().enumerate() {
        let mut data = vec![0u8; size];
        fill(&mut data, i as u64 + 1);
        send_transfer(&mut send, &data);
        for _ in 0..iters(size, mib) {
            send_transfer(&mut send, &data);
        }
    }
    for line in lines {
        println!("{}", line.expect("read"));
    }
    let status = child.wait().expect("wait for rank 1");
    drop(send);
    t.proxy().wait_idle(Duration::from_secs(10));
    assert!(status.success(), "rank 1 failed: {status}");
}
