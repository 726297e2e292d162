//! Where each connection's FIFO and counters live in the ranks' P2P windows.
//!
//! Every rank allocates one block of device memory, its *window*, and shares it with the
//! ranks of its host (an IPC handle, or the pointer itself within one process). A
//! connection `a -> b` on channel `c` keeps, as NCCL's P2P transport in write mode:
//!
//! - in the receiver `b`'s window, a *receive slot*: the tail counter (slots `a` posted), the
//!   tags of `a`'s point-to-point messages (one word per FIFO slot, [`TAGS_OFFSET`]), the
//!   FIFO of `STEPS` slots of `step_bytes`, which `a` writes over NVLink, and after it the LL
//!   buffer of `ll_bytes` (8 slots of flagged lines, no tail: `weft_core::fifo::ll`);
//! - in the sender `a`'s window, the head counter (slots `b` freed), which `b` writes, and
//!   [`EXCHANGE_OFFSET`] bytes after it the `weft_ptr_exchange` where `b` publishes its
//!   output buffer for direct writes (ranks of one process).
//!
//! In *read mode* (NCCL's P2P read, on by default where NCCL turns it on: NVLink between
//! compute capability 8.0 GPUs; `NCCL_P2P_READ_ENABLE`), the SIMPLE FIFO moves to the
//! sender's window, after its receive slots: the sender writes it locally and the receiver
//! reads it over NVLink. The tail, the LL buffer, the head and the exchange stay where they
//! are.
//!
//! So each side polls its own memory and writes the other's. Connections exist for each
//! channel's ring (`a`'s next rank) and, on the first [`Layout::p2p_channels`] channels,
//! between every pair of ranks (send/recv). A ring edge that is also a send/recv pair is
//! one connection: the two uses follow each other on the stream and carry their FIFO step
//! counters over. Every rank computes every rank's layout from the rings alone, so the
//! offsets never travel.

use std::mem::size_of;

use weft_core::abi::STEPS;

/// Bytes from a receive slot's start to its FIFO (the tail counter sits at 0).
pub const FIFO_OFFSET: usize = 4096;
/// Bytes from a receive slot's start to its point-to-point message tags (`ConnInfo::tags`:
/// `STEPS` words, after the tail's cache line and before the FIFO).
pub const TAGS_OFFSET: usize = 128;
const _: () = assert!(TAGS_OFFSET + STEPS as usize * 8 <= FIFO_OFFSET);
/// Bytes between two head counters (each on its own cache line and then some).
pub const HEAD_STRIDE: usize = 128;
/// Bytes from a head counter to its connection's `weft_ptr_exchange` (direct writes): the
/// receiver writes both, the sender polls both, so they share the sender's record.
pub const EXCHANGE_OFFSET: usize = 64;
const _: () = assert!(
    EXCHANGE_OFFSET >= 8
        && EXCHANGE_OFFSET + size_of::<weft_core::abi::PtrExchange>() <= HEAD_STRIDE
);

/// One direction of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    pub channel: u32,
    pub from: u32,
    pub to: u32,
}

/// The windows of a communicator's ranks.
#[derive(Debug, Clone)]
pub struct Layout {
    rings: Vec<Vec<u32>>,
    nranks: u32,
    p2p_channels: u32,
    step_bytes: usize,
    ll_bytes: usize,
    /// Read mode: SIMPLE FIFOs in the senders' windows.
    read: bool,
    /// Each rank's host (empty: all on one): a connection between two hosts is NET, with
    /// memory of its own, and takes no place in the windows.
    hosts: Vec<u64>,
}

/// The addresses one connection end uses, as offsets into two windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgePlace {
    /// Offset of the receive slot (tail at +0, tags at +[`TAGS_OFFSET`], FIFO at +[`FIFO_OFFSET`], LL buffer at
    /// +[`Layout::ll_offset`]) in the receiver's window.
    pub slot: usize,
    /// Offset of the head counter in the sender's window.
    pub head: usize,
    /// Offset of the SIMPLE FIFO: in the receiver's window (`slot + FIFO_OFFSET`), or in
    /// read mode in the sender's.
    pub fifo: usize,
}

impl Layout {
    /// `rings`: one ring per channel (each a permutation of `0..nranks`); `p2p_channels`:
    /// channels that connect every pair (at most the number of rings); `step_bytes`: a
    /// SIMPLE FIFO step; `ll_bytes`: each connection's LL buffer (0: none).
    pub fn new(
        rings: Vec<Vec<u32>>,
        nranks: u32,
        p2p_channels: u32,
        step_bytes: usize,
        ll_bytes: usize,
    ) -> Self {
        let p2p_channels = p2p_channels.min(u32::try_from(rings.len()).unwrap_or(u32::MAX));
        Layout {
            rings,
            nranks,
            p2p_channels,
            step_bytes,
            ll_bytes,
            read: false,
            hosts: Vec::new(),
        }
    }

    /// The same layout with each rank's host (`hosts[rank]`): connections between two
    /// hosts leave the windows (they are NET's, `gpu::comm::net`).
    pub fn with_hosts(self, hosts: Vec<u64>) -> Self {
        Layout { hosts, ..self }
    }

    /// Whether ranks `a` and `b` are on two hosts (a connection between them is NET's).
    pub fn between_hosts(&self, a: u32, b: u32) -> bool {
        self.hosts.get(a as usize) != self.hosts.get(b as usize)
    }

    /// Whether `from -> to` on `channel` is a connection whose memory is in the windows:
    /// every connection between ranks of one host.
    fn windowed(&self, channel: u32, from: u32, to: u32) -> bool {
        self.connected(channel, from, to) && !self.between_hosts(from, to)
    }

    /// The same layout in read mode (`true`: SIMPLE FIFOs in the senders' windows).
    pub fn with_read(self, read: bool) -> Self {
        Layout { read, ..self }
    }

    /// Whether SIMPLE FIFOs live in the senders' windows.
    pub fn read(&self) -> bool {
        self.read
    }

    /// Bytes of each connection's LL buffer (0: none).
    pub fn ll_bytes(&self) -> usize {
        self.ll_bytes
    }

    /// Bytes from a receive slot's start to its LL buffer: after the SIMPLE FIFO (none in
    /// read mode), on a page of its own (the kernels need 16-byte alignment for their line
    /// pairs).
    pub fn ll_offset(&self) -> usize {
        let fifo = if self.read { 0 } else { self.fifo_bytes() };
        (FIFO_OFFSET + fifo).next_multiple_of(FIFO_OFFSET)
    }

    pub fn nchannels(&self) -> u32 {
        u32::try_from(self.rings.len()).unwrap_or(u32::MAX)
    }

    pub fn p2p_channels(&self) -> u32 {
        self.p2p_channels
    }

    pub fn step_bytes(&self) -> usize {
        self.step_bytes
    }

    /// Bytes of one FIFO.
    pub fn fifo_bytes(&self) -> usize {
        self.step_bytes * STEPS as usize
    }

    /// The ring of `channel`.
    pub fn ring(&self, channel: u32) -> &[u32] {
        self.rings.get(channel as usize).map_or(&[], Vec::as_slice)
    }

    /// The rank after `rank` on `channel`'s ring.
    pub fn next(&self, channel: u32, rank: u32) -> u32 {
        let ring = self.ring(channel);
        let pos = ring.iter().position(|&r| r == rank).unwrap_or(0);
        ring.get((pos + 1) % ring.len().max(1))
            .copied()
            .unwrap_or(rank)
    }

    /// The rank before `rank` on `channel`'s ring.
    pub fn prev(&self, channel: u32, rank: u32) -> u32 {
        let ring = self.ring(channel);
        let n = ring.len().max(1);
        let pos = ring.iter().position(|&r| r == rank).unwrap_or(0);
        ring.get((pos + n - 1) % n).copied().unwrap_or(rank)
    }

    /// Whether `from -> to` on `channel` is a connection.
    pub fn connected(&self, channel: u32, from: u32, to: u32) -> bool {
        from != to
            && from < self.nranks
            && to < self.nranks
            && channel < self.nchannels()
            && (self.next(channel, from) == to || channel < self.p2p_channels)
    }

    /// Every connection into (`into`) or out of `rank`, in channel then peer order.
    fn edges(&self, rank: u32, into: bool) -> impl Iterator<Item = Edge> + '_ {
        (0..self.nchannels()).flat_map(move |channel| {
            (0..self.nranks)
                .map(move |peer| {
                    let (from, to) = if into { (peer, rank) } else { (rank, peer) };
                    Edge { channel, from, to }
                })
                .filter(|e| self.connected(e.channel, e.from, e.to))
        })
    }

    /// Every connection into `rank` that lies in the windows, in window order (channel,
    /// then sender).
    pub fn into_rank(&self, rank: u32) -> impl Iterator<Item = Edge> + '_ {
        self.edges(rank, true)
            .filter(|e| !self.between_hosts(e.from, e.to))
    }

    /// Every connection out of `rank` that lies in the windows, in window order (channel,
    /// then receiver).
    pub fn out_of_rank(&self, rank: u32) -> impl Iterator<Item = Edge> + '_ {
        self.edges(rank, false)
            .filter(|e| !self.between_hosts(e.from, e.to))
    }

    /// Every connection into (`into`) or out of `rank` that joins two hosts: NET's, with
    /// no place in the windows.
    pub fn net_edges(&self, rank: u32, into: bool) -> impl Iterator<Item = Edge> + '_ {
        self.edges(rank, into)
            .filter(|e| self.between_hosts(e.from, e.to))
    }

    fn slot_stride(&self) -> usize {
        (self.ll_offset() + self.ll_bytes).next_multiple_of(FIFO_OFFSET)
    }

    /// Where the receive slots of `rank`'s window start (after its head counters).
    fn slots_start(&self, rank: u32) -> usize {
        (self.out_of_rank(rank).count() * HEAD_STRIDE).next_multiple_of(FIFO_OFFSET)
    }

    /// Where the send FIFOs of `rank`'s window start (read mode), after its receive slots.
    fn sends_start(&self, rank: u32) -> usize {
        self.slots_start(rank) + self.into_rank(rank).count() * self.slot_stride()
    }

    /// Bytes between two send FIFOs (read mode).
    fn send_stride(&self) -> usize {
        self.fifo_bytes().next_multiple_of(FIFO_OFFSET)
    }

    /// Bytes of `rank`'s window.
    pub fn window_bytes(&self, rank: u32) -> usize {
        let sends = if self.read {
            self.out_of_rank(rank).count() * self.send_stride()
        } else {
            0
        };
        self.sends_start(rank) + sends
    }

    /// `rank`'s window as it would be after `step` steps through every connection with
    /// nothing in flight (tests: `GpuComm::restart_steps_for_test`): each head it holds and
    /// each tail at `step`, each LL line the word `ll_line` (a line flagged as written at
    /// `step - 1`), everything else zero.
    pub fn restart_image(&self, rank: u32, step: u64, ll_line: u64) -> Vec<u8> {
        let mut image = vec![0u8; self.window_bytes(rank)];
        let mut put = |at: usize, word: u64| {
            if let Some(b) = image.get_mut(at..at + 8) {
                b.copy_from_slice(&word.to_ne_bytes());
            }
        };
        for edge in self.out_of_rank(rank) {
            if let Some(place) = self.place(edge) {
                put(place.head, step);
            }
        }
        for edge in self.into_rank(rank) {
            if let Some(place) = self.place(edge) {
                put(place.slot, step);
                let ll = place.slot + self.ll_offset();
                for at in (ll..ll + self.ll_bytes).step_by(8) {
                    put(at, ll_line);
                }
            }
        }
        image
    }

    /// Where `edge` lives in the windows, or `None` if it is not a connection or joins two
    /// hosts.
    pub fn place(&self, edge: Edge) -> Option<EdgePlace> {
        if !self.windowed(edge.channel, edge.from, edge.to) {
            return None;
        }
        let slot_index = self.into_rank(edge.to).position(|e| e == edge)?;
        let out_index = self.out_of_rank(edge.from).position(|e| e == edge)?;
        let slot = self.slots_start(edge.to) + slot_index * self.slot_stride();
        Some(EdgePlace {
            slot,
            head: out_index * HEAD_STRIDE,
            fifo: if self.read {
                self.sends_start(edge.from) + out_index * self.send_stride()
            } else {
                slot + FIFO_OFFSET
            },
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn plain(nchannels: usize, nranks: u32) -> Vec<Vec<u32>> {
        (0..nchannels).map(|_| (0..nranks).collect()).collect()
    }

    #[test]
    fn two_ranks_have_one_connection_each_way_per_channel() {
        let l = Layout::new(plain(24, 2), 2, 4, 512 << 10, 512 << 10);
        assert_eq!(l.into_rank(0).count(), 24);
        assert_eq!(l.out_of_rank(1).count(), 24);
        // 24 heads fit in one 4 KiB page; 24 slots of 4 KiB + 4 MiB + 512 KiB of LL lines.
        let slot = 4096 + (4 << 20) + (512 << 10);
        assert_eq!(l.window_bytes(0), 4096 + 24 * slot);
        assert_eq!(l.ll_offset(), 4096 + (4 << 20));
        let p = l
            .place(Edge {
                channel: 3,
                from: 1,
                to: 0,
            })
            .unwrap();
        assert_eq!(
            p,
            EdgePlace {
                slot: 4096 + 3 * slot,
                head: 3 * HEAD_STRIDE,
                fifo: 4096 + 3 * slot + FIFO_OFFSET,
            }
        );
        assert!(
            l.place(Edge {
                channel: 0,
                from: 1,
                to: 1
            })
            .is_none()
        );
        assert!(
            l.place(Edge {
                channel: 24,
                from: 1,
                to: 0
            })
            .is_none()
        );
    }

    #[test]
    fn connections_between_hosts_take_no_place_in_the_windows() {
        // Ranks 0, 1 on one host and 2, 3 on another; one ring, every pair on channel 0.
        let one_host = Layout::new(plain(2, 4), 4, 1, 8192, 0);
        let two_hosts = one_host.clone().with_hosts(vec![7, 7, 9, 9]);
        for rank in 0..4u32 {
            assert!(two_hosts.window_bytes(rank) < one_host.window_bytes(rank));
            for edge in two_hosts.into_rank(rank).chain(two_hosts.out_of_rank(rank)) {
                assert_eq!(edge.from / 2, edge.to / 2, "{edge:?} crosses hosts");
                let place = two_hosts.place(edge).unwrap();
                assert!(place.slot < two_hosts.window_bytes(edge.to));
            }
        }
        // Still connections (NET carries them), but with no place here.
        let across = Edge {
            channel: 0,
            from: 1,
            to: 2,
        };
        assert!(two_hosts.connected(0, 1, 2));
        assert_eq!(two_hosts.place(across), None);
        assert!(two_hosts.net_edges(1, false).any(|e| e == across));
        assert!(one_host.net_edges(1, false).next().is_none());
        // Rank 0 on channel 0 receives from 1 only now (from 2 and 3 over NET); on channel
        // 1, whose ring edge into 0 comes from 3, from nobody.
        assert_eq!(two_hosts.into_rank(0).count(), 1);
    }

    #[test]
    fn places_never_overlap_and_fit_their_windows() {
        let rings: Vec<Vec<u32>> = vec![vec![0, 1, 2, 3], vec![0, 2, 1, 3], vec![3, 2, 1, 0]];
        // An LL buffer that is not a whole number of pages: the next slot still starts on one.
        let l = Layout::new(rings, 4, 2, 8192, 8 * 16 * 33);
        let used = l.ll_offset() + l.ll_bytes();
        assert!(l.ll_offset() >= FIFO_OFFSET + l.fifo_bytes());
        assert!(l.ll_offset().is_multiple_of(16));
        for rank in 0..4 {
            let mut slots: Vec<usize> = l
                .into_rank(rank)
                .map(|e| l.place(e).unwrap().slot)
                .collect();
            let mut heads: Vec<usize> = l
                .out_of_rank(rank)
                .map(|e| l.place(e).unwrap().head)
                .collect();
            slots.sort_unstable();
            heads.sort_unstable();
            for w in slots.windows(2) {
                assert!(w[1] - w[0] >= used, "slots overlap");
                assert!(w[1].is_multiple_of(FIFO_OFFSET));
            }
            for w in heads.windows(2) {
                assert!(w[1] - w[0] >= HEAD_STRIDE);
            }
            let last = *slots.last().unwrap();
            assert!(last + used <= l.window_bytes(rank));
            assert!(
                heads.last().unwrap() + HEAD_STRIDE <= slots[0],
                "heads run into the slots"
            );
        }
        // Channel 2 is ring-only: 3 -> 2 -> 1 -> 0 -> 3; channels 0 and 1 connect all pairs.
        assert!(l.connected(2, 3, 2) && !l.connected(2, 2, 3) && l.connected(2, 0, 3));
        assert!(l.connected(1, 3, 1) && l.connected(0, 2, 0));
        assert_eq!(l.into_rank(0).count(), 3 + 3 + 1);
    }

    #[test]
    fn read_mode_puts_each_fifo_in_its_senders_window() {
        let rings: Vec<Vec<u32>> = vec![vec![0, 1, 2, 3], vec![0, 2, 1, 3], vec![3, 2, 1, 0]];
        let write = Layout::new(rings.clone(), 4, 2, 8192, 8 * 16 * 33);
        let l = Layout::new(rings, 4, 2, 8192, 8 * 16 * 33).with_read(true);
        assert!(l.read() && !write.read());
        // The receive slots lose their FIFO: the LL buffer follows the tail's page.
        assert_eq!(l.ll_offset(), FIFO_OFFSET);
        for rank in 0..4 {
            // Ranges in `rank`'s window: heads, receive slots (tail and LL), send FIFOs.
            let mut used: Vec<(usize, usize)> = Vec::new();
            for e in l.out_of_rank(rank) {
                let p = l.place(e).unwrap();
                used.push((p.head, HEAD_STRIDE));
                used.push((p.fifo, l.fifo_bytes()));
                assert!(p.fifo.is_multiple_of(FIFO_OFFSET));
                // The receiver's slot is where write mode puts it, less the FIFO.
                assert_eq!(p.head, write.place(e).unwrap().head);
            }
            for e in l.into_rank(rank) {
                let p = l.place(e).unwrap();
                used.push((p.slot, l.ll_offset() + l.ll_bytes()));
            }
            used.sort_unstable();
            for w in used.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "rank {rank}: {w:?} overlap");
            }
            let (last, len) = *used.last().unwrap();
            assert!(last + len <= l.window_bytes(rank));
        }
    }

    #[test]
    fn a_restart_image_sets_counters_and_lines_and_nothing_else() {
        let rings = vec![vec![0, 1, 2], vec![2, 1, 0]];
        let l = Layout::new(rings, 3, 1, 4096, 8 * 16 * 4);
        let (step, line) = (0xffff_ffe0u64, 0xffff_ffe0_0000_0000u64);
        let word = |img: &[u8], at: usize| u64::from_ne_bytes(img[at..at + 8].try_into().unwrap());
        for rank in 0..3 {
            let img = l.restart_image(rank, step, line);
            assert_eq!(img.len(), l.window_bytes(rank));
            let mut expect = 0usize;
            for e in l.out_of_rank(rank) {
                assert_eq!(word(&img, l.place(e).unwrap().head), step);
                expect += 8;
            }
            for e in l.into_rank(rank) {
                let slot = l.place(e).unwrap().slot;
                assert_eq!(word(&img, slot), step);
                // The SIMPLE FIFO stays zero; every LL line is the word given.
                assert_eq!(word(&img, slot + FIFO_OFFSET), 0);
                for k in 0..l.ll_bytes() / 8 {
                    assert_eq!(word(&img, slot + l.ll_offset() + 8 * k), line);
                }
                expect += 8 + l.ll_bytes();
            }
            // Nothing else was written: the non-zero bytes are exactly those.
            let nonzero_words = img
                .chunks_exact(8)
                .filter(|w| w.iter().any(|b| *b != 0))
                .count();
            assert_eq!(nonzero_words * 8, expect, "rank {rank}");
        }
    }

    #[test]
    fn every_side_computes_the_same_place() {
        // The sender's and the receiver's view of an edge come from the same function of
        // the rings; both must agree whichever rank computes it.
        let rings = vec![vec![1, 0, 2], vec![2, 1, 0]];
        let a = Layout::new(rings.clone(), 3, 1, 4096, 512 << 10);
        let b = Layout::new(rings, 3, 1, 4096, 512 << 10);
        for from in 0..3 {
            for to in 0..3 {
                for channel in 0..2 {
                    let e = Edge { channel, from, to };
                    assert_eq!(a.place(e), b.place(e));
                    assert_eq!(a.place(e).is_some(), a.connected(channel, from, to));
                }
            }
        }
    }
}
