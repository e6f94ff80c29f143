//! The calling thread's scheduling priority: real-time above everything, or the lowest the OS
//! offers (through `thread-priority`, as the library's idle pool does).

#[cfg(unix)]
use thread_priority::unix::{
    set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
    ThreadSchedulePolicy,
};
use thread_priority::{ThreadPriority, ThreadPriorityValue};

/// Give the calling thread real-time priority `prio` (`SCHED_FIFO`, 1..=99); false where
/// refused (no `CAP_SYS_NICE` or `RLIMIT_RTPRIO`, or not a unix).
pub fn realtime(prio: u8) -> bool {
    let Ok(value) = ThreadPriorityValue::try_from(prio) else {
        return false;
    };
    #[cfg(unix)]
    {
        let fifo = ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo);
        set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Crossplatform(value),
            fifo,
        )
        .is_ok()
    }
    #[cfg(not(unix))]
    {
        let _ = value;
        false
    }
}

/// Lower the calling thread to the lowest priority the OS offers: `SCHED_IDLE` on Linux, the
/// lowest priority of its policy elsewhere. Returns what it got, for the output (None: refused).
#[cfg(target_os = "linux")]
pub fn lowest_priority() -> Option<&'static str> {
    use thread_priority::unix::NormalThreadSchedulePolicy;
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    let ok = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle).is_ok();
    ok.then_some("SCHED_IDLE")
}

/// Lower the calling thread to the lowest priority the OS offers: `SCHED_IDLE` on Linux, the
/// lowest priority of its policy elsewhere. Returns what it got, for the output (None: refused).
#[cfg(not(target_os = "linux"))]
pub fn lowest_priority() -> Option<&'static str> {
    let ok = thread_priority::set_current_thread_priority(ThreadPriority::Min).is_ok();
    ok.then_some("the lowest thread priority (SCHED_IDLE is Linux only)")
}
