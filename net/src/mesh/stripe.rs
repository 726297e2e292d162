//! How one message is cut over a connection's rails and put back together.
//!
//! Each rail is a connection of its own (verbs or sockets) that delivers its messages in
//! order, so message k of the mesh connection is message k on every rail: the sender sends
//! one part on each rail (possibly empty), the receiver posts one receive on each rail.
//! Neither end knows the other's number: the sender cuts its `size` bytes, the receiver its
//! buffer's capacity, both with [`part`]. Rail r's part starts at `r * unit(n)`, and `unit`
//! grows with `n`, so when the message is smaller than the buffer each part arrives at or
//! after the place it belongs; [`placement`] says which parts to move down (with
//! `ptr::copy`, in rail order, which never overwrites a part not yet moved). When the message
//! fills the buffer, or is small enough for rail 0 alone, nothing moves. So with several
//! rails, bytes of a receive buffer past the message may have been written (a part landed
//! there before it was moved); NCCL gives them no meaning.

/// Below this, a message travels on rail 0 alone (the others carry empty parts): splitting
/// small messages costs more in per-message work than it saves in wire time.
pub const MIN_PART: usize = 64 * 1024;
/// Parts start on this boundary (a page), so that no two rails write one page.
pub const ALIGN: usize = 4096;

/// The bytes each rail carries of an `n`-byte message (all but the last nonempty part).
pub fn unit(n: usize, rails: usize) -> usize {
    if rails <= 1 {
        return n.max(1);
    }
    n.div_ceil(rails).next_multiple_of(ALIGN).max(MIN_PART)
}

/// Rail `r`'s part of an `n`-byte message (or buffer): (offset, length).
pub fn part(n: usize, rails: usize, r: usize) -> (usize, usize) {
    let u = unit(n, rails);
    let off = r.saturating_mul(u).min(n);
    (off, u.min(n - off))
}

/// One move of a received part: `len` bytes from offset `from` down to offset `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub from: usize,
    pub to: usize,
    pub len: usize,
}

/// Where the parts received into a buffer of `cap` bytes belong, given the bytes each rail
/// received (`got[r]`): the message's size and the moves that put it in place, in the order
/// to apply them. An error says how the sizes disagree with any sender's cut (a peer that
/// does not cut as this build does).
pub fn placement(cap: usize, got: &[usize]) -> Result<(usize, Vec<Move>), String> {
    let rails = got.len();
    let size: usize = got.iter().sum();
    let mut moves = Vec::new();
    let mut at = 0;
    for (r, &len) in got.iter().enumerate() {
        let (from, room) = part(cap, rails, r);
        let (want_at, want_len) = part(size, rails, r);
        if len > room || at != want_at || len != want_len {
            return Err(format!(
                "rail {r} of {rails} received {len} bytes (its part of the buffer holds {room}), \
                 which no sender's cut of a {size}-byte message gives (rails received {got:?})"
            ));
        }
        if len > 0 && from != at {
            moves.push(Move { from, to: at, len });
        }
        at += len;
    }
    Ok((size, moves))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator (xorshift), so that failures reproduce.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn parts_cover_the_message_in_order() {
        for rails in 1..=4 {
            for n in [0, 1, 4095, 65_536, 65_537, 1 << 20, (16 << 20) - 5] {
                let mut at = 0;
                for r in 0..rails {
                    let (off, len) = part(n, rails, r);
                    assert_eq!(off, at.min(n), "n {n} rails {rails} r {r}");
                    at = off + len;
                }
                assert_eq!(at, n);
            }
        }
        assert_eq!(part(1000, 2, 0), (0, 1000));
        assert_eq!(part(1000, 2, 1), (1000, 0));
        assert_eq!(part(1 << 20, 2, 1), (512 << 10, 512 << 10));
    }

    /// Every (size, capacity, rails): the sender's parts, written where the receiver posted
    /// each rail's buffer and then moved by `placement`, give the message byte for byte.
    #[test]
    fn received_parts_reassemble_exactly() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..400 {
            let rails = 1 + (next(&mut seed) % 4) as usize;
            let cap = (next(&mut seed) % (3 << 20)) as usize;
            let size = if case % 5 == 0 {
                cap
            } else {
                (next(&mut seed) % (cap as u64 + 1)) as usize
            };
            let msg: Vec<u8> = (0..size).map(|i| (i * 7 + case) as u8).collect();
            let mut buf = vec![0xa5u8; cap];
            let mut got = vec![0; rails];
            for (r, got) in got.iter_mut().enumerate() {
                let (soff, slen) = part(size, rails, r);
                let (roff, room) = part(cap, rails, r);
                assert!(
                    slen <= room,
                    "rail {r}: {slen} > {room} (size {size} cap {cap})"
                );
                buf[roff..roff + slen].copy_from_slice(&msg[soff..soff + slen]);
                *got = slen;
            }
            let (total, moves) = placement(cap, &got).unwrap();
            assert_eq!(total, size);
            for m in moves {
                assert!(m.to < m.from);
                buf.copy_within(m.from..m.from + m.len, m.to);
            }
            assert!(
                buf[..size] == msg[..],
                "case {case}: size {size} cap {cap} rails {rails}"
            );
        }
    }

    #[test]
    fn a_message_larger_than_the_buffer_overflows_some_rail() {
        for rails in 1..=4 {
            for (size, cap) in [(10, 9), (1 << 20, (1 << 20) - 1), (3 << 20, 65_536)] {
                let over = (0..rails).any(|r| part(size, rails, r).1 > part(cap, rails, r).1);
                assert!(over, "size {size} cap {cap} rails {rails}");
            }
        }
    }

    #[test]
    fn sizes_no_sender_gives_are_refused() {
        // 2000 bytes are rail 0's alone: a part on rail 1 means another cut.
        let e = placement(1 << 20, &[1000, 1000]).unwrap_err();
        assert!(e.contains("rail 0 of 2 received 1000 bytes"), "{e}");
        assert_eq!(placement(1 << 20, &[2000, 0]).unwrap(), (2000, vec![]));
        assert!(
            placement(1 << 20, &[512 << 10, 512 << 10])
                .unwrap()
                .1
                .is_empty()
        );
        let (n, moves) = placement(1 << 20, &[256 << 10, 256 << 10]).unwrap();
        assert_eq!(n, 512 << 10);
        assert_eq!(
            moves,
            vec![Move {
                from: 512 << 10,
                to: 256 << 10,
                len: 256 << 10
            }]
        );
    }
}
