//! The names termgate gives: who ends what it ends, session containers and home
//! volumes (the last two are policy's, which dockgate compares creates with).

pub use policy::declared::{container_name, home_volume_name};

/// Who ends sessions the reconciler ends.
pub const SYSTEM: &str = "termgate";
