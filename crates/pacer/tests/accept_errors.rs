//! A gated listener out of file descriptors: this test runs itself again as a child process
//! with a low `RLIMIT_NOFILE` and floods it with connections. While `accept` fails, the
//! child's accept loop pauses (the process uses under 5 % of a CPU more than it did idle just
//! before, where a loop that only yields keeps a worker busy), and once descriptors are free it
//! serves again.

#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use elastic_cpu_core::ProcessCpuClock;
use elastic_cpu_pacer::gate::{GateSettings, GatedListener};
use elastic_cpu_pacer::Elastic;

/// Set in the child's environment: the test body runs the child's part.
const CHILD: &str = "ELASTIC_CPU_ACCEPT_ERRORS_CHILD";
const TEST: &str = "out_of_descriptors_the_accept_loop_pauses_and_recovers";
/// Connections the parent opens: many more than the child's descriptors.
const FLOOD: usize = 64;
/// How long the child measures its CPU while out of descriptors.
const WINDOW: Duration = Duration::from_secs(2);
/// The most of a CPU the child may use meanwhile (a spinning loop uses about 1.0).
const MAX_CPU: f64 = 0.05;

#[test]
fn out_of_descriptors_the_accept_loop_pauses_and_recovers() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |what: &str| -> String {
        for line in lines.by_ref() {
            let line = line.unwrap();
            // The harness's own words may stand before ours on the line.
            if let Some((_, rest)) = line.split_once(what) {
                return rest.trim().to_string();
            }
        }
        panic!("the child ended before saying {what:?}")
    };
    let port: u16 = next("port ").parse().unwrap();
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    // For the record (`--nocapture`): the child's share of a CPU idle and out of descriptors.
    eprintln!("child's CPU: {}", next("readings "));
    let cpu: f64 = next("cpu ")
        .parse()
        .expect("the child saw descriptors run out");
    let served = next("served ");
    drop(flood);
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"done\n");
    assert!(child.wait().unwrap().success());
    assert!(
        cpu < MAX_CPU,
        "the accept loop used {cpu:.3} of a CPU out of descriptors"
    );
    assert_eq!(
        served, "yes",
        "no connection accepted once descriptors were free"
    );
}

/// Descriptors open now.
fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

fn child() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap();
    rt.block_on(async {
        let gate = elastic.connection_gate(GateSettings::new()).unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        let mut listener = GatedListener::new(tcp, gate).unwrap();
        // The process idle (its governor ticking), to compare with.
        let idle = cpu_over(WINDOW).await;
        // Room for a few connections, then `accept` fails with EMFILE.
        let limit = open_descriptors() + 4;
        let rlimit = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit.max(1024),
        };
        // SAFETY: a valid rlimit for this process.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) }, 0);
        println!("port {port}");
        // The server's loop: keep every connection (so descriptors run out), go on past errors.
        let (err_tx, mut err_rx) = tokio::sync::mpsc::unbounded_channel();
        let (ok_tx, mut ok_rx) = tokio::sync::mpsc::unbounded_channel();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                match listener.accept().await {
                    Ok(conn) => {
                        held.push(conn);
                        let _ = ok_tx.send(held.len());
                    }
                    Err(e) => {
                        let _ = err_tx.send(e.raw_os_error());
                        // Free the descriptors once told to (the parent has seen the figure).
                        if FREE.load(std::sync::atomic::Ordering::Acquire) {
                            held.clear();
                        }
                    }
                }
            }
        });
        // A bound against a hang, not a timing assertion.
        let first = tokio::time::timeout(Duration::from_secs(30), err_rx.recv()).await;
        if first != Ok(Some(Some(libc::EMFILE))) {
            println!("cpu none: {first:?}");
            return;
        }
        let busy = cpu_over(WINDOW).await;
        println!("readings idle {idle:.4} out of descriptors {busy:.4}");
        println!("cpu {}", (busy - idle).max(0.0));
        // Free the descriptors at the next error, then wait for a connection to be accepted.
        while ok_rx.try_recv().is_ok() {}
        FREE.store(true, std::sync::atomic::Ordering::Release);
        // A bound against a hang, not a timing assertion.
        let served = tokio::time::timeout(Duration::from_secs(30), ok_rx.recv()).await;
        println!(
            "served {}",
            if matches!(served, Ok(Some(_))) {
                "yes"
            } else {
                "no"
            }
        );
        let _ = std::io::stdout().flush();
        // Until the parent is done with us.
        let _ = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        })
        .await;
        server.abort();
    });
}

/// The share of a CPU the process used over the next `window`.
async fn cpu_over(window: Duration) -> f64 {
    let cpu = || ProcessCpuClock::now().expect("a process CPU clock on Linux");
    let (cpu0, wall0) = (cpu(), std::time::Instant::now());
    tokio::time::sleep(window).await;
    (cpu() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64()
}

static FREE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
