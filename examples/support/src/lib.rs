//! What the examples share: the foreground service with its open-loop load generator (`fg`),
//! real connection setups (`handshake`: TLS 1.3 and SCRAM-SHA-256), the machine-pause watchdog
//! (`pauses`), pinning threads to CPUs (`affinity`), CPU quotas in a child cgroup (`quota`),
//! the CPU and latency helpers they measure with, Ctrl-C handling (`interrupt`), common flags
//! (`cli`), and the report harness (`report`: text and HTML tables, JSON, the HTML page and its
//! charts, where the files go).

pub mod affinity;
pub mod cli;
pub mod cpu_time;
pub mod fg;
pub mod handshake;
pub mod interrupt;
pub mod latency;
pub mod pauses;
pub mod priority;
pub mod quota;
pub mod report;
pub mod spin;
pub mod stats;
pub mod table;
