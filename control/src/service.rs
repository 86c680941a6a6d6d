//! The control service's operations, one type per resource: [`Sessions`], [`SignIns`],
//! [`Shares`], [`Peers`], [`RecordingLinks`], [`Targets`], [`Users`] (locks, in
//! `locks.rs`), [`Workspaces`] (with shared workspaces and secrets) and [`Grants`]
//! (terminal grants, and what a front proxy's terminal check reads), each in its own
//! file beside the operations it holds, assembled as [`Control`] in [`handle`] on the
//! state they share (`core.rs`). HTTP lives in `api`; this module decides (through
//! `policy`), writes the store and drives Docker, with compensation on every failure
//! path.
//!
//! Each resource type is a cheap handle to clone: the reconciler, the culler and the
//! volume pass are given the ones they use, never the whole service.

mod clock;
mod core;
mod failpoint;
mod grant_handles;
mod grants;
mod handle;
mod in_flight;
mod locks;
mod names;
mod peers;
mod recording_links;
mod sessions;
mod shares;
mod sign_ins;
mod targets;
mod workspaces;

pub use clock::now;
pub use failpoint::failpoint;
pub use grants::Grants;
pub use handle::Control;
pub use locks::{may_lock, Users};
pub use names::{container_name, home_volume_name, SYSTEM};
pub use peers::Peers;
pub use recording_links::RecordingLinks;
pub use sessions::{Allows, CreateTiming, Sessions, Shown, Whose};
pub use shares::Shares;
pub use sign_ins::SignIns;
pub use targets::Targets;
pub use workspaces::Workspaces;

// The operations take and return the types below and these; `api` turns its bodies
// into them and them into its views.
pub use policy::reports::SignInReport;
pub use recording_links::NewRecordingLink;
pub use sessions::NewSession;
pub use shares::{ShareLink, ShareStatus};
pub use sign_ins::RevocationAsked;
pub use targets::TargetAccessPatch;

#[cfg(test)]
mod tests {
    use super::in_flight::InFlight;
    use super::*;
    use policy::{SessionId, Sub};

    #[test]
    fn a_second_mark_is_refused_and_leaves_the_first_in_place() {
        let set = InFlight::default();
        let id = SessionId::from_random([7; 10]);
        let first = set.mark(id).expect("first mark");
        assert!(set.mark(id).is_none(), "a second task is refused");
        assert!(set.contains(&id), "the refusal leaves the holder's mark");
        drop(first);
        assert!(!set.contains(&id));
        assert!(set.mark(id).is_some(), "free again once the holder is done");
    }

    #[test]
    fn home_volume_names_are_distinct_and_docker_safe() {
        let sub = |s: &str| Sub::parse(s).expect("valid sub");
        let a = home_volume_name("prod", &sub("a@b"));
        let b = home_volume_name("prod", &sub("a-at-b"));
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'));
        assert_ne!(
            home_volume_name("one", &sub("alice")),
            home_volume_name("two", &sub("alice"))
        );
    }
}
