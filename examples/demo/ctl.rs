//! The one place the demo touches the library: building the runtime under test, reading the
//! snapshot, pacing a stream.
//!
//! Until the facade (`elastic_cpu::Elastic`) lands, this module runs a plain runtime and
//! measures scheduling latency with a sampling probe (a side thread spawns a tiny task every
//! millisecond and records spawn -> first poll), and the paced/static phases are unavailable.

use futures_util::stream::{BoxStream, Stream};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Runtime};

use crate::args::ProfileSpec;

/// How the phase's runtime is governed.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Probe only: nothing is paced.
    Unpaced,
    /// Controller off, static share.
    Fixed(f64),
    /// Controller on.
    Controlled {
        profile: ProfileSpec,
        initial: Option<f64>,
    },
}

/// What the monitor reads every sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snap {
    pub limit: Option<f64>,
    pub sched_p99_us: Option<f64>,
}

/// The runtime under test plus its elastic-CPU handle.
pub struct Control {
    pub rt: Runtime,
    sampler: Sampler,
}

impl Control {
    /// Whether paced / static phases can run in this build.
    pub fn pacing_available() -> bool {
        false
    }

    pub fn new(workers: usize, mode: Mode, _target_us: Option<u64>) -> Result<Control, String> {
        match mode {
            Mode::Unpaced => {}
            Mode::Fixed(l) => {
                return Err(format!("static limit {l}: the pacer is not in this build"))
            }
            Mode::Controlled { profile, initial } => {
                return Err(format!(
                    "profile {profile:?} from {initial:?}: the pacer is not in this build"
                ))
            }
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let sampler = Sampler::start(rt.handle().clone());
        Ok(Control { rt, sampler })
    }

    pub fn snapshot(&self) -> Snap {
        Snap {
            limit: None,
            sched_p99_us: self.sampler.p99_us(),
        }
    }

    /// Wrap a stream so it is paced by this runtime's elastic handle.
    pub fn paced<S>(&self, s: S) -> BoxStream<'static, S::Item>
    where
        S: Stream + Send + 'static,
    {
        Box::pin(s)
    }

    pub fn shutdown(self) {
        self.sampler.stop();
        self.rt.shutdown_timeout(Duration::from_secs(3));
    }
}

/// Sampling probe: spawn -> first poll of a tiny task, every millisecond, from a side thread.
/// Window p99 over the last 2.5 s.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    window: Arc<Mutex<VecDeque<(Instant, u64)>>>,
}

const WINDOW: Duration = Duration::from_millis(2500);

impl Sampler {
    fn start(handle: Handle) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let window: Arc<Mutex<VecDeque<(Instant, u64)>>> = Arc::default();
        let (st, w) = (stop.clone(), window.clone());
        let thread = std::thread::Builder::new()
            .name("demo-sampler".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let w = w.clone();
                    handle.spawn(async move {
                        let ns = t.elapsed().as_nanos() as u64;
                        let mut w = w.lock().unwrap();
                        w.push_back((Instant::now(), ns));
                        while w.front().is_some_and(|(at, _)| at.elapsed() > WINDOW) {
                            w.pop_front();
                        }
                    });
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .expect("spawn sampler thread");
        Sampler {
            stop,
            thread: Some(thread),
            window,
        }
    }

    fn p99_us(&self) -> Option<f64> {
        let w = self.window.lock().unwrap();
        let mut v: Vec<u64> = w
            .iter()
            .filter(|(at, _)| at.elapsed() <= WINDOW)
            .map(|&(_, ns)| ns)
            .collect();
        drop(w);
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let i = ((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1;
        Some(v[i] as f64 / 1e3)
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
