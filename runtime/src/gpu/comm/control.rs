//! The control block: the device-side description of a communicator that every kernel
//! reads (`weft_dev_comm`, then each channel's `weft_dev_channel`, its `weft_channel_peer`
//! per rank and its ring), written once at init and passed to each launch by address.

use std::mem::size_of;
use std::sync::Arc;

use weft_core::abi::{ChannelPeer, DevChannel, DevComm, RingInfo, TreeInfo};
use weft_cuda::{Context, DeviceBuffer};
use zerocopy::IntoBytes;

use super::faults::Faults;
use super::windows::Windows;
use crate::gpu::GpuError;
use crate::gpu::layout::Edge;

/// Writes `DevComm`, the channels, their peers and rings of `rank` of `nranks` into device
/// memory, every connection at FIFO step `first_step` (0 on a fresh communicator).
pub(super) fn write_control(
    ctx: &Arc<Context>,
    windows: &Windows,
    faults: &Faults,
    rank: usize,
    nranks: usize,
    first_step: u64,
) -> Result<DeviceBuffer, GpuError> {
    let layout = windows.layout();
    let nch = layout.nchannels() as usize;
    let n = nranks;
    let channels_at = 64usize;
    let peers_at = channels_at + nch * size_of::<DevChannel>();
    let rings_at = peers_at + nch * n * size_of::<ChannelPeer>();
    let total = rings_at + nch * n * 4;
    let buf = DeviceBuffer::alloc(ctx, total)?;
    let base = buf.ptr();
    let mut bytes = vec![0u8; total];
    let r = rank as u32;
    let dev = DevComm {
        rank: rank as i32,
        nranks: n as i32,
        n_channels: nch as u32,
        reserved: 0,
        abort_flag: faults.abort_flag_ptr(),
        channels: base + channels_at as u64,
        timeout_ns: faults.timeout_ns(),
        fault: faults.records_ptr(),
    };
    bytes[..size_of::<DevComm>()].copy_from_slice(dev.as_bytes());
    for c in 0..nch {
        let c32 = c as u32;
        let ring = layout.ring(c32);
        let pos = ring.iter().position(|&x| x == r).unwrap_or(0);
        let ring_addr = rings_at + c * n * 4;
        for (i, rank) in ring.iter().enumerate() {
            let at = ring_addr + i * 4;
            bytes[at..at + 4].copy_from_slice(&(*rank as i32).to_ne_bytes());
        }
        let ch = DevChannel {
            peers: base + (peers_at + c * n * size_of::<ChannelPeer>()) as u64,
            ring: RingInfo {
                prev: layout.prev(c32, r) as i32,
                next: layout.next(c32, r) as i32,
                index: pos as i32,
                reserved: 0,
                user_ranks: base + ring_addr as u64,
            },
            tree: TreeInfo::default(),
            id: c32,
            npeers: n as u32,
        };
        let at = channels_at + c * size_of::<DevChannel>();
        bytes[at..at + size_of::<DevChannel>()].copy_from_slice(ch.as_bytes());
        for q in 0..n as u32 {
            let mut peer = ChannelPeer::default();
            if layout.connected(c32, r, q) {
                peer.send = windows.conn_info(Edge {
                    channel: c32,
                    from: r,
                    to: q,
                })?;
                peer.send.step = first_step;
            }
            if layout.connected(c32, q, r) {
                peer.recv = windows.conn_info(Edge {
                    channel: c32,
                    from: q,
                    to: r,
                })?;
                peer.recv.step = first_step;
            }
            let at = peers_at + (c * n + q as usize) * size_of::<ChannelPeer>();
            bytes[at..at + size_of::<ChannelPeer>()].copy_from_slice(peer.as_bytes());
        }
    }
    buf.copy_from_host(&bytes)?;
    Ok(buf)
}
