//! The kernels' ring program (cuda/ring_program.cuh) against weft_core::sched's, step for
//! step: the header is compiled for the host with the system C++ compiler and driven over
//! random calls; every step's primitive, offsets, length and post-op must be equal, and
//! its slices must cover the step with pieces of at most one FIFO slot, 16-byte aligned.

use std::io::Write;
use std::process::{Command, Stdio};

mod host_harness;

use weft_core::sched::{Collective, Primitive, ProgramSpec, Ring, RingProgram};

fn prim_number(p: Primitive) -> u32 {
    match p {
        Primitive::Send => 0,
        Primitive::Recv => 1,
        Primitive::CopySend => 2,
        Primitive::RecvCopySend => 3,
        Primitive::RecvReduceSend => 4,
        Primitive::RecvReduceCopy => 5,
        Primitive::RecvReduceCopySend => 6,
        Primitive::Copy => 7,
    }
}

/// weft_coll_kind's number and the root.
fn coll_number(c: Collective) -> (u32, u32) {
    match c {
        Collective::Broadcast { root } => (0, root),
        Collective::Reduce { root } => (1, root),
        Collective::AllGather => (2, 0),
        Collective::ReduceScatter => (3, 0),
        Collective::AllReduce => (4, 0),
    }
}

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

struct Case {
    spec: ProgramSpec,
    ring: Vec<u32>,
    rank: u32,
    channel: u32,
    max_slice: usize,
    min_slices: usize,
}

fn cases() -> Vec<Case> {
    let mut rng = Rng(0x5eed);
    let mut out = Vec::new();
    for i in 0..3000 {
        let nranks = 1 + rng.below(9) as usize;
        let esize = [1usize, 2, 4, 8][rng.below(4) as usize];
        let root = rng.below(nranks as u64) as u32;
        let collective = match i % 5 {
            0 => Collective::AllReduce,
            1 => Collective::ReduceScatter,
            2 => Collective::AllGather,
            3 => Collective::Broadcast { root },
            _ => Collective::Reduce { root },
        };
        let count = match rng.below(4) {
            0 => rng.below(40) as usize,
            1 => rng.below(5000) as usize,
            2 => rng.below(1 << 20) as usize,
            _ => (1 << rng.below(22)) as usize,
        };
        let chunk_elems = 1 + rng.below(1 << 16) as usize;
        let nchannels = 1 + rng.below(8) as u32;
        let mut ring: Vec<u32> = (0..nranks as u32).collect();
        for k in (1..ring.len()).rev() {
            ring.swap(k, rng.below(k as u64 + 1) as usize);
        }
        out.push(Case {
            spec: ProgramSpec {
                collective,
                count,
                elem_size: esize,
                chunk_elems,
                nchannels,
            },
            rank: rng.below(nranks as u64) as u32,
            channel: rng.below(u64::from(nchannels)) as u32,
            ring,
            max_slice: 16 + rng.below(1 << 14) as usize * 16,
            min_slices: [0, 1, 2, 3, 4, 8][rng.below(6) as usize],
        });
    }
    out
}

#[test]
fn kernel_ring_program_matches_core() {
    let harness = host_harness::build("ring_program");
    let cases = cases();
    let mut input = String::new();
    for c in &cases {
        let (coll, root) = coll_number(c.spec.collective);
        let ring: Vec<String> = c.ring.iter().map(u32::to_string).collect();
        input += &format!(
            "{coll} {root} {} {} {} {} {} {} {} {} {} {}\n",
            c.spec.count,
            c.spec.elem_size,
            c.spec.chunk_elems,
            c.spec.nchannels,
            c.channel,
            c.ring.len(),
            c.rank,
            c.max_slice,
            c.min_slices,
            ring.join(" ")
        );
    }
    let mut child = Command::new(&harness)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running the ring program harness");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&harness);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let mut lines = text.lines();
    let mut steps_checked = 0usize;
    for (i, c) in cases.iter().enumerate() {
        let program =
            RingProgram::new(&c.spec, Ring::new(&c.ring).unwrap(), c.rank, c.channel).unwrap();
        let align = 16 / c.spec.elem_size.min(16);
        let max_elems = c.max_slice / c.spec.elem_size / align * align;
        for step in program {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("case {i}: harness ended early"));
            let f: Vec<u64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
            let want = [
                u64::from(prim_number(step.prim)),
                u64::from(step.post_op),
                step.input_offset as u64,
                step.output_offset as u64,
                step.len as u64,
            ];
            assert_eq!(
                &f[..5],
                &want,
                "case {i} ({:?} rank {} channel {}): {step:?}",
                c.spec,
                c.rank,
                c.channel
            );
            let slices = &f[5..];
            assert_eq!(
                slices.iter().sum::<u64>(),
                step.len as u64,
                "case {i}: slices cover the step"
            );
            for (k, s) in slices.iter().enumerate() {
                assert!(
                    *s as usize <= max_elems.max(align),
                    "case {i}: slice {k} of {s} > {max_elems}"
                );
                if k + 1 < slices.len() {
                    assert!(
                        *s > 0 && (*s as usize * c.spec.elem_size).is_multiple_of(16),
                        "case {i}: slice {k} of {s} elements is not 16-byte aligned"
                    );
                }
            }
            assert!(
                step.len == 0 || slices.iter().all(|s| *s > 0),
                "case {i}: an empty slice in {slices:?}"
            );
            // A step that fits in fewer slices is cut into `min_slices` where the pieces
            // stay above 1/32 of a slot (the kernel's floor, rounded up to `align`; 0 for
            // slots under 32 elements, which it never cuts more finely) and their 16-byte
            // rounding leaves room for them.
            let floor = (max_elems / 32).next_multiple_of(align);
            let m = c.min_slices;
            if m > 1 && floor > 0 && step.len >= m * floor && step.len > m * m * align {
                assert!(
                    slices.len() >= m,
                    "case {i}: {} slices of a step of {} (max {max_elems}), want {m}",
                    slices.len(),
                    step.len
                );
            }
            if step.len <= max_elems && (m <= 1 || floor == 0 || step.len < 2 * floor) {
                assert_eq!(slices.len(), 1, "case {i}: a step that fits is one slice");
            }
            steps_checked += 1;
        }
        assert_eq!(
            lines.next(),
            Some("end"),
            "case {i}: the kernel's program has more steps"
        );
    }
    assert!(
        steps_checked > 10_000,
        "only {steps_checked} steps compared"
    );
}
