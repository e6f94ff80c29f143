//! Classes of elastic work on a manual clock: the share split by weight among the busy
//! classes, a cap held, an idle class's part handed on within a tick, each class charged for
//! its own work, and bad settings refused.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use common::*;
use elastic_cpu_core::{Clock, ManualClock};
use elastic_cpu_pacer::settings::ClassSettings;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::{Elastic, Paced, PacedExt};

type Work = Pin<Box<Paced<Burn>>>;

fn work(clock: &ManualClock, class: &Elastic) -> Work {
    Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: MS,
            polls: usize::MAX,
        }
        .paced(class),
    )
}

/// Run `works` in [`Rounds`] for `for_` of the clock.
fn run(clock: &ManualClock, elastic: &Elastic, works: &mut [Work], for_: Duration) {
    run_beside(clock, elastic, works, Duration::ZERO, for_);
}

/// [`run`], with unpaced foreground work taking `foreground` of the CPU at the start of every
/// round (as a request handler takes its turn on a worker between elastic polls).
fn run_beside(
    clock: &ManualClock,
    elastic: &Elastic,
    works: &mut [Work],
    foreground: Duration,
    for_: Duration,
) {
    let end = clock.now() + for_;
    let mut rounds = Rounds::new(clock);
    while clock.now() < end {
        rounds.next(clock, elastic, works, foreground);
    }
}

/// Rounds on one simulated CPU: each polls every work once (a poll that runs advances the
/// clock by its 1 ms), a round in which none ran passes 1 ms idle, a governor tick every
/// 100 ms of the clock.
struct Rounds {
    waker: std::task::Waker,
    next_tick: Duration,
}

impl Rounds {
    fn new(clock: &ManualClock) -> Rounds {
        let (_n, waker) = CountingWaker::new();
        Rounds {
            waker,
            next_tick: clock.now() + 100 * MS,
        }
    }

    /// One round after `foreground` of unpaced work: how many works ran.
    fn next(
        &mut self,
        clock: &ManualClock,
        elastic: &Elastic,
        works: &mut [Work],
        foreground: Duration,
    ) -> usize {
        let mut cx = Context::from_waker(&self.waker);
        clock.advance(foreground);
        let mut ran = 0;
        for w in works.iter_mut() {
            let before = clock.now();
            assert!(w.as_mut().poll(&mut cx).is_pending());
            ran += usize::from(clock.now() > before);
        }
        if ran == 0 {
            clock.advance(MS);
        }
        while clock.now() >= self.next_tick {
            elastic.tick();
            self.next_tick += 100 * MS;
        }
        ran
    }
}

fn cpu_of(elastic: &Elastic) -> Vec<(String, Duration)> {
    elastic
        .snapshot()
        .classes
        .iter()
        .map(|c| (c.name.to_string(), c.cpu))
        .collect()
}

fn cpu(of: &[(String, Duration)], name: &str) -> f64 {
    of.iter()
        .find(|(n, _)| n == name)
        .map_or(0.0, |(_, d)| d.as_secs_f64())
}

/// An `Elastic` at 0.1 of 4 CPUs (0.4 CPU of tokens a second, on one simulated CPU) with
/// classes `backup` (weight 3) and `export` (weight 1).
fn backup_and_export(clock: &ManualClock) -> (Elastic, Elastic, Elastic) {
    let elastic = manual_elastic(clock, 0.1, 4.0);
    let backup = elastic
        .class(ClassSettings::new("backup").weight(3.0))
        .unwrap();
    let export = elastic.class(ClassSettings::new("export")).unwrap();
    (elastic, backup, export)
}

#[test]
fn busy_classes_share_by_weight_a_cap_holds_and_an_idle_part_moves_on() {
    let clock = ManualClock::new();
    let (elastic, backup, export) = backup_and_export(&clock);
    let tenant = elastic
        .class(ClassSettings::new("tenant-b").cap(0.015))
        .unwrap();
    let mut works = vec![
        work(&clock, &backup),
        work(&clock, &export),
        work(&clock, &tenant),
    ];
    run(&clock, &elastic, &mut works, Duration::from_secs(5));
    let from = cpu_of(&elastic);
    let secs = 60.0;
    run(&clock, &elastic, &mut works, Duration::from_secs(60));
    let to = cpu_of(&elastic);
    let used = |name| (cpu(&to, name) - cpu(&from, name)) / secs;
    // The split: tenant-b at its cap (0.015 × 4 = 0.06 CPU), the rest 3 : 1.
    let (b, e, t) = (used("backup"), used("export"), used("tenant-b"));
    assert!(
        (b - 0.255).abs() < 0.255 * 0.1,
        "backup ran {b:.3} CPU, entitled 0.255"
    );
    assert!(
        (e - 0.085).abs() < 0.085 * 0.1,
        "export ran {e:.3} CPU, entitled 0.085"
    );
    assert!(
        t <= 0.06 * 1.05,
        "tenant-b ran {t:.3} CPU over its cap 0.06"
    );
    assert!(t > 0.06 * 0.9, "tenant-b ran {t:.3} CPU, entitled 0.06");
    let s = elastic.snapshot();
    let names: Vec<_> = s.classes.iter().map(|c| c.name.to_string()).collect();
    assert_eq!(names, ["default", "backup", "export", "tenant-b"]);
    assert_eq!(s.classes[0].share, 0.0, "no default work: no part");

    // Backup's work stops: export has all of its part once a tick has seen backup idle.
    drop(works.remove(0));
    run(&clock, &elastic, &mut works, 200 * MS);
    let s = elastic.snapshot();
    let export_share = s.classes[2].share;
    assert!(
        (export_share - 0.085).abs() < 1e-6,
        "export's part after backup stopped: {export_share}"
    );
    assert_eq!(s.classes[1].share, 0.0, "backup has no work");
    assert!(s.classes[3].share <= 0.015 + 1e-9);
    for c in &s.classes {
        assert!(c.share <= c.cap.unwrap_or(1.0) + 1e-9);
    }
}

/// `backup` (weight 3) held back by the CPUs beside `export`: 1.1 CPUs of tokens on one
/// simulated CPU, with a foreground poll of 1 ms in every round, so `backup` runs at most two
/// polls a round (the two grants the classes hold together) whatever its part, and `export` as
/// far as its tokens go; `backup`'s four works first. After 10 s to settle.
fn held_back(export: ClassSettings) -> (ManualClock, Elastic, Vec<Work>) {
    const SHARE: f64 = 0.55;
    const CPUS: f64 = 2.0;
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, SHARE, CPUS);
    let backup = elastic
        .class(ClassSettings::new("backup").weight(3.0))
        .unwrap();
    let export = elastic.class(export).unwrap();
    let mut works: Vec<Work> = (0..4).map(|_| work(&clock, &backup)).collect();
    works.extend((0..4).map(|_| work(&clock, &export)));
    run_beside(&clock, &elastic, &mut works, MS, Duration::from_secs(10));
    (clock, elastic, works)
}

/// [`held_back`]: the CPU seconds each class ran over a minute.
fn held_back_beside(export: ClassSettings) -> (f64, f64) {
    let (clock, elastic, mut works) = held_back(export);
    let from = cpu_of(&elastic);
    run_beside(&clock, &elastic, &mut works, MS, Duration::from_secs(60));
    let to = cpu_of(&elastic);
    let used = |name| cpu(&to, name) - cpu(&from, name);
    (used("backup"), used("export"))
}

#[test]
fn a_class_the_cpus_hold_back_keeps_its_weight_against_one_its_tokens_bound() {
    let (b, e) = held_back_beside(ClassSettings::new("export"));
    // Weights 3 : 1 of what the two ran, within 8 % (without the bound: +11 %).
    let entitled = (b + e) / 4.0;
    assert!(
        (e - entitled).abs() < entitled * 0.08,
        "export ran {e:.2} s, entitled {entitled:.2} s (backup {b:.2} s)"
    );
    assert!(b + e > 0.5 * 60.0, "the classes ran {:.2} s of 60", b + e);
}

#[test]
fn when_a_class_the_cpus_held_back_stops_the_other_runs_its_part_within_a_second() {
    let (clock, elastic, mut works) = held_back(ClassSettings::new("export"));
    let export_cpu = |elastic: &Elastic| cpu(&cpu_of(elastic), "export");
    // `backup` stops: in the half second that ends a second later, `export` runs at least 90 %
    // of what it runs once settled, alone on the simulated CPU beside the foreground.
    works.drain(..4);
    let over_half_second = |from: Duration, works: &mut Vec<Work>| {
        run_beside(&clock, &elastic, works, MS, from);
        let before = export_cpu(&elastic);
        run_beside(&clock, &elastic, works, MS, 500 * MS);
        export_cpu(&elastic) - before
    };
    let rising = over_half_second(500 * MS, &mut works);
    let settled = over_half_second(Duration::from_secs(5), &mut works);
    assert!(
        rising >= 0.9 * settled,
        "export ran {rising:.3} s in the second half second after backup stopped, {settled:.3} s settled"
    );
}

#[test]
fn a_tick_the_classes_ran_little_in_does_not_shrink_their_parts() {
    let clock = ManualClock::new();
    let (elastic, backup, export) = backup_and_export(&clock);
    let mut works = vec![work(&clock, &backup), work(&clock, &export)];
    run(&clock, &elastic, &mut works, Duration::from_secs(5));
    let parts =
        |elastic: &Elastic| -> f64 { elastic.snapshot().classes.iter().map(|c| c.share).sum() };
    assert!(
        (parts(&elastic) - 0.1).abs() < 1e-9,
        "settled: {}",
        parts(&elastic)
    );
    // The host stops the process for 300 ms (or the foreground takes the CPU): no class runs.
    let mut rounds = Rounds::new(&clock);
    rounds.next(&clock, &elastic, &mut works, 300 * MS);
    for _ in 0..150 {
        rounds.next(&clock, &elastic, &mut works, Duration::ZERO);
        let p = parts(&elastic);
        assert!(
            (p - 0.1).abs() < 1e-9,
            "the parts after the stall: {p} of 0.1 at {:?}",
            clock.now()
        );
    }
}

#[test]
fn keeping_weights_never_takes_a_class_below_its_floor() {
    // A floor of a quarter of the CPU: more than its weight gives `export` against `backup`.
    let (_, e) = held_back_beside(ClassSettings::new("export").floor(0.25));
    assert!(
        e >= 0.25 * 60.0 * 0.95,
        "export ran {e:.2} s, its floor is 15 s"
    );
}

/// `rounds` rounds (see [`Rounds`]): how many works ran in each. A work runs while it holds a
/// grant (and a slot); a grant lasts 100 polls, so a round sees more than the holders only where
/// one ended and the next began.
fn ran_per_round(
    clock: &ManualClock,
    elastic: &Elastic,
    works: &mut [Work],
    rounds: usize,
) -> Vec<usize> {
    let mut r = Rounds::new(clock);
    (0..rounds)
        .map(|_| r.next(clock, elastic, works, Duration::ZERO))
        .collect()
}

/// The share of `rounds` in which more than `n` ran.
fn over(rounds: &[usize], n: usize) -> f64 {
    rounds.iter().filter(|&&r| r > n).count() as f64 / rounds.len() as f64
}

#[test]
fn classes_together_hold_the_grants_one_class_would_and_a_dropped_waiter_frees_its_slot() {
    let clock = ManualClock::new();
    // 0.75 of 2 CPUs pays for 2 grants at once.
    let elastic = manual_elastic(&clock, 0.75, 2.0);
    let classes: Vec<Elastic> = ["a", "b", "c"]
        .into_iter()
        .map(|n| elastic.class(ClassSettings::new(n)).unwrap())
        .collect();
    let mut works: Vec<Work> = (0..4)
        .flat_map(|_| classes.iter().map(|c| work(&clock, c)).collect::<Vec<_>>())
        .collect();
    // Caps and slots are set at the first tick: the grants out before it end first.
    ran_per_round(&clock, &elastic, &mut works, 1000);
    // Each class may hold 2 of its own (6 in all); together they hold 2.
    let rounds = ran_per_round(&clock, &elastic, &mut works, 3000);
    assert!(
        over(&rounds, 2) < 0.05,
        "more than 2 ran in {:.1} % of rounds",
        over(&rounds, 2) * 100.0
    );
    assert!(rounds.iter().filter(|&&r| r == 2).count() > rounds.len() / 2);
    let ran = cpu_of(&elastic);
    for n in ["a", "b", "c"] {
        assert!(cpu(&ran, n) > 0.5, "{n} ran {:.2} s", cpu(&ran, n));
    }
    // Drop every work of `a`, those holding a slot and those waiting for one: what they held
    // or waited for goes on to the others, still 2 at once.
    let mut i = 0;
    works.retain(|_| {
        i += 1;
        i % 3 != 1
    });
    let rounds = ran_per_round(&clock, &elastic, &mut works, 3000);
    assert!(over(&rounds, 2) < 0.05);
    assert!(rounds.iter().filter(|&&r| r == 2).count() > rounds.len() / 2);
    assert_ledger_balanced(&elastic.snapshot());
}

#[test]
fn alone_the_default_class_gets_the_whole_share() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.3, 2.0);
    let mut works = vec![work(&clock, &elastic)];
    run(&clock, &elastic, &mut works, Duration::from_secs(2));
    let s = elastic.snapshot();
    assert_eq!(s.classes.len(), 1);
    assert_eq!(s.classes[0].share, 0.3);
    assert_eq!(s.queue.rate_nanos_per_sec, 600_000_000);
    // A class made and gone leaves it so.
    let other = elastic.class(ClassSettings::new("other")).unwrap();
    drop(other);
    run(&clock, &elastic, &mut works, 200 * MS);
    let s = elastic.snapshot();
    assert_eq!(s.classes.len(), 1, "{:?}", s.classes);
    assert_eq!(s.classes[0].share, 0.3);
}

#[test]
fn an_overrun_is_charged_to_the_class_that_ran_it() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 4.0);
    let a = elastic.class(ClassSettings::new("a")).unwrap();
    let b = elastic.class(ClassSettings::new("b")).unwrap();
    let mut works = vec![work(&clock, &a), work(&clock, &b)];
    run(&clock, &elastic, &mut works, Duration::from_secs(3));
    // The work that holds a's grant stops first (a class holds as many grants as its share
    // pays for), then one poll of a runs 2 s, far past any slice.
    works.clear();
    elastic.tick();
    let before = cpu_of(&elastic);
    let mut long = Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: Duration::from_secs(2),
            polls: 1,
        }
        .paced(&a),
    );
    let (_n, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut waited = Duration::ZERO;
    while long.as_mut().poll(&mut cx).is_pending() {
        clock.advance(100 * MS);
        elastic.tick();
        waited += 100 * MS;
        assert!(waited < Duration::from_secs(10), "the long poll never ran");
    }
    elastic.tick();
    let after = cpu_of(&elastic);
    let ran = |n| cpu(&after, n) - cpu(&before, n);
    // Seconds as f64, a difference of two readings: equal to within rounding.
    assert!((ran("a") - 2.0).abs() < 1e-9, "all of the overrun is a's");
    assert!(ran("b").abs() < 1e-9, "none of it is b's");
}

#[test]
fn bad_class_settings_are_typed_errors() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.3, 2.0);
    let cases = [
        (ClassSettings::new("w").weight(0.0), "ClassSettings::weight"),
        (
            ClassSettings::new("w").weight(f64::NAN),
            "ClassSettings::weight",
        ),
        (ClassSettings::new("c").cap(1.5), "ClassSettings::cap"),
        (ClassSettings::new("c").cap(0.0), "ClassSettings::cap"),
        (
            ClassSettings::new("f").cap(0.2).floor(0.3),
            "ClassSettings::floor",
        ),
        (ClassSettings::new("f").floor(-0.1), "ClassSettings::floor"),
        (ClassSettings::new(""), "ClassSettings::name"),
        (ClassSettings::new("default"), "ClassSettings::name"),
        (ClassSettings::new("x".repeat(65)), "ClassSettings::name"),
    ];
    for (settings, setting) in cases {
        let err = elastic.class(settings.clone()).unwrap_err();
        assert_eq!(err.setting, setting, "{settings:?}");
    }
    let _a = elastic.class(ClassSettings::new("a")).unwrap();
    let err = elastic.class(ClassSettings::new("a")).unwrap_err();
    assert_eq!(err.setting, "ClassSettings::name");
    assert_eq!(elastic.snapshot().classes.len(), 2);
}

#[test]
fn a_class_cancelled_at_each_await_point_leaves_no_waiter_and_no_grant_behind() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 4.0);
    let a = elastic.class(ClassSettings::new("a")).unwrap();
    let (_n, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    elastic.tick();
    let waiters = |e: &Elastic| e.snapshot().classes[1].waiters;
    // Waiting for its first grant (a new class starts with no tokens).
    let mut held = work(&clock, &a);
    assert!(held.as_mut().poll(&mut cx).is_pending());
    clock.advance(10 * MS);
    elastic.tick();
    assert_eq!(waiters(&elastic), 0, "granted at the tick");
    // Holding its grant between polls: one poll ran.
    assert!(held.as_mut().poll(&mut cx).is_pending());
    // A second one waits behind the holder (one grant at a time at this share).
    let mut queued = work(&clock, &a);
    assert!(queued.as_mut().poll(&mut cx).is_pending());
    elastic.tick();
    assert_eq!(waiters(&elastic), 1);
    drop(queued);
    elastic.tick();
    assert_eq!(waiters(&elastic), 0, "a cancelled waiter leaves the queue");
    drop(held);
    elastic.tick();
    let s = elastic.snapshot();
    assert_eq!(s.classes[1].cpu, MS, "the one poll that ran, no more");
    assert_eq!(s.classes[1].waiters, 0);
    // The grant went back: new work of the class is granted within a second of refill.
    let mut next = work(&clock, &a);
    let mut ticks = 0;
    while elastic.snapshot().classes[1].cpu == MS {
        let _ = next.as_mut().poll(&mut cx);
        clock.advance(10 * MS);
        elastic.tick();
        ticks += 1;
        assert!(ticks < 100, "the class's work never ran again");
    }
}
