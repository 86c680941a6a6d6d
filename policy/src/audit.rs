//! The audit trail's wire records: one line as control keeps and serves it, and a
//! gateway's report of its own lines (terminal opened, refused, closed), which control
//! keeps beside its own so that one search finds both.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Entries one gateway report may carry.
pub const MAX_REPORT_ENTRIES: usize = 500;

/// One audit line as stored and served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEntry {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `INFO`, `WARN`, …
    pub level: String,
    /// The event's message ("session created").
    pub message: String,
    /// The event's fields as text (`session`, `sub`, `by`, `reason`, …).
    pub fields: BTreeMap<String, String>,
}

impl AuditEntry {
    /// Whether the entry is about `sub`: as the user acted for (`sub`), the actor
    /// (`by`) or the session's owner (`owner`).
    pub fn concerns_user(&self, sub: &str) -> bool {
        ["sub", "by", "owner"]
            .iter()
            .any(|k| self.fields.get(*k).is_some_and(|v| v == sub))
    }

    /// Whether the entry is about session `id`.
    pub fn concerns_session(&self, id: &str) -> bool {
        self.fields.get("session").is_some_and(|v| v == id)
    }
}

/// `POST /v1/audit`: audit lines of one gateway (`gateway` names the process, as in
/// its terminal reports), oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditReport {
    /// The reporting gateway process.
    pub gateway: String,
    /// At most [`MAX_REPORT_ENTRIES`].
    pub entries: Vec<AuditEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fields: &[(&str, &str)]) -> AuditEntry {
        AuditEntry {
            at_ms: 1,
            level: "INFO".into(),
            message: "terminal access".into(),
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn an_entry_concerns_its_user_actor_owner_and_session() {
        let e = entry(&[("sub", "bob"), ("by", "root"), ("session", "abc")]);
        assert!(e.concerns_user("bob") && e.concerns_user("root"));
        assert!(!e.concerns_user("alice"));
        assert!(e.concerns_session("abc") && !e.concerns_session("abd"));
        assert!(entry(&[("owner", "alice")]).concerns_user("alice"));
    }

    #[test]
    fn a_report_with_an_unknown_field_is_refused() {
        let ok = r#"{"gateway":"g1","entries":[{"at_ms":1,"level":"INFO","message":"m","fields":{"sub":"a"}}]}"#;
        let r: AuditReport = serde_json::from_str(ok).expect("valid report");
        assert_eq!(r.entries[0].fields["sub"], "a");
        let extra = r#"{"gateway":"g1","entries":[],"source":"x"}"#;
        assert!(serde_json::from_str::<AuditReport>(extra).is_err());
    }
}
