//! The rate a quota is measured by, as Kafka's metrics measure it (`Rate` over a `SampledStat`):
//! `quota.window.num` samples of `quota.window.size.seconds` each, the rate being what the
//! samples hold over the time they span (at least all but one window, so a first burst is not
//! divided by a few milliseconds). A request that takes the rate over its quota is throttled
//! for as long as the rate needs to fall back to it, were nothing else recorded. Pure: the
//! caller gives the time.

use std::collections::{BTreeMap, VecDeque};

use super::{QuotaKey, QuotaTags};

/// How the rates are sampled (`quota.window.num`, `quota.window.size.seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub samples: u32,
    pub size_ms: i64,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: i64,
    total: f64,
}

/// One measured rate: its samples, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Rate {
    samples: VecDeque<Sample>,
    last_recorded_ms: i64,
}

impl Rate {
    /// Adds `value` at `now_ms`, in a new sample once the current one spans a whole window.
    pub fn record(&mut self, value: f64, now_ms: i64, window: Window) {
        match self.samples.back_mut() {
            Some(s) if now_ms - s.start_ms < window.size_ms => s.total += value,
            _ => {
                self.samples.push_back(Sample { start_ms: now_ms, total: value });
                while self.samples.len() > window.samples.max(1) as usize {
                    self.samples.pop_front();
                }
            }
        }
        self.last_recorded_ms = now_ms;
    }

    /// Drops the samples too old to count.
    fn purge(&mut self, now_ms: i64, window: Window) {
        let expiry = window.samples as i64 * window.size_ms;
        while self.samples.front().is_some_and(|s| now_ms - s.start_ms >= expiry) {
            self.samples.pop_front();
        }
    }

    /// The time the rate is taken over, in milliseconds: since the oldest sample began, but
    /// at least all windows but one.
    pub fn window_ms(&mut self, now_ms: i64, window: Window) -> i64 {
        self.purge(now_ms, window);
        let oldest = self.samples.front().map_or(now_ms, |s| s.start_ms);
        let mut elapsed = now_ms - oldest;
        let full = elapsed / window.size_ms;
        let min_full = window.samples as i64 - 1;
        if full < min_full {
            elapsed += (min_full - full) * window.size_ms;
        }
        elapsed.max(1)
    }

    /// What was recorded per second.
    pub fn per_second(&mut self, now_ms: i64, window: Window) -> f64 {
        let window_ms = self.window_ms(now_ms, window);
        let total: f64 = self.samples.iter().map(|s| s.total).sum();
        total / (window_ms as f64 / 1000.0)
    }

    /// How long, in milliseconds, the rate needs to fall back to `bound`: 0 within it.
    pub fn throttle_ms(&mut self, bound: f64, now_ms: i64, window: Window) -> u64 {
        let rate = self.per_second(now_ms, window);
        if rate <= bound {
            return 0;
        }
        ((rate - bound) / bound * self.window_ms(now_ms, window) as f64).round() as u64
    }
}

/// Rates not recorded for this long are forgotten (Apache's inactive sensor expiry).
const INACTIVE_MS: i64 = 3_600_000;
/// Rates kept at most before the inactive ones are swept.
const RATES_SWEEP_AT: usize = 10_000;

/// Every rate this broker measures, by quota key and tags.
#[derive(Debug, Default)]
pub struct QuotaRates {
    rates: BTreeMap<(QuotaKey, QuotaTags), Rate>,
}

impl QuotaRates {
    /// Records `value` against the rate of `key` under `tags`, bound by `bound`; how long the
    /// client is throttled for it.
    pub fn record(
        &mut self,
        key: QuotaKey,
        tags: QuotaTags,
        bound: f64,
        value: f64,
        now_ms: i64,
        window: Window,
    ) -> u64 {
        if self.rates.len() >= RATES_SWEEP_AT {
            self.rates.retain(|_, r| now_ms - r.last_recorded_ms < INACTIVE_MS);
        }
        let rate = self.rates.entry((key, tags)).or_default();
        rate.record(value, now_ms, window);
        rate.throttle_ms(bound, now_ms, window)
    }

    /// Takes back a value recorded at `now_ms` (a throttled fetch sends nothing).
    pub fn unrecord(&mut self, key: QuotaKey, tags: QuotaTags, value: f64, now_ms: i64, window: Window) {
        if let Some(rate) = self.rates.get_mut(&(key, tags)) {
            rate.record(-value, now_ms, window);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Window = Window { samples: 11, size_ms: 1000 };

    #[test]
    fn a_first_burst_is_spread_over_all_windows_but_one() {
        let mut r = Rate::default();
        r.record(10_000.0, 0, WINDOW);
        // 10 000 bytes over at least 10 s.
        assert_eq!(r.per_second(0, WINDOW), 1000.0);
        assert_eq!(r.throttle_ms(2000.0, 0, WINDOW), 0);
        // At 500 bytes/s: twice the bound, so as long again as the window to fall back.
        assert_eq!(r.throttle_ms(500.0, 0, WINDOW), 10_000);
    }

    #[test]
    fn old_samples_stop_counting() {
        let mut r = Rate::default();
        r.record(10_000.0, 0, WINDOW);
        for t in 1..=10 {
            r.record(0.0, t * 1000, WINDOW);
        }
        assert!(r.per_second(10_000, WINDOW) > 900.0);
        r.record(0.0, 11_000, WINDOW);
        assert_eq!(r.per_second(11_000, WINDOW), 0.0);
    }

    #[test]
    fn a_steady_rate_is_measured_as_itself() {
        let mut r = Rate::default();
        for t in 0..100 {
            r.record(100.0, t * 100, WINDOW);
        }
        let rate = r.per_second(9_999, WINDOW);
        assert!((rate - 1000.0).abs() < 110.0, "{rate}");
    }

    #[test]
    fn rates_are_per_tags_and_unrecord_takes_back() {
        let mut rates = QuotaRates::default();
        let a = QuotaTags { user: "a".into(), client_id: String::new() };
        let b = QuotaTags { user: "b".into(), client_id: String::new() };
        let key = QuotaKey::ConsumerByteRate;
        assert!(rates.record(key, a.clone(), 100.0, 5_000.0, 0, WINDOW) > 0);
        assert_eq!(rates.record(key, b, 100.0, 500.0, 0, WINDOW), 0);
        rates.unrecord(key, a.clone(), 5_000.0, 0, WINDOW);
        assert_eq!(rates.record(key, a, 100.0, 500.0, 0, WINDOW), 0);
    }
}
