//! NCCL's graph XML (`NCCL_GRAPH_DUMP_FILE`, `NCCL_GRAPH_FILE`):
//! `<graphs version="1"><graph id= pattern= ...><channel><net dev=/><gpu dev=/>...`.
//!
//! Device numbers are written as NCCL 2.28 writes them (`%#lx`: `0`, `0x1`, ...) with the
//! host index in the top byte; GPUs are named by their NVML device number and mapped back to
//! ranks through the topology when read.

use super::{Channel, Graph, Pattern};
use crate::topo::model::{PathType, Topology};
use crate::topo::system_xml::{TopoXmlError, bad, req};
use crate::topo::xml::XmlNode;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

fn dev_id(host: usize, dev: i64) -> String {
    let id = (u64::try_from(host).unwrap_or(0) << 56)
        | (u64::try_from(dev).unwrap_or(0) & 0x00ff_ffff_ffff_ffff);
    if id == 0 {
        "0".to_string()
    } else {
        format!("{id:#x}")
    }
}

/// Path-type names accepted in `typeintra` / `typeinter` (NCCL's `kvDictLinkType`).
fn path_from_name(s: &str) -> Option<PathType> {
    PathType::ALL
        .iter()
        .copied()
        .find(|t| t.as_str() == s && *t <= PathType::Sys && *t != PathType::C2c)
}

/// The `<graphs>` tree NCCL would dump for these graphs over `topo`.
pub fn graphs_to_xml(graphs: &[&Graph], topo: &Topology) -> XmlNode {
    let mut root = XmlNode::new("graphs").with_attr("version", "1");
    for g in graphs {
        let mut x = XmlNode::new("graph")
            .with_attr("id", format!("{}", g.id))
            .with_attr("pattern", format!("{}", g.pattern as u32))
            .with_attr("crossnic", format!("{}", g.cross_nic))
            .with_attr("nchannels", format!("{}", g.nchannels()))
            .with_attr("speedintra", format!("{}", g.bw_intra))
            .with_attr("speedinter", format!("{}", g.bw_inter))
            .with_attr("latencyinter", format!("{}", g.latency_inter))
            .with_attr("typeintra", g.type_intra.as_str())
            .with_attr("typeinter", g.type_inter.as_str())
            .with_attr("samechannels", if g.same_channels { "1" } else { "0" });
        for c in &g.channels {
            let mut cx = XmlNode::new("channel");
            if let Some((a, _)) = c.nets {
                cx.children
                    .push(XmlNode::new("net").with_attr("dev", dev_id(0, i64::from(a))));
            }
            for &r in &c.gpus {
                let Some(node) = topo.gpu_by_rank(r).and_then(|i| topo.nodes.get(i)) else {
                    continue;
                };
                let dev = node.gpu().map_or(0, |x| i64::from(x.dev));
                cx.children
                    .push(XmlNode::new("gpu").with_attr("dev", dev_id(node.host, dev)));
            }
            if let Some((_, b)) = c.nets {
                cx.children
                    .push(XmlNode::new("net").with_attr("dev", dev_id(0, i64::from(b))));
            }
            x.children.push(cx);
        }
        root.children.push(x);
    }
    root
}

/// Writes graphs as NCCL's graph XML text.
pub fn write_graphs(graphs: &[&Graph], topo: &Topology) -> String {
    graphs_to_xml(graphs, topo).write()
}

fn int(x: &XmlNode, attr: &'static str) -> Result<i64, TopoXmlError> {
    let v = req(x, attr)?;
    let t = v.trim();
    let parsed = match t.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16).ok(),
        None => t.parse::<i64>().ok(),
    };
    parsed.ok_or_else(|| bad(x, attr, v))
}

fn float(x: &XmlNode, attr: &'static str) -> Result<f32, TopoXmlError> {
    let v = req(x, attr)?;
    v.trim().parse::<f32>().map_err(|_| bad(x, attr, v))
}

/// Reads a `<graphs>` file; GPU devices are mapped to ranks through `topo`.
pub fn parse_graphs(text: &str, topo: &Topology) -> Result<Vec<Graph>, TopoXmlError> {
    let root = XmlNode::parse(text)?;
    if root.name != "graphs" {
        return Err(TopoXmlError::WrongRoot { found: root.name });
    }
    let mut out = Vec::new();
    for gx in root.children_named("graph") {
        let id = u32::try_from(int(gx, "id")?)
            .map_err(|_| bad(gx, "id", req(gx, "id").unwrap_or("")))?;
        let pattern = Pattern::from_number(int(gx, "pattern")?)
            .ok_or_else(|| bad(gx, "pattern", req(gx, "pattern").unwrap_or("")))?;
        let ti = req(gx, "typeintra")?;
        let te = req(gx, "typeinter")?;
        let mut channels = Vec::new();
        for cx in gx.children_named("channel") {
            let mut gpus = Vec::new();
            let mut nets = Vec::new();
            for e in &cx.children {
                let dev = int(e, "dev")?;
                let host = usize::try_from(dev >> 56).unwrap_or(0);
                let local = dev & 0x00ff_ffff_ffff_ffff;
                match e.name.as_str() {
                    "gpu" => {
                        let rank = topo
                            .nodes
                            .iter()
                            .find(|n| {
                                n.host == host && n.gpu().is_some_and(|g| i64::from(g.dev) == local)
                            })
                            .and_then(|n| n.gpu())
                            .map(|g| g.rank)
                            .ok_or_else(|| bad(e, "dev", req(e, "dev").unwrap_or("")))?;
                        gpus.push(rank);
                    }
                    "net" => nets.push(
                        i32::try_from(local)
                            .map_err(|_| bad(e, "dev", req(e, "dev").unwrap_or("")))?,
                    ),
                    _ => {}
                }
            }
            let nets = match nets.as_slice() {
                [a, b] => Some((*a, *b)),
                _ => None,
            };
            channels.push(Channel { gpus, nets });
        }
        out.push(Graph {
            id,
            pattern,
            cross_nic: u8::try_from(int(gx, "crossnic")?).unwrap_or(0),
            bw_intra: float(gx, "speedintra")?,
            bw_inter: float(gx, "speedinter")?,
            latency_inter: if gx.attr("latencyinter").is_some() {
                float(gx, "latencyinter")?
            } else {
                0.0
            },
            type_intra: path_from_name(ti).ok_or_else(|| bad(gx, "typeintra", ti))?,
            type_inter: path_from_name(te).ok_or_else(|| bad(gx, "typeinter", te))?,
            same_channels: int(gx, "samechannels")? != 0,
            channels,
            fallback: None,
            budget_exhausted: false,
        });
    }
    Ok(out)
}
