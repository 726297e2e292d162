//! `weft topo` end to end: what the binary prints when a topology file is refused.

use std::path::PathBuf;
use std::process::Command;

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-topo-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `weft topo --file <path>`, which must fail; returns its stderr.
fn refused(path: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["topo", "--file"])
        .arg(path)
        .output()
        .expect("run weft topo");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn a_bad_file_is_named_once_after_one_prefix() {
    let dir = scratch("empty");
    let path = dir.join("empty.xml");
    std::fs::write(&path, "").unwrap();
    assert_eq!(
        refused(&path),
        format!(
            "weft topo: {}: XML error: no root element (empty file?)\n",
            path.display()
        )
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn ten_thousand_gpus_are_refused_at_the_limit() {
    let dir = scratch("huge");
    let path = dir.join("huge.xml");
    let mut text = String::from("<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\">\n");
    for i in 0..10_000 {
        text.push_str(&format!(
            "    <pci busid=\"{:04x}:{:02x}:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" \
             link_width=\"16\">\n      <gpu dev=\"{i}\" sm=\"90\" rank=\"{i}\" gdr=\"1\"/>\n    </pci>\n",
            i / 256,
            i % 256
        ));
    }
    text.push_str("  </cpu>\n</system>\n");
    std::fs::write(&path, text).unwrap();
    // Node 4097 is GPU 4095 (the CPU is node 1), whose <gpu> is on line 3 + 3 * 4095 + 1.
    assert_eq!(
        refused(&path),
        format!(
            "weft topo: {}: topology XML: <gpu> at line 12289, column 7 is device 4097, \
             more than the 4096 weft accepts\n",
            path.display()
        )
    );
    std::fs::remove_dir_all(dir).unwrap();
}
