//! The decision step's invariants, over arbitrary tick sequences: shares within their bounds,
//! caps and floors honoured, weights kept among busy members, work conserved when a member is
//! idle, the quota's headroom never exceeded, and a larger signal never raising the share.

use std::time::Duration;

use elastic_cpu_core::decide::{
    ClassKind, ClassReading, Decider, DeciderSettings, HostReading, Limit, Part, QuietWindow,
    QuotaLimit, SignalReading, SignalSource, TickReadings,
};
use elastic_cpu_core::{ControllerConfig, StepController};
use proptest::prelude::*;

const TICK: Duration = Duration::from_millis(100);
const EPS: f64 = 1e-9;

struct Quiet(Duration);

impl QuietWindow for Quiet {
    fn quiet_p99(&mut self, _ticks: usize) -> Option<Duration> {
        Some(self.0)
    }
}

fn config(min: f64, max: f64) -> ControllerConfig {
    ControllerConfig {
        min_share: min,
        max_share: max,
        ..ControllerConfig::default()
    }
}

/// One tick's inputs for every class: (signal µs, waited, ran share of a CPU) per class.
#[derive(Clone, Debug)]
struct Tick {
    signal_us: u64,
    throttled: bool,
    classes: Vec<(bool, f64)>,
    process_extra: f64,
}

fn tick_strategy(classes: usize) -> impl Strategy<Value = Tick> {
    (
        0u64..5_000,
        prop::bool::weighted(0.05),
        prop::collection::vec((any::<bool>(), 0.0f64..1.0), classes),
        0.0f64..1.5,
    )
        .prop_map(|(signal_us, throttled, classes, process_extra)| Tick {
            signal_us,
            throttled,
            classes,
            process_extra,
        })
}

/// Feeds ticks to a decider, keeping each class's running time and the process's CPU.
struct Feed {
    charged: Vec<Duration>,
    process: Duration,
}

impl Feed {
    fn new(classes: usize) -> Feed {
        Feed {
            charged: vec![Duration::ZERO; classes],
            process: Duration::ZERO,
        }
    }

    fn step(&mut self, d: &mut Decider, t: &Tick) {
        let mut readings = Vec::new();
        let mut ran_total = 0.0;
        for (i, &(waited, ran)) in t.classes.iter().enumerate() {
            let ran = TICK.mul_f64(ran);
            ran_total += ran.as_secs_f64();
            self.charged[i] += ran;
            readings.push(ClassReading {
                charged: self.charged[i],
                waited,
                busy: waited,
                has_tokens: !waited,
                holders: usize::from(waited),
                steering: waited,
                long_polls: false,
            });
        }
        self.process += Duration::from_secs_f64(ran_total) + TICK.mul_f64(t.process_extra);
        let sched = Duration::from_micros(t.signal_us);
        let r = TickReadings {
            now: self.process,
            period: TICK,
            intervals: 10,
            signal: SignalReading {
                value: Some(if t.throttled { Duration::MAX } else { sched }),
                source: if t.throttled {
                    SignalSource::Throttled
                } else {
                    SignalSource::Sched
                },
                sched_p99: Some(sched),
                run_queue_delay: None,
                bystander_delay: None,
                throttled: t.throttled,
            },
            run_queue: None,
            throttled_periods: 0,
            process_cpu: Some(self.process),
            foreground_per_sec: 5_000.0,
            classes: &readings,
        };
        d.step(&r, &mut Quiet(Duration::from_micros(200)));
    }
}

/// A decider with the own member, `members` more of the given weights, caps and floors, an
/// idle class and a gate, on `cpus`, inside a quota of `quota` CPUs if given.
fn decider(
    cpus: f64,
    quota: Option<f64>,
    members: &[(f64, Option<f64>, f64)],
    min: f64,
    max: f64,
) -> Decider {
    let mut settings = DeciderSettings::new(config(min, max), cpus);
    settings.initial_share = min;
    let mut d = Decider::new(settings).expect("valid settings");
    for (i, &(weight, cap, floor)) in members.iter().enumerate() {
        d.add_member(
            ClassKind::Member(i),
            Part::new(&format!("m{i}"), weight, cap, floor),
        );
    }
    let idle = StepController::with_initial_share(config(min, 1.0), min).expect("valid");
    d.add_solo(
        ClassKind::Idle,
        Limit::Controller(Box::new(idle)),
        min,
        true,
    );
    let gate = StepController::with_initial_share(config(0.05, 0.5), 0.1).expect("valid");
    d.add_solo(
        ClassKind::Gate(0),
        Limit::Controller(Box::new(gate)),
        0.05,
        true,
    );
    let limit = quota.map(|cpus| QuotaLimit {
        cpus,
        period: Duration::from_millis(100),
    });
    let host = HostReading {
        cpus,
        quota: limit,
        in_quota: quota.is_some(),
        parallelism: 2,
        throttling: true,
    };
    d.set_host(&host, Duration::ZERO);
    d
}

fn member_strategy() -> impl Strategy<Value = Vec<(f64, Option<f64>, f64)>> {
    prop::collection::vec(
        (
            0.1f64..4.0,
            prop::option::of(0.05f64..0.8),
            prop_oneof![Just(0.0), 0.0f64..0.1],
        ),
        0..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every share stays within its bounds, every member within its cap, and the members
    /// together within the group's share.
    #[test]
    fn shares_stay_within_bounds_and_caps(
        members in member_strategy(),
        quota in prop::option::of(0.5f64..2.0),
        ticks in prop::collection::vec(tick_strategy(7), 1..60),
    ) {
        let (min, max) = (0.05, 0.9);
        let mut d = decider(2.0, quota, &members, min, max);
        let n = d.kinds().len();
        let mut feed = Feed::new(n);
        for t in &ticks {
            let t = Tick { classes: t.classes[..n].to_vec(), ..t.clone() };
            feed.step(&mut d, &t);
            let share = d.group_share();
            prop_assert!((min - EPS..=max + EPS).contains(&share), "group share {share}");
            let mut members_total = 0.0;
            for (at, (kind, dec)) in d.kinds().zip(d.decisions()).enumerate() {
                prop_assert!(dec.applied >= -EPS && dec.applied.is_finite());
                if let Some(part) = d.part(at) {
                    members_total += dec.applied;
                    if let Some(cap) = part.cap {
                        prop_assert!(dec.applied <= cap + EPS, "{kind:?} {} over cap {cap}", dec.applied);
                    }
                } else if kind == ClassKind::Idle {
                    prop_assert!(dec.share <= 1.0 + EPS && dec.share >= min - EPS);
                } else {
                    prop_assert!((0.05 - EPS..=0.5 + EPS).contains(&dec.share));
                }
            }
            prop_assert!(members_total <= share + EPS, "members {members_total} over {share}");
        }
    }

    /// Inside a quota, the elastic classes take no more than its headroom (nor than their
    /// floors, which always move).
    #[test]
    fn the_quota_headroom_is_never_exceeded(
        members in member_strategy(),
        quota in 0.5f64..2.0,
        ticks in prop::collection::vec(tick_strategy(7), 1..60),
    ) {
        let cpus = 2.0;
        let min = 0.05;
        let mut d = decider(cpus, Some(quota), &members, min, 0.9);
        let n = d.kinds().len();
        let mut feed = Feed::new(n);
        for t in &ticks {
            let t = Tick { classes: t.classes[..n].to_vec(), ..t.clone() };
            feed.step(&mut d, &t);
            let Some(headroom) = d.headroom_cpus() else { continue };
            let members: f64 = (0..n).filter(|&i| d.part(i).is_some()).map(|i| d.decisions()[i].applied).sum();
            prop_assert!(members * cpus <= (headroom).max(min * cpus) + 1e-6,
                "members {members} × {cpus} over headroom {headroom}");
            let idle = d.kinds().position(|k| k == ClassKind::Idle).expect("idle class");
            let idle_cpus = d.decisions()[idle].applied * cpus;
            prop_assert!(idle_cpus <= headroom.max(min * cpus) + 1e-6);
        }
    }

    /// Members that all wait, with no caps or floors, split the share by weight; an idle
    /// member gets nothing and the busy ones take all of it.
    #[test]
    fn busy_members_keep_weights_and_idle_ones_leave_their_part(
        weights in prop::collection::vec(0.2f64..4.0, 1..4),
        idle_one in any::<prop::sample::Index>(),
        share in 0.1f64..0.9,
    ) {
        let members: Vec<_> = weights.iter().map(|&w| (w, None, 0.0)).collect();
        let mut d = decider(2.0, None, &members, share, share);
        let n = d.kinds().len();
        let idle_member = 1 + idle_one.index(weights.len());
        let mut feed = Feed::new(n);
        let classes: Vec<_> = (0..n)
            .map(|i| if i == idle_member || i > weights.len() { (false, 0.0) } else { (true, 0.2) })
            .collect();
        for _ in 0..3 {
            feed.step(&mut d, &Tick { signal_us: 100, throttled: false, classes: classes.clone(), process_extra: 0.0 });
        }
        let own_weight = 1.0;
        let busy_weight: f64 = own_weight
            + weights.iter().enumerate().filter(|(i, _)| 1 + i != idle_member).map(|(_, w)| w).sum::<f64>();
        let mut total = 0.0;
        for i in 0..=weights.len() {
            let part = d.part(i).expect("a member");
            let entitled = part.entitled();
            total += entitled;
            if i == idle_member {
                prop_assert!(entitled.abs() < EPS, "idle member got {entitled}");
            } else {
                let want = share * part.weight / busy_weight;
                prop_assert!((entitled - want).abs() < 1e-6, "member {i}: {entitled} want {want}");
            }
        }
        prop_assert!((total - share).abs() < 1e-6, "split {total} of {share}");
    }

    /// Two deciders fed the same ticks but a larger signal at the last: the larger one's share
    /// is never higher.
    #[test]
    fn a_larger_signal_never_raises_the_share(
        ticks in prop::collection::vec(tick_strategy(3), 1..40),
        last in tick_strategy(3),
        more_us in 1u64..5_000,
    ) {
        let mut a = decider(2.0, None, &[], 0.05, 0.9);
        let mut b = decider(2.0, None, &[], 0.05, 0.9);
        let (mut fa, mut fb) = (Feed::new(3), Feed::new(3));
        for t in &ticks {
            fa.step(&mut a, t);
            fb.step(&mut b, t);
        }
        let larger = Tick { signal_us: last.signal_us + more_us, ..last.clone() };
        fa.step(&mut a, &last);
        fb.step(&mut b, &larger);
        prop_assert!(b.group_share() <= a.group_share() + EPS,
            "{} > {}", b.group_share(), a.group_share());
        for i in 0..3 {
            prop_assert!(b.decisions()[i].share <= a.decisions()[i].share + EPS);
        }
    }
}

/// A fixed share holds whatever the signal, and set_share on it is refused with a typed error.
#[test]
fn a_fixed_share_holds_and_refuses_bounds() {
    let mut settings = DeciderSettings::new(config(0.05, 0.9), 2.0);
    settings.fixed = Some(0.3);
    let mut d = Decider::new(settings).expect("valid");
    let mut feed = Feed::new(1);
    for us in [100, 10_000, 50] {
        let t = Tick {
            signal_us: us,
            throttled: false,
            classes: vec![(true, 0.5)],
            process_extra: 0.0,
        };
        feed.step(&mut d, &t);
        assert_eq!(d.group_share(), 0.3);
    }
    assert!(d.set_share(0.1, 0.5).is_err());
    assert_eq!(d.group_share(), 0.3);
}

/// A bad initial share is a typed error, not a panic.
#[test]
fn bad_settings_are_refused() {
    let mut settings = DeciderSettings::new(config(0.05, 0.9), 2.0);
    settings.initial_share = f64::NAN;
    assert!(Decider::new(settings).is_err());
}
