//! The names termgate gives: who ends what it ends, session containers and home
//! volumes (the last two are policy's, which dockgate compares creates with), and the
//! characters no name a user gives may hold.

pub use policy::declared::{container_name, home_volume_name};

/// Who ends sessions the reconciler ends.
pub const SYSTEM: &str = "termgate";

/// A character a session name may not hold: control characters, and the invisible
/// format characters that make a name display as another one (bidirectional
/// overrides and isolates, zero-width characters, the byte-order mark, line and
/// paragraph separators).
pub(super) fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}')
}
