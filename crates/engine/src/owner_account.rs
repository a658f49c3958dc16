//! Senders are the owner's: a signature scheme that proves only the platform (fal signs every
//! customer's webhooks with the same Ed25519 keys) says nothing of whose job it is, so such a
//! verified request is accepted only for the owner's account (contract §7).
//!
//! The owner's account is the one set in Settings (`<provider>.account`) or by
//! `NEVERMISS_<PROVIDER>_ACCOUNT`; while none is set, it is learned from the first verified
//! request about a job the owner tracked with its polling URL (only the owner sets one: a device
//! cannot, and no webhook does), since the platform signs a request's id only for the account
//! that made it. A request for any other account is refused as unverified (401), counted among
//! the bad signatures and kept among the refused with that cause.

use crate::providers::SenderAccount;

/// The setting that holds a provider's owner account.
pub fn setting_key(provider: &str) -> String {
    format!("{provider}.account")
}

/// The owner's account for `provider`: `NEVERMISS_<PROVIDER>_ACCOUNT`, else the stored setting.
pub fn configured(settings: &crate::settings::Settings, provider: &str) -> Option<String> {
    crate::providers::ProviderConfig::account(settings, provider)
}

/// Whether `provider`'s discovery waits for the owner's account: its list is the account's and no
/// call finds it (Fireworks), and none is set.
pub fn discovery_waits(settings: &crate::settings::Settings, provider: &dyn crate::providers::Provider) -> bool {
    provider.discovery_needs_account_setting() && configured(settings, provider.name()).is_none()
}

/// What the receiver does with a verified request that names its sender's account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The owner's account: go on.
    Owner,
    /// No account was known, and this request is about a job the owner tracked: its account is
    /// the owner's from now on (stored), and the request goes on.
    Learned(String),
    /// Another account's, or one that cannot be told to be the owner's yet: refused, with why.
    Foreign(String),
}

/// Decides on a request for `sender`, given the owner's account when one is known and whether
/// the request is about a job the owner tracked.
pub fn verdict(provider: &str, owner: Option<&str>, sender: &SenderAccount, tracked_by_owner: bool) -> Verdict {
    let account = sender.account.as_str();
    match owner {
        Some(owner) if owner == account => Verdict::Owner,
        Some(owner) => Verdict::Foreign(format!(
            "signed by {provider} for another account ({}), not the owner's ({}): {provider} signs every customer's webhooks with the same keys, so only the owner's are taken. If the account is yours, set it in Settings ({})",
            shown(account),
            shown(owner),
            setting_key(provider),
        )),
        None if tracked_by_owner && !account.is_empty() => Verdict::Learned(account.to_owned()),
        None => Verdict::Foreign(format!(
            "signed by {provider} for account {}, and the owner's {provider} account is not known yet: set it in Settings ({}), or track one of your requests with its status URL first, and its first webhook teaches it",
            shown(account),
            setting_key(provider),
        )),
    }
}

/// An account id as it is shown in a cause: at most 64 characters, printable ones only.
fn shown(account: &str) -> String {
    let clean: String = account.chars().filter(|c| !c.is_control()).take(64).collect();
    format!("{clean:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(account: &str) -> SenderAccount {
        SenderAccount { account: account.into(), job_id: Some("req-1".into()) }
    }

    #[test]
    fn only_the_owners_account_is_taken_and_it_is_learned_only_from_a_job_the_owner_tracked() {
        assert_eq!(verdict("fal", Some("u-owner"), &from("u-owner"), false), Verdict::Owner);
        assert!(
            matches!(verdict("fal", Some("u-owner"), &from("u-other"), true), Verdict::Foreign(cause) if cause.contains("another account"))
        );
        assert_eq!(verdict("fal", None, &from("u-owner"), true), Verdict::Learned("u-owner".into()));
        assert!(matches!(verdict("fal", None, &from("u-other"), false), Verdict::Foreign(cause) if cause.contains("not known yet")));
        assert!(matches!(verdict("fal", None, &from(""), true), Verdict::Foreign(_)));
    }
}
