//! Benches of the decide layer (`crates/elastic-core`).
//!
//! * `over_limit/amortized` — `ElasticHandle::over_limit()` in a tight loop on the wall clock
//!   (`MonotonicClock`); time per call. Goal: ≤ 2 ns. When the 100 ms slice is spent the loop
//!   settles it and takes a new one, as real work would (that cost is in the figure too).
//!   `over_limit/clock_read` is the naive alternative for scale: one `MonotonicClock::now()` per
//!   iteration.
//! * `admit_done/{elastic_cpu_core,governor,leaky_bucket}/{1,8,32}` — one acquire round trip per
//!   iteration on each of N OS threads at once, tokens always available (huge rates), so this is
//!   the cost of the bookkeeping and of contention, not of waiting. `elastic_cpu_core`: `admit` (fast
//!   path) + `done` on a shared `WorkQueue`; `governor`: `RateLimiter::check()`; `leaky_bucket`:
//!   `RateLimiter::try_acquire(1)`. The N threads start together at a barrier; the figure is the
//!   wall time until all N have finished `iters` round trips, over `iters`: the time per round
//!   trip *per thread* (each thread's view of one round trip under that contention). This
//!   machine has 2 cores, so with 8 and 32 threads most threads are descheduled most of the
//!   time: divide by N/2 for the cost per round trip of the whole system.
//!
//! `cargo bench --bench core` runs in about a minute.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::concurrent;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use elastic_cpu_core::{
    Admit, Clock, ElasticHandle, MonotonicClock, WorkQueue, MAX_RATE, MAX_SLICE,
};

const THREADS: [usize; 3] = [1, 8, 32];

fn over_limit(c: &mut Criterion) {
    let mut g = c.benchmark_group("over_limit");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    g.bench_function("amortized", |b| {
        let clock = MonotonicClock::new();
        let queue = WorkQueue::new(clock.clone(), MAX_RATE);
        let admit = |queue: &WorkQueue<MonotonicClock>| match queue.admit(MAX_SLICE) {
            Admit::Granted(g) => ElasticHandle::new(g, clock.clone()),
            Admit::Queued(_) => unreachable!("tokens are always available"),
        };
        b.iter_custom(|iters| {
            let mut handle = admit(&queue);
            let start = Instant::now();
            for _ in 0..iters {
                if black_box(handle.over_limit()).0 {
                    let (grant, used) = handle.into_grant();
                    queue.done(grant, used);
                    handle = admit(&queue);
                }
            }
            let elapsed = start.elapsed();
            let (grant, used) = handle.into_grant();
            queue.done(grant, used);
            elapsed
        });
    });
    g.bench_function("clock_read", |b| {
        let clock = MonotonicClock::new();
        b.iter(|| black_box(clock.now()));
    });
    g.finish();
}

fn admit_done(c: &mut Criterion) {
    let mut g = c.benchmark_group("admit_done");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    for n in THREADS {
        g.bench_with_input(BenchmarkId::new("elastic_cpu_core", n), &n, |b, &n| {
            // 256 CPUs' worth: 32 threads hold at most 3.2 CPU-seconds of slices at once, and
            // every slice is returned whole. (Rates above ~1,100 CPUs skip the lock-free path.)
            let queue = WorkQueue::new(MonotonicClock::new(), 256_000_000_000);
            b.iter_custom(|iters| {
                let q = queue.clone();
                concurrent(n, iters, move || match q.admit(MAX_SLICE) {
                    Admit::Granted(grant) => q.done(grant, Duration::ZERO),
                    Admit::Queued(_) => unreachable!("tokens are always available"),
                })
            });
            let s = queue.snapshot();
            assert_eq!(s.waits, 0, "nobody may wait in this bench");
        });
        g.bench_with_input(BenchmarkId::new("governor", n), &n, |b, &n| {
            let limiter = Arc::new(governor::RateLimiter::direct(governor::Quota::per_second(
                NonZeroU32::MAX,
            )));
            b.iter_custom(|iters| {
                let l = limiter.clone();
                concurrent(n, iters, move || {
                    black_box(l.check()).expect("tokens are always available");
                })
            });
        });
        g.bench_with_input(BenchmarkId::new("leaky_bucket", n), &n, |b, &n| {
            let limiter = Arc::new(
                leaky_bucket::RateLimiter::builder()
                    .max(usize::MAX / 2)
                    .initial(usize::MAX / 2)
                    .refill(usize::MAX / 4)
                    .interval(Duration::from_millis(1))
                    .build(),
            );
            b.iter_custom(|iters| {
                let l = limiter.clone();
                concurrent(n, iters, move || {
                    assert!(l.try_acquire(1), "tokens are always available");
                })
            });
        });
    }
    g.finish();
}

criterion_group!(benches, over_limit, admit_done);
criterion_main!(benches);
