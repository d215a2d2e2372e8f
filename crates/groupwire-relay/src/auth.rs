//! Tokens: who may join which groups, in which role, at which priority.
//!
//! Litiu & Prakash §7 leave open how to stop clients from asking for high
//! priority for everything and suggest authenticating clients and giving
//! them quotas. A token carries exactly that: the groups a client may use,
//! the highest role it may take and a cap on the priority it may ask for.
//!
//! A token is a JSON Web Token (RFC 7519) signed with HMAC-SHA256
//! (`HS256`, RFC 7518 §3.2), so any JWT library can mint and inspect one:
//!
//! ```text
//! header  = {"alg":"HS256","typ":"JWT","kid":"2026-11"}
//! payload = {"sub":"alice","iat":1795000000,"exp":1795086400,
//!            "groups":["chat","lab-*"],"role":"observer","max_priority":5}
//! token   = base64url(header) "." base64url(payload) "." base64url(HMAC-SHA256(key, first two parts))
//! ```
//!
//! - `kid` names the key ([`Keys`]): a relay accepts several at once, so a
//!   secret can be rotated by adding the new one, re-minting, then
//!   removing the old one. A token without a `kid`, or with one the relay
//!   does not know, is refused.
//! - `exp` is required (Unix seconds) and checked with a leeway of
//!   [`LEEWAY_SECS`] for clock skew; `nbf`, when present, too.
//! - `groups` is a JSON array, one pattern per element: `"*"` matches every
//!   group, a pattern ending in `*` matches the names that start with what
//!   precedes it, any other pattern exactly one name. Commas, newlines,
//!   quotes or `=` in a name are plain characters: JSON escaping keeps
//!   every element whole, so no name can split into two patterns. A `*` is
//!   special only as the last character (a group whose own name ends in
//!   `*` is reachable only through a prefix pattern).
//! - Only `HS256` is accepted: `none`, other HMAC sizes and public-key
//!   algorithms are refused before any claim is read.
//!
//! Pure functions: the caller supplies the current Unix time. (jsonwebtoken's
//! own clock check is turned off; [`verify`] checks `exp` and `nbf` against
//! the time it is given.)

use std::collections::BTreeMap;
use std::fmt;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::frame::Role;
use crate::priority::MAX_PRIORITY;

/// Seconds of clock skew tolerated on `exp` and `nbf`.
///
/// Small on purpose: an expired token stays usable this long. A minute
/// covers hosts whose clocks are NTP-synchronised.
pub const LEEWAY_SECS: u64 = 60;

/// What a token allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    /// Who the token was issued to (for logs): the JWT `sub` claim.
    pub subject: String,
    /// Group patterns: a name, `*`, or a prefix ending in `*`.
    pub groups: Vec<String>,
    /// The most privileged role allowed.
    pub max_role: Role,
    /// The highest group or member priority the client may ask for
    /// (0..=[`MAX_PRIORITY`]).
    pub max_priority: u8,
    /// When the token was minted, Unix seconds (`iat`).
    pub issued_unix: u64,
    /// Expiry, Unix seconds (`exp`; required: [`mint`] refuses 0).
    pub expires_unix: u64,
}

impl Claims {
    /// Everything allowed: what clients get when the relay runs without a
    /// secret (local use). Its times are 0; give it an `expires_unix`
    /// before minting it.
    pub fn anyone() -> Self {
        Self {
            subject: "anonymous".into(),
            groups: vec!["*".into()],
            max_role: Role::Principal,
            max_priority: MAX_PRIORITY,
            issued_unix: 0,
            expires_unix: 0,
        }
    }

    /// Whether `group` matches one of the token's patterns.
    pub fn allows_group(&self, group: &str) -> bool {
        self.groups.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => group.starts_with(prefix),
            None => p == group,
        })
    }

    /// Whether the client may take `role` in `group`.
    pub fn allows(&self, group: &str, role: Role) -> bool {
        self.allows_group(group) && self.max_role.at_least(role)
    }
}

/// The secrets a relay accepts, by key id (`kid`).
///
/// `Debug` prints the key ids only, never a secret.
#[derive(Clone, Default)]
pub struct Keys {
    by_kid: BTreeMap<String, Vec<u8>>,
}

impl Keys {
    /// No keys (every token is refused with [`AuthError::UnknownKey`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// One key.
    pub fn single(kid: &str, secret: &[u8]) -> Result<Self, AuthError> {
        let mut k = Self::new();
        k.insert(kid, secret)?;
        Ok(k)
    }

    /// Adds `secret` under `kid`. An empty `kid` or secret, or a `kid`
    /// given twice, is [`AuthError::BadKey`].
    pub fn insert(&mut self, kid: &str, secret: &[u8]) -> Result<(), AuthError> {
        if kid.is_empty() {
            return Err(AuthError::BadKey("empty key id".into()));
        }
        if secret.is_empty() {
            return Err(AuthError::BadKey(format!("key {kid:?} is empty")));
        }
        if self.by_kid.contains_key(kid) {
            return Err(AuthError::BadKey(format!("key id {kid:?} given twice")));
        }
        self.by_kid.insert(kid.to_owned(), secret.to_vec());
        Ok(())
    }

    /// The key ids, sorted.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.by_kid.keys().map(String::as_str)
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.by_kid.is_empty()
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("kids", &self.by_kid.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why a token was refused, or could not be minted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No token, but the relay requires one.
    #[error("a token is required")]
    Missing,
    /// Not a JWT, or its claims are missing, of the wrong type or out of
    /// range.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// Signed with an algorithm other than HS256 (`none` included).
    #[error("token algorithm {0} is not accepted (only HS256)")]
    Algorithm(String),
    /// The header names no key, or one this relay does not have.
    #[error("token key id {0:?} is not known to this relay")]
    UnknownKey(String),
    /// The signature does not match the key its `kid` names.
    #[error("bad token signature")]
    BadSignature,
    /// Past its expiry (beyond [`LEEWAY_SECS`]).
    #[error("token expired")]
    Expired,
    /// Its `nbf` is still in the future (beyond [`LEEWAY_SECS`]).
    #[error("token not valid yet")]
    NotYetValid,
    /// A key or claim set that cannot make a token (local misuse).
    #[error("{0}")]
    BadKey(String),
}

/// Signs `claims` with `secret`, naming it `kid` in the header.
///
/// Refuses (as [`AuthError::BadKey`]) an empty `kid` or secret, an
/// `expires_unix` of 0 and a `max_priority` above [`MAX_PRIORITY`].
pub fn mint(kid: &str, secret: &[u8], claims: &Claims) -> Result<String, AuthError> {
    if kid.is_empty() || secret.is_empty() {
        return Err(AuthError::BadKey(
            "a token needs a key id and a secret".into(),
        ));
    }
    if claims.expires_unix == 0 {
        return Err(AuthError::BadKey("a token needs an expiry".into()));
    }
    if claims.max_priority > MAX_PRIORITY {
        return Err(AuthError::BadKey(format!(
            "max_priority {} is above {MAX_PRIORITY}",
            claims.max_priority
        )));
    }
    ensure_provider();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.to_owned());
    let wire = WireClaims {
        sub: claims.subject.clone(),
        iat: claims.issued_unix,
        exp: claims.expires_unix,
        nbf: None,
        groups: claims.groups.clone(),
        role: claims.max_role.as_str().to_owned(),
        max_priority: claims.max_priority,
    };
    jsonwebtoken::encode(&header, &wire, &EncodingKey::from_secret(secret))
        .map_err(|e| AuthError::BadKey(e.to_string()))
}

/// Checks `token` against `keys` at `now_unix` seconds.
///
/// Order: the header (alg must be HS256, `kid` must name a key), the
/// signature, then the claims. Nothing in the payload is trusted before
/// the signature checks out.
pub fn verify(keys: &Keys, token: &str, now_unix: u64) -> Result<Claims, AuthError> {
    if token.is_empty() {
        return Err(AuthError::Missing);
    }
    ensure_provider();
    // The algorithm first, whatever else is wrong with the token: `none`
    // and the rest are named as such, not as a parse failure.
    if let Some(alg) = header_alg(token).filter(|a| a != "HS256") {
        return Err(AuthError::Algorithm(alg));
    }
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| AuthError::Malformed(e.to_string()))?;
    if header.alg != Algorithm::HS256 {
        return Err(AuthError::Algorithm(format!("{:?}", header.alg)));
    }
    let kid = header.kid.unwrap_or_default();
    let Some(secret) = keys.by_kid.get(&kid) else {
        return Err(AuthError::UnknownKey(kid));
    };
    let mut validation = Validation::new(Algorithm::HS256);
    // Time is checked below against the caller's clock (sans-IO); the
    // crate would read the system clock.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.required_spec_claims.clear();
    validation.validate_aud = false;
    let data =
        jsonwebtoken::decode::<WireClaims>(token, &DecodingKey::from_secret(secret), &validation)
            .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => AuthError::BadSignature,
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => {
                AuthError::Algorithm(format!("{:?}", header.alg))
            }
            _ => AuthError::Malformed(e.to_string()),
        })?;
    let w = data.claims;
    if now_unix > w.exp.saturating_add(LEEWAY_SECS) {
        return Err(AuthError::Expired);
    }
    if w.nbf
        .is_some_and(|nbf| nbf > now_unix.saturating_add(LEEWAY_SECS))
    {
        return Err(AuthError::NotYetValid);
    }
    let max_role: Role = w
        .role
        .parse()
        .map_err(|e: String| AuthError::Malformed(format!("role: {e}")))?;
    if w.max_priority > MAX_PRIORITY {
        return Err(AuthError::Malformed(format!(
            "max_priority {} is above {MAX_PRIORITY}",
            w.max_priority
        )));
    }
    Ok(Claims {
        subject: w.sub,
        groups: w.groups,
        max_role,
        max_priority: w.max_priority,
        issued_unix: w.iat,
        expires_unix: w.exp,
    })
}

/// The JWT payload. Unknown claims are ignored (forward compatibility);
/// every known one has a fixed JSON type, and a value of another type is a
/// parse error, never "absent".
#[derive(Serialize, Deserialize)]
struct WireClaims {
    sub: String,
    iat: u64,
    exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<u64>,
    groups: Vec<String>,
    role: String,
    max_priority: u8,
}

/// Selects jsonwebtoken's RustCrypto backend for the process, unless one
/// is selected already. Without this, a build in which some other crate
/// also enables jsonwebtoken's `aws_lc_rs` feature would panic on the first
/// token (the crate cannot pick between two backends by itself). Either
/// backend computes the same HS256.
fn ensure_provider() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
}

/// The `alg` of the token's header, if the header is base64url JSON with
/// a string `alg` (an `alg` of another type reads as its JSON text).
fn header_alg(token: &str) -> Option<String> {
    use base64::Engine;
    let head = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head)
        .ok()?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes).ok()?;
    header.get("alg").map(|a| match a {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests;
