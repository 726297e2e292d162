//! The symbols a shared library exports, read from its ELF `.dynsym`: what the dynamic
//! linker (and `dlsym`) can find in it, as `nm -D --defined-only` lists them.
//!
//! A few lines of parsing instead of running `nm`, so that the export tests need no
//! binutils. 64-bit little-endian ELF only (x86-64 and aarch64, where weft runs).

use std::fmt;
use std::path::Path;

/// What a symbol names (`STT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolKind {
    /// `STT_FUNC`: code.
    Function,
    /// `STT_OBJECT`: data (`ncclNetPlugin_v11`).
    Object,
    /// Anything else (`STT_NOTYPE`, `STT_TLS`, `STT_GNU_IFUNC`, ...), with its number.
    Other(u8),
}

/// One defined dynamic symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicSymbol {
    pub name: String,
    pub kind: SymbolKind,
}

impl fmt::Display for DynamicSymbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            SymbolKind::Function => write!(f, "{} (function)", self.name),
            SymbolKind::Object => write!(f, "{} (data)", self.name),
            SymbolKind::Other(t) => write!(f, "{} (symbol type {t})", self.name),
        }
    }
}

const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;
const SYM_SIZE: usize = 24;

/// `len` bytes of `bytes` at `at`, or an error naming `what` was cut off.
fn field<'a>(bytes: &'a [u8], at: usize, len: usize, what: &str) -> Result<&'a [u8], String> {
    at.checked_add(len)
        .and_then(|end| bytes.get(at..end))
        .ok_or_else(|| format!("the file ends inside {what} (offset {at}, {len} bytes)"))
}

fn u16_at(bytes: &[u8], at: usize, what: &str) -> Result<u16, String> {
    let b = field(bytes, at, 2, what)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(bytes: &[u8], at: usize, what: &str) -> Result<u32, String> {
    let b = field(bytes, at, 4, what)?;
    Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

fn usize_at(bytes: &[u8], at: usize, what: &str) -> Result<usize, String> {
    let b = field(bytes, at, 8, what)?;
    let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
    usize::try_from(v).map_err(|_| format!("{what} = {v} does not fit in memory"))
}

/// The symbols `path` defines in its dynamic symbol table, in table order.
pub fn defined_dynamic_symbols(path: &Path) -> Result<Vec<DynamicSymbol>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    dynamic_symbols_of(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// As [`defined_dynamic_symbols`], from the file's bytes.
pub fn dynamic_symbols_of(bytes: &[u8]) -> Result<Vec<DynamicSymbol>, String> {
    if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF file".into());
    }
    // EI_CLASS 2: 64-bit; EI_DATA 1: little-endian.
    if bytes.get(4..6) != Some([2u8, 1].as_slice()) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let shoff = usize_at(bytes, 0x28, "e_shoff")?;
    let shentsize = usize::from(u16_at(bytes, 0x3a, "e_shentsize")?);
    let shnum = usize::from(u16_at(bytes, 0x3c, "e_shnum")?);
    let section = |i: usize| -> Result<&[u8], String> {
        let at = i
            .checked_mul(shentsize)
            .and_then(|o| o.checked_add(shoff))
            .ok_or("section header offset overflows")?;
        field(bytes, at, 64, "a section header")
    };
    let dynsym = (0..shnum)
        .map(section)
        .find(|s| {
            s.as_ref()
                .is_ok_and(|s| u32_at(s, 4, "sh_type") == Ok(SHT_DYNSYM))
        })
        .ok_or("no .dynsym section: not a shared library?")??;
    let (sym_off, sym_size) = (
        usize_at(dynsym, 24, "sh_offset")?,
        usize_at(dynsym, 32, "sh_size")?,
    );
    let strtab = section(usize::try_from(u32_at(dynsym, 40, "sh_link")?).unwrap_or(usize::MAX))?;
    let (str_off, str_size) = (
        usize_at(strtab, 24, "sh_offset")?,
        usize_at(strtab, 32, "sh_size")?,
    );
    let symbols = field(bytes, sym_off, sym_size, ".dynsym")?;
    let names = field(bytes, str_off, str_size, ".dynstr")?;
    let mut out = Vec::new();
    for sym in symbols.chunks_exact(SYM_SIZE) {
        let name_at = usize::try_from(u32_at(sym, 0, "st_name")?).unwrap_or(usize::MAX);
        let info = sym[4];
        if u16_at(sym, 6, "st_shndx")? == SHN_UNDEF {
            continue;
        }
        let name = names
            .get(name_at..)
            .and_then(|rest| rest.split(|&b| b == 0).next())
            .ok_or_else(|| format!("symbol name offset {name_at} is beyond .dynstr"))?;
        if name.is_empty() {
            continue;
        }
        out.push(DynamicSymbol {
            name: String::from_utf8_lossy(name).into_owned(),
            kind: match info & 0xf {
                1 => SymbolKind::Object,
                2 => SymbolKind::Function,
                other => SymbolKind::Other(other),
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn what_is_not_a_64_bit_elf_is_an_error() {
        assert_eq!(
            dynamic_symbols_of(b"#!/bin/sh\n"),
            Err("not an ELF file".into())
        );
        assert_eq!(
            dynamic_symbols_of(b"\x7fELF\x01\x01\x01"),
            Err("not a 64-bit little-endian ELF file".into())
        );
        let e = dynamic_symbols_of(b"\x7fELF\x02\x01\x01\x00").unwrap_err();
        assert!(e.starts_with("the file ends inside e_shoff"), "{e}");
    }

    #[test]
    fn this_test_binary_has_a_dynamic_symbol_table() {
        // A PIE executable has a .dynsym (of mostly undefined symbols): the walk must get
        // through it, whatever it finds defined.
        let exe = std::env::current_exe().expect("test executable path");
        let symbols = defined_dynamic_symbols(&exe).expect("parse the test binary");
        assert!(symbols.iter().all(|s| !s.name.is_empty()));
    }
}
