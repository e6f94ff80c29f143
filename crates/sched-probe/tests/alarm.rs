//! The probe's backlog alarm (`ProbeConfig::alarm_at`): which polls raise it, how it is taken,
//! and who is woken. Counts and flags only; the only deadlines are generous ones for "did the
//! listener wake at all".

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use elastic_cpu_probe::{Probe, ProbeConfig};

const AT: Duration = Duration::from_millis(1);

fn probe(alarm_at: Option<Duration>) -> Probe {
    Probe::new(ProbeConfig {
        alarm_at,
        ..ProbeConfig::default()
    })
    .unwrap()
}

#[test]
fn threshold_is_inclusive() {
    let p = probe(Some(AT));
    p.record_poll(Some(AT - Duration::from_nanos(1)), None, false);
    assert_eq!(p.alarms(), 0);
    assert!(!p.take_alarm());
    p.record_poll(Some(AT), None, false);
    assert_eq!(p.alarms(), 1);
    assert!(p.take_alarm());
    p.record_poll(Some(AT + Duration::from_nanos(1)), None, false);
    assert_eq!(p.alarms(), 2);
    // The samples are recorded as usual, alarm or not.
    p.rotate();
    assert_eq!(p.window().queue_latency.foreground.count, 3);
}

#[test]
fn elastic_polls_never_alarm() {
    let p = probe(Some(AT));
    for q in [AT, Duration::from_secs(5), Duration::MAX] {
        p.record_poll(Some(q), Some(Duration::from_secs(1)), true);
    }
    assert_eq!(p.alarms(), 0);
    assert!(!p.take_alarm());
    p.rotate();
    assert_eq!(p.window().queue_latency.elastic.count, 3);
}

#[test]
fn poll_time_alone_never_alarms() {
    // A long poll is not a long wait: only queue latency counts.
    let p = probe(Some(AT));
    p.record_poll(None, Some(Duration::from_secs(1)), false);
    assert_eq!(p.alarms(), 0);
    assert!(!p.take_alarm());
}

#[test]
fn none_never_alarms() {
    let p = probe(None);
    for q in [AT, Duration::from_secs(3600), Duration::MAX] {
        p.record_poll(Some(q), None, false);
    }
    assert_eq!(p.alarms(), 0);
    assert!(!p.take_alarm());
    // The largest threshold there is still alarms on a wait that long.
    let p = probe(Some(Duration::MAX));
    p.record_poll(Some(Duration::from_secs(3600)), None, false);
    assert_eq!(p.alarms(), 0);
    p.record_poll(Some(Duration::MAX), None, false);
    assert_eq!(p.alarms(), 1);
}

#[test]
fn take_alarm_lowers_until_the_next_alarm() {
    let p = probe(Some(AT));
    let clone = p.clone(); // clones share the alarm
    p.record_poll(Some(AT * 2), None, false);
    clone.record_poll(Some(AT * 3), None, false);
    assert_eq!((p.alarms(), clone.alarms()), (2, 2));
    // Two alarms, one raise: taken once.
    assert!(clone.take_alarm());
    assert!(!p.take_alarm());
    assert!(!clone.take_alarm());
    // Polls under the threshold do not raise it again ...
    p.record_poll(Some(AT / 2), None, false);
    assert!(!p.take_alarm());
    // ... the next alarm does; the count never goes down.
    p.record_poll(Some(AT), None, false);
    assert_eq!(p.alarms(), 3);
    assert!(p.take_alarm());
    assert!(!p.take_alarm());
    assert_eq!(p.alarms(), 3);
}

/// A listener thread: parks, and on every wake-up reports `phase` (set by the test just before
/// each raise it expects to wake the listener), then spins (never parks) until the test lets it
/// go on and park again. While it spins it is not parked, so an unpark meant for nobody would
/// be kept as its park token and show up as an extra report with a stale phase. Nothing else
/// may park this thread: unpark tokens do not add up, so a blocking channel receive here
/// could swallow the alarm's wake-up.
struct Listener {
    phase: Arc<AtomicU64>,
    go: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    reports: mpsc::Receiver<u64>,
    handle: thread::JoinHandle<()>,
}

impl Listener {
    fn start() -> Listener {
        let phase = Arc::new(AtomicU64::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (report, reports) = mpsc::channel();
        let handle = thread::spawn({
            let (phase, go, stop) = (phase.clone(), go.clone(), stop.clone());
            move || loop {
                thread::park();
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                // Sending on an unbounded channel never parks the sender.
                if report.send(phase.load(Ordering::SeqCst)).is_err() {
                    return;
                }
                while !go.swap(false, Ordering::SeqCst) {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    thread::yield_now();
                }
            }
        });
        Listener {
            phase,
            go,
            stop,
            reports,
            handle,
        }
    }

    /// The next wake-up's phase (generous deadline: it must wake at all).
    fn woke(&self) -> u64 {
        self.reports
            .recv_timeout(Duration::from_secs(30))
            .expect("the listener was not woken")
    }

    /// Lets the listener park again after a report.
    fn go_on(&self) {
        self.go.store(true, Ordering::SeqCst);
    }

    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.thread().unpark();
        self.handle.join().unwrap();
    }
}

#[test]
fn notify_on_alarm_unparks_the_listener_once_per_raise() {
    let p = probe(Some(AT));
    let l = Listener::start();
    p.notify_on_alarm(l.handle.thread().clone());

    // Polls that do not alarm wake nobody (a wake-up now would report phase 0).
    p.record_poll(Some(AT / 2), None, false);
    p.record_poll(Some(AT * 10), None, true);
    p.record_poll(None, Some(AT * 10), false);

    // Lowered → raised: the listener wakes.
    l.phase.store(1, Ordering::SeqCst);
    p.record_poll(Some(AT), None, false);
    assert_eq!(l.woke(), 1);

    // While it is raised, more alarms wake nobody (the listener is not parked now: a stray
    // unpark would be kept and make it report phase 1 again at its next park).
    p.record_poll(Some(AT * 2), None, false);
    p.record_poll(Some(AT * 3), None, false);
    assert!(p.take_alarm());
    l.go_on();

    // The next raise wakes it again, from another thread this time.
    l.phase.store(2, Ordering::SeqCst);
    let p2 = p.clone();
    thread::spawn(move || p2.record_poll(Some(AT), None, false))
        .join()
        .unwrap();
    assert_eq!(l.woke(), 2, "an extra wake-up while the alarm was raised");
    assert_eq!(p.alarms(), 4);
    assert!(p.take_alarm());
    l.go_on();

    // A new listener replaces the old one: the raise wakes only the new one.
    let l2 = Listener::start();
    p.notify_on_alarm(l2.handle.thread().clone());
    l.phase.store(3, Ordering::SeqCst);
    l2.phase.store(3, Ordering::SeqCst);
    p.record_poll(Some(AT), None, false);
    assert_eq!(l2.woke(), 3);
    // The old one, woken now by hand, has nothing queued before this: it reports phase 4.
    l.phase.store(4, Ordering::SeqCst);
    l.handle.thread().unpark();
    assert_eq!(
        l.woke(),
        4,
        "the replaced listener had an extra wake-up (by this alarm or an earlier one)"
    );
    l.go_on();
    l.stop();
    l2.stop();
}

/// With tokio's task hooks: a foreground task that waits behind a blocking poll on a
/// current-thread runtime alarms; the same wait by an elastic task does not.
#[cfg(tokio_unstable)]
mod hooks {
    use std::future::poll_fn;
    use std::task::Poll;
    use std::thread;
    use std::time::Duration;

    use elastic_cpu_probe::{mark_elastic_poll, Probe, ProbeConfig};

    const AT: Duration = Duration::from_millis(2);
    /// At least this long (`thread::sleep` never returns early): the waiter's queue latency.
    const BLOCK: Duration = Duration::from_millis(20);

    /// Runs one elastic task that spawns `waiter` and then blocks the only worker for
    /// [`BLOCK`]: the waiter, runnable from its spawn, is polled after at least that long.
    /// Returns the probe once every hook has run.
    fn run(waiter_is_elastic: bool) -> Probe {
        let probe = Probe::new(ProbeConfig {
            alarm_at: Some(AT),
            ..ProbeConfig::default()
        })
        .unwrap();
        let rt = probe
            .instrument(&mut tokio::runtime::Builder::new_current_thread())
            .build()
            .unwrap();
        rt.block_on(async move {
            let blocker = tokio::spawn(poll_fn(move |_| {
                mark_elastic_poll();
                let waiter = tokio::spawn(poll_fn(move |_| {
                    if waiter_is_elastic {
                        mark_elastic_poll();
                    }
                    Poll::Ready(())
                }));
                thread::sleep(BLOCK);
                Poll::Ready(waiter)
            }));
            blocker.await.unwrap().await.unwrap();
        });
        drop(rt);
        probe.rotate();
        probe
    }

    #[test]
    fn foreground_task_behind_a_blocking_poll_alarms() {
        let probe = run(false);
        let w = probe.window();
        // The runtime's only foreground poll is the waiter's, and it alarmed.
        assert_eq!(w.queue_latency.foreground.count, 1, "{w:#?}");
        assert_eq!(probe.alarms(), 1);
        assert!(probe.take_alarm());
        assert!(!probe.take_alarm());
    }

    #[test]
    fn elastic_task_behind_a_blocking_poll_does_not_alarm() {
        let probe = run(true);
        let w = probe.window();
        assert_eq!(w.queue_latency.foreground.count, 0, "{w:#?}");
        assert_eq!(w.queue_latency.elastic.count, 2, "{w:#?}");
        // It did wait past the threshold.
        assert!(w.queue_latency.elastic.max >= Some(AT), "{w:#?}");
        assert_eq!(probe.alarms(), 0);
        assert!(!probe.take_alarm());
    }
}
