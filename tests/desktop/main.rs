//! The app's own tests: the real `nevermiss` window under Xvfb with a private D-Bus session bus
//! (the window, the tray, one instance, the UI inside WebKitGTK), native notifications through a
//! real notification server, and the OS keychain through a real Secret Service.

// `session::one_at_a_time` is held for a whole test, across its awaits, on purpose: the tests run
// one after another, each on its own runtime, and nothing on that runtime waits for the lock.
#![allow(clippy::await_holding_lock)]

mod common;
mod session;

mod desktop_notifications;
mod desktop_single_engine;
mod desktop_webview;
mod desktop_window;
mod keychain;
mod notification_cancel;
mod notification_clicks;
mod notification_images;
mod notification_picture;
mod notification_sounds;
