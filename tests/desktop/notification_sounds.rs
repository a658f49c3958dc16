//! The sound of each urgency on a real notification server (dunst on a private session bus): a
//! real engine in this process with the desktop notifier, its settings changed through the admin
//! API as the Settings screen does. Off by default, and then the notification carries no
//! `sound-name` hint at all (the desktop's own settings decide); once `sound_urgent` or
//! `sound_normal` names a sound, the notifications of that urgency carry it, the others not.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use std::sync::Arc;

use nevermiss_engine::api::settings::SettingsView;
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::channels::desktop::OpenJob;
use nevermiss_engine::engine::{Engine, EngineConfig};
use serde_json::{json, Value};

use crate::common::OwnerApi;
use crate::notification_clicks::{desk_in_process, Desk, SECRET};
use crate::session::{self, NotifyCalls};

/// The one `Notify` call whose summary is `summary`.
fn call(calls: &NotifyCalls, summary: &str) -> String {
    calls.one(&format!("string \"{summary}\""))
}

/// The sound a call asks for: the string after its `sound-name` hint, if it has one.
fn sound_of(call: &str) -> Option<String> {
    let after = call.split("string \"sound-name\"").nth(1)?;
    Some(after.split('"').nth(1).expect("the hint's value").to_owned())
}

/// `PUT /api/settings` on the engine: the settings as they now stand, or the refusal.
async fn put_settings(engine: &Engine, body: Value) -> Result<SettingsView, ErrorBody> {
    let response = OwnerApi(engine).call(reqwest::Method::PUT, "/api/settings", Some(body)).await;
    match response.status().as_u16() {
        200 => Ok(response.json().await.unwrap()),
        400 => Err(response.json().await.unwrap()),
        other => panic!("PUT /api/settings answered {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_urgency_has_its_sound_and_none_while_off() {
    let _alone = session::one_at_a_time();
    let Desk { calls, data_dir, .. } = &desk_in_process();
    let notifier = nevermiss_engine::channels::desktop::desktop_notifier(Arc::new(OpenJob::default()));
    let engine = Engine::start(EngineConfig::local(data_dir.path()), notifier).await.unwrap();
    let receiver = format!("http://{}", engine.receiver_addr);
    let finish = |n: u32, job_id: &str, state: &str| {
        let answer = session::deliver_generic_state(&receiver, SECRET, &format!("sound-{n}"), job_id, state);
        assert_eq!(answer, r#"{"outcome":"applied"}"#);
    };

    // Off by default: neither urgency asks for a sound.
    let view = put_settings(&engine, json!({})).await.unwrap();
    assert_eq!((view.sound_urgent.as_str(), view.sound_normal.as_str()), ("off", "off"));
    finish(1, "failed-quiet", "failed");
    finish(2, "done-quiet", "succeeded");
    assert_eq!(sound_of(&call(calls, "Failed: failed-quiet")), None);
    assert_eq!(sound_of(&call(calls, "Succeeded: done-quiet")), None);

    // An urgent sound: failures ring, successes stay quiet.
    let view = put_settings(&engine, json!({"sound_urgent": "dialog-warning"})).await.unwrap();
    assert_eq!(view.sound_urgent, "dialog-warning");
    finish(3, "failed-loud", "failed");
    finish(4, "done-still-quiet", "succeeded");
    assert_eq!(sound_of(&call(calls, "Failed: failed-loud")).as_deref(), Some("dialog-warning"));
    assert_eq!(sound_of(&call(calls, "Succeeded: done-still-quiet")), None);

    // The other urgency's own sound; turned off again, no hint.
    put_settings(&engine, json!({"sound_normal": "message-new-instant", "sound_urgent": "off"})).await.unwrap();
    finish(5, "done-loud", "succeeded");
    finish(6, "failed-quiet-again", "failed");
    assert_eq!(sound_of(&call(calls, "Succeeded: done-loud")).as_deref(), Some("message-new-instant"));
    assert_eq!(sound_of(&call(calls, "Failed: failed-quiet-again")), None);

    // Not a sound name: refused next to the field, nothing changed.
    let refused = put_settings(&engine, json!({"sound_urgent": "/usr/share/sounds/alarm.oga"})).await.unwrap_err();
    let reason = refused.errors.unwrap_or_default().remove("sound_urgent").unwrap_or_default();
    assert!(reason.contains("sound name"), "{reason}");
    let view = put_settings(&engine, json!({})).await.unwrap();
    assert_eq!((view.sound_urgent.as_str(), view.sound_normal.as_str()), ("off", "message-new-instant"));
    engine.shutdown().await;
}
