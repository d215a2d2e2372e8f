//! The settings every relay node on one NATS JetStream must share
//! (issue 17, "Bad input"): the record the first node stores, how a later
//! node compares its own settings with it, and the error that says what
//! differs and how to fix it.
//!
//! # What must agree, and what need not
//!
//! A setting must agree when a node acting on its own value would change
//! what the other nodes store or read, or what they promise their clients:
//!
//! - **replicas** (`--nats-replicas`): whichever node creates a group
//!   creates its log stream, so with different counts some groups would
//!   survive the loss of a NATS node and others not, by chance.
//! - **lock lease** (`--nats-lock-lease`): how long the lock of a node
//!   that died blocks the waiters on every other node; the `GW_LOCKS`
//!   bucket keeps its expiry markers for the lease of the node that
//!   created it.
//! - **largest frame** (`--max-frame`): an update (or a checkpoint) one
//!   node accepts is logged and must be delivered by every node, to
//!   clients that were told the smaller limit.
//! - **log compaction** ([`CoreConfig::compact_on_checkpoint`]): a
//!   checkpoint through one node purges the shared log, so a node that
//!   keeps the log would find it purged anyway.
//! - **whether clients need tokens** (`--auth-secret-file`): a node that
//!   takes every client opens every group to anyone. Only whether tokens
//!   are required is stored, never a key or a hash of one; which keys a
//!   node accepts is its own, so keys can be rotated one node at a time.
//!
//! Everything else is the node's own: listen addresses, TLS, the NATS
//! servers it connects to and its credentials there, timeouts, windows,
//! the priority scheduler and its queues, overload shedding.
//!
//! # The record
//!
//! The first node to start stores its settings with a KV `create` (so of
//! two nodes starting at once exactly one stores them) in bucket
//! [`BUCKET`], key [`KEY`], as JSON:
//!
//! ```json
//! {"version":1,"replicas":1,"lock_lease_secs":10,"max_frame":1048576,
//!  "compact_on_checkpoint":true,"tokens_required":false,
//!  "written_by":"groupwire-relay 0.1.0"}
//! ```
//!
//! `written_by` is for the error message only; every other field is
//! compared. A later groupwire that adds a setting that must agree writes
//! a higher `version`: a node that does not know it refuses to start
//! ([`ClusterSettingsError::NewerFormat`]) rather than check half of the
//! settings. Decoding never panics; bytes that are not such a record are
//! [`ClusterSettingsError::Unreadable`].
//!
//! [`CoreConfig::compact_on_checkpoint`]: crate::core::CoreConfig::compact_on_checkpoint

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;

use super::NatsConfig;
use crate::core::CoreConfig;

/// The KV bucket of the cluster's settings.
pub(crate) const BUCKET: &str = "GW_CLUSTER";
/// The key of the settings record in [`BUCKET`].
pub(crate) const KEY: &str = "settings";
/// The record format this groupwire writes and reads.
pub(crate) const FORMAT: u64 = 1;

/// A relay node's settings that every node of its cluster must share (see
/// the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClusterSettings {
    replicas: u64,
    /// Whole seconds, as the lease is written ([`lease_secs`]).
    lock_lease_secs: u64,
    max_frame: u64,
    compact_on_checkpoint: bool,
    tokens_required: bool,
}

impl ClusterSettings {
    /// The settings of a relay node storing through `nats` with `core`.
    pub(crate) fn new(nats: &NatsConfig, core: &CoreConfig) -> Self {
        Self {
            replicas: nats.replicas as u64,
            lock_lease_secs: lease_secs(nats.lock_lease),
            max_frame: core.max_frame as u64,
            compact_on_checkpoint: core.compact_on_checkpoint,
            tokens_required: core.auth_keys.is_some(),
        }
    }

    /// The record stored for these settings.
    pub(crate) fn encode(&self) -> Bytes {
        let record = Record {
            version: FORMAT,
            replicas: self.replicas,
            lock_lease_secs: self.lock_lease_secs,
            max_frame: self.max_frame,
            compact_on_checkpoint: self.compact_on_checkpoint,
            tokens_required: self.tokens_required,
            written_by: software(),
        };
        Bytes::from(serde_json::to_vec(&record).expect("a struct of numbers, bools and a string"))
    }

    /// Reads a stored record. Never panics, whatever `bytes` holds.
    pub(crate) fn decode(bytes: &[u8]) -> Result<(Self, String), ClusterSettingsError> {
        let unreadable = |reason: String| ClusterSettingsError::Unreadable { reason };
        let head: Head = serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
        if head.version > FORMAT {
            return Err(ClusterSettingsError::NewerFormat {
                found: head.version,
                known: FORMAT,
                ours: software(),
            });
        }
        if head.version == 0 {
            return Err(unreadable("format version 0".into()));
        }
        let r: Record = serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
        if r.replicas == 0 || r.lock_lease_secs == 0 || r.max_frame == 0 {
            return Err(unreadable(
                "replicas, lock lease and largest frame must be above 0".into(),
            ));
        }
        let settings = Self {
            replicas: r.replicas,
            lock_lease_secs: r.lock_lease_secs,
            max_frame: r.max_frame,
            compact_on_checkpoint: r.compact_on_checkpoint,
            tokens_required: r.tokens_required,
        };
        Ok((settings, r.written_by))
    }

    /// Compares this node's settings (`self`) with the stored record:
    /// `Ok` if they agree, else every setting that differs.
    pub(crate) fn check(&self, stored: &[u8]) -> Result<(), ClusterSettingsError> {
        let (cluster, written_by) = Self::decode(stored)?;
        let differs = self.differences(&cluster);
        if differs.is_empty() {
            Ok(())
        } else {
            Err(ClusterSettingsError::Differ {
                differs,
                written_by,
            })
        }
    }

    /// Every setting where `cluster` and this node differ, in the order
    /// of the module docs.
    fn differences(&self, cluster: &Self) -> Vec<SettingDiff> {
        let mut out = Vec::new();
        let mut differ = |setting, option, cluster: String, node: String, fix: String| {
            if cluster != node {
                out.push(SettingDiff {
                    setting,
                    option,
                    cluster,
                    node,
                    fix,
                });
            }
        };
        differ(
            "replicas",
            "--nats-replicas",
            cluster.replicas.to_string(),
            self.replicas.to_string(),
            format!("with --nats-replicas {}", cluster.replicas),
        );
        differ(
            "lock lease",
            "--nats-lock-lease",
            format!("{}s", cluster.lock_lease_secs),
            format!("{}s", self.lock_lease_secs),
            format!("with --nats-lock-lease {}s", cluster.lock_lease_secs),
        );
        differ(
            "largest frame",
            "--max-frame",
            cluster.max_frame.to_string(),
            self.max_frame.to_string(),
            format!("with --max-frame {}", cluster.max_frame),
        );
        let compacts = |c: bool| if c { "on" } else { "off" }.to_owned();
        differ(
            "log compaction on checkpoints",
            "CoreConfig::compact_on_checkpoint",
            compacts(cluster.compact_on_checkpoint),
            compacts(self.compact_on_checkpoint),
            format!(
                "with CoreConfig::compact_on_checkpoint = {}",
                cluster.compact_on_checkpoint
            ),
        );
        let tokens = |t: bool| if t { "required" } else { "not required" }.to_owned();
        differ(
            "client tokens",
            "--auth-secret-file",
            tokens(cluster.tokens_required),
            tokens(self.tokens_required),
            if cluster.tokens_required {
                "with --auth-secret-file (the token keys of the other nodes)".into()
            } else {
                "without --auth-secret-file".into()
            },
        );
        out
    }
}

/// Why a node may not join its cluster's store (issue 17): its settings
/// differ from the cluster's, or the stored record cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterSettingsError {
    /// Settings that must agree differ (at least one).
    #[error("{}", differ_message(differs, written_by))]
    Differ {
        /// Each setting that differs.
        differs: Vec<SettingDiff>,
        /// The software that stored the cluster's settings.
        written_by: String,
    },
    /// The record is of a format this groupwire does not know.
    #[error(
        "the cluster's settings (NATS KV bucket {BUCKET}, key {KEY}) are stored in format \
         {found}, which {ours} does not know (it knows up to {known}): a later groupwire \
         stored them; run this node with the groupwire the other nodes run"
    )]
    NewerFormat {
        /// The record's format.
        found: u64,
        /// The latest format this groupwire knows.
        known: u64,
        /// This groupwire.
        ours: String,
    },
    /// The record is not one a relay node wrote.
    #[error(
        "the cluster's settings (NATS KV bucket {BUCKET}, key {KEY}) are unreadable \
         ({reason}); no relay node wrote them. With no relay node running, delete them \
         (`nats kv del {BUCKET} {KEY}`) and start the nodes again: the first stores its \
         settings"
    )]
    Unreadable {
        /// What is wrong with it.
        reason: String,
    },
}

/// One setting that differs between the cluster and this node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettingDiff {
    /// What it is ("replicas").
    pub setting: &'static str,
    /// How a node sets it ("--nats-replicas").
    pub option: &'static str,
    /// The cluster's value.
    pub cluster: String,
    /// This node's value.
    pub node: String,
    /// How to start this node to agree ("with --nats-replicas 3").
    pub fix: String,
}

/// [`NatsConfig::lock_lease`] as written: rounded up to whole seconds, at
/// least 1 (a message TTL is whole seconds).
pub(crate) fn lease_secs(lease: Duration) -> u64 {
    (lease.as_secs() + u64::from(lease.subsec_nanos() > 0)).max(1)
}

/// The stored record, [`FORMAT`] 1 (see the module docs). Unknown fields
/// are refused: a setting added later comes with a new format.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    version: u64,
    replicas: u64,
    lock_lease_secs: u64,
    max_frame: u64,
    compact_on_checkpoint: bool,
    tokens_required: bool,
    written_by: String,
}

/// Any format's first field, read before the rest.
#[derive(serde::Deserialize)]
struct Head {
    version: u64,
}

/// This groupwire, as `written_by` names it.
fn software() -> String {
    format!("groupwire-relay {}", env!("CARGO_PKG_VERSION"))
}

fn differ_message(differs: &[SettingDiff], written_by: &str) -> String {
    let mut m = format!(
        "this relay node's settings differ from those of the other nodes on this NATS \
         JetStream, which every node must share (the first node, {written_by}, stored them \
         in KV bucket {BUCKET}, key {KEY}):"
    );
    for d in differs {
        let _ = write!(
            m,
            " {} ({}): the cluster has {}, this node {};",
            d.setting, d.option, d.cluster, d.node
        );
    }
    let fixes: Vec<&str> = differs.iter().map(|d| d.fix.as_str()).collect();
    let _ = write!(
        m,
        " start this node {}; or, to change them for the whole cluster, stop every \
         node, delete the stored settings (`nats kv del {BUCKET} {KEY}`) and start every \
         node with the new ones",
        fixes.join(", ")
    );
    m
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ours() -> ClusterSettings {
        ClusterSettings::new(
            &NatsConfig::new(vec!["nats://x".into()]),
            &CoreConfig::default(),
        )
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let s = ClusterSettings {
            replicas: 3,
            lock_lease_secs: 30,
            max_frame: 4 << 20,
            compact_on_checkpoint: false,
            tokens_required: true,
        };
        let (back, by) = ClusterSettings::decode(&s.encode()).expect("decodes");
        assert_eq!(back, s);
        assert_eq!(by, software());
        assert_eq!(s.check(&s.encode()), Ok(()));
    }

    #[test]
    fn the_record_holds_no_secret() {
        let mut core = CoreConfig::default();
        let mut keys = crate::auth::Keys::new();
        keys.insert("k1", b"a-very-secret-hmac-key").expect("a key");
        core.auth_keys = Some(keys);
        let nats = NatsConfig::new(vec!["nats://x".into()])
            .auth(super::super::NatsAuth::Token("nats-secret-token".into()));
        let record = ClusterSettings::new(&nats, &core).encode();
        let text = String::from_utf8(record.to_vec()).expect("JSON");
        assert!(text.contains("\"tokens_required\":true"), "{text}");
        for secret in ["a-very-secret-hmac-key", "nats-secret-token", "k1"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }

    #[test]
    fn each_differing_setting_is_named_with_both_values_and_its_fix() {
        let node = ours();
        let cluster = ClusterSettings {
            replicas: 3,
            lock_lease_secs: 30,
            ..ours()
        };
        let err = node.check(&cluster.encode()).expect_err("differs");
        let ClusterSettingsError::Differ { differs, .. } = &err else {
            panic!("{err:?}")
        };
        let named: Vec<_> = differs
            .iter()
            .map(|d| (d.option, d.cluster.as_str(), d.node.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("--nats-replicas", "3", "1"),
                ("--nats-lock-lease", "30s", "10s")
            ]
        );
        let msg = err.to_string();
        for part in [
            "replicas (--nats-replicas): the cluster has 3, this node 1",
            "lock lease (--nats-lock-lease): the cluster has 30s, this node 10s",
            "start this node with --nats-replicas 3, with --nats-lock-lease 30s;",
            "nats kv del GW_CLUSTER settings",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
    }

    #[test]
    fn tokens_frame_and_compaction_differ_too() {
        let cluster = ClusterSettings {
            max_frame: 2 << 20,
            compact_on_checkpoint: false,
            tokens_required: true,
            ..ours()
        };
        let msg = ours()
            .check(&cluster.encode())
            .expect_err("differs")
            .to_string();
        for part in [
            "largest frame (--max-frame): the cluster has 2097152, this node 1048576",
            "(CoreConfig::compact_on_checkpoint): the cluster has off, this node on",
            "client tokens (--auth-secret-file): the cluster has required, this node not required",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
    }

    #[test]
    fn a_lease_agrees_in_whole_seconds() {
        let nats = |lease| NatsConfig::new(vec!["nats://x".into()]).lock_lease(lease);
        let core = CoreConfig::default();
        let a = ClusterSettings::new(&nats(Duration::from_millis(1500)), &core);
        let b = ClusterSettings::new(&nats(Duration::from_secs(2)), &core);
        assert_eq!(a, b, "both leases are written as 2 s");
    }

    #[test]
    fn a_newer_format_is_refused_by_name() {
        let record = br#"{"version":2,"replicas":1,"something_new":true}"#;
        let err = ours().check(record).expect_err("newer");
        assert_eq!(
            err,
            ClusterSettingsError::NewerFormat {
                found: 2,
                known: 1,
                ours: software()
            }
        );
        assert!(err.to_string().contains("format 2"), "{err}");
    }

    #[test]
    fn garbage_is_unreadable() {
        for bytes in [
            &b""[..],
            b"\xff\x00garbage",
            b"[]",
            b"{\"version\":\"1\"}",
            b"{\"version\":-1}",
            b"{\"version\":0}",
            b"{\"version\":1}",
            br#"{"version":1,"replicas":0,"lock_lease_secs":10,"max_frame":1048576,"compact_on_checkpoint":true,"tokens_required":false,"written_by":""}"#,
            br#"{"version":1,"replicas":1,"lock_lease_secs":10,"max_frame":1048576,"compact_on_checkpoint":true,"tokens_required":false,"written_by":"","extra":1}"#,
        ] {
            let err = ours().check(bytes).expect_err("garbage");
            assert!(
                matches!(err, ClusterSettingsError::Unreadable { .. }),
                "{:?}: {err:?}",
                String::from_utf8_lossy(bytes)
            );
            assert!(err.to_string().contains("unreadable"), "{err}");
        }
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = ClusterSettings::decode(&bytes);
        }

        #[test]
        fn decoding_mangled_records_never_panics(cut in 0usize..200, flip in 0usize..200, bit in 0u8..8) {
            let mut bytes = ours().encode().to_vec();
            if let Some(b) = bytes.get_mut(flip) {
                *b ^= 1 << bit;
            }
            bytes.truncate(cut);
            let _ = ClusterSettings::decode(&bytes);
        }
    }
}
