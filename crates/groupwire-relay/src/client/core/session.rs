//! What a client remembers across connections: the groups it is in, as
//! what, and the last update it handed over in each. After a reconnect
//! ([`ClientCore::reconnect`](super::ClientCore::reconnect)) the core
//! re-joins every group from that update (`Join::resume_after`), and drops
//! any delivery it already handed over: no gap, no duplicate.

use std::collections::{BTreeMap, HashMap};

use crate::client::{ClientError, ClientEvent};
use crate::frame::{ActivityMode, Frame, JoinInfo, MembershipChange, Role};

/// The groups a client is in, and the requests that change that.
#[derive(Debug, Default)]
pub(super) struct Session {
    groups: BTreeMap<String, Joined>,
    /// Requests in flight that change `groups`, by request id.
    asks: HashMap<u32, Ask>,
    /// Deliveries dropped because they were handed over before.
    pub(super) duplicates: u64,
}

/// One group the client is in.
#[derive(Debug)]
struct Joined {
    role: Role,
    mode: ActivityMode,
    watch: bool,
    /// The last sequence handed over (or the checkpoint's, after a state).
    last: u64,
}

/// A request whose reply changes the session.
#[derive(Debug)]
enum Ask {
    Join {
        group: String,
        role: Role,
        mode: ActivityMode,
        watch: bool,
    },
    /// The core's own re-join after a reconnect: its reply is not the
    /// application's.
    Rejoin {
        group: String,
    },
    Leave {
        group: String,
    },
    Role {
        group: String,
        role: Role,
    },
    Mode {
        group: String,
        mode: ActivityMode,
    },
}

/// What to do with a reply.
#[derive(Debug)]
pub(super) enum Answer {
    /// Hand it to the application.
    Report,
    /// The core's own request: hand these over instead (maybe none).
    Own(Vec<ClientEvent>),
}

impl Session {
    /// Notes request `id` if its reply changes the session.
    pub(super) fn asked(&mut self, id: u32, frame: &Frame) {
        let ask = match frame {
            Frame::Join {
                group,
                role,
                mode,
                watch_membership,
                ..
            } => Ask::Join {
                group: group.clone(),
                role: *role,
                mode: *mode,
                watch: *watch_membership,
            },
            Frame::Leave { group } => Ask::Leave {
                group: group.clone(),
            },
            Frame::ChangeRole { group, role } => Ask::Role {
                group: group.clone(),
                role: *role,
            },
            Frame::ChangeMode { group, mode } => Ask::Mode {
                group: group.clone(),
                mode: *mode,
            },
            _ => return,
        };
        self.asks.insert(id, ask);
    }

    /// The reply to request `id`.
    pub(super) fn replied(&mut self, id: u32, result: &Result<Frame, ClientError>) -> Answer {
        let Some(ask) = self.asks.remove(&id) else {
            return Answer::Report;
        };
        match (ask, result) {
            (
                Ask::Join {
                    group,
                    role,
                    mode,
                    watch,
                },
                Ok(Frame::Joined(j)),
            ) => {
                self.groups.insert(
                    group,
                    Joined {
                        role,
                        mode,
                        watch,
                        last: j.checkpoint_seq,
                    },
                );
            }
            (Ask::Rejoin { group }, result) => return Answer::Own(self.rejoined(group, result)),
            (Ask::Leave { group }, Ok(_)) => {
                self.groups.remove(&group);
            }
            (Ask::Role { group, role }, Ok(_)) => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.role = role;
                }
            }
            (Ask::Mode { group, mode }, Ok(_)) => {
                if let Some(g) = self.groups.get_mut(&group) {
                    g.mode = mode;
                }
            }
            _ => {}
        }
        Answer::Report
    }

    /// A delivery of `seq` in `group`: `true` to hand it over, `false` if
    /// it was handed over before (a resumed join on a node that had not yet
    /// followed the updates another node delivered sends them again).
    pub(super) fn deliver(&mut self, group: &str, seq: u64) -> bool {
        match self.groups.get_mut(group) {
            Some(g) if seq <= g.last => {
                self.duplicates += 1;
                false
            }
            Some(g) => {
                g.last = seq;
                true
            }
            None => true,
        }
    }

    /// A fresh state (after a resync or a role change): the updates after
    /// its checkpoint follow.
    pub(super) fn state(&mut self, j: &JoinInfo) {
        if let Some(g) = self.groups.get_mut(&j.group) {
            g.last = j.checkpoint_seq;
        }
    }

    /// The group was deleted, or this client evicted from it.
    pub(super) fn gone(&mut self, group: &str) {
        self.groups.remove(group);
    }

    /// A new connection: replies of the old one never come.
    pub(super) fn reconnecting(&mut self) {
        self.asks.clear();
    }

    /// The `Join`s that put this client back in its groups, each resuming
    /// after the last update handed over if the relay can (`resume`);
    /// `next_id` numbers them.
    pub(super) fn rejoins(
        &mut self,
        resume: bool,
        mut next_id: impl FnMut() -> u32,
    ) -> Vec<(u32, Frame)> {
        let mut out = Vec::with_capacity(self.groups.len());
        for (group, g) in &self.groups {
            let id = next_id();
            self.asks.insert(
                id,
                Ask::Rejoin {
                    group: group.clone(),
                },
            );
            out.push((
                id,
                Frame::Join {
                    group: group.clone(),
                    role: g.role,
                    mode: g.mode,
                    watch_membership: g.watch,
                    resume_after: resume.then_some(g.last),
                },
            ));
        }
        out
    }

    /// Whether `notice` removes this client (`me`) from its group.
    pub(super) fn evicted(&mut self, me: u64, change: MembershipChange, client: u64, group: &str) {
        if client == me && change == MembershipChange::Evicted {
            self.gone(group);
        }
    }

    /// The answer to a re-join: nothing to report if it resumed where the
    /// client stopped (`checkpoint_seq` at most the last update handed
    /// over: the later updates follow, those already handed over are
    /// dropped); a resync and the fresh state if the log no longer had
    /// them; the failure otherwise (the client is no longer a member).
    fn rejoined(&mut self, group: String, result: &Result<Frame, ClientError>) -> Vec<ClientEvent> {
        match result {
            Ok(Frame::Joined(j)) => {
                let Some(g) = self.groups.get_mut(&group) else {
                    return Vec::new();
                };
                if j.checkpoint_seq <= g.last {
                    return Vec::new();
                }
                let dropped = j.checkpoint_seq - g.last;
                g.last = j.checkpoint_seq;
                vec![
                    ClientEvent::Resync { group, dropped },
                    ClientEvent::State(j.clone()),
                ]
            }
            // `NO_SUCH_GROUP` too: deleted meanwhile, or (on a cluster)
            // created through another node so recently that this one does
            // not know it yet; the application knows which to expect.
            Err(e) => {
                self.groups.remove(&group);
                vec![ClientEvent::RejoinFailed {
                    group,
                    error: e.clone(),
                }]
            }
            Ok(other) => {
                self.groups.remove(&group);
                vec![ClientEvent::RejoinFailed {
                    group,
                    error: ClientError::Unexpected(format!("{:?}", other.kind())),
                }]
            }
        }
    }
}
