//! Time, injected. The only place that reads the system's wall clock.
//!
//! Leases use wall-clock milliseconds since the Unix epoch (protocol §2.1, §4.10); the
//! owner's self-fence uses a monotonic reading (§4.4a). Both come from a [`Clock`] so
//! tests drive them with a [`ManualClock`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall and monotonic time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Monotonic time since an arbitrary fixed origin; never goes backwards.
    fn monotonic(&self) -> Duration;
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The real clocks of this machine.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is now.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }

    /// A shared handle to a new system clock.
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock::new())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one sanctioned read of the wall clock
    fn now_ms(&self) -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to. `advance` moves wall and monotonic time
/// together; `jump_wall` moves wall time alone, like a clock change or a suspended
/// laptop (protocol §4.10).
#[derive(Debug)]
pub struct ManualClock {
    wall_ms: AtomicI64,
    monotonic_ns: AtomicU64,
}

impl ManualClock {
    /// A clock at `wall_ms` (ms since the epoch), its monotonic time at zero.
    pub fn new(wall_ms: i64) -> Self {
        ManualClock {
            wall_ms: AtomicI64::new(wall_ms),
            monotonic_ns: AtomicU64::new(0),
        }
    }

    /// A shared handle, for code that takes a [`SharedClock`].
    pub fn shared(wall_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock::new(wall_ms))
    }

    /// Moves wall and monotonic time forward together.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.wall_ms.fetch_add(ms, Ordering::SeqCst);
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.monotonic_ns.fetch_add(ns, Ordering::SeqCst);
    }

    /// [`ManualClock::advance`] by `ms` milliseconds.
    pub fn advance_ms(&self, ms: u64) {
        self.advance(Duration::from_millis(ms));
    }

    /// Moves the wall clock by `delta_ms` (either way) without moving monotonic time.
    pub fn jump_wall(&self, delta_ms: i64) {
        self.wall_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.monotonic_ns.load(Ordering::SeqCst))
    }
}

/// A moment as a calendar date and a time of day, in the zone its milliseconds are
/// counted in (UTC, or local once an offset is added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    /// Days since 1970-01-01.
    pub days: i64,
}

impl Civil {
    /// `ms` since 1970-01-01T00:00:00 (Howard Hinnant's days-to-civil).
    pub fn of(ms: i64) -> Civil {
        let secs = ms.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        Civil {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day: doy - (153 * mp + 2) / 5 + 1,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
            days,
        }
    }
}

/// The local time zone's offset from UTC at `at_ms`, in seconds (east positive), as
/// the C library sees it (`TZ`, `/etc/localtime`); 0 when it cannot tell. For
/// showing times of day: what a screen prints as "14:02:11".
#[allow(unsafe_code)]
pub fn local_offset_s(at_ms: i64) -> i32 {
    let secs = at_ms.div_euclid(1000) as libc::time_t;
    // SAFETY: `tm` is plain data (all zeroes is a valid value); `localtime_r` reads
    // `secs` and writes only into the `tm` it is given.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let filled = unsafe { libc::localtime_r(&secs, &mut tm) };
    if filled.is_null() {
        return 0;
    }
    i32::try_from(tm.tm_gmtoff).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        assert_eq!(clock.monotonic(), Duration::ZERO);
        clock.advance_ms(250);
        assert_eq!(
            (clock.now_ms(), clock.monotonic()),
            (1_250, Duration::from_millis(250))
        );
        clock.jump_wall(-3_600_000);
        assert_eq!(clock.now_ms(), 1_250 - 3_600_000);
        assert_eq!(clock.monotonic(), Duration::from_millis(250));
    }

    #[test]
    fn system_clock_reads_a_plausible_wall_time() {
        let clock = SystemClock::new();
        // 2020-01-01 in ms; any machine running this is later than that.
        assert!(clock.now_ms() > 1_577_836_800_000);
    }
}
