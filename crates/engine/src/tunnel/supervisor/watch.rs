//! Watching an open tunnel session until it ends or is to be ended: the periodic checks (late
//! test jobs forgotten, self-tests when due, a session that failed too many ended).

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Tunnel, Watch, CHECK_EVERY, SELF_TEST_FAILURES_BEFORE_RESTART};
use crate::tunnel::config::TunnelConfig;
use crate::tunnel::session::Session;

impl Tunnel {
    /// Watches an open session until it ends, a restart or a new configuration is asked for, or
    /// the engine stops; meanwhile, every `CHECK_EVERY`, late test jobs are forgotten, a
    /// self-test runs when due, and a session that failed too many self-tests in a row is
    /// ended. The session is stopped before this returns.
    pub(super) async fn watch_session(
        self: &Arc<Self>,
        config: &TunnelConfig,
        mut session: Box<dyn Session>,
        up_at: Instant,
        shutdown: &CancellationToken,
    ) -> Watch {
        let mut self_test_due = config.self_test;
        let mut next_check = Instant::now();
        let restartable = session.restartable();
        // One `ended()` for the whole session, polled across the periodic checks
        // below: a fresh call after each check would drop a health probe in flight,
        // and with both on a 5 s period (a hung program's probe lasting until its
        // timeout) every probe was dropped, so a silent program was never restarted.
        let watched = {
            let mut ended = std::pin::pin!(session.ended());
            loop {
                tokio::select! {
                    reason = &mut ended => break Watch::Ended(reason),
                    _ = self.wake.notified() => break Watch::Asked,
                    _ = shutdown.cancelled() => break Watch::Shutdown,
                    _ = tokio::time::sleep_until(next_check) => {
                        next_check = Instant::now() + CHECK_EVERY;
                        self.forget_late_test_jobs(false).await;
                        if self_test_due || (config.self_test && self.self_test_is_due(config).await) {
                            self_test_due = false;
                            let trigger = self.next_trigger(up_at);
                            self.spawn_self_test(trigger, shutdown.clone());
                        }
                        let failed = self.health.lock().unwrap().failed_self_tests;
                        if failed >= SELF_TEST_FAILURES_BEFORE_RESTART && restartable {
                            let last = self.state.lock().unwrap().self_test.as_ref().and_then(|t| t.reason.clone());
                            break Watch::Ended(format!(
                                "stopped answering: {failed} self-tests in a row failed ({})",
                                last.as_deref().unwrap_or("no reason given")
                            ));
                        }
                    }
                }
            }
        };
        session.stop().await;
        watched
    }
}
