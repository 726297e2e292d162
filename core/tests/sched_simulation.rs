//! Runs every rank's ring programs over plain arrays, with one bounded FIFO per ring edge, and
//! checks every element of every rank's output against the collective computed directly.
//!
//! Each element carries five lanes, one per reduction operator (sum, prod, min, max, avg), so
//! one run checks all operators over the same data movement. Integers wrap as NCCL's do; float
//! data are multiples of 1/2 in [-2, 2], whose sums and products are exact in any order, so
//! results are compared exactly.

use std::collections::VecDeque;
use std::fmt::Debug;

use weft_core::sched::{
    ChunkSizing, Collective, Primitive, ProgramSpec, Ring, RingProgram, RingStep, STEPS,
    SchedError, channel_part,
};

const OPS: usize = 5;
const SUM: usize = 0;
const PROD: usize = 1;
const MIN: usize = 2;
const MAX: usize = 3;
const AVG: usize = 4;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut v: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            v.swap(i, self.below(i + 1));
        }
        v
    }
}

trait Scalar: Copy + PartialEq + Debug {
    const SIZE: usize;
    fn random(rng: &mut XorShift) -> Self;
    fn apply(op: usize, a: Self, b: Self) -> Self;
    fn divide(a: Self, n: usize) -> Self;
}

impl Scalar for i64 {
    const SIZE: usize = 8;
    fn random(rng: &mut XorShift) -> Self {
        rng.next() as i64
    }
    fn apply(op: usize, a: Self, b: Self) -> Self {
        match op {
            SUM | AVG => a.wrapping_add(b),
            PROD => a.wrapping_mul(b),
            MIN => a.min(b),
            MAX => a.max(b),
            _ => unreachable!("there are {OPS} lanes"),
        }
    }
    fn divide(a: Self, n: usize) -> Self {
        a / n as i64
    }
}

impl Scalar for u8 {
    const SIZE: usize = 1;
    fn random(rng: &mut XorShift) -> Self {
        rng.next() as u8
    }
    fn apply(op: usize, a: Self, b: Self) -> Self {
        match op {
            SUM | AVG => a.wrapping_add(b),
            PROD => a.wrapping_mul(b),
            MIN => a.min(b),
            MAX => a.max(b),
            _ => unreachable!("there are {OPS} lanes"),
        }
    }
    fn divide(a: Self, n: usize) -> Self {
        (a as usize / n) as u8
    }
}

impl Scalar for f32 {
    const SIZE: usize = 4;
    fn random(rng: &mut XorShift) -> Self {
        (rng.below(9) as f32 - 4.0) / 2.0
    }
    fn apply(op: usize, a: Self, b: Self) -> Self {
        match op {
            SUM | AVG => a + b,
            PROD => a * b,
            MIN => a.min(b),
            MAX => a.max(b),
            _ => unreachable!("there are {OPS} lanes"),
        }
    }
    fn divide(a: Self, n: usize) -> Self {
        a / n as f32
    }
}

/// One element: the same position under each of the five operators.
type Lanes<T> = [T; OPS];

fn random_lanes<T: Scalar>(rng: &mut XorShift) -> Lanes<T> {
    std::array::from_fn(|_| T::random(rng))
}

fn reduce<T: Scalar>(a: Lanes<T>, b: Lanes<T>) -> Lanes<T> {
    std::array::from_fn(|op| T::apply(op, a[op], b[op]))
}

fn post<T: Scalar>(mut a: Lanes<T>, nranks: usize) -> Lanes<T> {
    a[AVG] = T::divide(a[AVG], nranks);
    a
}

/// A message on a ring edge: which block it is, and its data.
struct Message<T> {
    block: usize,
    data: Vec<Lanes<T>>,
}

/// The offset that names a step's block the same way on sender and receiver.
fn block_of(step: &RingStep) -> usize {
    match step.prim {
        Primitive::CopySend | Primitive::RecvCopySend | Primitive::Recv => step.output_offset,
        _ => step.input_offset,
    }
}

struct Case {
    collective: Collective,
    nranks: usize,
    count: usize,
    nchannels: u32,
    chunk: usize,
}

impl Case {
    fn spec(&self, elem_size: usize) -> ProgramSpec {
        ProgramSpec {
            collective: self.collective,
            count: self.count,
            elem_size,
            chunk_elems: self.chunk,
            nchannels: self.nchannels,
        }
    }
}

/// Runs one channel: all ranks in lock-step, one step per rank per round when its inputs are
/// there and the FIFO to its next rank has room.
fn run_channel<T: Scalar>(
    case: &Case,
    ring: &[u32],
    channel: u32,
    memory: &mut [RankMemory<T>],
    writes: &mut [Vec<u32>],
) {
    let n = case.nranks;
    let spec = case.spec(T::SIZE);
    let ring_checked = Ring::new(ring).unwrap();
    let programs: Vec<RingProgram> = (0..n as u32)
        .map(|r| RingProgram::new(&spec, ring_checked, r, channel).unwrap())
        .collect();
    let steps: Vec<Vec<RingStep>> = programs.iter().map(|p| p.clone().collect()).collect();
    for (p, s) in programs.iter().zip(&steps) {
        assert_eq!(p.len(), s.len(), "ExactSizeIterator length");
        assert_eq!(p.send_count(), s.iter().filter(|s| s.prim.sends()).count());
        assert_eq!(
            p.recv_count(),
            s.iter().filter(|s| s.prim.receives()).count()
        );
        assert_eq!(p.prev(), ring[(p.position() + n - 1) % n]);
        assert_eq!(p.next(), ring[(p.position() + 1) % n]);
    }
    // Everything a rank sends, its next rank receives.
    for p in &programs {
        assert_eq!(p.send_count(), programs[p.next() as usize].recv_count());
    }

    // FIFO of rank r's incoming edge, bounded like the real one: STEPS slots, a chunk each
    // `chunk_steps` of them.
    let capacity = STEPS / case.collective.chunk_steps();
    let mut fifo: Vec<VecDeque<Message<T>>> = (0..n).map(|_| VecDeque::new()).collect();
    let mut cursor = vec![0usize; n];
    let input_len = case.collective.input_len(case.count, n).unwrap();
    let output_len = case.collective.output_len(case.count, n).unwrap();

    while cursor.iter().zip(&steps).any(|(c, s)| *c < s.len()) {
        let mut progressed = false;
        for r in 0..n {
            let Some(step) = steps[r].get(cursor[r]).copied() else {
                continue;
            };
            let next = programs[r].next() as usize;
            if step.prim.receives() && fifo[r].is_empty() {
                continue;
            }
            // A rank of a 1-rank ring never sends; on 2 ranks next == prev, still two FIFOs.
            if step.prim.sends() && fifo[next].len() >= capacity {
                continue;
            }
            let received = step.prim.receives().then(|| {
                let m = fifo[r].pop_front().unwrap();
                assert_eq!(
                    (m.block, m.data.len()),
                    (block_of(&step), step.len),
                    "rank {r} received another block than it expected at {step:?}"
                );
                m.data
            });
            let mem = &mut memory[r];
            let input = step.prim.reads_input().then(|| {
                assert!(step.input_offset + step.len <= input_len, "{step:?}");
                mem.data[mem.input_base + step.input_offset..][..step.len].to_vec()
            });
            let mut data: Vec<Lanes<T>> = match (received, input) {
                (Some(recv), Some(input)) => {
                    assert!(step.prim.reduces());
                    recv.iter()
                        .zip(&input)
                        .map(|(a, b)| reduce(*a, *b))
                        .collect()
                }
                (Some(recv), None) => recv,
                (None, Some(input)) => input,
                (None, None) => panic!("{step:?} has no source"),
            };
            if step.post_op {
                data.iter_mut().for_each(|v| *v = post(*v, n));
            }
            if step.prim.writes_output() {
                assert!(step.output_offset + step.len <= output_len, "{step:?}");
                mem.data[mem.output_base + step.output_offset..][..step.len].copy_from_slice(&data);
                writes[r][step.output_offset..][..step.len]
                    .iter_mut()
                    .for_each(|w| *w += 1);
            }
            if step.prim.sends() {
                fifo[next].push_back(Message {
                    block: block_of(&step),
                    data,
                });
            }
            cursor[r] += 1;
            progressed = true;
        }
        assert!(
            progressed,
            "deadlock: {} ranks, cursors {cursor:?}, ring {ring:?}",
            n
        );
    }
    assert!(fifo.iter().all(VecDeque::is_empty), "messages left over");
}

/// A rank's memory: input and output apart, or aliased the way NCCL's in-place calls alias
/// them (ReduceScatter's output is the rank's block of its input, AllGather's input the rank's
/// block of its output, the others one buffer).
struct RankMemory<T> {
    data: Vec<Lanes<T>>,
    input_base: usize,
    output_base: usize,
}

impl<T: Scalar> RankMemory<T> {
    fn new(
        case: &Case,
        rank: usize,
        input: &[Lanes<T>],
        in_place: bool,
        rng: &mut XorShift,
    ) -> Self {
        let n = case.nranks;
        let output_len = case.collective.output_len(case.count, n).unwrap();
        let garbage = |rng: &mut XorShift| -> Vec<Lanes<T>> {
            (0..output_len).map(|_| random_lanes(rng)).collect()
        };
        let own_block = rank * case.count;
        match (in_place, case.collective) {
            (false, _) => RankMemory {
                data: input.iter().copied().chain(garbage(rng)).collect(),
                input_base: 0,
                output_base: input.len(),
            },
            (true, Collective::ReduceScatter) => RankMemory {
                data: input.to_vec(),
                input_base: 0,
                output_base: own_block,
            },
            (true, Collective::AllGather) => {
                let mut data = garbage(rng);
                data[own_block..][..case.count].copy_from_slice(input);
                RankMemory {
                    data,
                    input_base: own_block,
                    output_base: 0,
                }
            }
            (true, _) => RankMemory {
                data: input.to_vec(),
                input_base: 0,
                output_base: 0,
            },
        }
    }

    fn output(&self, len: usize) -> Vec<Lanes<T>> {
        self.data[self.output_base..][..len].to_vec()
    }
}

fn check<T: Scalar>(case: &Case, in_place: bool, rng: &mut XorShift) {
    let n = case.nranks;
    let count = case.count;
    let input_len = case.collective.input_len(count, n).unwrap();
    let output_len = case.collective.output_len(count, n).unwrap();
    let inputs: Vec<Vec<Lanes<T>>> = (0..n)
        .map(|_| (0..input_len).map(|_| random_lanes(rng)).collect())
        .collect();
    let mut memory: Vec<RankMemory<T>> = inputs
        .iter()
        .enumerate()
        .map(|(r, input)| RankMemory::new(case, r, input, in_place, rng))
        .collect();
    let initial: Vec<Vec<Lanes<T>>> = memory.iter().map(|m| m.output(output_len)).collect();
    let mut writes = vec![vec![0u32; output_len]; n];

    // Channel parts tile the count.
    let mut next = 0;
    for c in 0..case.nchannels {
        let align = weft_core::sched::align_elems(T::SIZE).unwrap();
        let part = channel_part(count, align, case.nchannels, c).unwrap();
        assert_eq!(part.offset, next);
        next = part.end();
        let ring = if c == 0 {
            (0..n as u32).collect()
        } else {
            rng.permutation(n)
        };
        run_channel(case, &ring, c, &mut memory, &mut writes);
    }
    assert_eq!(next, count);

    // The reduction of every input position over all ranks, computed directly.
    let all: Vec<Lanes<T>> = (0..input_len)
        .map(|i| {
            post(
                (1..n).fold(inputs[0][i], |acc, r| reduce(acc, inputs[r][i])),
                n,
            )
        })
        .collect();
    let reduced = |offset: usize| all[offset];
    for r in 0..n {
        let expected: Vec<Lanes<T>> = match case.collective {
            Collective::AllReduce => (0..count).map(reduced).collect(),
            Collective::ReduceScatter => (0..count).map(|i| reduced(r * count + i)).collect(),
            Collective::AllGather => (0..n).flat_map(|q| inputs[q].iter().copied()).collect(),
            Collective::Broadcast { root } => inputs[root as usize].clone(),
            Collective::Reduce { root } if root as usize == r => (0..count).map(reduced).collect(),
            Collective::Reduce { .. } => initial[r].clone(),
        };
        let output = memory[r].output(output_len);
        assert_eq!(output.len(), expected.len());
        for (i, (got, want)) in output.iter().zip(&expected).enumerate() {
            assert_eq!(
                got, want,
                "{:?} n={n} count={count} channels={} chunk={} in_place={in_place}: \
                 rank {r} element {i}",
                case.collective, case.nchannels, case.chunk
            );
        }
        let once = !matches!(case.collective, Collective::Reduce { root } if root as usize != r);
        assert!(
            writes[r].iter().all(|&w| w == u32::from(once)),
            "{:?} n={n} count={count}: rank {r} writes {:?}",
            case.collective,
            writes[r]
        );
    }
}

fn collectives(n: usize) -> Vec<Collective> {
    let mut v = vec![
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
    ];
    for root in 0..n as u32 {
        v.push(Collective::Broadcast { root });
        v.push(Collective::Reduce { root });
    }
    v
}

/// Every rank count 1..=9, channel count 1..=4, collective and root, for each `(count, chunk)`.
fn sweep<T: Scalar>(seed: u64, cases: &[(usize, usize)]) {
    let mut rng = XorShift(seed);
    let mut in_place = false;
    for nranks in 1..=9 {
        for &(count, chunk) in cases {
            // The cost is per element (n^2 * count of them); the large counts try one channel
            // count, three channels, whose parts are uneven.
            let channels: &[u32] = if count > 1023 { &[3] } else { &[1, 2, 3, 4] };
            for &nchannels in channels {
                {
                    for collective in collectives(nranks) {
                        let case = Case {
                            collective,
                            nranks,
                            count,
                            nchannels,
                            chunk,
                        };
                        // Alternate out-of-place and in-place calls.
                        in_place = !in_place;
                        check::<T>(&case, in_place, &mut rng);
                    }
                }
            }
        }
    }
}

#[test]
fn every_collective_on_i64() {
    let cases = [
        (0, 1),
        (1, 1),
        (7, 1),
        (7, 3),
        (1023, 5),
        (1023, 1 << 20),
        (4099, 61),
        (4099, 1000),
    ];
    sweep::<i64>(0x9e37_79b9_7f4a_7c15, &cases);
}

#[test]
fn every_collective_on_f32() {
    let cases = [
        (0, 3),
        (1, 3),
        (7, 2),
        (1023, 37),
        (4099, 133),
        (4099, 4099),
    ];
    sweep::<f32>(0xdead_beef_cafe_f00d, &cases);
}

#[test]
fn every_collective_on_u8() {
    // 1-byte elements: 16-element alignment of parts and last chunks.
    let cases = [
        (0, 2),
        (1, 2),
        (7, 1),
        (31, 17),
        (1023, 17),
        (4099, 255),
        (4099, 1 << 16),
    ];
    sweep::<u8>(0x0bad_5eed_0000_0001, &cases);
}

#[test]
fn nccl_chunk_sizes_with_a_small_buffer() {
    // The specs ProgramSpec::new gives for a 16 KiB buffer and up to 4 channels, over counts
    // that need several loops (and, for the smaller ones, fewer channels).
    let mut rng = XorShift(77);
    for nranks in [2, 3, 5, 8] {
        for collective in collectives(nranks) {
            let sizing = ChunkSizing::new(collective, 16 << 10, 4).unwrap();
            let chunk = sizing.chunk_elems();
            for count in [chunk * nranks * 3 + 5, 2 * chunk - 3, 1000] {
                let spec = ProgramSpec::new(collective, count, 4, nranks, 4, 16 << 10).unwrap();
                assert_eq!(spec.chunk_elems, chunk);
                let case = Case {
                    collective,
                    nranks,
                    count,
                    nchannels: spec.nchannels,
                    chunk,
                };
                check::<f32>(&case, count % 2 == 0, &mut rng);
                // Every primitive's block fits in its FIFO slots, slice by slice.
                let ring: Vec<u32> = (0..nranks as u32).collect();
                let ring = Ring::new(&ring).unwrap();
                for c in 0..spec.nchannels {
                    for step in RingProgram::new(&spec, ring, 0, c).unwrap() {
                        let slices: Vec<(usize, usize)> = sizing.slices(step.len).collect();
                        assert_eq!(slices.len(), sizing.slices_per_chunk());
                        assert_eq!(slices.iter().map(|s| s.1).sum::<usize>(), step.len);
                        assert!(
                            slices
                                .iter()
                                .all(|s| s.1 <= sizing.step_elems() * sizing.slice_steps())
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let spec = ProgramSpec {
        collective: Collective::Broadcast { root: 3 },
        count: 10,
        elem_size: 4,
        chunk_elems: 8,
        nchannels: 2,
    };
    let ring = [0, 2, 1];
    let r = Ring::new(&ring).unwrap();
    assert_eq!(Ring::new(&[]).unwrap_err(), SchedError::NoRanks);
    assert_eq!(
        RingProgram::new(&spec, r, 0, 0).unwrap_err(),
        SchedError::RootOutOfRange { root: 3, nranks: 3 }
    );
    let ok = ProgramSpec {
        collective: Collective::AllReduce,
        ..spec
    };
    assert_eq!(
        RingProgram::new(&ok, r, 3, 0).unwrap_err(),
        SchedError::RankOutOfRange { rank: 3, nranks: 3 }
    );
    assert_eq!(
        RingProgram::new(&ok, r, 0, 2).unwrap_err(),
        SchedError::ChannelOutOfRange {
            channel: 2,
            nchannels: 2
        }
    );
    assert_eq!(
        RingProgram::new(
            &ProgramSpec {
                chunk_elems: 0,
                ..ok
            },
            r,
            0,
            0
        )
        .unwrap_err(),
        SchedError::ZeroChunk
    );
    assert_eq!(
        RingProgram::new(&ProgramSpec { elem_size: 0, ..ok }, r, 0, 0).unwrap_err(),
        SchedError::ZeroElementSize
    );
    assert_eq!(
        RingProgram::new(&ProgramSpec { nchannels: 0, ..ok }, r, 0, 0).unwrap_err(),
        SchedError::NoChannels
    );
    let rs = ProgramSpec {
        collective: Collective::ReduceScatter,
        count: usize::MAX / 2,
        ..ok
    };
    assert_eq!(
        RingProgram::new(&rs, r, 0, 0).unwrap_err(),
        SchedError::TooLarge {
            count: usize::MAX / 2,
            nranks: 3
        }
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// Random shapes beyond the sweep: up to 12 ranks, 6 channels, any chunk, random rings.
    #[test]
    fn random_shapes(
        kind in 0u8..5,
        nranks in 1usize..=12,
        root_pick: u32,
        count in 0usize..1500,
        chunk in 1usize..400,
        nchannels in 1u32..=6,
        seed in 1u64..,
        float: bool,
        in_place: bool,
    ) {
        let root = root_pick % nranks as u32;
        let collective = match kind {
            0 => Collective::AllReduce,
            1 => Collective::ReduceScatter,
            2 => Collective::AllGather,
            3 => Collective::Broadcast { root },
            _ => Collective::Reduce { root },
        };
        let case = Case { collective, nranks, count, nchannels, chunk };
        let mut rng = XorShift(seed);
        if float {
            check::<f32>(&case, in_place, &mut rng);
        } else {
            check::<i64>(&case, in_place, &mut rng);
        }
    }
}
