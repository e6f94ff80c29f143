//! Properties of the connection gate's queue over random sequences of attempts, polls,
//! cancels, settles, setups waiting on their peers and resuming, ticks, rate changes and a
//! close: the queue never exceeds its bound, nor the setups in flight theirs, every attempt
//! ends exactly once, no setup starts after its deadline, and the ledger balances. The clock may
//! step backwards (a clock source that is set back): deadlines are clock times, so a step back
//! lengthens a wait, and every waiter still ends once the clock passes its deadline.

use std::task::{Poll, Waker};
use std::time::Duration;

use elastic_cpu_core::{
    Clock, GateAdmit, GateConfig, GateQueue, GateStats, GateTicket, ManualClock, QueueOrder,
    SetupGrant,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Admit { deadline_ms: u64 },
    Poll(usize),
    Cancel(usize),
    Settle { which: usize, used_us: u64 },
    Advance { ms: u64 },
    StepBack { ms: u64 },
    Tick,
    Rate { per_mille: u64 },
    Close,
    WaitOnPeer(usize),
    Resume(usize),
    Cap(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..2000).prop_map(|deadline_ms| Op::Admit { deadline_ms }),
        3 => any::<usize>().prop_map(Op::Poll),
        1 => any::<usize>().prop_map(Op::Cancel),
        3 => (any::<usize>(), 0u64..5000).prop_map(|(which, used_us)| Op::Settle { which, used_us }),
        2 => (0u64..300).prop_map(|ms| Op::Advance { ms }),
        1 => (0u64..3000).prop_map(|ms| Op::StepBack { ms }),
        2 => Just(Op::Tick),
        1 => (0u64..2000).prop_map(|per_mille| Op::Rate { per_mille }),
        1 => prop_oneof![99 => Just(Op::Tick), 1 => Just(Op::Close)],
        2 => any::<usize>().prop_map(Op::WaitOnPeer),
        2 => any::<usize>().prop_map(Op::Resume),
        1 => (1usize..4).prop_map(Op::Cap),
    ]
}

fn assert_attempts(s: &GateStats) {
    assert_eq!(
        s.attempts,
        s.admitted + s.rejected + s.expired + s.cancelled + s.queue_len as u64 + s.pending as u64,
        "{s:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn every_attempt_ends_once_within_bounds(
        ops in proptest::collection::vec(op(), 1..200),
        lifo in any::<bool>(),
        max_queue in 1usize..8,
        max_in_flight in 1usize..6,
    ) {
        let clock = ManualClock::new();
        let order = if lifo { QueueOrder::Lifo } else { QueueOrder::Fifo };
        let q = GateQueue::new(
            clock.clone(),
            20_000_000, // 2 % of a CPU: 20 ms of setup CPU a second
            GateConfig {
                max_queue,
                order,
                initial_cost: Duration::from_millis(1),
                max_in_flight,
            },
        );
        // Waiting attempts, with their deadlines (absolute).
        let mut tickets: Vec<(GateTicket<ManualClock>, Duration)> = Vec::new();
        let mut running: Vec<SetupGrant> = Vec::new();
        for op in ops {
            match op {
                Op::Admit { deadline_ms } => {
                    let deadline = Duration::from_millis(deadline_ms);
                    match q.admit(deadline, Waker::noop()) {
                        GateAdmit::Admitted(g) => running.push(g),
                        GateAdmit::Queued(t) => tickets.push((t, clock.now() + deadline)),
                        GateAdmit::Rejected(_) => {}
                    }
                }
                Op::Poll(i) if !tickets.is_empty() => {
                    let i = i % tickets.len();
                    if let Poll::Ready(r) = tickets[i].0.poll(Waker::noop()) {
                        let (mut t, _) = tickets.remove(i);
                        // It resolves once: polled again, it has nothing more to give.
                        prop_assert!(matches!(t.poll(Waker::noop()), Poll::Ready(Err(_))));
                        if let Ok(g) = r {
                            running.push(g);
                        }
                    }
                }
                Op::Cancel(i) if !tickets.is_empty() => {
                    let i = i % tickets.len();
                    drop(tickets.remove(i));
                }
                Op::Settle { which, used_us } if !running.is_empty() => {
                    let g = running.swap_remove(which % running.len());
                    q.done(g, Duration::from_micros(used_us));
                }
                Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
                Op::StepBack { ms } => {
                    clock.set(clock.now().saturating_sub(Duration::from_millis(ms)));
                }
                Op::Tick => {
                    q.tick();
                }
                Op::Rate { per_mille } => q.set_rate(per_mille * 1_000_000),
                Op::Close => q.close(),
                Op::WaitOnPeer(i) if !running.is_empty() => {
                    let n = running.len();
                    q.wait_on_peer(&mut running[i % n]);
                }
                Op::Resume(i) if !running.is_empty() => {
                    let n = running.len();
                    q.resume_setup(&mut running[i % n]);
                }
                Op::Cap(n) => q.set_max_in_setup(Some(n)),
                _ => {}
            }
            let s = q.snapshot();
            prop_assert!(s.queue_len <= max_queue, "{s:?}");
            let waiting = running.iter().filter(|g| g.is_waiting_on_peer()).count();
            prop_assert_eq!(s.waiting_on_peer, waiting);
            prop_assert_eq!(s.in_setup, running.len() - waiting + s.pending);
            prop_assert!(s.in_setup + s.waiting_on_peer <= max_in_flight, "{s:?}");
            assert_attempts(&s);
        }
        // A tick drops every waiter whose deadline has passed.
        q.tick();
        let now = clock.now();
        for (t, deadline) in &mut tickets {
            if *deadline <= now {
                // Ended: refused, or granted before its deadline and not collected yet (a
                // grant waits in its ticket; the grant path itself refuses expired waiters).
                // Never still waiting.
                match t.poll(Waker::noop()) {
                    Poll::Ready(Ok(g)) => running.push(g),
                    Poll::Ready(Err(_)) => {}
                    Poll::Pending => prop_assert!(false, "still waiting past its deadline"),
                }
            }
        }
        // Past every deadline, a tick ends every waiter left (refused, or granted in time).
        if let Some(last) = tickets.iter().map(|t| t.1).max() {
            clock.set(last.max(clock.now()));
            q.tick();
            for (t, _) in &mut tickets {
                match t.poll(Waker::noop()) {
                    Poll::Ready(Ok(g)) => running.push(g),
                    Poll::Ready(Err(_)) => {}
                    Poll::Pending => prop_assert!(false, "still waiting past its deadline"),
                }
            }
        }
        drop(tickets);
        for g in running.drain(..) {
            q.done(g, Duration::from_micros(700));
        }
        let s = q.snapshot();
        prop_assert_eq!((s.queue_len, s.in_setup, s.pending, s.waiting_on_peer), (0, 0, 0, 0));
        assert_attempts(&s);
        prop_assert_eq!(
            s.acquired_nanos as i128 - s.returned_nanos as i128 + s.over_limit_nanos as i128,
            s.used_nanos as i128
        );
    }
}
