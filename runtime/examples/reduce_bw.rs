//! Bandwidth of the CPU executor's reduction kernels on one core, next to `memcpy`.
//!
//! `cargo run --release -p weft-runtime --example reduce_bw [seconds-per-case]`
//!
//! For each case: `dst = a ⊕ b` over buffers of 64 MiB (memory-bound) and 256 KiB
//! (cache-resident, the size of a FIFO slice). `dst GB/s` counts bytes of `dst` written per
//! second; `traffic GB/s` counts every byte read or written (3x dst for a reduction, 2x for a
//! copy). The best of the timed repetitions is reported.

use std::hint::black_box;
use std::time::{Duration, Instant};

use weft_runtime::exec::reduce::{self, Dtype, Op};

/// xorshift64*, seeded: the data need only be plausible numbers, not secret.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A 64-byte-aligned buffer of `len` bytes at `offset` bytes past the alignment.
struct Buffer {
    storage: Vec<u64>,
    offset: usize,
    len: usize,
}

impl Buffer {
    fn new(len: usize, offset: usize) -> Self {
        let mut storage = vec![0u64; (len + offset) / 8 + 16];
        let shift = storage.as_mut_ptr().cast::<u8>().align_offset(64);
        Buffer {
            storage,
            offset: shift + offset,
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        let all: &[u8] = zerocopy::IntoBytes::as_bytes(self.storage.as_slice());
        &all[self.offset..self.offset + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let all: &mut [u8] = zerocopy::IntoBytes::as_mut_bytes(self.storage.as_mut_slice());
        &mut all[self.offset..self.offset + self.len]
    }

    /// Values in [-4, 4) with a few fraction bits, encoded as `dtype`.
    fn fill(&mut self, dtype: Dtype, rng: &mut Rng) {
        let size = dtype.size_of_elem();
        for chunk in self.bytes_mut().chunks_exact_mut(size) {
            let r = rng.next();
            let x = ((r >> 40) as f64 / (1u64 << 24) as f64) * 8.0 - 4.0;
            let bytes: [u8; 8] = match dtype {
                Dtype::Float32 => u64::from((x as f32).to_bits()).to_le_bytes(),
                Dtype::Float64 => x.to_bits().to_le_bytes(),
                Dtype::Float16 => u64::from(reduce::F16::from_f32(x as f32).0).to_le_bytes(),
                Dtype::Bfloat16 => u64::from(reduce::Bf16::from_f32(x as f32).0).to_le_bytes(),
                _ => r.to_le_bytes(),
            };
            chunk.copy_from_slice(&bytes[..size]);
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Copy,
    Reduce(Dtype, Op),
    ReduceInPlace(Dtype, Op),
}

struct Case {
    name: &'static str,
    kind: Kind,
    /// Byte offsets of (dst, a, b) past 64-byte alignment.
    offsets: [usize; 3],
}

fn time_case(case: &Case, bytes: usize, budget: Duration) -> Duration {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let dtype = match case.kind {
        Kind::Copy => Dtype::Uint8,
        Kind::Reduce(d, _) | Kind::ReduceInPlace(d, _) => d,
    };
    let mut dst = Buffer::new(bytes, case.offsets[0]);
    let mut a = Buffer::new(bytes, case.offsets[1]);
    let mut b = Buffer::new(bytes, case.offsets[2]);
    a.fill(dtype, &mut rng);
    b.fill(dtype, &mut rng);
    dst.fill(dtype, &mut rng);
    let run = |dst: &mut Buffer| {
        let result = match case.kind {
            Kind::Copy => reduce::copy(dst.bytes_mut(), a.bytes()),
            Kind::Reduce(d, op) => reduce::reduce(d, op, dst.bytes_mut(), a.bytes(), b.bytes()),
            // Sum into dst again and again: values grow, but stay finite for the repetitions
            // a budget allows (inputs are below 4 in magnitude).
            Kind::ReduceInPlace(d, op) => {
                reduce::reduce_in_place(d, op, dst.bytes_mut(), b.bytes())
            }
        };
        if let Err(e) = result {
            eprintln!("{}: {e}", case.name);
            std::process::exit(1);
        }
        black_box(dst.bytes().first());
    };
    run(&mut dst); // warm: page faults, caches
    let mut best = Duration::MAX;
    let start = Instant::now();
    let mut reps = 0;
    while reps < 3 || start.elapsed() < budget {
        let t = Instant::now();
        run(&mut dst);
        best = best.min(t.elapsed());
        reps += 1;
    }
    best
}

fn main() {
    let budget = std::env::args()
        .nth(1)
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_millis(400), Duration::from_secs_f64);
    let cases = [
        Case {
            name: "memcpy (copy)",
            kind: Kind::Copy,
            offsets: [0, 0, 0],
        },
        Case {
            name: "f32 sum",
            kind: Kind::Reduce(Dtype::Float32, Op::Sum),
            offsets: [0, 0, 0],
        },
        Case {
            name: "bf16 sum",
            kind: Kind::Reduce(Dtype::Bfloat16, Op::Sum),
            offsets: [0, 0, 0],
        },
        Case {
            name: "f16 sum",
            kind: Kind::Reduce(Dtype::Float16, Op::Sum),
            offsets: [0, 0, 0],
        },
        Case {
            name: "i8 sum",
            kind: Kind::Reduce(Dtype::Int8, Op::Sum),
            offsets: [0, 0, 0],
        },
        Case {
            name: "f64 max",
            kind: Kind::Reduce(Dtype::Float64, Op::Max),
            offsets: [0, 0, 0],
        },
        Case {
            name: "f32 sum in place",
            kind: Kind::ReduceInPlace(Dtype::Float32, Op::Sum),
            offsets: [0, 0, 0],
        },
        Case {
            name: "f32 sum, b at +1 B",
            kind: Kind::Reduce(Dtype::Float32, Op::Sum),
            offsets: [0, 0, 1],
        },
        Case {
            name: "bf16 sum, dst at +1 B",
            kind: Kind::Reduce(Dtype::Bfloat16, Op::Sum),
            offsets: [1, 0, 0],
        },
    ];
    #[cfg(target_arch = "x86_64")]
    println!(
        "# cpu: avx2={} f16c={} (kernels pick AVX2 / F16C at run time)",
        std::arch::is_x86_feature_detected!("avx2"),
        std::arch::is_x86_feature_detected!("f16c")
    );
    println!(
        "# one thread; best of repetitions over {:.2} s per case",
        budget.as_secs_f64()
    );
    println!(
        "{:<24} {:>9} {:>11} {:>12} {:>9}",
        "case", "size", "dst GB/s", "traffic GB/s", "us"
    );
    for bytes in [64 << 20, 256 << 10] {
        for case in &cases {
            let best = time_case(case, bytes, budget);
            let secs = best.as_secs_f64();
            let dst_gbs = bytes as f64 / secs / 1e9;
            let streams = if matches!(case.kind, Kind::Copy) {
                2.0
            } else {
                3.0
            };
            let size = if bytes >= 1 << 20 {
                format!("{} MiB", bytes >> 20)
            } else {
                format!("{} KiB", bytes >> 10)
            };
            println!(
                "{:<24} {:>9} {:>11.2} {:>12.2} {:>9.1}",
                case.name,
                size,
                dst_gbs,
                dst_gbs * streams,
                secs * 1e6
            );
        }
    }
}
