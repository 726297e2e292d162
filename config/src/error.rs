//! What is wrong with the environment: each bad value with its variable and what is allowed.

use std::fmt;

/// One value a parser refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    /// The variable it was read from.
    pub name: &'static str,
    /// The value, blanks trimmed.
    pub value: String,
    /// What the variable takes.
    pub allowed: &'static str,
    /// The parser's own reason, when it has a more precise one than `allowed`.
    pub detail: Option<String>,
    /// Ignored (the variable kept its default) rather than an error.
    pub ignored: bool,
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}", self.name, self.value)?;
        if self.ignored {
            f.write_str(" ignored")?;
        }
        match &self.detail {
            Some(detail) => write!(f, ": {detail}"),
            None => write!(f, ": expected {}", self.allowed),
        }
    }
}

/// Why the settings could not be read: every refused value, in table order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub bad: Vec<BadValue>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.bad.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            b.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_variable_the_value_and_what_is_allowed() {
        let bad = BadValue {
            name: "NCCL_SOCKET_NTHREADS",
            value: "17".into(),
            allowed: "a number from 1 to 16",
            detail: None,
            ignored: false,
        };
        assert_eq!(
            bad.to_string(),
            "NCCL_SOCKET_NTHREADS=\"17\": expected a number from 1 to 16"
        );
        let ignored = BadValue {
            name: "NCCL_P2P_LEVEL",
            value: "FAST".into(),
            allowed: "LOC, NVL, PIX, PXB, PHB, SYS or 0..5",
            detail: None,
            ignored: true,
        };
        assert_eq!(
            ignored.to_string(),
            "NCCL_P2P_LEVEL=\"FAST\" ignored: expected LOC, NVL, PIX, PXB, PHB, SYS or 0..5"
        );
        let two = ConfigError {
            bad: vec![
                bad.clone(),
                BadValue {
                    detail: Some("unknown protocol".into()),
                    name: "NCCL_PROTO",
                    ..bad
                },
            ],
        };
        assert_eq!(
            two.to_string(),
            "NCCL_SOCKET_NTHREADS=\"17\": expected a number from 1 to 16; \
             NCCL_PROTO=\"17\": unknown protocol"
        );
    }
}
