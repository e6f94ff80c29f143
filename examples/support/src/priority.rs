//! The calling thread's scheduling priority: real-time above everything, or the lowest the OS
//! offers.

/// Give the calling thread real-time priority `prio` (1..=99); false where refused.
#[cfg(target_os = "linux")]
pub fn realtime(prio: i32) -> bool {
    // SAFETY: plain syscall on the calling thread with a valid, initialised parameter.
    unsafe {
        let param = libc::sched_param {
            sched_priority: prio,
        };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0
    }
}

/// Give the calling thread real-time priority `prio` (1..=99); false where refused.
#[cfg(not(target_os = "linux"))]
pub fn realtime(_prio: i32) -> bool {
    false
}

/// Lower the calling thread to the lowest priority the OS offers: `SCHED_IDLE` on Linux, nice
/// 19 elsewhere. Returns what it got, for the output (None: refused).
#[cfg(target_os = "linux")]
pub fn lowest_priority() -> Option<&'static str> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on the calling thread with a valid, initialised parameter.
    let ok = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0;
    ok.then_some("SCHED_IDLE")
}

/// Lower the calling thread to the lowest priority the OS offers: `SCHED_IDLE` on Linux, nice
/// 19 elsewhere. Returns what it got, for the output (None: refused).
#[cfg(not(target_os = "linux"))]
pub fn lowest_priority() -> Option<&'static str> {
    // SAFETY: plain syscall with valid arguments (0: the caller).
    let ok = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) } == 0;
    ok.then_some("nice 19 (SCHED_IDLE is Linux only)")
}
