//! The TypeScript types in `ui/src/generated/` are made from these Rust definitions by ts-rs
//! (`#[ts(export)]` writes them during `cargo test`). This test compares each committed file, as
//! it was when the tests were compiled, with what the Rust definition gives now, so a change to an
//! API type that was not carried to the UI fails the tests. To refresh the files (the store's
//! types export from their own crate): `cargo test -p nevermiss-store -p nevermiss-engine --lib
//! export_bindings`, then commit `ui/src/generated/`.

use ts_rs::{Config, TS};

macro_rules! check {
    ($cfg:expr, $failures:expr, $($ty:ty => $file:literal),+ $(,)?) => {
        $(
            let fresh = <$ty>::export_to_string(&$cfg).expect("the type exports");
            let committed = include_str!(concat!("../../../../ui/src/generated/", $file));
            if fresh != committed {
                $failures.push($file);
            }
        )+
    };
}

#[test]
fn generated_typescript_is_up_to_date() {
    // As `.cargo/config.toml` sets it for the export: 64-bit integers are JSON numbers.
    let cfg = Config::default().with_large_int("number");
    let mut stale: Vec<&str> = Vec::new();
    check!(cfg, stale,
        crate::store::job::Job => "Job.ts",
        crate::store::job::JobResult => "JobResult.ts",
        crate::store::channels::ChannelKind => "ChannelKind.ts",
        crate::store::channels::Announce => "Announce.ts",
        crate::channels::EmailTls => "EmailTls.ts",
        crate::store::counters::ChannelTally => "ChannelTally.ts",
        crate::metrics::FailingChannel => "FailingChannel.ts",
        super::channels::Channel => "Channel.ts",
        super::providers::ProviderList => "ProviderList.ts",
        super::providers::ProviderEntry => "ProviderEntry.ts",
        super::channels::QuietHours => "QuietHours.ts",
        super::channels::ChannelList => "ChannelList.ts",
        super::channels::ChannelInput => "ChannelInput.ts",
        super::channels::ChannelFields => "ChannelFields.ts",
        super::channels::ChannelTestResult => "ChannelTestResult.ts",
        super::channels::ChannelRemoved => "ChannelRemoved.ts",
        crate::hub_client::HubState => "HubState.ts",
        super::hub::HubInput => "HubInput.ts",
        super::devices::DeviceToken => "DeviceToken.ts",
        super::devices::NewDevice => "NewDevice.ts",
        super::devices::DeviceList => "DeviceList.ts",
        crate::device_messages::DeviceNotification => "DeviceNotification.ts",
        super::devices::DeviceInfo => "DeviceInfo.ts",
        crate::device_messages::DeviceAck => "DeviceAck.ts",
        super::devices::DeviceAcked => "DeviceAcked.ts",
        crate::notification::Notification => "Notification.ts",
        crate::store::outbox::Subject => "Subject.ts",
        crate::store::job::JobState => "JobState.ts",
        crate::store::job::Source => "Source.ts",
        crate::store::job::Outcome => "Outcome.ts",
        crate::store::job::TimelineEvent => "TimelineEvent.ts",
        crate::metrics::Metrics => "Metrics.ts",
        crate::store::metrics::DailyCompletions => "DailyCompletions.ts",
        crate::store::passes::PassSummary => "PassSummary.ts",
        crate::store::deliveries::StoredDelivery => "StoredDelivery.ts",
        crate::store::jobs::JobPage => "JobPage.ts",
        crate::store::jobs::JobFilter => "JobFilter.ts",
        crate::store::job::PollErrorKind => "PollErrorKind.ts",
        crate::provider_health::HealthStatus => "HealthStatus.ts",
        super::status::Passes => "Passes.ts",
        super::status::Health => "Health.ts",
        super::ErrorBody => "ErrorBody.ts",
        super::settings::SettingsView => "SettingsView.ts",
        super::settings::ProviderSettings => "ProviderSettings.ts",
        super::settings::OnOff => "OnOff.ts",
        super::settings::AccountUse => "AccountUse.ts",
        super::jobs::JobDetail => "JobDetail.ts",
        super::jobs::TrackRequest => "TrackRequest.ts",
        super::jobs::TrackAnswer => "TrackAnswer.ts",
        super::tunnel::CredentialState => "CredentialState.ts",
        crate::receiver::HookAnswer => "HookAnswer.ts",
        crate::tunnel::self_test::SelfTestOutcome => "SelfTestOutcome.ts",
        crate::tunnel::self_test::SelfTestTrigger => "SelfTestTrigger.ts",
        crate::store::outbox::Kind => "NotificationKind.ts",
        crate::provider_health::ProviderHealth => "ProviderHealth.ts",
        crate::reconcile::PassReport => "PassReport.ts",
        crate::reconcile::ProviderRound => "ProviderRound.ts",
        crate::reconcile::RoundOutcome => "RoundOutcome.ts",
        crate::store::job::AbandonReason => "AbandonReason.ts",
        crate::changes::Change => "Change.ts",
        super::jobs::PollAnswer => "PollAnswer.ts",
        super::cancel::CancelAnswer => "CancelAnswer.ts",
        super::status::Info => "Info.ts",
        super::status::MetricsHistory => "MetricsHistory.ts",
        super::setup::SecretStatus => "SecretStatus.ts",
        super::setup::ProviderSecrets => "ProviderSecrets.ts",
        crate::providers::WebhookIntake => "WebhookIntake.ts",
        super::setup::SecretsView => "SecretsView.ts",
        super::setup::TestDelivery => "TestDelivery.ts",
        crate::tunnel::TunnelState => "TunnelState.ts",
        crate::tunnel::config::TunnelKind => "TunnelKind.ts",
        crate::tunnel::Status => "TunnelStatus.ts",
        crate::tunnel::self_test::SelfTestReport => "SelfTestReport.ts",
        crate::store::refused::Refusal => "Refusal.ts",
        crate::store::refused::RefusalKind => "RefusalKind.ts",
        super::refused::RefusedList => "RefusedList.ts",
        crate::store::groups::GroupSummary => "GroupSummary.ts",
        crate::store::groups::GroupMember => "GroupMember.ts",
        crate::store::groups::MemberNotifications => "MemberNotifications.ts",
        super::groups::GroupList => "GroupList.ts",
        super::groups::GroupDetail => "GroupDetail.ts",
    );
    assert!(
        stale.is_empty(),
        "ui/src/generated is stale for {stale:?}: run `cargo test -p nevermiss-engine --lib export_bindings` and commit ui/src/generated/"
    );
}
