//! The plain rings, and NCCL's log line for a channel.
//!
//! Every channel gets the plain ring `0 1 .. n-1` (NCCL's result on a flat topology),
//! ordered so that ranks of one host are adjacent when the launcher numbered them that way.
//! [`super::channels`] uses it where the topology search does not apply (ranks without a
//! GPU, several hosts).

use super::peers::Peer;

/// One ring per channel, each a permutation of `0..peers.len()`.
pub fn rings(peers: &[Peer], nchannels: u32) -> Vec<Vec<u32>> {
    let n = u32::try_from(peers.len()).unwrap_or(u32::MAX);
    (0..nchannels).map(|_| (0..n).collect()).collect()
}

/// NCCL's `NCCL_DEBUG=INFO` line for a channel: `Channel 00/02 : 0 1 2 3`.
pub fn describe(channel: usize, nchannels: usize, ring: &[u32]) -> String {
    let ranks: Vec<String> = ring.iter().map(u32::to_string).collect();
    format!("Channel {channel:02}/{nchannels:02} : {}", ranks.join(" "))
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::comm::peers::Settings;

    #[test]
    fn plain_rings_are_permutations() {
        let s = Settings {
            transport: 0,
            pid: 1,
            nchannels: 3,
            step_bytes: 0,
            cpus: 2,
            protocols: weft_core::tune::ProtocolEnable::default().to_bits(),
            ll_lines: 0,
        };
        let peers: Vec<Peer> = (0..5).map(|r| Peer::local(r, None, s)).collect();
        let r = rings(&peers, 3);
        assert_eq!(r.len(), 3);
        for ring in &r {
            assert!(weft_core::sched::Ring::new(ring).is_ok());
        }
        assert_eq!(describe(1, 3, &r[1]), "Channel 01/03 : 0 1 2 3 4");
    }
}
