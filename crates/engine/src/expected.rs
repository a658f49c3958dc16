//! Expected durations: what "usually" means for a kind of job, and when a running job is late.
//!
//! A kind's history is the durations of its last succeeded jobs (`store::durations`, at most 100
//! a kind). From `MIN_FOR_EXPECTED` of them it has an expected duration, their median: the
//! API's `expected_ms`, "usually 4m 12s" in the UI. From `MIN_FOR_SLOW` of them a running job of
//! that kind is **slower than usual** once it has run longer than the 95th percentile times 1.5
//! (`SLOW_FACTOR`), measured as its duration would be (from the provider's start, else from when
//! NeverMiss first heard of it): one alert, which replaces the fixed stuck threshold for that
//! kind. A kind with less history (or a job of no known kind) keeps the fixed threshold
//! (`stuck_threshold_secs`). The rule is `lateness`, a pure function.
//!
//! `ExpectedDurations` keeps every kind's figures as last read, for what shows a job without
//! reading the store itself (the live stream, the notifications); each pass of the lateness
//! alerts reads them all again, and the API's job reads refresh the kinds they show.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::store::job::Job;
use crate::store::jobs::Running;
use crate::store::outbox::Kind;
use crate::store::{durations, sql};

/// Durations a kind needs before it has an expected duration.
pub const MIN_FOR_EXPECTED: usize = 3;
/// Durations a kind needs before "slower than usual" replaces the fixed stuck threshold.
pub const MIN_FOR_SLOW: usize = 10;
/// The percentile of a kind's durations that "slower than usual" starts from.
pub const SLOW_PERCENTILE: usize = 95;
/// How far past that percentile a running job is slower than usual: 3/2, times 1.5.
pub const SLOW_FACTOR: (i64, i64) = (3, 2);

/// A kind's figures, from the durations of its last succeeded jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// How many durations they come from.
    pub samples: usize,
    /// The median (ms): how long a job of the kind usually takes.
    pub usual_ms: i64,
    /// Past this (ms) a running job of the kind is slower than usual; None while the kind has
    /// fewer than `MIN_FOR_SLOW` durations.
    pub slow_after_ms: Option<i64>,
}

impl Expected {
    /// The figures of a kind's durations (ms, any order); None with fewer than
    /// `MIN_FOR_EXPECTED`.
    pub fn of(durations: &[i64]) -> Option<Expected> {
        if durations.len() < MIN_FOR_EXPECTED {
            return None;
        }
        let mut sorted = durations.to_vec();
        sorted.sort_unstable();
        let slow_after_ms =
            (sorted.len() >= MIN_FOR_SLOW).then(|| percentile(&sorted, SLOW_PERCENTILE).saturating_mul(SLOW_FACTOR.0) / SLOW_FACTOR.1);
        Some(Expected { samples: sorted.len(), usual_ms: percentile(&sorted, 50), slow_after_ms })
    }
}

/// The nearest-rank percentile of sorted values (not empty): the smallest value with at least
/// `percent`% of the values at or below it.
fn percentile(sorted: &[i64], percent: usize) -> i64 {
    let rank = (percent * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Which alert a running job is due as of `now` (ms), if any: slower than usual when its kind
/// has the history for it (`expected`), else stuck when NeverMiss first heard of it before
/// `stuck_cutoff` (ms), the fixed threshold's.
pub fn lateness(job: &Running, expected: Option<&Expected>, stuck_cutoff: i64, now: i64) -> Option<Kind> {
    match expected.and_then(|e| e.slow_after_ms) {
        Some(slow_after) => (now - job.since > slow_after).then_some(Kind::Slow),
        None => (job.created_at < stuck_cutoff).then_some(Kind::Stuck),
    }
}

/// The windows of the kinds of `jobs`, read with them (so what they show is current).
pub fn windows_of(db: &dyn sql::Db, jobs: &[Job]) -> sql::Result<BTreeMap<String, Vec<i64>>> {
    durations::windows_of(db, jobs.iter().filter_map(|job| job.kind.as_deref()))
}

/// Every kind's figures as last read, shared (see the module's comment).
#[derive(Debug, Default)]
pub struct ExpectedDurations {
    kinds: RwLock<Arc<BTreeMap<String, Expected>>>,
}

impl ExpectedDurations {
    /// Replaces every kind's figures with those of `windows` (every kind's durations).
    pub fn replace(&self, windows: &BTreeMap<String, Vec<i64>>) -> Arc<BTreeMap<String, Expected>> {
        let kinds: Arc<BTreeMap<String, Expected>> =
            Arc::new(windows.iter().filter_map(|(kind, durations)| Some((kind.clone(), Expected::of(durations)?))).collect());
        *self.kinds.write().unwrap() = kinds.clone();
        kinds
    }

    /// Replaces the figures of the kinds `windows` holds (a kind with no durations has none).
    pub fn update(&self, windows: &BTreeMap<String, Vec<i64>>) {
        let mut kinds = self.kinds.write().unwrap();
        let mut updated = (**kinds).clone();
        for (kind, durations) in windows {
            match Expected::of(durations) {
                Some(expected) => updated.insert(kind.clone(), expected),
                None => updated.remove(kind),
            };
        }
        *kinds = Arc::new(updated);
    }

    /// A kind's figures, if it has enough history.
    pub fn of(&self, kind: &str) -> Option<Expected> {
        self.kinds.read().unwrap().get(kind).copied()
    }

    /// Sets the `expected_ms` of jobs from their kinds' windows (`windows_of`), and keeps those
    /// figures for what shows jobs afterwards.
    pub fn show(&self, windows: &BTreeMap<String, Vec<i64>>, jobs: &mut [Job]) {
        self.update(windows);
        for job in jobs {
            self.fill(job);
        }
    }

    /// Sets a job's `expected_ms` from its kind's figures.
    pub fn fill(&self, job: &mut Job) {
        job.expected_ms = job.kind.as_deref().and_then(|kind| self.of(kind)).map(|e| e.usual_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::job::JobState;

    fn running(since: i64, created_at: i64) -> Running {
        Running { job_id: "j".into(), state: JobState::Running, kind: Some("k".into()), since, created_at }
    }

    #[test]
    fn a_kind_has_an_expected_duration_from_three_durations_and_a_slow_rule_from_ten() {
        assert_eq!(Expected::of(&[]), None);
        assert_eq!(Expected::of(&[1_000, 2_000]), None);
        assert_eq!(Expected::of(&[3_000, 1_000, 2_000]), Some(Expected { samples: 3, usual_ms: 2_000, slow_after_ms: None }));
        let nine: Vec<i64> = (1..=9).map(|s| s * 1_000).collect();
        assert_eq!(Expected::of(&nine).unwrap().slow_after_ms, None);
        // 1 s to 10 s: the median is 5 s (nearest rank), the 95th percentile 10 s, times 1.5.
        let ten: Vec<i64> = (1..=10).rev().map(|s| s * 1_000).collect();
        assert_eq!(Expected::of(&ten), Some(Expected { samples: 10, usual_ms: 5_000, slow_after_ms: Some(15_000) }));
        // 1 s to 100 s: the 95th percentile is the 95th value.
        let hundred: Vec<i64> = (1..=100).map(|s| s * 1_000).collect();
        assert_eq!(Expected::of(&hundred).unwrap().slow_after_ms, Some(142_500));
    }

    #[test]
    fn with_the_history_for_it_a_job_is_slow_past_the_rule_and_never_stuck() {
        let ten = Expected::of(&[60_000; 10]).unwrap();
        assert_eq!(ten.slow_after_ms, Some(90_000));
        let now = 10_000_000;
        // Running 90 s: not past the rule; 90.001 s: slow. Its first sight (long ago, before the
        // fixed threshold's cutoff) does not matter.
        assert_eq!(lateness(&running(now - 90_000, 0), Some(&ten), now - 1_800_000, now), None);
        assert_eq!(lateness(&running(now - 90_001, 0), Some(&ten), now - 1_800_000, now), Some(Kind::Slow));
    }

    #[test]
    fn without_enough_history_the_fixed_threshold_stays() {
        let now = 10_000_000;
        let cutoff = now - 1_800_000;
        let few = Expected::of(&[1_000; 3]).unwrap();
        for expected in [None, Some(&few)] {
            assert_eq!(lateness(&running(0, cutoff), expected, cutoff, now), None, "heard of at the cutoff: not yet");
            assert_eq!(lateness(&running(0, cutoff - 1), expected, cutoff, now), Some(Kind::Stuck));
        }
    }

    #[test]
    fn the_shared_figures_fill_a_job_of_a_known_kind_only() {
        let shared = ExpectedDurations::default();
        shared.replace(&BTreeMap::from([("a".to_owned(), vec![4_000; 3]), ("b".to_owned(), vec![1_000])]));
        assert_eq!(shared.of("a").map(|e| e.usual_ms), Some(4_000));
        assert_eq!(shared.of("b"), None, "one duration is no history");
        shared.update(&BTreeMap::from([("b".to_owned(), vec![2_000; 5]), ("a".to_owned(), vec![])]));
        assert_eq!(shared.of("a"), None);
        assert_eq!(shared.of("b").map(|e| e.usual_ms), Some(2_000));
    }
}
