//! A hand-written SVG of a topology: the PCI tree of each CPU as boxes (CPU at the top,
//! PCIe switches below it, GPUs and NICs at the leaves), NVSwitches in a row underneath,
//! PCIe links as grey lines, NVLinks green, links between sockets dashed, and ring 0 of
//! the ring graph as red arrows from GPU to GPU.

use weft_core::search::Graph;
use weft_core::topo::Topology;
use weft_core::topo::model::{LinkType, NodeData, NodeKind, nvlink_bw};

const BOX_W: f32 = 168.0;
const BOX_H: f32 = 48.0;
const GAP_X: f32 = 24.0;
const GAP_Y: f32 = 70.0;
const MARGIN: f32 = 30.0;
const TITLE_H: f32 = 40.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Two lines of text for a node's box, and its fill colour.
fn describe(topo: &Topology, n: usize) -> (String, String, &'static str) {
    let Some(node) = topo.nodes.get(n) else {
        return (String::new(), String::new(), "#ffffff");
    };
    match &node.data {
        NodeData::Cpu(c) => (
            format!("CPU {} (host {})", c.numa_id, node.host),
            format!("{} {}", c.arch, c.vendor.as_deref().unwrap_or("")),
            "#dfe7f5",
        ),
        NodeData::Pci { pci, .. } => ("PCIe switch".to_string(), pci.busid.clone(), "#eeeeee"),
        NodeData::Gpu(g) => (
            format!("GPU{} (dev {}, sm{})", g.rank, g.dev, g.sm),
            g.pci.busid.clone(),
            "#d9f2d0",
        ),
        NodeData::Nic { pci } => {
            let nets: Vec<String> = topo
                .nodes
                .iter()
                .filter(|x| x.parent == Some(n))
                .filter_map(|x| x.net())
                .map(|x| {
                    format!(
                        "{} {}G",
                        x.name.as_deref().unwrap_or("net"),
                        x.speed_mbps / 1000
                    )
                })
                .collect();
            (
                format!("NIC {}", nets.join(", ")),
                pci.as_ref()
                    .map_or_else(|| "(not on PCI)".to_string(), |p| p.busid.clone()),
                "#fbe5c8",
            )
        }
        NodeData::Nvs => (
            "NVSwitch".to_string(),
            format!("host {}", node.host),
            "#c8ecd9",
        ),
        NodeData::Net(x) => (x.name.clone().unwrap_or_default(), String::new(), "#ffffff"),
    }
}

struct Layout {
    /// Centre of each drawn node's box, by node index.
    pos: Vec<Option<(f32, f32)>>,
    width: f32,
    height: f32,
}

fn children(topo: &Topology, n: usize) -> Vec<usize> {
    topo.nodes
        .iter()
        .enumerate()
        .filter(|(_, x)| x.parent == Some(n) && x.kind != NodeKind::Net)
        .map(|(i, _)| i)
        .collect()
}

/// Places the subtree of `n` with its leftmost leaf at slot `*next`; returns its x.
fn place(topo: &Topology, n: usize, depth: usize, next: &mut usize, l: &mut Layout) -> f32 {
    let kids = children(topo, n);
    let y = MARGIN + TITLE_H + depth as f32 * (BOX_H + GAP_Y) + BOX_H / 2.0;
    let x = if kids.is_empty() {
        let x = MARGIN + *next as f32 * (BOX_W + GAP_X) + BOX_W / 2.0;
        *next += 1;
        x
    } else {
        let xs: Vec<f32> = kids
            .iter()
            .map(|k| place(topo, *k, depth + 1, next, l))
            .collect();
        let lo = xs.iter().copied().fold(f32::MAX, f32::min);
        let hi = xs.iter().copied().fold(f32::MIN, f32::max);
        (lo + hi) / 2.0
    };
    if let Some(p) = l.pos.get_mut(n) {
        *p = Some((x, y));
    }
    l.height = l.height.max(y + BOX_H / 2.0);
    x
}

fn layout(topo: &Topology) -> Layout {
    let mut l = Layout {
        pos: vec![None; topo.nodes.len()],
        width: 0.0,
        height: 0.0,
    };
    let mut next = 0usize;
    for cpu in topo.of_kind(NodeKind::Cpu) {
        place(topo, cpu, 0, &mut next, &mut l);
    }
    // NVSwitches: one row under everything, centred under their host's GPUs.
    let nvs_y = l.height + GAP_Y + BOX_H / 2.0;
    for nvs in topo.of_kind(NodeKind::Nvs) {
        let host = topo.nodes.get(nvs).map_or(0, |x| x.host);
        let xs: Vec<f32> = topo
            .of_kind(NodeKind::Gpu)
            .into_iter()
            .filter(|g| topo.nodes.get(*g).is_some_and(|x| x.host == host))
            .filter_map(|g| l.pos.get(g).copied().flatten().map(|p| p.0))
            .collect();
        let x = if xs.is_empty() {
            MARGIN + next as f32 * (BOX_W + GAP_X) + BOX_W / 2.0
        } else {
            xs.iter().sum::<f32>() / xs.len() as f32
        };
        if let Some(p) = l.pos.get_mut(nvs) {
            *p = Some((x, nvs_y));
        }
        l.height = l.height.max(nvs_y + BOX_H / 2.0);
    }
    l.width = MARGIN * 2.0 + next.max(1) as f32 * (BOX_W + GAP_X);
    l.height += MARGIN + 40.0;
    l
}

/// Draws `topo` with ring 0 of `ring` (if any); `title` goes on top.
pub fn render(topo: &Topology, ring: Option<&Graph>, title: &str) -> String {
    let l = layout(topo);
    let pos = |n: usize| l.pos.get(n).copied().flatten();
    let mut s = String::new();
    s.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        w = l.width,
        h = l.height
    ));
    s.push_str("  <defs>\n    <marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">\n      <path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#d62728\"/>\n    </marker>\n  </defs>\n");
    s.push_str("  <rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");
    s.push_str(&format!(
        "  <text x=\"{MARGIN}\" y=\"{:.0}\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
        MARGIN + 12.0,
        escape(title)
    ));
    // PCIe tree edges.
    for (i, node) in topo.nodes.iter().enumerate() {
        let (Some(p), Some(a)) = (node.parent, pos(i)) else {
            continue;
        };
        if let Some(b) = pos(p) {
            s.push_str(&format!(
                "  <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888888\" stroke-width=\"2\"/>\n",
                a.0,
                a.1 - BOX_H / 2.0,
                b.0,
                b.1 + BOX_H / 2.0
            ));
        }
    }
    // Links between sockets, NVLinks.
    for (i, node) in topo.nodes.iter().enumerate() {
        for link in &node.links {
            let (Some(a), Some(b)) = (pos(i), pos(link.to)) else {
                continue;
            };
            let other = topo.nodes.get(link.to).map(|n| n.kind);
            match link.kind {
                LinkType::Sys if i < link.to => s.push_str(&format!(
                    "  <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#4060a0\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n",
                    a.0 + BOX_W / 2.0, a.1, b.0 - BOX_W / 2.0, b.1
                )),
                LinkType::Nvl if other == Some(NodeKind::Nvs) => s.push_str(&format!(
                    "  <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#2ca02c\" stroke-width=\"3\"/>\n",
                    a.0, a.1 + BOX_H / 2.0, b.0, b.1 - BOX_H / 2.0
                )),
                LinkType::Nvl if other == Some(NodeKind::Gpu) && i < link.to => {
                    let sm = node.gpu().map_or(0, |g| g.sm);
                    let count = (link.bw / nvlink_bw(sm)).round() as u32;
                    let mid = (a.0 + b.0) / 2.0;
                    let depth = 30.0 + (b.0 - a.0).abs() * 0.15;
                    let y = a.1.max(b.1) + BOX_H / 2.0;
                    s.push_str(&format!(
                        "  <path d=\"M {:.1} {y:.1} Q {mid:.1} {:.1} {:.1} {y:.1}\" fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"2\"/>\n  <text x=\"{mid:.1}\" y=\"{:.1}\" fill=\"#2ca02c\" text-anchor=\"middle\">NV{count}</text>\n",
                        a.0,
                        y + depth * 2.0,
                        b.0,
                        y + depth + 4.0
                    ));
                }
                _ => {}
            }
        }
    }
    // Boxes.
    for i in 0..topo.nodes.len() {
        let Some((x, y)) = pos(i) else { continue };
        let (l1, l2, fill) = describe(topo, i);
        s.push_str(&format!(
            "  <g>\n    <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"6\" fill=\"{fill}\" stroke=\"#333333\"/>\n    <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n    <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n  </g>\n",
            x - BOX_W / 2.0,
            y - BOX_H / 2.0,
            y - 4.0,
            escape(&l1),
            y + 14.0,
            escape(&l2)
        ));
    }
    // Ring 0, drawn over the boxes' tops.
    if let Some(ch) = ring.and_then(|g| g.channels.first()) {
        let n = ch.gpus.len();
        for k in 0..n {
            let (Some(&r0), Some(&r1)) = (ch.gpus.get(k), ch.gpus.get((k + 1) % n)) else {
                continue;
            };
            let (Some(a), Some(b)) = (
                topo.gpu_by_rank(r0).and_then(pos),
                topo.gpu_by_rank(r1).and_then(pos),
            ) else {
                continue;
            };
            if n < 2 || r0 == r1 {
                continue;
            }
            let mid = (a.0 + b.0) / 2.0;
            let top = a.1.min(b.1) - BOX_H / 2.0;
            // Forward hops arc low, the way back arcs higher, both below the row above
            // (a quadratic curve peaks at half its control point's height).
            let dir = if b.0 >= a.0 { 1.0 } else { -1.0 };
            let lift = if dir > 0.0 {
                (20.0 + (b.0 - a.0).abs() * 0.2).min(GAP_Y * 1.1)
            } else {
                GAP_Y * 1.7
            };
            s.push_str(&format!(
                "  <path d=\"M {:.1} {top:.1} Q {mid:.1} {:.1} {:.1} {top:.1}\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" marker-end=\"url(#arrow)\"/>\n",
                a.0 + dir * 20.0,
                top - lift,
                b.0 - dir * 20.0
            ));
        }
    }
    let legend_y = l.height - 16.0;
    for (i, (color, what)) in [
        ("#888888", "grey: PCIe"),
        ("#2ca02c", "green: NVLink"),
        ("#4060a0", "dashed: CPU interconnect"),
        ("#d62728", "red arrows: ring 0"),
    ]
    .iter()
    .enumerate()
    {
        s.push_str(&format!(
            "  <text x=\"{:.0}\" y=\"{legend_y:.0}\" fill=\"{color}\">{what}</text>\n",
            MARGIN + i as f32 * 190.0
        ));
    }
    s.push_str("</svg>\n");
    s
}
