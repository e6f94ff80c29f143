//! [`Rejected`]: why an attempt got no setup permit, and when to come back.

use std::fmt;
use std::time::Duration;

use elastic_cpu_core::{RejectKind, Rejection};

/// The shortest retry-after hint.
pub const RETRY_AFTER_MIN: Duration = Duration::from_millis(100);
/// Every retry-after hint is below this.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(30);

/// Why an attempt was refused.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The queue was full (newest-first order: this attempt was the oldest and made room).
    QueueFull,
    /// It could not have started within its deadline: refused at once, no setup CPU spent.
    WouldExpire,
    /// It waited past its deadline: dropped before its setup started.
    Expired,
    /// The gate is closed: its governor is gone.
    Closed,
}

/// An attempt the gate refused, with a hint for when to retry.
///
/// Each refusal books a retry slot: the next one free after the attempts queued now and after
/// the slots booked by earlier refusals, one setup's time apart at the current admission rate
/// (the setup class's token rate over the measured CPU per setup). So the hint grows with the
/// crowd of refused clients, and they come back about as fast as the gate admits. The time to
/// the slot is kept within [`RETRY_AFTER_MIN`] ..= [`RETRY_AFTER_MAX`] / 2, then stretched by a
/// random factor in `[1, 2)` so clients told the same time spread their retries. So it always
/// lies in `RETRY_AFTER_MIN .. RETRY_AFTER_MAX`.
///
/// ```
/// use elastic_cpu_pacer::gate::{RejectReason, Rejected, RETRY_AFTER_MAX, RETRY_AFTER_MIN};
/// fn tell_client(r: &Rejected) -> String {
///     assert!(r.retry_after() >= RETRY_AFTER_MIN && r.retry_after() < RETRY_AFTER_MAX);
///     format!("busy ({}), retry in {} ms", r, r.retry_after().as_millis())
/// }
/// # let _ = tell_client;
/// ```
#[derive(Debug, Clone)]
pub struct Rejected {
    reason: RejectReason,
    retry_after: Duration,
}

impl Rejected {
    pub(crate) fn from_core(r: Rejection) -> Rejected {
        let reason = match r.kind {
            RejectKind::QueueFull => RejectReason::QueueFull,
            RejectKind::WouldExpire => RejectReason::WouldExpire,
            RejectKind::Expired => RejectReason::Expired,
            _ => RejectReason::Closed,
        };
        Rejected {
            reason,
            retry_after: jittered(r.retry_base, fastrand::f64()),
        }
    }

    /// Why.
    pub fn reason(&self) -> RejectReason {
        self.reason
    }

    /// How long the client should wait before trying again (with jitter; see the type docs).
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }
}

/// `base` clamped into `RETRY_AFTER_MIN ..= RETRY_AFTER_MAX / 2`, times `1 + u` (`u` in
/// `[0, 1)`).
pub(crate) fn jittered(base: Duration, u: f64) -> Duration {
    let base = base.clamp(RETRY_AFTER_MIN, RETRY_AFTER_MAX / 2);
    let hint = base.mul_f64(1.0 + u.clamp(0.0, 1.0));
    // u just below 1 can round up to the bound itself.
    hint.min(RETRY_AFTER_MAX - Duration::from_nanos(1))
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RejectReason::QueueFull => "the admission queue is full",
            RejectReason::WouldExpire => "it could not start within its deadline",
            RejectReason::Expired => "it waited past its deadline",
            RejectReason::Closed => "the gate is closed",
        })
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connection setup refused: {}; retry after {:?}",
            self.reason, self.retry_after
        )
    }
}

impl Rejected {
    /// The refusal as an HTTP response, for a server to write before closing the connection:
    /// `503 Service Unavailable` with `Retry-After` in whole seconds, rounded up (HTTP has no
    /// finer unit).
    ///
    /// ```
    /// # fn hint(r: &elastic_cpu_pacer::gate::Rejected) {
    /// let response = r.http_503();
    /// assert!(response.starts_with("HTTP/1.1 503 "));
    /// # }
    /// ```
    pub fn http_503(&self) -> String {
        let secs = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: {secs}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    }
}

impl std::error::Error for Rejected {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_refusal_rounds_the_hint_up_to_seconds() {
        let r = |ms| Rejected {
            reason: RejectReason::WouldExpire,
            retry_after: Duration::from_millis(ms),
        };
        assert!(r(100).http_503().contains("\r\nRetry-After: 1\r\n"));
        assert!(r(2000).http_503().contains("\r\nRetry-After: 2\r\n"));
        assert!(r(2001).http_503().contains("\r\nRetry-After: 3\r\n"));
        assert!(r(2001).http_503().ends_with("\r\n\r\n"));
    }

    #[test]
    fn the_hint_is_bounded_and_spread() {
        for base in [Duration::ZERO, Duration::from_millis(300), Duration::MAX] {
            for u in [0.0, 0.5, 0.999_999_999_999, 1.0] {
                let h = jittered(base, u);
                assert!(
                    h >= RETRY_AFTER_MIN && h < RETRY_AFTER_MAX,
                    "{base:?} {u} {h:?}"
                );
            }
        }
        assert_eq!(
            jittered(Duration::from_millis(300), 0.0),
            Duration::from_millis(300)
        );
        assert_eq!(
            jittered(Duration::from_millis(300), 0.5),
            Duration::from_millis(450)
        );
    }
}
