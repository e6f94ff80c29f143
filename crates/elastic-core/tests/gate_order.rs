//! FIFO or newest-first? A manual-clock experiment on the gate's admission queue: open-loop
//! connection attempts at 0.8×–10× what the setup class can serve, each client giving up
//! after its timeout. A setup counts as completed when it ends within its client's timeout;
//! one that ends later is wasted CPU (the client has gone). docs/design.md §5 quotes the table
//! this prints (`cargo test -p elastic-cpu-core --test gate_order -- --nocapture`).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

use common::gate;
use elastic_cpu_core::{Clock, GateAdmit, GateTicket, ManualClock, QueueOrder, SetupGrant};

const MS: Duration = Duration::from_millis(1);

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy)]
struct Run {
    /// Arrivals per second over capacity.
    load: f64,
    /// The gate's deadline (the server does not know each client's timeout).
    deadline: Duration,
    order: QueueOrder,
    /// Halve the rate halfway through (the controller stepping down on latency): waiters
    /// admitted on the old rate's estimate now wait longer.
    cut: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Outcome {
    /// Setups per second that ended within their client's timeout.
    completed_per_sec: f64,
    /// Share of setup CPU spent on setups whose client had gone.
    wasted: f64,
    /// Median wait of completed setups before they started, ms.
    wait_p50_ms: f64,
}

/// 1 CPU for setups, 1 ms each: capacity 1000 setups a second. Clients give up after 500 ms.
/// Counted from the third second on: the first second spends the bucket's start-up burst.
fn simulate(run: Run) -> Outcome {
    const SECONDS: u64 = 10;
    const FROM: Duration = Duration::from_secs(2);
    let cost = MS;
    let timeout = Duration::from_millis(500);
    let (q, clock) = gate(1_000_000_000, 1024, run.order, cost);
    // Queued attempts: (ticket, arrival, woken flag).
    let mut waiting: Vec<(GateTicket<ManualClock>, Duration, Arc<Flag>)> = Vec::new();
    // Running setups: (grant, arrival, end).
    let mut running: Vec<(SetupGrant, Duration, Duration)> = Vec::new();
    let (mut completed, mut wasted, mut waits) = (0u64, 0u64, Vec::new());
    let per_ms = run.load; // capacity is 1 per ms
    let mut owed = 0.0;
    for ms in 0..SECONDS * 1000 {
        let now = clock.now();
        // Setups that end now settle (granting waiters with what they give back).
        running.sort_by_key(|r| r.2);
        while running.first().is_some_and(|r| r.2 <= now) {
            let (grant, arrival, end) = running.remove(0);
            q.done(grant, cost);
            if arrival < FROM {
                continue;
            }
            if end - arrival <= timeout {
                completed += 1;
            } else {
                wasted += 1;
            }
        }
        if ms % 100 == 0 {
            q.tick();
        }
        if run.cut && ms == SECONDS * 500 {
            q.set_rate(500_000_000);
        }
        // Woken tickets: granted (start now) or refused.
        let mut still = Vec::with_capacity(waiting.len());
        for (mut t, arrival, flag) in waiting.drain(..) {
            if !flag.0.swap(false, Ordering::SeqCst) {
                still.push((t, arrival, flag));
                continue;
            }
            let waker = Waker::from(flag.clone());
            match t.poll(&waker) {
                Poll::Ready(Ok(g)) => {
                    if arrival >= FROM {
                        waits.push((now - arrival).as_secs_f64() * 1e3);
                    }
                    running.push((g, arrival, now + cost));
                }
                Poll::Ready(Err(_)) => {}
                Poll::Pending => still.push((t, arrival, flag)),
            }
        }
        waiting = still;
        // New attempts this millisecond.
        owed += per_ms;
        while owed >= 1.0 {
            owed -= 1.0;
            let flag = Arc::new(Flag(AtomicBool::new(false)));
            let waker = Waker::from(flag.clone());
            match q.admit(run.deadline, &waker) {
                GateAdmit::Admitted(g) => {
                    if now >= FROM {
                        waits.push(0.0);
                    }
                    running.push((g, now, now + cost));
                }
                GateAdmit::Queued(t) => waiting.push((t, now, flag)),
                GateAdmit::Rejected(_) => {}
            }
        }
        clock.advance(MS);
    }
    waits.sort_by(|a, b| a.total_cmp(b));
    let settled = (completed + wasted).max(1) as f64;
    Outcome {
        completed_per_sec: completed as f64 / (SECONDS as f64 - FROM.as_secs_f64()),
        wasted: wasted as f64 / settled,
        wait_p50_ms: waits.get(waits.len() / 2).copied().unwrap_or(0.0),
    }
}

#[test]
fn newest_first_completes_more_setups_within_deadline_under_overload() {
    println!("load  deadline  rate  order  completed/s  wasted  wait p50");
    let cases = [0.8, 1.2, 3.0, 10.0]
        .into_iter()
        .flat_map(|load| {
            [Duration::from_secs(1), Duration::from_millis(400)]
                .map(|deadline| (load, deadline, false))
        })
        .chain([(3.0, Duration::from_millis(400), true)]);
    for (load, deadline, cut) in cases {
        {
            let mut row = Vec::new();
            for order in [QueueOrder::Fifo, QueueOrder::Lifo] {
                let o = simulate(Run {
                    load,
                    deadline,
                    order,
                    cut,
                });
                println!(
                    "{load:>4}× {:>6} ms  {:<5} {:<5} {:>10.0}  {:>5.1} %  {:>6.1} ms",
                    deadline.as_millis(),
                    if cut { "cut" } else { "flat" },
                    format!("{order:?}"),
                    o.completed_per_sec,
                    o.wasted * 100.0,
                    o.wait_p50_ms
                );
                row.push(o);
            }
            let (fifo, lifo) = (row[0], row[1]);
            // Newest-first never does worse (within 2 %), and under overload with a deadline
            // longer than the clients' patience it does far better.
            assert!(
                lifo.completed_per_sec >= fifo.completed_per_sec * 0.98,
                "{load} {deadline:?}: {fifo:?} vs {lifo:?}"
            );
            assert!(lifo.wasted <= fifo.wasted + 0.02, "{fifo:?} vs {lifo:?}");
            if load >= 3.0 && deadline > Duration::from_millis(500) {
                assert!(
                    lifo.completed_per_sec > 2.0 * fifo.completed_per_sec,
                    "{fifo:?} vs {lifo:?}"
                );
            }
        }
    }
}
