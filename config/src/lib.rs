//! termgate's one configuration, shared by the gateway and the control service.
//!
//! A TOML file, then `TERMGATE__<SECTION>__<KEY>` environment overrides (double
//! underscore between levels), then typed deserialisation and validation. Every
//! problem found is reported together, each naming its key. Secrets come only from
//! files and are redacted in `Debug`. Profiles are checked against `policy`'s sandbox
//! rules, so a profile that breaks a red line stops the process at start.

mod error;
mod load;
mod model;
pub mod pki;
mod secret;
pub mod telemetry;
mod validate;

pub use error::{ConfigError, ConfigErrors};
pub use load::{load, load_for, load_from_str, load_from_str_for, ENV_PREFIX};
pub use model::*;
pub use secret::{Secret, Secrets};
