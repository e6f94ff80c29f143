//! tokio's task poll hooks (with `--cfg tokio_unstable`): they read the thread's poll state and
//! record each poll into the probe.

use crate::poll_state::{Instant, POLL};
use crate::shared::{nanos, Shared};

#[inline]
pub(crate) fn before_poll(poll_time_every: u32) {
    let _ = POLL.try_with(|p| {
        p.elastic.set(false);
        let left = p.countdown.get();
        if left == 0 {
            p.countdown.set(poll_time_every - 1);
            p.start.set(Some(Instant::now()));
        } else {
            p.countdown.set(left - 1);
            p.start.set(None);
        }
    });
}

#[inline]
pub(crate) fn after_poll(shared: &std::sync::Arc<Shared>, meta: &tokio::runtime::TaskMeta<'_>) {
    let queue_ns = meta.schedule_latency().map(nanos);
    let recorded = POLL.try_with(|p| {
        let elastic = p.elastic.replace(false);
        // Only measured polls read the clock (see `poll_time_every`).
        let poll_ns = p
            .start
            .take()
            .map(|s| nanos(Instant::now().saturating_duration_since(s)));
        match p.owned.get() {
            (id, index) if id == shared.id => {
                shared.record_owned(index, queue_ns, poll_ns, elastic)
            }
            _ => {
                if let Some(index) = shared.record(queue_ns, poll_ns, elastic) {
                    p.owned.set((shared.id, index));
                }
            }
        }
    });
    if recorded.is_err() {
        shared.record(queue_ns, None, false);
    }
}
