//! Bootstrap: unique id, root rendezvous, ring, all-gather, send/recv by tag, barrier.
