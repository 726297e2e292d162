//! A generic XML tree, read and written the way NCCL's `xml.cc` does.
//!
//! NCCL's topology and graph files use a small subset of XML: elements with attributes and
//! children, no text content, optional comments. [`XmlNode::parse`] accepts any well-formed
//! document (the `xmlparser` crate tokenizes it) and keeps elements and attributes in order;
//! text, comments, declarations and processing instructions are skipped. [`XmlNode::write`]
//! produces NCCL's layout byte for byte: two-space indentation, `key="value"` attributes in
//! insertion order, `/>` for an element without children, a newline after every tag.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// Deepest element nesting accepted; NCCL's topology files nest about eight levels, and a
/// limit keeps a hostile file from exhausting memory through the stack of open elements.
pub const MAX_DEPTH: usize = 256;
/// Most elements accepted in one document (NCCL's graph files are capped at 65536 nodes);
/// bounds the memory a hostile file can make the parser and the model use.
pub const MAX_ELEMENTS: usize = 1 << 16;

/// One element: a name, attributes in file order, children in file order, and where it
/// started in the source (for error messages; ignored by `==`).
#[derive(Clone, Debug, Default)]
pub struct XmlNode {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<XmlNode>,
    pub pos: Option<TextPos>,
}

impl PartialEq for XmlNode {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.attrs == other.attrs && self.children == other.children
    }
}

impl Eq for XmlNode {}

/// A position in the source text, both 1-based (the first character is line 1, column 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPos {
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for TextPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// What went wrong while reading an XML document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XmlError {
    /// The text is not well-formed XML; `detail` is the tokenizer's description.
    Syntax { pos: TextPos, detail: String },
    /// `</name>` closes an element that is not the one open.
    MismatchedClose {
        pos: TextPos,
        expected: String,
        found: String,
    },
    /// The document ended with elements still open.
    Unclosed { name: String },
    /// No root element at all.
    Empty,
    /// More than one root element.
    TrailingRoot { pos: TextPos, name: String },
    /// Elements nest deeper than [`MAX_DEPTH`].
    TooDeep { pos: TextPos },
    /// More than [`MAX_ELEMENTS`] elements.
    TooManyElements { pos: TextPos },
}

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XmlError::Syntax { pos, detail } => write!(f, "XML syntax error at {pos}: {detail}"),
            XmlError::MismatchedClose {
                pos,
                expected,
                found,
            } => write!(
                f,
                "XML error at {pos}: </{found}> closes <{expected}>; check the nesting of the file"
            ),
            XmlError::Unclosed { name } => {
                write!(
                    f,
                    "XML error: the file ends while <{name}> is still open (truncated file?)"
                )
            }
            XmlError::Empty => write!(f, "XML error: no root element (empty file?)"),
            XmlError::TrailingRoot { pos, name } => {
                write!(
                    f,
                    "XML error at {pos}: second root element <{name}>; a file holds one root"
                )
            }
            XmlError::TooDeep { pos } => {
                write!(
                    f,
                    "XML error at {pos}: elements nest deeper than {MAX_DEPTH} levels"
                )
            }
            XmlError::TooManyElements { pos } => {
                write!(f, "XML error at {pos}: more than {MAX_ELEMENTS} elements")
            }
        }
    }
}

/// Line and column of byte offset `offset` in `text`.
pub fn text_pos(text: &str, offset: usize) -> TextPos {
    let mut line: u32 = 1;
    let mut column: u32 = 1;
    for (i, c) in text.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line = line.saturating_add(1);
            column = 1;
        } else {
            column = column.saturating_add(1);
        }
    }
    TextPos { line, column }
}

/// Line and column of increasing byte offsets, each byte of the text scanned once: taking
/// every element's position from the start of the text made parsing quadratic in the file's
/// size (13 s in a release build for the 2.4 MB file of 10,000 GPUs in issue 9).
struct TextCursor<'a> {
    text: &'a str,
    offset: usize,
    pos: TextPos,
}

impl<'a> TextCursor<'a> {
    fn new(text: &'a str) -> Self {
        TextCursor {
            text,
            offset: 0,
            pos: TextPos { line: 1, column: 1 },
        }
    }

    /// The position of `offset`, as [`text_pos`] gives it.
    fn at(&mut self, offset: usize) -> TextPos {
        let end = offset.min(self.text.len());
        // Offsets come in increasing order on character boundaries; anything else is
        // answered from the start.
        let Some(ahead) = self.text.get(self.offset..end) else {
            return text_pos(self.text, offset);
        };
        for c in ahead.chars() {
            if c == '\n' {
                self.pos.line = self.pos.line.saturating_add(1);
                self.pos.column = 1;
            } else {
                self.pos.column = self.pos.column.saturating_add(1);
            }
        }
        self.offset = end;
        self.pos
    }
}

/// Decodes the five predefined entities and numeric character references; anything else is
/// kept as written (NCCL itself does no decoding, and its values never contain `&`).
fn unescape(raw: &str) -> String {
    if !raw.contains('&') {
        return raw.to_string();
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        out.push_str(rest.get(..amp).unwrap_or(""));
        let tail = rest.get(amp..).unwrap_or("");
        let decoded = tail.find(';').and_then(|semi| {
            let name = tail.get(1..semi)?;
            let c = match name {
                "lt" => '<',
                "gt" => '>',
                "amp" => '&',
                "quot" => '"',
                "apos" => '\'',
                _ => {
                    let num = name.strip_prefix('#')?;
                    let code = match num.strip_prefix('x') {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => num.parse::<u32>().ok()?,
                    };
                    char::from_u32(code)?
                }
            };
            Some((c, semi))
        });
        match decoded {
            Some((c, semi)) => {
                out.push(c);
                rest = tail.get(semi.saturating_add(1)..).unwrap_or("");
            }
            None => {
                out.push('&');
                rest = tail.get(1..).unwrap_or("");
            }
        }
    }
    out.push_str(rest);
    out
}

fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
}

impl XmlNode {
    /// A new element with no attributes or children.
    pub fn new(name: &str) -> Self {
        XmlNode {
            name: name.to_string(),
            attrs: Vec::new(),
            children: Vec::new(),
            pos: None,
        }
    }

    /// The value of attribute `key`, if present (the first one when repeated).
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets attribute `key`, replacing its value when present, appending it otherwise.
    pub fn set_attr(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        match self.attrs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.attrs.push((key.to_string(), value)),
        }
    }

    /// Builder form of [`XmlNode::set_attr`].
    pub fn with_attr(mut self, key: &str, value: impl Into<String>) -> Self {
        self.set_attr(key, value);
        self
    }

    /// Children named `name`, in order.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a XmlNode> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// Parses a document and returns its root element.
    pub fn parse(text: &str) -> Result<XmlNode, XmlError> {
        use xmlparser::{ElementEnd, Token, Tokenizer};
        let mut stack: Vec<XmlNode> = Vec::new();
        let mut root: Option<XmlNode> = None;
        let mut elements = 0usize;
        let mut cursor = TextCursor::new(text);
        for token in Tokenizer::from(text) {
            let token = token.map_err(|e| {
                let p = e.pos();
                XmlError::Syntax {
                    pos: TextPos {
                        line: p.row,
                        column: p.col,
                    },
                    detail: e.to_string(),
                }
            })?;
            match token {
                Token::ElementStart {
                    prefix,
                    local,
                    span,
                } => {
                    let pos = cursor.at(span.start());
                    if root.is_some() {
                        return Err(XmlError::TrailingRoot {
                            pos,
                            name: local.as_str().to_string(),
                        });
                    }
                    if stack.len() >= MAX_DEPTH {
                        return Err(XmlError::TooDeep { pos });
                    }
                    elements = elements.saturating_add(1);
                    if elements > MAX_ELEMENTS {
                        return Err(XmlError::TooManyElements { pos });
                    }
                    let mut name = String::new();
                    if !prefix.as_str().is_empty() {
                        name.push_str(prefix.as_str());
                        name.push(':');
                    }
                    name.push_str(local.as_str());
                    stack.push(XmlNode {
                        name,
                        attrs: Vec::new(),
                        children: Vec::new(),
                        pos: Some(pos),
                    });
                }
                Token::Attribute {
                    prefix,
                    local,
                    value,
                    ..
                } => {
                    if let Some(node) = stack.last_mut() {
                        let mut key = String::new();
                        if !prefix.as_str().is_empty() {
                            key.push_str(prefix.as_str());
                            key.push(':');
                        }
                        key.push_str(local.as_str());
                        node.attrs.push((key, unescape(value.as_str())));
                    }
                }
                Token::ElementEnd { end, span } => {
                    let close = match end {
                        ElementEnd::Open => continue,
                        ElementEnd::Empty => None,
                        ElementEnd::Close(prefix, local) => {
                            let mut name = String::new();
                            if !prefix.as_str().is_empty() {
                                name.push_str(prefix.as_str());
                                name.push(':');
                            }
                            name.push_str(local.as_str());
                            Some(name)
                        }
                    };
                    let Some(node) = stack.pop() else {
                        return Err(XmlError::Syntax {
                            pos: cursor.at(span.start()),
                            detail: "closing tag without an open element".to_string(),
                        });
                    };
                    if let Some(found) = close {
                        if found != node.name {
                            return Err(XmlError::MismatchedClose {
                                pos: cursor.at(span.start()),
                                expected: node.name,
                                found,
                            });
                        }
                    }
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(node),
                        None => root = Some(node),
                    }
                }
                _ => {}
            }
        }
        if let Some(open) = stack.pop() {
            return Err(XmlError::Unclosed { name: open.name });
        }
        root.ok_or(XmlError::Empty)
    }

    /// Writes the tree the way NCCL's `ncclTopoDumpXmlRec` does.
    pub fn write(&self) -> String {
        let mut out = String::new();
        self.write_into(&mut out, 0);
        out
    }

    fn write_into(&self, out: &mut String, indent: usize) {
        for _ in 0..indent {
            out.push(' ');
        }
        out.push('<');
        out.push_str(&self.name);
        for (k, v) in &self.attrs {
            out.push(' ');
            out.push_str(k);
            out.push_str("=\"");
            escape_into(out, v);
            out.push('"');
        }
        if self.children.is_empty() {
            out.push_str("/>\n");
            return;
        }
        out.push_str(">\n");
        for child in &self.children {
            child.write_into(out, indent.saturating_add(2));
        }
        for _ in 0..indent {
            out.push(' ');
        }
        out.push_str("</");
        out.push_str(&self.name);
        out.push_str(">\n");
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use alloc::format;

    const SAMPLE: &str = "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\">\n    <pci busid=\"0000:17:00.0\"/>\n  </cpu>\n</system>\n";

    #[test]
    fn parse_then_write_is_byte_identical_to_nccl_layout() {
        let root = XmlNode::parse(SAMPLE).unwrap();
        assert_eq!(root.name, "system");
        assert_eq!(root.attr("version"), Some("1"));
        let cpu = &root.children[0];
        assert_eq!(
            cpu.attrs,
            [
                ("numaid".into(), "0".into()),
                ("arch".into(), "x86_64".into())
            ]
        );
        assert_eq!(cpu.children[0].attr("busid"), Some("0000:17:00.0"));
        assert_eq!(root.write(), SAMPLE);
    }

    #[test]
    fn comments_declaration_and_single_quotes_are_accepted() {
        let text = "<?xml version=\"1.0\"?>\n<!-- dumped -->\n<a k='v'><!-- x --><b/></a>";
        let root = XmlNode::parse(text).unwrap();
        assert_eq!(root.attr("k"), Some("v"));
        assert_eq!(root.children.len(), 1);
        assert_eq!(root.children[0].name, "b");
    }

    #[test]
    fn errors_carry_line_and_column() {
        let err = XmlNode::parse("<a>\n  <b>\n  </c>\n</a>").unwrap_err();
        assert_eq!(
            err,
            XmlError::MismatchedClose {
                pos: TextPos { line: 3, column: 3 },
                expected: "b".into(),
                found: "c".into()
            }
        );
        match XmlNode::parse("<a>\n <b x=1/></a>").unwrap_err() {
            XmlError::Syntax { pos, .. } => assert_eq!(pos.line, 2),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            XmlNode::parse("<a><b>").unwrap_err(),
            XmlError::Unclosed { name: "b".into() }
        );
        assert_eq!(XmlNode::parse("  ").unwrap_err(), XmlError::Empty);
        assert!(matches!(
            XmlNode::parse("<a/><b/>"),
            Err(XmlError::TrailingRoot { .. } | XmlError::Syntax { .. })
        ));
        let deep = format!(
            "{}{}",
            "<a>".repeat(MAX_DEPTH + 1),
            "</a>".repeat(MAX_DEPTH + 1)
        );
        assert!(matches!(
            XmlNode::parse(&deep),
            Err(XmlError::TooDeep { .. })
        ));
    }

    #[test]
    fn positions_of_late_elements_are_exact() {
        // Multi-byte characters count as one column; the cursor sees them between elements.
        let text = "<a>\n<!-- é€ -->\n  <b/>\n<c>\n</c><d k=\"ü\"/></a>";
        let root = XmlNode::parse(text).unwrap();
        let pos: Vec<_> = root.children.iter().map(|c| c.pos.unwrap()).collect();
        assert_eq!(
            pos,
            [
                TextPos { line: 3, column: 3 },
                TextPos { line: 4, column: 1 },
                TextPos { line: 5, column: 5 },
            ]
        );
        assert_eq!(
            XmlNode::parse("<a>\n<b>\n</b>\n é</c>").unwrap_err(),
            XmlError::MismatchedClose {
                pos: TextPos { line: 4, column: 3 },
                expected: "a".into(),
                found: "c".into()
            }
        );
    }

    #[test]
    fn special_characters_round_trip() {
        let node = XmlNode::new("n").with_attr("v", "a<b&\"c\">");
        let text = node.write();
        assert_eq!(text, "<n v=\"a&lt;b&amp;&quot;c&quot;&gt;\"/>\n");
        assert_eq!(XmlNode::parse(&text).unwrap(), node);
    }

    proptest::proptest! {
        #[test]
        fn random_trees_round_trip(names in proptest::collection::vec("[a-z][a-z0-9_]{0,6}", 1..7),
                                   values in proptest::collection::vec("[ -~]{0,9}", 1..7)) {
            // Build a chain with a sibling at each level, attributes from random printable text.
            let mut node = XmlNode::new(&names[0]);
            for (i, n) in names.iter().enumerate().skip(1) {
                let mut parent = XmlNode::new(n);
                parent.set_attr("k", values[i % values.len()].clone());
                parent.children.push(XmlNode::new("leaf").with_attr("x", values[0].clone()));
                parent.children.push(node);
                node = parent;
            }
            let text = node.write();
            proptest::prop_assert_eq!(XmlNode::parse(&text).unwrap(), node);
        }

        #[test]
        fn cursor_agrees_with_text_pos(text in "[a\n\u{e9}\u{20ac}]{0,40}",
                                       cuts in proptest::collection::vec(0usize..48, 0..8)) {
            // Increasing offsets on character boundaries, then any offset at all.
            let mut offsets: Vec<usize> = cuts
                .iter()
                .filter_map(|&c| text.char_indices().map(|(i, _)| i).nth(c))
                .collect();
            offsets.sort_unstable();
            offsets.extend(&cuts);
            let mut cursor = TextCursor::new(&text);
            for offset in offsets {
                proptest::prop_assert_eq!(cursor.at(offset), text_pos(&text, offset));
            }
        }
    }
}
