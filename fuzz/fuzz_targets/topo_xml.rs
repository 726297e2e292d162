//! Arbitrary bytes as NCCL topology XML: parsing never panics, and whatever loads writes
//! back to XML that loads to the same model and writes to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_core::topo::system_xml::{parse_topology, write_topology};
use weft_core::topo::xml::XmlNode;
use weft_core::topo::{compute_paths, PathOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = core::str::from_utf8(data) else { return };
    // The generic layer alone: a parsed tree writes to text that parses to the same tree.
    if let Ok(tree) = XmlNode::parse(text) {
        let written = tree.write();
        assert_eq!(XmlNode::parse(&written).as_ref(), Ok(&tree));
    }
    let Ok((topo, _warnings)) = parse_topology(text) else { return };
    let written = write_topology(&topo);
    let (again, _) = parse_topology(&written).expect("weft's own output loads");
    assert_eq!(topo, again);
    assert_eq!(written, write_topology(&again));
    // Paths on whatever graph came out must not panic either.
    let _ = compute_paths(&topo, &PathOptions::default());
});
