//! The kernels' LL arithmetic (cuda/ll_lines.cuh) against weft_core::fifo::ll, the reference:
//! the header is compiled for the host with the system C++ compiler and asked, for random
//! steps and the edges of the flag space (cleaning steps around 2^31, the 32-bit flag wrap,
//! the u64 wrap), for each step's flag, whether it cleans, its slot's first line, the line
//! pairs of a message, the two words of a pair and their payload (a pair with one stale half
//! refused), and whether a head gives credit. Every answer must be core's.

use std::io::Write;
use std::process::{Command, Stdio};

mod host_harness;

use weft_core::fifo::ll::{LlGeometry, LlSender, pair_data, pair_words};

/// A small deterministic generator (the test must be reproducible).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct Query {
    step: u64,
    bytes: u64,
    data: u64,
    buff: u64,
    head: u64,
}

fn queries() -> Vec<Query> {
    let mut rng = Rng(0x11_c0de);
    let edges = [
        0u64,
        1,
        7,
        8,
        9,
        0x7fff_fff0,
        0x7fff_fff8,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_fff7,
        0xffff_fff8,
        0xffff_ffff,
        0x1_0000_0000,
        0x1_7fff_fffb,
        u64::MAX - 8,
        u64::MAX - 1,
    ];
    let mut out = Vec::new();
    for i in 0..4000u64 {
        let step = if i < 400 {
            edges[(i % edges.len() as u64) as usize].wrapping_add(i / edges.len() as u64)
        } else {
            rng.next() >> rng.below(64)
        };
        // LL buffers of whole 16-byte pairs per slot, NCCL's 512 KiB among them.
        let buff = if i % 3 == 0 {
            512 << 10
        } else {
            8 * 16 * (1 + rng.below(8192))
        };
        // Heads from far behind the step to just below it (a head past the step is an error
        // in core and never happens on a connection).
        let head = step.saturating_sub(rng.below(20));
        out.push(Query {
            step,
            bytes: rng.below(70_000),
            data: rng.next(),
            buff,
            head,
        });
    }
    out
}

#[test]
fn kernel_ll_arithmetic_matches_core() {
    let harness = host_harness::build("ll_lines");
    let queries = queries();
    let input: String = queries
        .iter()
        .map(|q| format!("{} {} {} {} {}\n", q.step, q.bytes, q.data, q.buff, q.head))
        .collect();
    let mut child = Command::new(&harness)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the LL harness");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&harness);
    assert!(output.status.success(), "the LL harness failed");
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), queries.len(), "one answer per query");
    let mut cleaned = 0;
    for (q, line) in queries.iter().zip(lines) {
        let got: Vec<u64> = line.split(' ').map(|w| w.parse().unwrap()).collect();
        let g = LlGeometry::for_buffer(q.buff as usize).unwrap();
        let flag = g.flag(q.step);
        let [lo, hi] = pair_words(q.data, flag);
        let stale = pair_words(q.data, g.flag(q.step.wrapping_sub(1)))[1];
        // Core's sender at this step, asked with this head: credit or "wait".
        let credit = LlSender::new(g, q.step)
            .acquire(q.head)
            .expect("a head at or below the step is valid")
            .is_some();
        let want = [
            u64::from(flag),
            u64::from(g.cleans(q.step)),
            g.lines_per_step() as u64,
            g.line_index(q.step, 0).unwrap() as u64,
            LlGeometry::pairs_for(q.bytes as usize) as u64,
            lo,
            hi,
            1,
            pair_data([lo, hi], flag).unwrap(),
            u64::from(pair_data([lo, stale], flag).is_some()),
            u64::from(credit),
        ];
        assert_eq!(
            got, want,
            "step {:#x}, {} bytes, buffer {}, head {:#x}",
            q.step, q.bytes, q.buff, q.head
        );
        cleaned += usize::from(g.cleans(q.step));
    }
    // The edges reached the cleaning steps.
    assert!(
        cleaned > 10,
        "only {cleaned} cleaning steps among the queries"
    );
}
