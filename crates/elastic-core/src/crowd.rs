//! The refused crowd: when each refused client was told to come back, so the retry-after hint
//! grows with the number of clients waiting to retry (docs/design.md §5, "Connection gate").
//!
//! A gate's queue holds only the attempts that can start within their deadlines; in a storm
//! most clients are refused, and a hint that counts only the queue tells all of them about the
//! same short time: they come back together and are refused again, and refusing them costs
//! CPU (accept, read, answer, close) the service needs. So each refusal books the next free
//! slot after the queue and after every slot booked before it, one setup's time apart at the
//! current admission rate: its hint is the time to that slot. Refused clients then come back
//! about as fast as the gate admits, however many they are; once refusals stop, the booked
//! time runs out and hints are the queue's own again.

/// No slot starts further ahead than this (60 s).
pub(crate) const MAX_AHEAD_NANOS: u64 = 60_000_000_000;

/// The end of the last booked slot, in the clock's nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Crowd {
    booked_until: u64,
}

impl Crowd {
    /// Book a slot for a client refused at `now` that could start `ready` from now (after the
    /// attempts queued now): it starts at the later of that and the end of the last slot
    /// booked, and lasts `spacing` (one setup's time at the current rate). Returns how long
    /// from `now` until it starts.
    pub(crate) fn book(&mut self, now: u64, ready: u64, spacing: u64) -> u64 {
        let start = self.slot_start(now, ready);
        let end = start
            .saturating_add(spacing)
            .min(now.saturating_add(MAX_AHEAD_NANOS));
        self.booked_until = self.booked_until.max(end);
        start - now
    }

    /// How long after `now` a slot booked now would start, without booking it.
    pub(crate) fn peek(&self, now: u64, ready: u64) -> u64 {
        self.slot_start(now, ready) - now
    }

    fn slot_start(&self, now: u64, ready: u64) -> u64 {
        self.booked_until
            .max(now.saturating_add(ready))
            .min(now.saturating_add(MAX_AHEAD_NANOS))
    }

    /// Refused clients whose slots are still ahead, at `spacing` per client.
    pub(crate) fn waiting(&self, now: u64, spacing: u64) -> u64 {
        self.booked_until.saturating_sub(now) / spacing.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn each_refusal_books_the_next_slot() {
        let mut c = Crowd::default();
        // The first could start in 50 ms; slots are 10 ms apart.
        assert_eq!(c.book(0, 50 * MS, 10 * MS), 50 * MS);
        assert_eq!(c.book(0, 50 * MS, 10 * MS), 60 * MS);
        assert_eq!(c.peek(0, 50 * MS), 70 * MS);
        assert_eq!(c.waiting(0, 10 * MS), 7);
        // 30 ms later: the next slot is still after the last booked.
        assert_eq!(c.book(30 * MS, 0, 10 * MS), 40 * MS);
        assert_eq!(c.waiting(30 * MS, 10 * MS), 5);
        // A queue that clears later than the booked slots goes first.
        assert_eq!(c.book(30 * MS, 200 * MS, 10 * MS), 200 * MS);
        assert_eq!(c.waiting(30 * MS, 10 * MS), 21);
    }

    #[test]
    fn booked_time_runs_out() {
        let mut c = Crowd::default();
        for i in 0..100 {
            assert_eq!(c.book(0, 0, MS), i * MS);
        }
        assert_eq!(c.waiting(0, MS), 100);
        assert_eq!(c.waiting(100 * MS, MS), 0);
        assert_eq!(c.book(100 * MS, 0, MS), 0);
    }

    #[test]
    fn no_slot_starts_past_the_horizon() {
        let mut c = Crowd::default();
        assert_eq!(c.book(0, u64::MAX, u64::MAX), MAX_AHEAD_NANOS);
        assert_eq!(c.book(5, 0, u64::MAX), MAX_AHEAD_NANOS - 5);
        assert_eq!(c.waiting(5, 0), MAX_AHEAD_NANOS);
        assert_eq!(c.book(u64::MAX - 1, 0, 10), 0);
        assert_eq!(c.book(u64::MAX - 1, 0, 10), 1);
    }
}
