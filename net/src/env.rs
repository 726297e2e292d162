//! Reading settings from the environment, shared by every module that has them.
//!
//! weft accepts its own `WEFT_*` name and NCCL's `NCCL_*` name for most settings, the
//! `WEFT_*` one first. A variable set to blanks counts as unset, as in NCCL, so that
//! `NCCL_SOCKET_IFNAME=` in a job script does not filter out every interface.

/// The first of `names` that `env` has set to something other than blanks, with its value.
pub fn first_set<'n>(
    env: &dyn Fn(&str) -> Option<String>,
    names: &[&'n str],
) -> Option<(&'n str, String)> {
    names.iter().find_map(|&name| {
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v))
    })
}

/// The value of [`first_set`], without its name.
pub fn first_value(env: &dyn Fn(&str) -> Option<String>, names: &[&str]) -> Option<String> {
    first_set(env, names).map(|(_, v)| v)
}

/// The process environment as a lookup for [`first_set`].
pub fn process(name: &str) -> Option<String> {
    std::env::var(name).ok()
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
