//! Priorities (Corona §4.1-4.3): a group's default priority, a member's
//! share of it, and the bounds a token may grant.

use crate::frame::{ActivityMode, Role};

/// Highest group default priority.
pub const MAX_GROUP_PRIORITY: u8 = 7;
/// Default group priority (the middle of the range).
pub const DEFAULT_GROUP_PRIORITY: u8 = 4;
/// Highest queue priority: group 7 + principal 2 + active 1.
pub const MAX_PRIORITY: u8 = MAX_GROUP_PRIORITY + 3;

//= Litiu & Prakash §4.2, §4.3
//# three roles [...] listed here in the decreasing order of their priority
//# [...] The client priority within a group is decreased when the client
//# indicates that its activity mode is changing from active to passive
/// A member's priority: principal 2, observer 1, membership observer 0,
/// plus 1 when active. The paper gives the order, not the numbers.
pub fn member_priority(role: Role, mode: ActivityMode) -> u8 {
    let r = match role {
        Role::Principal => 2,
        Role::Observer => 1,
        Role::MembershipObserver => 0,
    };
    r + u8::from(mode == ActivityMode::Active)
}
