use std::fmt;

/// One problem with the configuration, naming the key it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key path, e.g. `gateway.listen` or `profiles.default`.
    pub key: String,
    /// What is wrong and, where it helps, how to fix it.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Every problem found while loading, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Whether some error concerns `key` and its message contains `needle`.
    pub fn mentions(&self, key: &str, needle: &str) -> bool {
        self.0
            .iter()
            .any(|e| e.key == key && e.message.contains(needle))
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid configuration ({} problem{}):",
            self.0.len(),
            if self.0.len() == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}
