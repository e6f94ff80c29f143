//! Running a process under a CFS bandwidth limit of F CPUs, as in a container with a CPU limit
//! (the demo's `--cpu-quota`, each of the fleet's nodes). The process makes a child cgroup next
//! to its own (cgroup v1's `cpu` controller: `cpu.cfs_quota_us` / `cpu.cfs_period_us`; or v2:
//! `cpu.max`), moves itself whole into it (every thread: the pid goes to `cgroup.procs`), and at
//! the end moves back and removes the cgroup, also after Ctrl-C ([`cleanup_active`]) and on an
//! early return or a panic (the guard's `Drop`).

use elastic_cpu_probe::CpuThrottling;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// CFS enforcement period set (the kernel's default).
const PERIOD_US: u64 = 100_000;

/// The cgroup to clean up if the process is told to quit at once (second Ctrl-C).
static ACTIVE: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);

/// The child cgroup the process runs in while the guard lives.
pub struct QuotaCgroup {
    /// The child cgroup's directory.
    pub dir: PathBuf,
    /// The cgroup the process came from (it goes back there).
    parent: PathBuf,
    /// The quota in CPUs.
    pub cpus: f64,
    /// `v1` or `v2`.
    pub version: &'static str,
}

/// Where this process's cgroup of the `cpu` controller is: `(v1 mount + path)` candidates
/// first (the v1 controller, when mounted, is the one that enforces), then the v2 one.
fn candidates() -> Vec<(&'static str, PathBuf)> {
    match std::fs::read_to_string("/proc/self/cgroup") {
        Ok(text) => candidates_in(&text),
        Err(_) => Vec::new(),
    }
}

/// [`candidates`] from the text of `/proc/self/cgroup`.
fn candidates_in(text: &str) -> Vec<(&'static str, PathBuf)> {
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if ctrls.is_empty() {
            v2.push(("v2", Path::new("/sys/fs/cgroup").join(rel)));
            v2.push(("v2", Path::new("/sys/fs/cgroup/unified").join(rel)));
        } else if ctrls.split(',').any(|c| c == "cpu") {
            for mount in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
                v1.push(("v1", Path::new(mount).join(rel)));
            }
        }
    }
    v1.extend(v2);
    v1
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {text:?} to {}: {e}", path.display()))
}

/// Make the child cgroup `name` under `parent` with the quota set (and real-time runtime, for a
/// process with `realtime` threads); the process is not in it yet.
fn make(
    version: &'static str,
    parent: &Path,
    name: &str,
    cpus: f64,
    realtime: bool,
) -> Result<PathBuf, String> {
    let quota_us = (cpus * PERIOD_US as f64).round() as u64;
    let dir = parent.join(name);
    let settings = match version {
        "v1" => {
            if !parent.join("cpu.cfs_quota_us").exists() {
                return Err(format!("{} has no cpu.cfs_quota_us", parent.display()));
            }
            vec![
                ("cpu.cfs_period_us", PERIOD_US.to_string()),
                ("cpu.cfs_quota_us", quota_us.to_string()),
            ]
        }
        _ => {
            let ctrls = std::fs::read_to_string(parent.join("cgroup.controllers"))
                .map_err(|e| format!("{}: {e}", parent.join("cgroup.controllers").display()))?;
            if !ctrls.split_whitespace().any(|c| c == "cpu") {
                return Err(format!(
                    "{} does not offer the cpu controller",
                    parent.display()
                ));
            }
            write(&parent.join("cgroup.subtree_control"), "+cpu")?;
            vec![("cpu.max", format!("{quota_us} {PERIOD_US}"))]
        }
    };
    std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (file, value) in settings {
        if let Err(e) = write(&dir.join(file), &value) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
    }
    // v1 with real-time group scheduling refuses a process with real-time threads (the pause
    // watchdog, the load generator) into a cgroup without real-time runtime: give it some.
    // Real-time threads are outside the CFS quota (the load generator stands in for clients
    // on other machines); the quota binds the service's runtimes.
    let rt = dir.join("cpu.rt_runtime_us");
    if realtime && version == "v1" && rt.exists() {
        let ok = ["500000", "200000", "100000", "50000"]
            .into_iter()
            .any(|us| std::fs::write(&rt, us).is_ok());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!(
                "no real-time runtime to give {} (the parent has none to spare)",
                rt.display()
            ));
        }
    }
    Ok(dir)
}

impl QuotaCgroup {
    /// Make a child cgroup with a quota of `cpus` CPUs and move this whole process into it.
    /// The error says why neither cgroup version worked.
    pub fn enter(cpus: f64) -> Result<QuotaCgroup, String> {
        Self::enter_named("elastic-cpu-demo", cpus, true)
    }

    /// [`enter`](Self::enter) with the cgroup named `prefix-<pid>`; `realtime`: the process has
    /// real-time threads (a cgroup v1 with real-time group scheduling then needs real-time
    /// runtime to take it in, and each child takes some of its parent's).
    pub fn enter_named(prefix: &str, cpus: f64, realtime: bool) -> Result<QuotaCgroup, String> {
        let name = format!("{prefix}-{}", std::process::id());
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (cpus, &name, realtime);
            return Err("CPU quotas (cgroups) are Linux only".into());
        }
        let mut why = Vec::new();
        let cands = candidates();
        if cands.is_empty() {
            why.push("no cgroup of this process found in /proc/self/cgroup".to_string());
        }
        for (version, parent) in cands {
            if !parent.is_dir() {
                continue;
            }
            match make(version, &parent, &name, cpus, realtime) {
                Ok(dir) => {
                    let pid = std::process::id().to_string();
                    if let Err(e) = write(&dir.join("cgroup.procs"), &pid) {
                        let _ = std::fs::remove_dir(&dir);
                        why.push(e);
                        continue;
                    }
                    *ACTIVE.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((dir.clone(), parent.clone()));
                    return Ok(QuotaCgroup {
                        dir,
                        parent,
                        cpus,
                        version,
                    });
                }
                Err(e) => why.push(format!("{version}: {e}")),
            }
        }
        Err(why.join("; "))
    }

    /// Change the quota in place to `cpus` CPUs, or lift it (`None`), as an in-place pod resize
    /// does; the process stays in the cgroup.
    pub fn set_cpus(&mut self, cpus: Option<f64>) -> Result<(), String> {
        let quota = cpus.map(|c| (c * PERIOD_US as f64).round() as u64);
        match (self.version, quota) {
            ("v1", Some(us)) => write(&self.dir.join("cpu.cfs_quota_us"), &us.to_string())?,
            ("v1", None) => write(&self.dir.join("cpu.cfs_quota_us"), "-1")?,
            (_, Some(us)) => write(&self.dir.join("cpu.max"), &format!("{us} {PERIOD_US}"))?,
            (_, None) => write(&self.dir.join("cpu.max"), &format!("max {PERIOD_US}"))?,
        }
        if let Some(c) = cpus {
            self.cpus = c;
        }
        Ok(())
    }

    /// The cgroup's throttling counters now.
    pub fn throttling(&self) -> Option<CpuThrottling> {
        CpuThrottling::read(&self.dir)
    }
}

/// Move the process back to `parent` and remove `dir` (a cgroup with tasks cannot be removed).
fn leave(dir: &Path, parent: &Path) -> Result<(), String> {
    write(
        &parent.join("cgroup.procs"),
        &std::process::id().to_string(),
    )?;
    // The kernel may take a moment to see the cgroup empty.
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Err(format!(
        "removing {}: {}",
        dir.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// Clean up the active cgroup, if any (for a quit that skips destructors).
pub fn cleanup_active() {
    if let Some((dir, parent)) = ACTIVE.lock().unwrap_or_else(|e| e.into_inner()).take() {
        if let Err(e) = leave(&dir, &parent) {
            eprintln!("warning: {e}");
        }
    }
}

impl Drop for QuotaCgroup {
    fn drop(&mut self) {
        let mine = ACTIVE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_if(|(d, _)| *d == self.dir)
            .is_some();
        if mine {
            if let Err(e) = leave(&self.dir, &self.parent) {
                eprintln!("warning: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_cgroup_is_found_in_v1_and_v2_lines() {
        let text = "9:name=systemd:/\n4:memory:/m\n2:cpu,cpuacct:/svc/a\n0::/user.slice\n";
        let c = candidates_in(text);
        assert_eq!(
            c[0],
            ("v1", PathBuf::from("/sys/fs/cgroup/cpu/svc/a")),
            "{c:?}"
        );
        assert_eq!(c[1].1, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/svc/a"));
        assert_eq!(c[2], ("v2", PathBuf::from("/sys/fs/cgroup/user.slice")));
        assert_eq!(c.len(), 4);
        // cpuacct alone is not the cpu controller; garbage lines are skipped.
        assert!(candidates_in("3:cpuacct:/x\nnonsense\n").is_empty());
    }

    #[test]
    fn a_cgroup_without_the_cpu_files_is_refused_with_why() {
        let dir = std::env::temp_dir().join(format!("demo-quota-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let v1 = make("v1", &dir, "q", 1.5, true).unwrap_err();
        assert!(v1.contains("cpu.cfs_quota_us"), "{v1}");
        let v2 = make("v2", &dir, "q", 1.5, true).unwrap_err();
        assert!(v2.contains("cgroup.controllers"), "{v2}");
        std::fs::write(dir.join("cgroup.controllers"), "memory io").unwrap();
        let v2 = make("v2", &dir, "q", 1.5, true).unwrap_err();
        assert!(v2.contains("does not offer the cpu controller"), "{v2}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
