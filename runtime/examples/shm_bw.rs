//! SHM bandwidth between two processes: this binary re-executes itself as the sending rank
//! and streams full slices through one SHM connection; the receiver copies each slice out
//! to a user buffer, as the CPU executor does. Each slice's first 8 bytes carry its index,
//! checked on arrival.
//!
//! ```text
//! cargo run --release -p weft-runtime --example shm_bw -- [MiB per run] [step KiB ...]
//! ```
//! Defaults: 1024 MiB per run, steps of 16, 32, 64, 128, 256 and 512 KiB (8 slots each).
//! Last, an 8-byte ping-pong over two connections gives the one-way latency.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weft_runtime::conn::{AbortFlag, FifoLayout, WaitPolicy};
use weft_runtime::transport::shm::ShmTransport;
use weft_runtime::transport::{ConnSpec, Transport};

const ROLE: &str = "WEFT_SHM_BW_ROLE";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .filter_map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn transport(step: usize) -> Result<ShmTransport, Box<dyn std::error::Error>> {
    Ok(ShmTransport::new(
        FifoLayout::new(8, step)?,
        WaitPolicy::default().with_timeout(Duration::from_secs(60)),
        AbortFlag::new(),
    ))
}

/// The sending rank: reads the receiver's connect info from stdin, streams `slices` slices.
fn sender(step: usize, slices: u64) -> Result<(), Box<dyn std::error::Error>> {
    let shm = transport(step)?;
    let spec = ConnSpec {
        rank: 1,
        peer: 0,
        channel: 0,
    };
    let (setup, _blob) = shm.send_setup(spec)?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let mut send = shm.send_connect(setup, &unhex(line.trim()))?;
    let mut src = vec![0x5au8; step];
    for i in 0..slices {
        src[..8].copy_from_slice(&i.to_le_bytes());
        send.send(&src)?;
    }
    Ok(())
}

/// The ping-pong partner: receives on connection B, echoes on connection A.
fn echo(rounds: u64) -> Result<(), Box<dyn std::error::Error>> {
    let shm = transport(4096)?;
    let a = ConnSpec {
        rank: 1,
        peer: 0,
        channel: 0,
    };
    let b = ConnSpec {
        rank: 1,
        peer: 0,
        channel: 1,
    };
    let (send_setup, _) = shm.send_setup(a)?;
    let (recv_setup, blob) = shm.recv_setup(b)?;
    println!("\nBLOB {}", hex(&blob));
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let mut send = shm.send_connect(send_setup, &unhex(line.trim()))?;
    let mut recv = shm.recv_connect(recv_setup, &[])?;
    let mut buf = [0u8; 8];
    for _ in 0..rounds {
        let got = recv.recv_into(&mut buf)?;
        send.send(&buf[..got])?;
    }
    Ok(())
}

/// Median one-way latency of 8-byte messages, in microseconds.
fn latency(rounds: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(ROLE, format!("echo {rounds}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let shm = transport(4096)?;
    let a = ConnSpec {
        rank: 0,
        peer: 1,
        channel: 0,
    };
    let b = ConnSpec {
        rank: 0,
        peer: 1,
        channel: 1,
    };
    let (recv_setup, blob) = shm.recv_setup(a)?;
    let (send_setup, _) = shm.send_setup(b)?;
    let stdin = child.stdin.as_mut().ok_or("no child stdin")?;
    writeln!(stdin, "{}", hex(&blob))?;
    stdin.flush()?;
    let mut out = std::io::BufReader::new(child.stdout.take().ok_or("no child stdout")?);
    let mut line = String::new();
    let peer_blob = loop {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            return Err("echo process ended without its connect info".into());
        }
        if let Some((_, hex)) = line.split_once("BLOB ") {
            break unhex(hex.trim());
        }
    };
    let mut send = shm.send_connect(send_setup, &peer_blob)?;
    let mut recv = shm.recv_connect(recv_setup, &[])?;
    let mut buf = [0u8; 8];
    let mut times = Vec::with_capacity(rounds as usize);
    for i in 0..rounds {
        let start = Instant::now();
        send.send(&i.to_le_bytes())?;
        recv.recv_into(&mut buf)?;
        times.push(start.elapsed());
        if u64::from_le_bytes(buf) != i {
            return Err(format!("round {i}: echo returned {}", u64::from_le_bytes(buf)).into());
        }
    }
    child.wait()?;
    times.sort();
    Ok(times[times.len() / 2].as_secs_f64() * 1e6 / 2.0)
}

/// One run: returns GB/s seen by the receiver (first byte to last byte).
fn run(step: usize, total: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let slices = total / step as u64;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .env(ROLE, format!("{step} {slices}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let shm = transport(step)?;
    let spec = ConnSpec {
        rank: 0,
        peer: 1,
        channel: 0,
    };
    let (setup, blob) = shm.recv_setup(spec)?;
    let stdin = child.stdin.as_mut().ok_or("no child stdin")?;
    writeln!(stdin, "{}", hex(&blob))?;
    stdin.flush()?;
    let mut recv = shm.recv_connect(setup, &[])?;
    let mut dst = vec![0u8; step];
    // The first slice starts the clock: process start-up is not bandwidth.
    recv.recv_into(&mut dst)?;
    let start = Instant::now();
    for i in 1..slices {
        let got = recv.recv_into(&mut dst)?;
        let index = u64::from_le_bytes(dst[..8].try_into()?);
        if got != step || index != i {
            return Err(format!("slice {i}: got index {index}, {got} bytes").into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("sender exited with {status}").into());
    }
    Ok(((slices - 1) * step as u64) as f64 / secs / 1e9)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(role) = std::env::var(ROLE) {
        if let Some(rounds) = role.strip_prefix("echo ") {
            return echo(rounds.parse()?);
        }
        let mut it = role.split(' ').map(|v| v.parse::<u64>());
        let (Some(Ok(step)), Some(Ok(slices))) = (it.next(), it.next()) else {
            return Err(format!("bad {ROLE}={role}").into());
        };
        return sender(step as usize, slices);
    }
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let total = args.first().copied().unwrap_or(1024) << 20;
    let steps: Vec<u64> = match args.get(1..) {
        Some(s) if !s.is_empty() => s.to_vec(),
        _ => vec![16, 32, 64, 128, 256, 512],
    };
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "# weft SHM bandwidth, 2 processes, 8 slots, {} MiB per run, {cpus} CPUs",
        total >> 20
    );
    println!("{:>10} {:>10} {:>8}", "step", "ring", "GB/s");
    for kib in steps {
        let step = (kib << 10) as usize;
        let gbs = run(step, total)?;
        println!("{:>7} KiB {:>6} KiB {gbs:>8.2}", kib, kib * 8);
    }
    println!(
        "# 8-byte one-way latency (median of 20000 round trips / 2): {:.2} us",
        latency(20000)?
    );
    Ok(())
}
