//! Total order (Corona §4.1): a principal's update is sequenced, made
//! durable, then fanned out to every member; checkpoints compact the log.

use super::*;

impl RelayCore {
    pub(super) fn on_send(
        &mut self,
        conn: ConnId,
        req: u32,
        group: String,
        msg_type: u16,
        sent_at_micros: u64,
        payload: Bytes,
    ) {
        if self
            .principal(conn, req, &group, &format!("send to {group:?}"))
            .is_none()
        {
            return;
        }
        let g = self.groups.get_mut(&group).expect("members are in groups");
        if g.broken {
            return self.error(
                conn,
                req,
                ErrorCode::STORAGE,
                "the group's log failed; restart the relay",
            );
        }
        //= Litiu & Prakash §2.1
        //# Messages from members of a group are multicast as point-to-point
        //# messages in the order of arrival to all the members, thus
        //# ensuring total order.
        let seq = g.next_seq;
        g.next_seq += 1;
        self.stats.updates += 1;
        self.storage_ops.push_back(StorageOp::Append {
            origin: Origin { conn, request: req },
            entry: Update {
                group,
                seq,
                sender: conn.client_id(),
                msg_type,
                sent_at_micros,
                payload,
            },
        });
    }

    pub(super) fn on_checkpoint(
        &mut self,
        conn: ConnId,
        req: u32,
        group: String,
        seq: u64,
        state: Bytes,
    ) {
        if self.principal(conn, req, &group, "checkpoint").is_none() {
            return;
        }
        let g = &self.groups[&group];
        if seq < g.checkpoint_seq || seq > g.committed {
            let msg = format!(
                "checkpoint at {seq} outside {}..={}",
                g.checkpoint_seq, g.committed
            );
            return self.error(conn, req, ErrorCode::BAD_CHECKPOINT, &msg);
        }
        self.storage_ops.push_back(StorageOp::Checkpoint {
            origin: Origin { conn, request: req },
            group,
            seq,
            state,
            compact: self.cfg.compact_on_checkpoint,
        });
    }

    pub(super) fn on_appended(
        &mut self,
        now: Instant,
        origin: Origin,
        entry: Update,
        result: Result<(), StorageError>,
    ) {
        if let Err(e) = result {
            self.stats.storage_errors += 1;
            if let Some(g) = self.groups.get_mut(&entry.group) {
                g.broken = true;
            }
            return self.error(
                origin.conn,
                origin.request,
                ErrorCode::STORAGE,
                &e.to_string(),
            );
        }
        self.commit(now, &entry);
        self.shed_observers(now, &entry.group);
        let group = entry.group;
        self.reply(
            origin.conn,
            origin.request,
            Frame::Sent {
                group,
                seq: entry.seq,
            },
        );
    }

    /// An update another relay node appended (cluster storage): fanned
    /// out like this node's own, in the one order of the log.
    pub(super) fn on_remote(&mut self, now: Instant, entry: Update) {
        self.commit(now, &entry);
        self.shed_observers(now, &entry.group);
    }

    /// Fans out an update that is durable in the log, whichever relay node
    /// appended it. Storage hands them over in sequence order; on one node
    /// that is the order `on_send` proposed, in a cluster the log's (an
    /// update may come back under a later number than proposed, after the
    /// other nodes' updates it lost the race to), so the core takes the
    /// log's number and keeps `next_seq` past it.
    fn commit(&mut self, now: Instant, entry: &Update) {
        let Some(g) = self.groups.get_mut(&entry.group) else {
            return;
        };
        if entry.seq <= g.committed {
            return; // handed over already
        }
        let gap = entry.seq > g.committed + 1;
        g.committed = entry.seq;
        g.next_seq = g.next_seq.max(entry.seq + 1);
        let id = g.id;
        if gap {
            // Another node's checkpoint compacted updates this node never
            // saw: whoever expects them live gets a fresh state transfer
            // (from that checkpoint, up to and including this update).
            let behind: Vec<ConnId> = g
                .members
                .iter()
                .filter(|(_, m)| m.role != Role::MembershipObserver && m.live_from < entry.seq)
                .map(|(&c, _)| c)
                .collect();
            for c in behind {
                self.start_resync(now, c, &entry.group, true);
            }
        }
        let Some(g) = self.groups.get(&entry.group) else {
            return;
        };
        let frame = frame::encode_update(0, entry);
        let recipients: Vec<ConnId> = g
            .members
            .iter()
            .filter(|(_, m)| {
                m.role != Role::MembershipObserver && entry.seq >= m.live_from && !m.following
            })
            .map(|(&c, _)| c)
            .collect();
        for c in recipients {
            self.push(now, c, id, frame.clone());
        }
    }
}
