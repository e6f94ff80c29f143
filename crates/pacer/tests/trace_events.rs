//! `tracing` events (feature `tracing`) on the manual clock: a refusal, an admission that
//! waited, a share that moved (and none while it holds).

mod common;

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::gate::GateSettings;
use elastic_cpu_pacer::testing::Drive;

/// Everything the subscriber writes, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self, what: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(what))
            .map(str::to_string)
            .collect()
    }
}

/// A subscriber that writes `DEBUG` and up to the returned buffer.
fn capture() -> (Captured, impl tracing::Subscriber) {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (out, subscriber)
}

fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let (_c, waker) = CountingWaker::new();
    Pin::new(f).poll(&mut Context::from_waker(&waker))
}

#[test]
fn refusals_waits_and_share_moves_are_events() {
    let (out, subscriber) = capture();
    tracing::subscriber::with_default(subscriber, || {
        let clock = ManualClock::new();
        let elastic = manual_elastic(&clock, 0.1, 1.0);
        let gate = elastic
            .connection_gate(GateSettings::new().share(0.1, 0.9).initial_share(0.5))
            .unwrap();
        // One setup of a second: the bucket is in debt, the next start is far away.
        let Poll::Ready(Ok(p)) = poll(&mut gate.admit(Duration::from_secs(10))) else {
            panic!("not admitted at once")
        };
        clock.advance(Duration::from_secs(1));
        drop(p);
        // Refused at once: it could not start within 1 ms.
        assert!(matches!(poll(&mut gate.admit(MS)), Poll::Ready(Err(_))));
        let refused = out.lines("connection attempt refused");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].contains("WouldExpire") && refused[0].contains("retry_after_ms"));
        // Queued, then admitted once the debt is repaid: one event with how long it waited.
        let mut waiting = gate.admit(Duration::from_secs(100));
        assert!(poll(&mut waiting).is_pending());
        for _ in 0..40 {
            clock.advance(100 * MS);
            elastic.tick();
            if let Poll::Ready(r) = poll(&mut waiting) {
                drop(r.expect("admitted"));
                break;
            }
        }
        let waited = out.lines("admitted after waiting");
        assert_eq!(waited.len(), 1, "{waited:?}");
        assert!(waited[0].contains("class=gate-0"), "{waited:?}");
        // Latency over the target steps the gate's share down 0.01 a tick: an event each
        // 0.05, not each tick.
        let before = out.lines("share moved").len();
        for _ in 0..20 {
            elastic.probe().record_poll(Some(5 * MS), None, false);
            clock.advance(100 * MS);
            elastic.tick();
        }
        let moved = out.lines("share moved");
        let new = &moved[before..];
        assert!((3..=5).contains(&new.len()), "{new:?}");
        assert!(new.iter().all(|l| l.contains("signal_us")), "{new:?}");
    });
}

#[test]
fn an_outlier_far_past_the_threshold_is_an_event_once() {
    let (out, subscriber) = capture();
    tracing::subscriber::with_default(subscriber, || {
        let elastic = elastic_cpu_pacer::Elastic::builder()
            .manual(ManualClock::new())
            .fixed_share(0.5)
            .cpus(2.0)
            .outlier_threshold(elastic_cpu_pacer::settings::OutlierThreshold::At(MS))
            .build()
            .unwrap();
        let site = std::panic::Location::caller();
        // 5 ms is past 4 × the 1 ms threshold; 2 ms is an outlier, but no event.
        elastic
            .probe()
            .record_poll_from(site, None, Some(5 * MS), false);
        elastic
            .probe()
            .record_poll_from(site, None, Some(2 * MS), false);
        elastic.tick();
        let events = out.lines(" outlier ");
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(events[0].contains("duration_us=5000"), "{events:?}");
        assert!(
            events[0].contains(&format!("{}:{}", file!(), site.line())),
            "{events:?}"
        );
        // Still in the window at the next tick: no second event.
        elastic.tick();
        assert_eq!(out.lines(" outlier ").len(), 1);
    });
}
