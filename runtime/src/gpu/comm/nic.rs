//! Which network device carries a GPU's connections to other hosts: the one nearest the GPU
//! on the PCI tree, as NCCL's topology search places each channel's NIC (a GPU and the NIC
//! behind the same PCIe switch share their traffic's path only up to that switch); where
//! several are as near, the channels take them in turn. A machine with a NIC per GPU thus
//! sends each GPU's traffic through its own NIC instead of funnelling every rank's through
//! device 0.
//!
//! Nearness is the length of the common prefix of the two devices' sysfs paths
//! (`/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/...`): the same switch shares more
//! components than the same root complex, which shares more than another CPU's. A device
//! without a PCI path (loopback, a virtual interface, a plugin that says nothing) counts as
//! farthest; a GPU whose path is unknown keeps device 0.
//!
//! Each end chooses for itself, as NCCL does with `NCCL_CROSS_NIC=1`: on a fabric with a
//! subnet per rail, where GPU i's NIC only reaches the other hosts' NIC i, the hosts must be
//! built alike (GPU i behind NIC i everywhere), which rail-optimised clusters are; NCCL's
//! search pairing the same NIC at both ends of a channel is not done yet.

use std::path::Path;

/// The sysfs path of the GPU at PCI bus id `bus_id` (`0000:18:00.0`, as CUDA writes it,
/// any case), resolved through `/sys/bus/pci/devices`; `None` where sysfs does not have it.
pub(super) fn gpu_pci_path(bus_id: &str) -> Option<String> {
    let id = bus_id.trim().to_ascii_lowercase();
    if id.is_empty() {
        return None;
    }
    // CUDA may write an eight-digit domain; sysfs names it with four.
    let id = match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => id,
    };
    std::fs::canonicalize(Path::new("/sys/bus/pci/devices").join(id))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Path components two sysfs paths share from the start.
fn shared_components(a: &str, b: &str) -> usize {
    a.split('/')
        .filter(|s| !s.is_empty())
        .zip(b.split('/').filter(|s| !s.is_empty()))
        .take_while(|(x, y)| x == y)
        .count()
}

/// The device (index into `nics`, each its PCI path if known) for this GPU's connections on
/// `channel`: the nearest to `gpu` (see the module documentation), the channels taking the
/// equally near ones in turn. 0 where there are no devices.
pub(super) fn nic_for_channel(gpu: Option<&str>, nics: &[Option<String>], channel: u32) -> usize {
    // Where this GPU's place is not known, every rank keeps to device 0, as before: both
    // ends of a connection then use the same one, which a fabric with a subnet per rail
    // needs (choosing by channel on each end alone could pair two rails).
    let Some(gpu) = gpu else {
        return 0;
    };
    let nearness = |nic: &Option<String>| match (Some(gpu), nic) {
        (Some(g), Some(n)) => shared_components(g, n),
        _ => 0,
    };
    let best = nics.iter().map(nearness).max().unwrap_or(0);
    let nearest: Vec<usize> = (0..nics.len())
        .filter(|&d| nearness(&nics[d]) == best)
        .collect();
    match nearest.len() {
        0 => 0,
        n => nearest[channel as usize % n],
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// A DGX-like host: two CPUs, on each two PCIe switches, behind each switch two GPUs
    /// and one NIC.
    fn dgx() -> (Vec<String>, Vec<Option<String>>) {
        let mut gpus = Vec::new();
        let mut nics = Vec::new();
        for cpu in 0..2 {
            for sw in 0..2 {
                let switch =
                    format!("/sys/devices/pci0000:{cpu}0/0000:{cpu}0:0{sw}.0/0000:{cpu}{sw}:00.0");
                for g in 0..2 {
                    gpus.push(format!(
                        "{switch}/0000:{cpu}{sw}:1{g}.0/0000:{cpu}{sw}:2{g}:00.0"
                    ));
                }
                nics.push(Some(format!(
                    "{switch}/0000:{cpu}{sw}:18.0/0000:{cpu}{sw}:30:00.0"
                )));
            }
        }
        (gpus, nics)
    }

    #[test]
    fn each_gpu_takes_the_nic_behind_its_own_switch() {
        let (gpus, nics) = dgx();
        for (g, gpu) in gpus.iter().enumerate() {
            for channel in 0..4 {
                assert_eq!(
                    nic_for_channel(Some(gpu), &nics, channel),
                    g / 2,
                    "GPU {g} channel {channel}"
                );
            }
        }
    }

    #[test]
    fn equally_near_nics_are_taken_in_turn_by_channel() {
        let (gpus, mut nics) = dgx();
        // A second NIC behind GPU 0's switch.
        let twin = nics[0].as_ref().unwrap().replace(":18.0/", ":19.0/");
        nics.push(Some(twin));
        let picked: Vec<usize> = (0..4)
            .map(|c| nic_for_channel(Some(&gpus[0]), &nics, c))
            .collect();
        assert_eq!(picked, [0, 4, 0, 4]);
    }

    #[test]
    fn unknown_places_fall_back_sensibly_and_no_devices_means_zero() {
        // The GPU's place unknown: device 0, whatever the channel.
        let nics = vec![None, None, None];
        let picked: Vec<usize> = (0..4).map(|c| nic_for_channel(None, &nics, c)).collect();
        assert_eq!(picked, [0, 0, 0, 0]);
        // The GPU's known, no NIC's: every device as near, taken in turn.
        let (gpus, _) = dgx();
        let picked: Vec<usize> = (0..4)
            .map(|c| nic_for_channel(Some(&gpus[0]), &nics, c))
            .collect();
        assert_eq!(picked, [0, 1, 2, 0]);
        // A NIC with a path beats ones without (lo, virtual interfaces).
        let some = vec![
            None,
            Some("/sys/devices/pci0000:10/0000:10:00.0".to_string()),
        ];
        assert_eq!(nic_for_channel(Some(&gpus[0]), &some, 0), 1);
        assert_eq!(nic_for_channel(Some(&gpus[0]), &[], 3), 0);
    }

    #[test]
    fn cuda_bus_ids_are_found_under_sysfs_names() {
        // Whatever this machine has: a bus id that does not exist is None, never a panic.
        assert_eq!(gpu_pci_path("00000000:FF:1F.7"), None);
        assert_eq!(gpu_pci_path(""), None);
    }
}
