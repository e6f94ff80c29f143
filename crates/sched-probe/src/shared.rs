//! The state every clone of a [`Probe`](crate::Probe) shares, and recording a sample into it:
//! into the calling thread's own worker slot (claimed on its first sample, released when the
//! thread exits), else into the overflow slot.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::config::ProbeConfig;
use crate::outliers::{Record, TrapWindow};
use crate::slot::{Layout, RecordSlot};
use crate::window::WindowState;

/// Per-worker slots (worker index modulo this); one more slot takes everything off-runtime.
pub(crate) const SLOTS: usize = 64;
pub(crate) const OVERFLOW: usize = SLOTS;

/// What every clone of a [`Probe`](crate::Probe) points to.
pub(crate) struct ProbeState {
    /// Unique among all probes of the process (never 0): names this probe in a thread's cache
    /// of the slot it owns (see `poll_state`).
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    pub(crate) id: u64,
    pub(crate) config: ProbeConfig,
    /// Bucket layout of the histograms (shared by slots and intervals).
    pub(crate) layout: Layout,
    /// `SLOTS` per-worker slots plus the overflow slot, each allocated on first use.
    /// Each on cache lines of its own: a slot's owner writes its header on every poll.
    pub(crate) slots: Box<[OnceLock<Box<CachePadded<RecordSlot>>>]>,
    pub(crate) window: Mutex<WindowState>,
    /// The quiet window: copies of the intervals marked quiet, as many as `window` holds.
    pub(crate) quiet: Mutex<WindowState>,
    /// `config.alarm_at` in nanoseconds, minus one: a queue latency *above* this alarms.
    /// `u64::MAX` (never) without `alarm_at`: even a latency that saturates to `u64::MAX` ns
    /// must not alarm then.
    pub(crate) alarm_above: u64,
    /// Foreground polls whose queue latency reached `config.alarm_at`.
    pub(crate) alarms: AtomicU64,
    /// Raised by an alarm, lowered by [`Probe::take_alarm`](crate::Probe::take_alarm).
    pub(crate) raised: AtomicBool,
    /// Unparked when the alarm is raised.
    pub(crate) listener: Mutex<Option<Thread>>,
    /// The outlier threshold in nanoseconds: a poll or foreground wait longer is recorded as an
    /// outlier. `u64::MAX`: the trap is off.
    pub(crate) outlier_above: AtomicU64,
    /// What `at` in outlier records counts from.
    pub(crate) born: quanta::Instant,
    /// The outliers collected from the slots, a window of them.
    pub(crate) outliers: Mutex<TrapWindow>,
    /// Set once [`Probe::instrument`](crate::Probe::instrument) has installed the task hooks
    /// on a builder (never without `tokio_unstable`).
    pub(crate) hooked: AtomicBool,
}

/// What the hooks (or a caller of `record_poll`) know of a poll found over the threshold.
pub(crate) struct Suspect {
    pub(crate) site: &'static std::panic::Location<'static>,
    /// tokio's task id, 0 unknown.
    pub(crate) task: u64,
    pub(crate) queue_ns: Option<u64>,
    pub(crate) poll_ns: Option<u64>,
    /// When the poll ended, if the clock was read.
    pub(crate) end: Option<quanta::Instant>,
    pub(crate) elastic: bool,
}

impl ProbeState {
    /// A foreground poll waited at least `alarm_at`: count it, raise the alarm, notify.
    #[cold]
    #[inline(never)]
    fn alarm(&self) {
        self.alarms.fetch_add(1, Ordering::Relaxed);
        if !self.raised.load(Ordering::Relaxed) && !self.raised.swap(true, Ordering::AcqRel) {
            if let Some(t) = &*self.listener.lock().unwrap_or_else(PoisonError::into_inner) {
                t.unpark();
            }
        }
    }

    /// Whether a poll with these measures is an outlier: one comparison each.
    #[inline]
    pub(crate) fn is_outlier(
        &self,
        queue_ns: Option<u64>,
        poll_ns: Option<u64>,
        elastic: bool,
    ) -> bool {
        let above = self.outlier_above.load(Ordering::Relaxed);
        poll_ns.is_some_and(|p| p > above) || (!elastic && queue_ns.is_some_and(|q| q > above))
    }

    /// Records an outlier poll and / or wait into slot `index`'s ring (the overflow slot for
    /// `None`). Returns when it ended (read now if the caller had not).
    #[cold]
    #[inline(never)]
    pub(crate) fn trap(&self, index: Option<usize>, s: Suspect) -> quanta::Instant {
        let above = self.outlier_above.load(Ordering::Relaxed);
        let end = s.end.unwrap_or_else(quanta::Instant::now);
        let at = nanos(end.saturating_duration_since(self.born));
        let slot = self.slot(index.unwrap_or(OVERFLOW));
        let site = crate::sites::intern(s.site);
        let record = |wait, nanos, at| Record {
            wait,
            elastic: s.elastic,
            site,
            nanos,
            at,
            task: s.task,
            holders: [None, None],
        };
        let poll_ns = s.poll_ns.unwrap_or(0);
        if let Some(q) = s.queue_ns.filter(|&q| q > above && !s.elastic) {
            // The wait ended where the poll began.
            slot.push_outlier(record(true, q, at.saturating_sub(poll_ns)));
        }
        if poll_ns > above {
            slot.push_outlier(record(false, poll_ns, at));
        }
        end
    }

    /// Slot `index`, allocated on first use.
    #[inline]
    fn slot(&self, index: usize) -> &RecordSlot {
        self.slots[index].get_or_init(|| {
            Box::new(CachePadded::new(RecordSlot::new(
                &self.layout,
                index == OVERFLOW,
            )))
        })
    }

    /// Raises the alarm if this is a foreground poll that waited past `alarm_at`.
    #[inline]
    pub(crate) fn check_alarm(&self, queue_ns: Option<u64>, elastic: bool) {
        if !elastic && queue_ns.is_some_and(|q| q > self.alarm_above) {
            self.alarm();
        }
    }

    /// Records one sample into the calling thread's slot. Returns the index of the worker slot
    /// the thread owns, if it owns one (it keeps it until it exits), for the caller to cache.
    #[inline]
    pub(crate) fn record(
        self: &Arc<Self>,
        queue_ns: Option<u64>,
        poll_ns: Option<u64>,
        elastic: bool,
    ) -> Option<usize> {
        self.check_alarm(queue_ns, elastic);
        if let Some(worker) = tokio::runtime::worker_index() {
            let index = worker % SLOTS;
            let slot = self.slot(index);
            let token = token();
            let owner = slot.owner.load(Relaxed);
            if (owner != 0 && owner == token) || (owner == 0 && claim(self, slot, index, token)) {
                slot.bump(&self.layout, queue_ns, poll_ns, elastic);
                return Some(index);
            }
        }
        self.slot(OVERFLOW)
            .bump(&self.layout, queue_ns, poll_ns, elastic);
        None
    }

    /// [`record`](Self::record), and the outlier trap for a poll spawned at `site`.
    #[inline]
    pub(crate) fn record_from(
        self: &Arc<Self>,
        site: &'static std::panic::Location<'static>,
        queue_ns: Option<u64>,
        poll_ns: Option<u64>,
        elastic: bool,
    ) {
        let index = self.record(queue_ns, poll_ns, elastic);
        if self.is_outlier(queue_ns, poll_ns, elastic) {
            let task = tokio::task::try_id().map_or(0, task_number);
            let suspect = Suspect {
                site,
                task,
                queue_ns,
                poll_ns,
                end: None,
                elastic,
            };
            self.trap(index, suspect);
        }
    }

    /// The outlier trap for a poll that was not recorded into the histograms.
    #[cold]
    pub(crate) fn trap_poll(
        self: &Arc<Self>,
        site: &'static std::panic::Location<'static>,
        poll_ns: Option<u64>,
        elastic: bool,
    ) {
        // Finds (or claims) the thread's slot; records nothing.
        let index = self.record(None, None, elastic);
        let task = tokio::task::try_id().map_or(0, task_number);
        let suspect = Suspect {
            site,
            task,
            queue_ns: None,
            poll_ns,
            end: None,
            elastic,
        };
        self.trap(index, suspect);
    }

    /// Sets the outlier threshold (`None`: off).
    pub(crate) fn set_outlier_threshold(&self, threshold: Option<Duration>) {
        let above = threshold.map_or(u64::MAX, |t| nanos(t).min(u64::MAX - 1));
        self.outlier_above.store(above, Ordering::Relaxed);
    }

    /// The outlier threshold (`None`: off).
    pub(crate) fn outlier_threshold(&self) -> Option<Duration> {
        match self.outlier_above.load(Ordering::Relaxed) {
            u64::MAX => None,
            above => Some(Duration::from_nanos(above)),
        }
    }

    /// Collects every slot's new outlier records into one interval of the outlier window.
    pub(crate) fn collect_outliers(&self) {
        let mut window = self.outliers.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut records, mut missed) = (Vec::new(), 0);
        for (index, slot) in self.slots.iter().enumerate() {
            if let Some(ring) = slot.get().and_then(|s| s.outliers.get()) {
                missed += window.collect_from(index, ring, &mut records);
            }
        }
        window.push(records, missed);
    }

    /// Records into worker slot `index`, which the calling thread owns (cached from `record`).
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    #[inline]
    pub(crate) fn record_owned(
        &self,
        index: usize,
        queue_ns: Option<u64>,
        poll_ns: Option<u64>,
        elastic: bool,
    ) {
        self.check_alarm(queue_ns, elastic);
        if let Some(slot) = self.slots[index].get() {
            slot.bump(&self.layout, queue_ns, poll_ns, elastic);
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh probe id (see [`ProbeState::id`]).
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Relaxed)
}

/// tokio's task id as a number (its `Display` is the number).
pub(crate) fn task_number(id: tokio::task::Id) -> u64 {
    struct Digits(u64);
    impl std::fmt::Write for Digits {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for b in s.bytes().filter(u8::is_ascii_digit) {
                self.0 = self.0.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
            }
            Ok(())
        }
    }
    let mut d = Digits(0);
    let _ = std::fmt::write(&mut d, format_args!("{id}"));
    d.0
}

#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's token (0 = not assigned yet).
    static TOKEN: Cell<u64> = const { Cell::new(0) };
    /// Slots this thread owns, released when it exits.
    static CLAIMS: RefCell<Claims> = const { RefCell::new(Claims { token: 0, slots: Vec::new() }) };
}

struct Claims {
    token: u64,
    slots: Vec<(Weak<ProbeState>, usize)>,
}

impl Drop for Claims {
    fn drop(&mut self) {
        // This thread's polls must stop writing the slots it gives up.
        crate::poll_state::forget_owned_slot();
        for (shared, index) in self.slots.drain(..) {
            if let Some(slot) = shared.upgrade().as_ref().and_then(|s| s.slots[index].get()) {
                // Release pairs with the next owner's claim: it continues from our counts.
                let _ = slot.owner.compare_exchange(self.token, 0, Release, Relaxed);
            }
        }
    }
}

#[inline]
pub(crate) fn token() -> u64 {
    TOKEN
        .try_with(|t| match t.get() {
            0 => {
                let v = NEXT_TOKEN.fetch_add(1, Relaxed);
                t.set(v);
                v
            }
            v => v,
        })
        .unwrap_or(0)
}

/// Tries to make the calling thread (with `token`) the owner of worker slot `index`.
#[cold]
fn claim(shared: &Arc<ProbeState>, slot: &RecordSlot, index: usize, token: u64) -> bool {
    if token == 0
        || slot
            .owner
            .compare_exchange(0, token, Acquire, Relaxed)
            .is_err()
    {
        return false;
    }
    let registered = CLAIMS.try_with(|claims| {
        let mut claims = claims.borrow_mut();
        claims.token = token;
        claims.slots.push((Arc::downgrade(shared), index));
    });
    if registered.is_err() {
        // Thread is exiting: nobody would release the slot.
        slot.owner.store(0, Release);
        return false;
    }
    true
}
