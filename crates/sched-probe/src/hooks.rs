//! tokio's task poll hooks (with `--cfg tokio_unstable`): they read the thread's poll state and
//! record each poll into the probe, and hand polls and waits over the threshold to the outlier
//! trap.

use crate::poll_state::{Instant, POLL};
use crate::shared::{nanos, task_number, ProbeState, Suspect};

#[inline]
pub(crate) fn before_poll(poll_time_every: u32) {
    let _ = POLL.try_with(|p| {
        p.elastic.set(false);
        let left = p.countdown.get();
        let sampled = left == 0;
        p.countdown.set(if sampled {
            poll_time_every - 1
        } else {
            left - 1
        });
        p.sampled.set(sampled);
        // While the thread is on the alert every poll is timed (see `alert_until`).
        let timed = sampled || p.alert_until.get().is_some();
        p.start.set(timed.then(Instant::now));
    });
}

#[inline]
pub(crate) fn after_poll(shared: &std::sync::Arc<ProbeState>, meta: &tokio::runtime::TaskMeta<'_>) {
    let queue_ns = meta.schedule_latency().map(nanos);
    let recorded = POLL.try_with(|p| {
        let elastic = p.elastic.replace(false);
        // Only timed polls read the clock (see `poll_time_every` and `alert_until`).
        let end = p.start.take().map(|s| (s, Instant::now()));
        let poll_ns = end.map(|(s, e)| nanos(e.saturating_duration_since(s)));
        let sampled_ns = poll_ns.filter(|_| p.sampled.get());
        let index = match p.owned.get() {
            (id, index) if id == shared.id => {
                shared.record_owned(index, queue_ns, sampled_ns, elastic);
                Some(index)
            }
            _ => {
                let index = shared.record(queue_ns, sampled_ns, elastic);
                if let Some(index) = index {
                    p.owned.set((shared.id, index));
                }
                index
            }
        };
        if shared.is_outlier(queue_ns, poll_ns, elastic) {
            let suspect = Suspect {
                site: meta.spawned_at(),
                task: task_number(meta.id()),
                queue_ns,
                poll_ns,
                end: end.map(|(_, e)| e),
                elastic,
            };
            let now = shared.trap(index, suspect);
            p.alert_until.set(Some(now + shared.config.window));
        } else if let (Some(until), Some((_, now))) = (p.alert_until.get(), end) {
            if now > until {
                p.alert_until.set(None);
            }
        }
    });
    if recorded.is_err() {
        shared.record(queue_ns, None, false);
    }
}
