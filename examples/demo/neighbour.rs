//! A noisy neighbour: another process on the same cores, burning a fixed share of one core in
//! 10 ms periods (spin, then sleep), as a co-located tenant or a cron job would. It is this
//! binary re-executed with an environment variable, so the demo needs nothing else installed.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const VAR: &str = "ELASTIC_CPU_DEMO_BURN";
const PERIOD: Duration = Duration::from_millis(10);

/// When this process is the neighbour: burn the share of one core it was started with until
/// killed (or until the parent is gone).
pub fn burn_if_neighbour() {
    if let Some(share) = std::env::var(VAR).ok().and_then(|v| v.parse().ok()) {
        burn(share);
    }
}

fn burn(share: f64) -> ! {
    let parent = std::os::unix::process::parent_id();
    let busy = PERIOD.mul_f64(share.clamp(0.0, 1.0));
    loop {
        let start = Instant::now();
        while start.elapsed() < busy {
            std::hint::spin_loop();
        }
        if let Some(rest) = PERIOD.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
        // Orphaned (the demo was killed without dropping the guard): stop.
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(0);
        }
    }
}

/// The running neighbour; killed when dropped.
pub struct Neighbour(Child);

impl Neighbour {
    /// Start a neighbour burning `share` of one core.
    pub fn start(share: f64) -> std::io::Result<Neighbour> {
        let child = Command::new(std::env::current_exe()?)
            .env(VAR, share.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Neighbour(child))
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
