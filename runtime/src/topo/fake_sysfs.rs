//! A fake `/sys` + `/proc` tree in a temporary directory, for detection tests.

use super::sysfs::SysRoot;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug)]
pub struct FakeSys {
    pub dir: PathBuf,
}

impl Drop for FakeSys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn symlink(target: &Path, link: &Path) {
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

impl FakeSys {
    pub fn new(tag: &str) -> FakeSys {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weft-fake-sys-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sys/bus/pci/devices")).unwrap();
        std::fs::create_dir_all(dir.join("sys/bus/virtio")).unwrap();
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        FakeSys { dir }
    }

    pub fn root(&self) -> SysRoot {
        SysRoot::under(&self.dir)
    }

    pub fn file(&self, rel: &str, content: &str) {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    /// A PCI function at `sys/devices/<path>` (its last component is its bus id), with
    /// sysfs attribute files.
    pub fn pci(&self, path: &str, attrs: &[(&str, &str)]) {
        let dir = self.dir.join("sys/devices").join(path);
        std::fs::create_dir_all(&dir).unwrap();
        for (k, v) in attrs {
            std::fs::write(dir.join(k), format!("{v}\n")).unwrap();
        }
        symlink(&self.dir.join("sys/bus/pci"), &dir.join("subsystem"));
        let busid = dir.file_name().unwrap().to_owned();
        symlink(&dir, &self.dir.join("sys/bus/pci/devices").join(busid));
    }

    /// A non-PCI device (virtio) at `sys/devices/<path>`.
    pub fn virtio(&self, path: &str) {
        let dir = self.dir.join("sys/devices").join(path);
        std::fs::create_dir_all(&dir).unwrap();
        symlink(&self.dir.join("sys/bus/virtio"), &dir.join("subsystem"));
    }

    /// `sys/class/net/<name>` with attribute files, its `device` link pointing at
    /// `sys/devices/<device>` when given.
    pub fn net(&self, name: &str, device: Option<&str>, attrs: &[(&str, &str)]) {
        let dir = self.dir.join("sys/class/net").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (k, v) in attrs {
            std::fs::write(dir.join(k), format!("{v}\n")).unwrap();
        }
        if let Some(d) = device {
            symlink(&self.dir.join("sys/devices").join(d), &dir.join("device"));
        }
    }

    /// `sys/class/infiniband/<name>` on PCI device `sys/devices/<device>`, with ports
    /// `(number, state, rate, link_layer)`.
    pub fn ib(&self, name: &str, device: &str, guid: &str, ports: &[(u32, &str, &str, &str)]) {
        let dir = self.dir.join("sys/class/infiniband").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("sys_image_guid"), format!("{guid}\n")).unwrap();
        symlink(
            &self.dir.join("sys/devices").join(device),
            &dir.join("device"),
        );
        for (n, state, rate, ll) in ports {
            let p = dir.join(format!("ports/{n}"));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("state"), format!("{state}\n")).unwrap();
            std::fs::write(p.join("rate"), format!("{rate}\n")).unwrap();
            std::fs::write(p.join("link_layer"), format!("{ll}\n")).unwrap();
        }
    }

    pub fn cpuinfo(&self, vendor: &str, family: u32, model: u32) {
        let mut text = String::new();
        for cpu in 0..3 {
            text += &format!(
                "processor\t: {cpu}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: Fake CPU\n\n"
            );
        }
        self.file("proc/cpuinfo", &text);
    }
}
