//! Where values come from: a lookup from a variable's name to its text, the process
//! environment or, in tests, a closure over a few pairs.
//!
//! A variable set to blanks counts as unset, as in NCCL, so that `NCCL_SOCKET_IFNAME=` in a
//! job script does not filter out every interface, and a blank `WEFT_` name does not hide
//! the `NCCL_` one behind it.

/// A variable's value by name; `None`: unset.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as a [`Lookup`]. A value that is not UTF-8 counts as unset.
pub fn process(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The first of `names` that `lookup` has set to something other than blanks, with its value.
pub fn first_set<'n>(lookup: Lookup<'_>, names: &[&'n str]) -> Option<(&'n str, String)> {
    names.iter().find_map(|&name| {
        lookup(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v))
    })
}

/// The value of [`first_set`], without its name.
pub fn first_value(lookup: Lookup<'_>, names: &[&str]) -> Option<String> {
    first_set(lookup, names).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_non_blank_name_wins() {
        let env = |k: &str| match k {
            "A" => Some(" \t".to_string()),
            "B" => Some("eth0".to_string()),
            "C" => Some("ib0".to_string()),
            _ => None,
        };
        assert_eq!(
            first_set(&env, &["A", "B", "C"]),
            Some(("B", "eth0".to_string()))
        );
        assert_eq!(first_value(&env, &["Z", "C", "B"]), Some("ib0".to_string()));
        assert_eq!(first_set(&env, &["A", "Z"]), None);
    }
}
