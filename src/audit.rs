//! Who made an audited transition, and why: dead letters, gaps, claims and outbox rows keep
//! both.

use crate::error::AdminError;

/// Who makes an audited transition (of a dead letter, a gap, a claim, an outbox row), and why:
/// both required, both kept.
///
/// ```
/// use diesel_inbox::Audit;
///
/// let audit = Audit::new("ops@example.com", "SKU added upstream")?;
/// assert_eq!(audit.actor(), "ops@example.com");
/// assert!(Audit::new("ops@example.com", " ").is_err());
/// # Ok::<(), diesel_inbox::AdminError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    actor: String,
    reason: String,
}

impl Audit {
    /// `actor` (a person or a system) makes a transition for `reason`.
    ///
    /// # Errors
    ///
    /// [`AdminError::MissingAudit`] when either is empty or blank.
    pub fn new(actor: impl Into<String>, reason: impl Into<String>) -> Result<Self, AdminError> {
        let (actor, reason) = (actor.into(), reason.into());
        if actor.trim().is_empty() {
            return Err(AdminError::MissingAudit("actor"));
        }
        if reason.trim().is_empty() {
            return Err(AdminError::MissingAudit("reason"));
        }
        Ok(Self { actor, reason })
    }

    /// Who.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Why.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}
