//! A small command-line reader: `--name value`, `--name=value`, `-x value`, flags.

/// The arguments not yet consumed.
#[derive(Debug, Clone)]
pub struct Args {
    items: Vec<String>,
}

impl Args {
    pub fn new(items: &[String]) -> Self {
        Args {
            items: items.to_vec(),
        }
    }

    /// Removes a flag that may take a number (`-c`, `-c 0`, `--check=1`): `None` if absent,
    /// `Some(None)` for the bare flag, `Some(Some(n))` with a number.
    pub fn optional_number(&mut self, names: &[&str]) -> Option<Option<u64>> {
        let mut found = None;
        let mut i = 0;
        while i < self.items.len() {
            let item = self.items[i].clone();
            if names.contains(&item.as_str()) {
                self.items.remove(i);
                let n = self.items.get(i).and_then(|v| v.parse::<u64>().ok());
                if n.is_some() {
                    self.items.remove(i);
                }
                found = Some(n);
                continue;
            }
            if let Some(v) = names
                .iter()
                .filter(|n| n.starts_with("--"))
                .find_map(|n| item.strip_prefix(&format!("{n}=")))
            {
                found = Some(v.parse::<u64>().ok());
                self.items.remove(i);
                continue;
            }
            i += 1;
        }
        found
    }

    /// Removes a bare flag (`--threads`); whether it was there.
    pub fn flag(&mut self, names: &[&str]) -> bool {
        let before = self.items.len();
        self.items.retain(|item| !names.contains(&item.as_str()));
        self.items.len() != before
    }

    /// Removes `name value` or `name=value` (the last one wins); `Err` if the value is
    /// missing.
    pub fn value(&mut self, names: &[&str]) -> Result<Option<String>, String> {
        let mut found = None;
        let mut i = 0;
        while i < self.items.len() {
            let item = self.items[i].clone();
            if let Some(name) = names.iter().find(|n| item == **n) {
                if i + 1 >= self.items.len() {
                    return Err(format!("{name} needs a value"));
                }
                found = Some(self.items.remove(i + 1));
                self.items.remove(i);
                continue;
            }
            if let Some(v) = names
                .iter()
                .filter(|n| n.starts_with("--"))
                .find_map(|n| item.strip_prefix(&format!("{n}=")))
            {
                found = Some(v.to_string());
                self.items.remove(i);
                continue;
            }
            i += 1;
        }
        Ok(found)
    }

    /// `value` parsed with `parse`, naming the option on failure.
    pub fn parsed<T>(
        &mut self,
        names: &[&str],
        what: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, String> {
        match self.value(names)? {
            None => Ok(None),
            Some(v) => parse(&v)
                .map(Some)
                .ok_or_else(|| format!("{} {v:?}: expected {what}", names[0])),
        }
    }

    /// What is left (positional arguments, or unknown options).
    pub fn rest(&self) -> &[String] {
        &self.items
    }
}

/// A byte size as nccl-tests reads it: a number with an optional K, M or G (powers of
/// 1024; a trailing B is allowed): `8`, `1K`, `64M`, `1.5G`.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let t = t.strip_suffix(['B', 'b']).unwrap_or(t);
    let (num, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], Some(c.to_ascii_uppercase())),
        _ => (t, None),
    };
    let mult: f64 = match unit {
        None => 1.0,
        Some('K') => 1024.0,
        Some('M') => 1024.0 * 1024.0,
        Some('G') => 1024.0 * 1024.0 * 1024.0,
        Some(_) => return None,
    };
    let v: f64 = num.trim().parse().ok()?;
    let bytes = v * mult;
    (bytes.is_finite() && (0.0..1e18).contains(&bytes)).then_some(bytes as u64)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8"), Some(8));
        assert_eq!(parse_size("1K"), Some(1024));
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("64MB"), Some(64 << 20));
        assert_eq!(parse_size("1.5k"), Some(1536));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("3Q"), None);
    }

    #[test]
    fn values_and_flags() {
        let mut a = Args::new(&[
            "all-reduce".into(),
            "-b".into(),
            "8".into(),
            "--iters=3".into(),
            "--check".into(),
        ]);
        assert_eq!(a.optional_number(&["--check"]), Some(None));
        assert_eq!(a.value(&["-b", "--minbytes"]).unwrap(), Some("8".into()));
        assert_eq!(a.value(&["-n", "--iters"]).unwrap(), Some("3".into()));
        assert_eq!(a.rest(), ["all-reduce".to_string()]);
        let mut b = Args::new(&["-e".into()]);
        assert!(b.value(&["-e"]).is_err());
        let mut c = Args::new(&["-c".into(), "0".into(), "reduce".into()]);
        assert_eq!(c.optional_number(&["-c", "--check"]), Some(Some(0)));
        assert_eq!(c.rest(), ["reduce".to_string()]);
        let mut d = Args::new(&["--check".into(), "reduce".into()]);
        assert_eq!(d.optional_number(&["-c", "--check"]), Some(None));
        assert_eq!(d.optional_number(&["-c", "--check"]), None);
    }
}
