//! What a rank says about where it runs, for `PeerInfo`: which host (ranks with the same
//! host hash may use SHM and P2P), which process (same pid hash: same address space), and
//! which /dev/shm (SHM needs the same one). NCCL's `getHostHash` / `getPidHash`.

use std::os::unix::fs::MetadataExt;

use weft_config::Settings;

/// FNV-1a, 64 bits: stable across builds and hosts (std's hasher is neither promised).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Same value for every process of one host (one kernel boot): [`host_hash_of`] the
/// process environment's `WEFT_HOSTID` / `NCCL_HOSTID`. Every caller in a process must
/// agree on it (it is also in [`pid_hash`]), so it is read here rather than passed down.
pub fn host_hash() -> u64 {
    host_hash_of(Settings::from_env_or_defaults().bootstrap.hostid.as_deref())
}

/// The host hash with host id `hostid` (`WEFT_HOSTID` / `NCCL_HOSTID`), which replaces the
/// host name and boot id, for containers that hide them or should be told apart.
pub fn host_hash_of(hostid: Option<&str>) -> u64 {
    if let Some(id) = hostid {
        return fnv1a(&[id.as_bytes()]);
    }
    let host = read_trimmed("/proc/sys/kernel/hostname");
    let boot = read_trimmed("/proc/sys/kernel/random/boot_id");
    fnv1a(&[host.as_bytes(), boot.as_bytes()])
}

/// Same value for every rank of one process: the host, the pid namespace and the pid.
pub fn pid_hash() -> u64 {
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let pid = std::process::id().to_be_bytes();
    fnv1a(&[&host_hash().to_be_bytes(), ns.as_bytes(), &pid])
}

/// The device number of /dev/shm (0 if it cannot be read): SHM between two ranks works only
/// when both see the same one.
pub fn shm_dev() -> u64 {
    std::fs::metadata("/dev/shm").map(|m| m.dev()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_distinguish() {
        assert_eq!(host_hash(), host_hash());
        assert_eq!(pid_hash(), pid_hash());
        assert_ne!(host_hash(), pid_hash());
        let hostid = |k: &'static str, v: &'static str| {
            let s = Settings::from_lookup(&|n| (n == k).then(|| v.to_string())).unwrap();
            host_hash_of(s.bootstrap.hostid.as_deref())
        };
        let a = hostid("NCCL_HOSTID", "node-a");
        let b = hostid("WEFT_HOSTID", "node-b");
        assert_ne!(a, b);
        assert_eq!(a, fnv1a(&[b"node-a"]));
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        // FNV-1a of nothing is its offset basis.
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
    }
}
