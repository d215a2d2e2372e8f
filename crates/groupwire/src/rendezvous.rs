//! Meeting a peer through a group on a groupwire relay (Corona, Litiu &
//! Prakash), for two applications that know a relay and a group name but
//! not each other's address:
//!
//! ```no_run
//! use groupwire::rendezvous::{self, RendezvousOptions};
//! use groupwire::{Qos, Session};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let session = Session::bind("0.0.0.0:7400").await?;
//! let opts = RendezvousOptions::new().advertise("198.51.100.4:7400".parse()?);
//! let peer = rendezvous::meet(&session, "tcp://relay.example:7600", "room-42", opts).await?;
//! let pointer = peer.channel("telepointer", Qos::awareness().mer_band(0.05, 0.06))?;
//! # let _ = pointer;
//! # Ok(()) }
//! ```
//!
//! **How.** Each side connects to the relay (its own connection, closed
//! once the peers meet), joins the group (creating it if it does not
//! exist: that needs a token allowing the principal role, as any
//! `CreateGroup`), watching membership, and multicasts an offer: the
//! session's address and a random 64-bit number. The first offer from
//! another *current* member (offers in the group's log from members that
//! have left are ignored, so a group can be met in again and again) makes
//! the pair: the side with the smaller number dials
//! ([`Session::connect`]), the other waits for it
//! ([`Session::accept_from`]), so there is one handshake and one stream
//! connection, whatever the relay's delivery times (two sessions that dial
//! each other at once also make one, by comparing connection ids, but a
//! side that dialed late would send Hellos for nothing).
//!
//! An offer is one update of [`RENDEZVOUS_TYPE`] (big-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `gwR1` |
//! | 8 | the random number |
//! | rest | the session's address, UTF-8 (`192.0.2.1:7400`, `[2001:db8::1]:7400`) |
//!
//! **What it is for, and not.** A meeting point for two: with more members
//! offering in one group at once, pairs form by who comes first, and a
//! member whose partner paired with someone else waits until the timeout;
//! give each pair its own group. The address offered is the one the
//! session is bound to, or [`RendezvousOptions::advertise`]; nothing finds
//! a way through a NAT (no ICE or STUN). The relay is trusted with the
//! addresses only: when the session has a key, the session's own handshake
//! proves the peer holds it, and a member that offers someone else's
//! address gets Hellos sent there, no more than a `connect` sends (they
//! are never larger than their answer).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use groupwire_relay::frame::{ActivityMode, ErrorCode, MembershipChange, Role};
use groupwire_relay::{ClientError, ClientEvent, ClientOptions, RelayClient};
use groupwire_tokio::session::{ConnectError, Peer, Session};

/// The message type of an offer in the group.
pub const RENDEZVOUS_TYPE: u16 = 0x6752;
/// The first bytes of an offer.
const MAGIC: &[u8; 4] = b"gwR1";
/// The type name a group created for meeting gets.
pub const GROUP_TYPE: &str = "groupwire-rendezvous";

/// How [`meet`] goes about it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RendezvousOptions {
    /// The relay connection's options: the name other members see, the
    /// token, TLS roots.
    pub client: ClientOptions,
    /// The address to offer (default: the session's own, which must then
    /// not be unspecified, as `0.0.0.0:7400` is).
    pub advertise: Option<SocketAddr>,
    /// How long to wait for a peer and its handshake (default 30 s).
    pub timeout: Duration,
}

impl Default for RendezvousOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl RendezvousOptions {
    /// The defaults: the client name "groupwire", no token, 30 s.
    pub fn new() -> Self {
        Self {
            client: ClientOptions::new("groupwire"),
            advertise: None,
            timeout: Duration::from_secs(30),
        }
    }
    /// Sets the relay connection's options.
    pub fn client(mut self, client: ClientOptions) -> Self {
        self.client = client;
        self
    }
    /// Sets the address to offer.
    pub fn advertise(mut self, addr: SocketAddr) -> Self {
        self.advertise = Some(addr);
        self
    }
    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Why [`meet`] did not give a peer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RendezvousError {
    /// The relay refused or could not be reached.
    #[error("relay: {0}")]
    Relay(#[from] ClientError),
    /// The address to offer is not one a peer can send to.
    #[error(
        "the session is bound to {0}, which no peer can send to: set RendezvousOptions::advertise to an address it can"
    )]
    Unreachable(SocketAddr),
    /// No other member offered within the timeout (or the one that did
    /// never completed the handshake).
    #[error("no peer met us in group {group:?} within {timeout:?}")]
    Timeout {
        /// The group.
        group: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The session's handshake with the peer failed.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The relay connection closed before a peer came.
    #[error("the relay connection closed before a peer came")]
    Closed,
}

/// Meets one other member of `group` on the relay at `relay` (any
/// address [`RelayClient::connect_url`] takes) and connects `session` to
/// it; see the [module docs](self).
pub async fn meet(
    session: &Session,
    relay: &str,
    group: &str,
    opts: RendezvousOptions,
) -> Result<Peer, RendezvousError> {
    let addr = opts.advertise.unwrap_or_else(|| session.local_addr());
    if addr.ip().is_unspecified() || addr.port() == 0 {
        return Err(RendezvousError::Unreachable(addr));
    }
    let timeout = opts.timeout;
    let (client, events) = RelayClient::connect_url(relay, opts.client).await?;
    let met = tokio::time::timeout(timeout, pair(session, &client, events, group, addr)).await;
    // The group is left whatever happened; the connection closes as the
    // client drops.
    let _ = client.leave(group).await;
    met.map_err(|_| RendezvousError::Timeout {
        group: group.to_owned(),
        timeout,
    })?
}

/// Joins, offers, and pairs with the first current member's offer.
async fn pair(
    session: &Session,
    client: &RelayClient,
    mut events: tokio::sync::mpsc::Receiver<ClientEvent>,
    group: &str,
    addr: SocketAddr,
) -> Result<Peer, RendezvousError> {
    let joined = join_or_create(client, group).await?;
    let me = client.client_id();
    let mut members: BTreeSet<u64> = joined.members.iter().map(|m| m.client).collect();
    let mut id = [0u8; 8];
    getrandom::fill(&mut id).map_err(|e| ClientError::Connect(format!("no randomness: {e}")))?;
    let nonce = u64::from_be_bytes(id);
    client
        .send(group, RENDEZVOUS_TYPE, encode(nonce, addr))
        .await?;
    // Offers by sender, in the order they came; a sender's last counts.
    let mut offers: BTreeMap<u64, (u64, SocketAddr)> = BTreeMap::new();
    let mut order: Vec<u64> = Vec::new();
    // No pick before our own offer comes back: by then the group's log up
    // to it has been replayed, so a member's latest offer is the one held
    // (a relay that restarted may give an old member's id to a new one).
    let mut caught_up = false;
    loop {
        match events.recv().await {
            None | Some(ClientEvent::Closed(_)) => return Err(RendezvousError::Closed),
            Some(ClientEvent::Deliver(u)) if u.group == group && u.msg_type == RENDEZVOUS_TYPE => {
                match decode(&u.payload) {
                    Some((n, _)) if u.sender == me => caught_up |= n == nonce,
                    // The insert keeps a sender's latest offer either way.
                    Some(offer) if offers.insert(u.sender, offer).is_none() => {
                        order.push(u.sender);
                    }
                    Some(_) => {}
                    None => {}
                }
            }
            Some(ClientEvent::Membership(m)) if m.group == group => match m.change {
                MembershipChange::Joined => {
                    // Whatever it offered before joining was an earlier
                    // member's under the same id.
                    offers.remove(&m.client);
                    members.insert(m.client);
                }
                MembershipChange::Left
                | MembershipChange::Disconnected
                | MembershipChange::Evicted => {
                    members.remove(&m.client);
                    offers.remove(&m.client);
                }
                _ => {}
            },
            Some(ClientEvent::State(s)) if s.group == group => {
                members = s.members.iter().map(|m| m.client).collect();
            }
            Some(ClientEvent::GroupDeleted(g)) if g == group => {
                return Err(RendezvousError::Closed);
            }
            Some(_) => {}
        }
        let first = order
            .iter()
            .filter(|c| caught_up && members.contains(c))
            .find_map(|c| offers.get(c).copied());
        if let Some((theirs, at)) = first {
            // Equal numbers (one in 2^64): both wait; the timeout ends it.
            return Ok(if nonce < theirs {
                session.connect(at).await?
            } else {
                session.accept_from(at).await?
            });
        }
    }
}

/// Joins `group` as a principal watching membership, creating it first if
/// there is none (another member creating it at once is no error).
async fn join_or_create(
    client: &RelayClient,
    group: &str,
) -> Result<groupwire_relay::JoinInfo, ClientError> {
    let join = || client.join(group, Role::Principal, ActivityMode::Active, true);
    match join().await {
        Err(ClientError::Relay { code, .. }) if code == ErrorCode::NO_SUCH_GROUP => {
            match client
                .create_group(group, GROUP_TYPE, 0, Bytes::new())
                .await
            {
                Ok(()) => {}
                Err(ClientError::Relay { code, .. }) if code == ErrorCode::GROUP_EXISTS => {}
                Err(e) => return Err(e),
            }
            join().await
        }
        r => r,
    }
}

/// An offer's bytes.
fn encode(nonce: u64, addr: SocketAddr) -> Bytes {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&nonce.to_be_bytes());
    v.extend_from_slice(addr.to_string().as_bytes());
    v.into()
}

/// An offer, or `None` for anything else (counted nowhere: the group may
/// carry other updates).
fn decode(b: &[u8]) -> Option<(u64, SocketAddr)> {
    let rest = b.strip_prefix(MAGIC)?;
    let nonce = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let addr = std::str::from_utf8(rest.get(8..)?).ok()?.parse().ok()?;
    Some((nonce, addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn offers_round_trip(nonce: u64, mut addr: SocketAddr) {
            // The text form carries no IPv6 flow label (it is per packet).
            if let SocketAddr::V6(a) = &mut addr {
                a.set_flowinfo(0);
            }
            prop_assert_eq!(decode(&encode(nonce, addr)), Some((nonce, addr)));
        }

        #[test]
        fn any_bytes_decode_or_not_without_panicking(b: Vec<u8>) {
            let _ = decode(&b);
        }
    }

    #[test]
    fn an_offer_is_magic_number_then_the_address() {
        let b = encode(0x0102_0304_0506_0708, "192.0.2.1:7400".parse().unwrap());
        assert_eq!(
            &b[..],
            b"gwR1\x01\x02\x03\x04\x05\x06\x07\x08192.0.2.1:7400"
        );
        assert_eq!(decode(b"gwR1\x00\x00"), None, "short");
        assert_eq!(
            decode(b"gwR2\x00\x00\x00\x00\x00\x00\x00\x00192.0.2.1:1"),
            None
        );
        assert_eq!(
            decode(b"gwR1\x00\x00\x00\x00\x00\x00\x00\x00not an address"),
            None
        );
    }
}
