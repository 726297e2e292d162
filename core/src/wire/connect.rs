//! Connect infos of the P2P, SHM, NET and IB transports.
