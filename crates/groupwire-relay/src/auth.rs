//! Tokens: who may join which groups, in which role, at which priority.
//!
//! Litiu & Prakash §7 leave open how to stop clients from asking for high
//! priority for everything and suggest authenticating clients and giving
//! them quotas. A token carries exactly that: the groups a client may use,
//! the highest role it may take and a cap on the priority it may ask for.
//!
//! ```text
//! token  = base64url(claims) "." base64url(HMAC-SHA256(secret, base64url(claims)))
//! claims = "sub=alice\ngroups=chat,lab-*\nrole=principal\nprio=5\nexp=0"
//! ```
//!
//! Pure functions: the caller supplies the current Unix time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::core::MAX_PRIORITY;
use crate::frame::Role;

/// What a token allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    /// Who the token was issued to (for logs).
    pub subject: String,
    /// Group patterns: a name, `*`, or a prefix ending in `*`.
    pub groups: Vec<String>,
    /// The most privileged role allowed.
    pub max_role: Role,
    /// The highest group or member priority the client may ask for.
    pub max_priority: u8,
    /// Expiry in Unix seconds; 0 never expires.
    pub expires_unix: u64,
}

impl Claims {
    /// Everything allowed: what clients get when the relay runs without a
    /// secret (local use).
    pub fn anyone() -> Self {
        Self {
            subject: "anonymous".into(),
            groups: vec!["*".into()],
            max_role: Role::Principal,
            max_priority: MAX_PRIORITY,
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

    fn encode(&self) -> String {
        format!(
            "sub={}\ngroups={}\nrole={}\nprio={}\nexp={}",
            self.subject,
            self.groups.join(","),
            self.max_role.as_str(),
            self.max_priority,
            self.expires_unix
        )
    }

    fn decode(text: &str) -> Result<Self, AuthError> {
        let mut c = Claims {
            subject: String::new(),
            groups: Vec::new(),
            max_role: Role::MembershipObserver,
            max_priority: 0,
            expires_unix: 0,
        };
        for line in text.lines() {
            let (k, v) = line.split_once('=').ok_or(AuthError::Malformed)?;
            match k {
                "sub" => c.subject = v.into(),
                "groups" => {
                    c.groups = v
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect();
                }
                "role" => c.max_role = v.parse().map_err(|_| AuthError::Malformed)?,
                "prio" => c.max_priority = v.parse().map_err(|_| AuthError::Malformed)?,
                "exp" => c.expires_unix = v.parse().map_err(|_| AuthError::Malformed)?,
                _ => {} // unknown claims are ignored, for forward compatibility
            }
        }
        Ok(c)
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No token, but the relay requires one.
    #[error("a token is required")]
    Missing,
    /// Not `claims.signature` in base64url, or bad claims.
    #[error("malformed token")]
    Malformed,
    /// The signature does not match the relay's secret.
    #[error("bad token signature")]
    BadSignature,
    /// Past its expiry.
    #[error("token expired")]
    Expired,
}

/// Signs `claims` with `secret`.
pub fn mint(secret: &[u8], claims: &Claims) -> String {
    let body = URL_SAFE_NO_PAD.encode(claims.encode());
    let sig = URL_SAFE_NO_PAD.encode(mac(secret, body.as_bytes()).finalize().into_bytes());
    format!("{body}.{sig}")
}

/// Checks `token` against `secret` at `now_unix` seconds.
pub fn verify(secret: &[u8], token: &str, now_unix: u64) -> Result<Claims, AuthError> {
    if token.is_empty() {
        return Err(AuthError::Missing);
    }
    let (body, sig) = token.split_once('.').ok_or(AuthError::Malformed)?;
    let sig = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|_| AuthError::Malformed)?;
    // Constant-time comparison.
    mac(secret, body.as_bytes())
        .verify_slice(&sig)
        .map_err(|_| AuthError::BadSignature)?;
    let text = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| AuthError::Malformed)?;
    let claims = Claims::decode(std::str::from_utf8(&text).map_err(|_| AuthError::Malformed)?)?;
    if claims.expires_unix != 0 && now_unix >= claims.expires_unix {
        return Err(AuthError::Expired);
    }
    Ok(claims)
}

fn mac(secret: &[u8], data: &[u8]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(data);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            subject: "alice".into(),
            groups: vec!["chat".into(), "lab-*".into()],
            max_role: Role::Observer,
            max_priority: 3,
            expires_unix: 1000,
        }
    }

    #[test]
    fn minted_tokens_verify_and_carry_their_claims() {
        let t = mint(b"secret", &claims());
        assert_eq!(verify(b"secret", &t, 999), Ok(claims()));
        assert_eq!(verify(b"other", &t, 999), Err(AuthError::BadSignature));
        assert_eq!(verify(b"secret", &t, 1000), Err(AuthError::Expired));
        assert_eq!(verify(b"secret", "", 0), Err(AuthError::Missing));
        assert_eq!(verify(b"secret", "nodot", 0), Err(AuthError::Malformed));
    }

    #[test]
    fn a_tampered_claim_fails_the_signature() {
        let t = mint(b"secret", &claims());
        let (_, sig) = t.split_once('.').expect("dot");
        let forged =
            URL_SAFE_NO_PAD.encode(claims().encode().replace("role=observer", "role=principal"));
        assert_eq!(
            verify(b"secret", &format!("{forged}.{sig}"), 0),
            Err(AuthError::BadSignature)
        );
    }

    #[test]
    fn group_patterns_and_roles() {
        let c = claims();
        assert!(c.allows("chat", Role::Observer));
        assert!(c.allows("lab-7", Role::MembershipObserver));
        assert!(!c.allows("chat", Role::Principal));
        assert!(!c.allows("other", Role::Observer));
        assert!(Claims::anyone().allows("x", Role::Principal));
    }
}
