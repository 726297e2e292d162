//! Seeded test messages: a receiver regenerates what the sender sent and compares every byte.
//! Included by path (`#[path = "common/random.rs"]`) from the tests that stream messages,
//! so that they need not build the multi-process harness in `common/mod.rs`.

/// xorshift64*, seeded.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Message `i` of stream `seed`: a size in 0..=max (mostly odd, sometimes 0 or max) and
/// random bytes.
pub fn message(seed: u64, i: u64, max: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ i.wrapping_mul(0xA24B_AED4_963E_E407));
    let len = match rng.next() % 8 {
        0 => max,
        1 => 0,
        _ => ((rng.next() % (max as u64 + 1)) as usize | 1).min(max),
    };
    let mut data = vec![0u8; len];
    for chunk in data.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes()[..chunk.len()]);
    }
    data
}
