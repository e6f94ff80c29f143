//! What the fuzz targets share: scratch cgroup trees, the checks every quota reading must pass,
//! and the settings drawn from the fuzzer's bytes.

use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use arbitrary::Arbitrary;
use elastic_cpu_pacer::gate::{GateSettings, QueueOrder};
use elastic_cpu_pacer::settings::{
    Brake, Enforcement, Inputs, OutlierThreshold, Placement, Steps, Timing,
};
use elastic_cpu_pacer::testing::ManualClock;
use elastic_cpu_pacer::{BuildError, Elastic, ElasticBuilder, Profile};
use elastic_cpu_probe::{QuotaReading, QuotaSource};

/// A fresh directory for one target's fake tree (on tmpfs where there is one: the targets
/// write a file per input).
pub fn scratch(target: &str) -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let root = base.join(format!("elastic-cpu-fuzz-{target}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).expect("scratch directory");
    root
}

/// What any reading must be, whatever the files said: a limit the kernel could enforce, read
/// inside the tree (never above `root`), or no quota.
pub fn check_reading(root: &Path, reading: &QuotaReading) {
    if let Some(dir) = reading.cgroup_dir() {
        assert!(
            dir.starts_with(root),
            "read outside the tree: {}",
            dir.display()
        );
        assert!(
            dir.components()
                .all(|c| matches!(c, Component::Normal(_) | Component::RootDir)),
            "not a plain path: {}",
            dir.display()
        );
    }
    match reading {
        QuotaReading::Limited(q) => {
            assert!(
                q.cpus.is_finite() && q.cpus > 0.0 && q.cpus <= 1_048_576.0,
                "{reading}"
            );
            assert!(
                (Duration::from_millis(1)..=Duration::from_secs(1)).contains(&q.period),
                "{reading}"
            );
            assert!(q.quota >= Duration::from_millis(1), "{reading}");
            assert_ne!(reading.source(), QuotaSource::None);
        }
        QuotaReading::NoQuota(_) => assert_eq!(reading.source(), QuotaSource::None),
    }
    // Formatting never panics either.
    let _ = reading.to_string();
}

/// The builder's settings, each set or left at its default.
#[derive(Arbitrary, Debug)]
pub struct BuilderInput {
    profile: Option<ProfileInput>,
    target_p99: Option<Duration>,
    share: Option<(f64, f64)>,
    initial_share: Option<f64>,
    fixed_share: Option<f64>,
    cpus: Option<f64>,
    brake: Option<Option<Option<Duration>>>,
    inputs: Option<(bool, bool, bool, bool)>,
    enforcement: Option<EnforcementInput>,
    placement: Option<u8>,
    outliers: Option<Option<Option<Duration>>>,
    /// Ticks to run when the settings are accepted (at most a few).
    ticks: u8,
}

#[derive(Arbitrary, Debug)]
enum ProfileInput {
    Default,
    Cockroach,
    Custom {
        delta_per_sec: f64,
        decrease_factor: f64,
        inactive_decrease_factor: f64,
        inactive_point: f64,
        tick: Duration,
        window: Duration,
        max_boost: u32,
    },
}

#[derive(Arbitrary, Debug)]
struct EnforcementInput {
    slice: Duration,
    quantum: Duration,
    os_yield: bool,
    unstack_workers: bool,
    cap_concurrency: bool,
    timing: u8,
}

impl BuilderInput {
    /// The builder these settings make, on a manual clock (no governor thread).
    pub fn builder(&self, clock: &ManualClock) -> ElasticBuilder {
        let mut b = Elastic::builder().manual(clock.clone());
        if let Some(p) = &self.profile {
            b = b.profile(match *p {
                ProfileInput::Default => Profile::Default,
                ProfileInput::Cockroach => Profile::Cockroach,
                ProfileInput::Custom {
                    delta_per_sec,
                    decrease_factor,
                    inactive_decrease_factor,
                    inactive_point,
                    tick,
                    window,
                    max_boost,
                } => Profile::Custom(
                    Steps::default()
                        .delta_per_sec(delta_per_sec)
                        .decrease_factor(decrease_factor)
                        .inactive_decrease_factor(inactive_decrease_factor)
                        .inactive_point(inactive_point)
                        .tick(tick)
                        .window(window)
                        .max_boost(max_boost),
                ),
            });
        }
        if let Some(t) = self.target_p99 {
            b = b.target_p99(t);
        }
        if let Some((min, max)) = self.share {
            b = b.share(min, max);
        }
        if let Some(s) = self.initial_share {
            b = b.initial_share(s);
        }
        if let Some(s) = self.fixed_share {
            b = b.fixed_share(s);
        }
        if let Some(c) = self.cpus {
            b = b.cpus(c);
        }
        if let Some(brake) = self.brake {
            b = b.brake(match brake {
                None => Brake::Default,
                Some(None) => Brake::Off,
                Some(Some(at)) => Brake::At(at),
            });
        }
        if let Some((io_wakeup, run_queue, throttling, quota_headroom)) = self.inputs {
            b = b.inputs(
                Inputs::default()
                    .io_wakeup(io_wakeup)
                    .run_queue(run_queue)
                    .throttling(throttling)
                    .quota_headroom(quota_headroom),
            );
        }
        if let Some(e) = &self.enforcement {
            b = b.enforcement(
                Enforcement::default()
                    .slice(e.slice)
                    .quantum(e.quantum)
                    .os_yield(e.os_yield)
                    .unstack_workers(e.unstack_workers)
                    .cap_concurrency(e.cap_concurrency)
                    .timing(match e.timing % 3 {
                        0 => Timing::Adaptive,
                        1 => Timing::ThreadCpu,
                        _ => Timing::Wall,
                    }),
            );
        }
        if let Some(p) = self.placement {
            b = b.placement(match p % 3 {
                0 => Placement::Auto,
                1 => Placement::Runtime,
                _ => Placement::IdlePool,
            });
        }
        if let Some(o) = self.outliers {
            b = b.outlier_threshold(match o {
                None => OutlierThreshold::Target,
                Some(None) => OutlierThreshold::Off,
                Some(Some(at)) => OutlierThreshold::At(at),
            });
        }
        b
    }

    /// Build: accepted settings run a few ticks; refused ones are a typed error naming the
    /// setting. Neither panics.
    pub fn run(&self) {
        let clock = ManualClock::new();
        match self.builder(&clock).build() {
            Ok(elastic) => {
                for _ in 0..self.ticks.min(4) {
                    clock.advance(Duration::from_millis(100));
                    elastic.tick();
                }
                let s = elastic.snapshot();
                assert!(
                    s.share.is_finite() && s.share >= 0.0 && s.share <= 1.0,
                    "{s:?}"
                );
                assert!(s.cpus.is_finite() && s.cpus > 0.0, "{s:?}");
            }
            Err(BuildError::Setting(e)) => {
                assert!(!e.setting.is_empty());
                let _ = e.to_string();
            }
            Err(e) => panic!("not a setting error: {e}"),
        }
    }
}

/// A connection gate's settings, each set or left at its default.
#[derive(Arbitrary, Debug)]
pub struct GateInput {
    deadline: Option<Duration>,
    max_queue: Option<usize>,
    setup_cost: Option<Duration>,
    share: Option<(f64, f64)>,
    initial_share: Option<f64>,
    lifo: Option<bool>,
    cap_concurrency: Option<bool>,
}

impl GateInput {
    /// The settings.
    pub fn settings(&self) -> GateSettings {
        let mut s = GateSettings::new();
        if let Some(d) = self.deadline {
            s = s.deadline(d);
        }
        if let Some(n) = self.max_queue {
            s = s.max_queue(n);
        }
        if let Some(c) = self.setup_cost {
            s = s.setup_cost(c);
        }
        if let Some((min, max)) = self.share {
            s = s.share(min, max);
        }
        if let Some(i) = self.initial_share {
            s = s.initial_share(i);
        }
        if let Some(lifo) = self.lifo {
            s = s.order(if lifo {
                QueueOrder::Lifo
            } else {
                QueueOrder::Fifo
            });
        }
        if let Some(on) = self.cap_concurrency {
            s = s.cap_concurrency(on);
        }
        s
    }

    /// Make a gate on a manual-clock `Elastic`: accepted settings make a gate that ticks and
    /// answers; refused ones are a typed error naming the setting.
    pub fn run(&self) {
        let clock = ManualClock::new();
        let elastic = Elastic::builder()
            .manual(clock.clone())
            .build()
            .expect("defaults");
        match elastic.connection_gate(self.settings()) {
            Ok(gate) => {
                let _admission = gate.admit(gate.default_deadline());
                clock.advance(Duration::from_millis(100));
                elastic.tick();
                let s = gate.snapshot();
                let _ = format!("{s:?}");
            }
            Err(e) => {
                assert!(!e.setting.is_empty());
                let _ = e.to_string();
            }
        }
    }
}
