//! The names termgate gives: who ends what it ends, session containers and home
//! volumes.

use policy::{SessionId, Sub};
use sha2::Digest;

/// Who ends sessions the reconciler ends.
pub const SYSTEM: &str = "termgate";

/// Name of a user's persistent home volume: stable, label-safe, collision-free.
pub fn home_volume_name(instance: &str, sub: &Sub) -> String {
    let digest = sha2::Sha256::digest(sub.as_str().as_bytes());
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("termgate-home-{instance}-{hex}")
}

/// Docker's name for a session's container.
pub fn container_name(id: &SessionId) -> String {
    format!("termgate-{id}")
}
