//! The peer-pointer kernels' offsets and cuts (cuda/peer_layout.cuh) against
//! weft_core::nvls, query for query: the header is compiled for the host with the system
//! C++ compiler and asked for random slots, counters, channel parts and per-head loop parts;
//! every answer must equal the Rust original's.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

mod host_harness;

use weft_core::nvls::{self, Direction, Layout, Loops, channel_part};

/// A small deterministic generator (the test must be reproducible).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[test]
fn kernel_layout_matches_core_nvls() {
    let mut rng = Rng(0xc0ffee);
    let mut queries = String::new();
    let mut expect = Vec::new();
    for _ in 0..4000 {
        let nheads = 1 + rng.below(8);
        let nch = 1 + rng.below(64);
        let chunk = 16 * (1 + rng.below(16384));
        let layout = Layout::new(nheads as usize, nch, chunk, 1 << 21, 1 << 21).unwrap();
        let h = rng.below(nheads);
        let c = rng.below(nch);
        let dir = if rng.below(2) == 0 {
            Direction::Scatter
        } else {
            Direction::Broadcast
        };
        let step = rng.next();
        writeln!(queries, "S {h} {} {nch} {c} {chunk} {step}", dir as u32).unwrap();
        expect.push(layout.slot_offset(h, dir, c, step).unwrap().to_string());
        let posted = rng.below(2);
        let rank = rng.below(nvls::COUNTER_RANKS);
        writeln!(queries, "K {h} {} {nch} {c} {posted} {rank}", dir as u32).unwrap();
        let field = if posted == 1 {
            nvls::POSTED_OFFSET
        } else {
            nvls::FREED_OFFSET
        };
        expect.push((layout.credit_offset(h, dir, c).unwrap() + field + 8 * rank).to_string());
    }
    for _ in 0..4000 {
        let esize = [1u64, 2, 4, 8][rng.below(4) as usize];
        let count = match rng.below(3) {
            0 => rng.below(100),
            1 => rng.below(1 << 20),
            _ => rng.below(1 << 30),
        };
        let nch = 1 + rng.below(64);
        let c = rng.below(nch);
        writeln!(queries, "C {count} {esize} {nch} {c}").unwrap();
        let (s, l) = channel_part(count, esize, nch, c);
        expect.push(format!("{s} {l}"));
    }
    for _ in 0..1500 {
        let esize = [1u64, 2, 4, 8][rng.below(4) as usize];
        let nheads = 1 + rng.below(8);
        let chunk_bytes = 16384 * (1 + rng.below(16));
        let chunk_elems = chunk_bytes / esize;
        let ccount = match rng.below(3) {
            0 => rng.below(5000),
            1 => rng.below(1 << 21),
            _ => chunk_elems * nheads * (1 + rng.below(4)),
        };
        let all_reduce = rng.below(2) == 0;
        writeln!(
            queries,
            "L {} {ccount} {chunk_elems} {nheads} {esize}",
            u32::from(all_reduce)
        )
        .unwrap();
        // Reduce-scatter and all-gather: one chunk per loop, the same place of every
        // head's segment (Loops with one head).
        let per = if all_reduce { nheads } else { 1 };
        let loops = Loops::new(ccount, esize, chunk_bytes, per).unwrap();
        let mut line = loops.nloops().to_string();
        for lp in loops {
            for h in 0..nheads {
                let (s, l) = lp.head_part(if all_reduce { h } else { 0 }, ccount);
                write!(line, " {s} {l}").unwrap();
            }
        }
        expect.push(line);
    }
    let harness = host_harness::build("peer_layout");
    let mut child = Command::new(&harness)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the harness");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(queries.as_bytes()));
    let out = child.wait_with_output().expect("harness output");
    writer.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&harness);
    assert!(out.status.success(), "harness failed: {:?}", out.status);
    let got: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(got.len(), expect.len());
    for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
        assert_eq!(g, e, "answer {i} differs");
    }
}
