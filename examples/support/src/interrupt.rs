//! Interrupting a run: the first Ctrl-C ends it early (the examples still write their partial
//! report), the second quits at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by the first Ctrl-C.
static STOP: AtomicBool = AtomicBool::new(false);

/// Whether the run was interrupted.
pub fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Handle Ctrl-C on a side thread named `thread_name` (a tiny current-thread runtime of its
/// own); `on_quit` runs before the process exits on the second one.
pub fn install_ctrl_c(thread_name: &str, on_quit: fn()) {
    let _ = std::thread::Builder::new()
        .name(thread_name.into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("\ninterrupted: finishing the current phase early and writing the partial report (Ctrl-C again to quit now)");
                    STOP.store(true, Ordering::SeqCst);
                }
                if tokio::signal::ctrl_c().await.is_ok() {
                    on_quit();
                    std::process::exit(130);
                }
            });
        });
}

/// Sleep until `deadline`, or less when the run is interrupted meanwhile.
pub fn sleep_until(deadline: Instant) {
    while Instant::now() < deadline && !stopped() {
        std::thread::sleep((deadline - Instant::now()).min(Duration::from_millis(20)));
    }
}
