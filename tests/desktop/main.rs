//! The app's own tests: the real `nevermiss` window under Xvfb with a private D-Bus session bus
//! (the window, the tray, one instance, the UI inside WebKitGTK), native notifications through a
//! real notification server, and the OS keychain through a real Secret Service.

mod common;
mod session;

mod desktop_notifications;
mod desktop_single_engine;
mod desktop_webview;
mod desktop_window;
mod keychain;
mod notification_clicks;
