//! The connecting clients: a population of client tasks in a separate process (this binary
//! re-executed with an environment variable), as clients on other machines would be: their
//! sockets do not count against the service's file limit and their timers are their own.
//!
//! Each client loops: connect, say hello, wait for the answer within its timeout (with TLS
//! setups, an answer to go ahead is followed by the client's side of the TLS handshake and of
//! SCRAM, then the answer proper, inside TLS); set up: send
//! a few requests, disconnect, think (exponential, mean `think`), again; no answer in time:
//! drop the connection and reconnect at once (the churn loop); rejected: wait the server's
//! retry-after hint, then retry. `--clients polite` retries through the library's
//! `RetryBudget` instead: the hint with jitter, backoff after a timeout, and attempts held
//! locally once they exceed twice the accepted ones. Closed-loop clients (the capacity phase) have no timeout and
//! no think time.
//!
//! The process runs at normal priority: it shares the service's two cores, so the clients'
//! CPU (connects, rejects, resets) competes with the service, as the kernel's share of a
//! real storm would. (At nice 19 the clients were starved by the service, their attempts
//! aged before they reached it, and that artefact looked like the service's delay.)
//!
//! The parent sets the population with lines `pop N` on the child's stdin; the child prints
//! its running totals each second on stdout: `ok timeouts rejects errors`.

use crate::server::{ANSWER, HELLO, REQ};
use crate::setup::wall_ns;
use elastic_cpu::gate::{Attempt, RetryBudget};
use elastic_cpu_examples::cpu_time::cpu_of;
use elastic_cpu_examples::fg::exp;
use elastic_cpu_examples::handshake::ClientSide;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const VAR: &str = "ELASTIC_CPU_STORM_CLIENTS";

/// How the clients behave.
#[derive(Clone, Debug)]
pub struct Params {
    pub addr: SocketAddr,
    /// None: closed loop (no timeout, no think time).
    pub timeout: Option<Duration>,
    pub think: Duration,
    pub requests: u32,
    /// TLS setups: the server certificate to trust (DER).
    pub cert: Option<Vec<u8>>,
    /// Retry through the library's `RetryBudget` (one per client process, as one per
    /// connection pool) instead of at once.
    pub polite: bool,
}

impl Params {
    fn encode(&self) -> String {
        let cert = self.cert.as_ref().map_or("-".to_string(), |c| {
            c.iter().map(|b| format!("{b:02x}")).collect::<String>()
        });
        format!(
            "{} {} {} {} {cert} {}",
            self.addr,
            self.timeout.map_or(0, |t| t.as_micros() as u64),
            self.think.as_micros(),
            self.requests,
            u8::from(self.polite)
        )
    }

    fn decode(s: &str) -> Option<Params> {
        let v: Vec<&str> = s.split_whitespace().collect();
        let us = |i: usize| v.get(i)?.parse::<u64>().ok();
        Some(Params {
            addr: v.first()?.parse().ok()?,
            timeout: us(1).filter(|&t| t > 0).map(Duration::from_micros),
            think: Duration::from_micros(us(2)?),
            requests: us(3)? as u32,
            cert: match *v.get(4)? {
                "-" => None,
                hex => Some(
                    (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                        .collect::<Option<Vec<u8>>>()?,
                ),
            },
            polite: us(5)? == 1,
        })
    }
}

/// Running totals, client side.
#[derive(Default)]
pub struct ClientTotals {
    pub ok: AtomicU64,
    pub timeouts: AtomicU64,
    pub rejects: AtomicU64,
    pub errors: AtomicU64,
}

/// The client process, from the parent's side; killed when dropped.
pub struct Clients {
    child: Child,
    stdin: ChildStdin,
    pub totals: Arc<ClientTotals>,
}

impl Clients {
    pub fn start(p: Params) -> Result<Clients, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .env(VAR, p.encode())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("client process: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let totals = Arc::new(ClientTotals::default());
        let t = totals.clone();
        std::thread::Builder::new()
            .name("storm-client-stats".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let v: Vec<u64> = line
                        .split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    if let [ok, to, rej, err] = v[..] {
                        t.ok.store(ok, Ordering::Relaxed);
                        t.timeouts.store(to, Ordering::Relaxed);
                        t.rejects.store(rej, Ordering::Relaxed);
                        t.errors.store(err, Ordering::Relaxed);
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Clients {
            child,
            stdin,
            totals,
        })
    }

    /// CPU time the client process has used.
    pub fn cpu(&self) -> Option<Duration> {
        cpu_of(&self.child.id().to_string())
    }

    pub fn set_population(&mut self, n: usize) {
        let _ = writeln!(self.stdin, "pop {n}");
        let _ = self.stdin.flush();
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client parameters, when this process is the client population.
pub fn client_mode() -> Option<Params> {
    Params::decode(&std::env::var(VAR).ok()?)
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    timeouts: AtomicU64,
    rejects: AtomicU64,
    errors: AtomicU64,
}

/// A set-up connection: plain TCP (hash setups) or TLS over it.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

enum Outcome {
    SetUp(Box<dyn Conn>),
    Rejected(Duration),
    Failed,
}

/// Run the population until stdin closes (the parent is gone or done).
pub fn run(p: Params) -> ! {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    let _ = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line
                    .strip_prefix("pop ")
                    .and_then(|n| n.trim().parse().ok())
                {
                    let _ = tx.send(n);
                }
            }
            std::process::exit(0);
        });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("client runtime: {e}");
            std::process::exit(1)
        });
    let tls = p.cert.as_ref().map(|c| {
        Arc::new(ClientSide::new(c).unwrap_or_else(|e| {
            eprintln!("client TLS: {e}");
            std::process::exit(1)
        }))
    });
    let budget = p.polite.then(|| {
        let b = RetryBudget::new(2.0, Duration::from_secs(10), p.addr.port() as u64);
        Arc::new(Mutex::new(b.expect("valid settings")))
    });
    rt.block_on(async move {
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let g = |x: &AtomicU64| x.load(Ordering::Relaxed);
                println!(
                    "{} {} {} {}",
                    g(&c.ok),
                    g(&c.timeouts),
                    g(&c.rejects),
                    g(&c.errors)
                );
                let _ = std::io::stdout().flush();
            }
        });
        let mut tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        let mut next_id = 0u64;
        while let Some(n) = rx.recv().await {
            while tasks.len() > n {
                if let Some(t) = tasks.pop() {
                    t.abort();
                }
            }
            while tasks.len() < n {
                next_id += 1;
                tasks.push(tokio::spawn(client(
                    next_id,
                    p.clone(),
                    tls.clone(),
                    budget.clone(),
                    counts.clone(),
                )));
            }
        }
    });
    std::process::exit(0)
}

/// The process's retry budget, shared by its clients.
type Budget = Option<Arc<Mutex<RetryBudget>>>;

async fn client(
    id: u64,
    p: Params,
    tls: Option<Arc<ClientSide>>,
    budget: Budget,
    counts: Arc<Counts>,
) {
    let start = Instant::now();
    let with_budget = |f: &mut dyn FnMut(&mut RetryBudget, Duration) -> Duration| {
        budget.as_ref().map(|b| {
            f(
                &mut b.lock().unwrap_or_else(|e| e.into_inner()),
                start.elapsed(),
            )
        })
    };
    let mut rng = fastrand::Rng::with_seed(id);
    // New clients arrive spread over a think time, not all in one instant.
    if p.timeout.is_some() {
        let d = rng.f64() * p.think.as_secs_f64();
        tokio::time::sleep(Duration::from_secs_f64(d)).await;
    }
    loop {
        let hold = with_budget(&mut |b, now| match b.attempt(now) {
            Attempt::Go => Duration::ZERO,
            Attempt::Hold(wait) => wait,
        });
        if let Some(wait) = hold.filter(|w| !w.is_zero()) {
            tokio::time::sleep(wait).await;
            continue;
        }
        let gives_up = p
            .timeout
            .map_or(u64::MAX, |t| wall_ns() + t.as_nanos() as u64);
        let attempt = attempt(p.addr, gives_up, id, tls.as_deref());
        let outcome = match p.timeout {
            Some(t) => tokio::time::timeout(t, attempt).await.ok(),
            None => Some(attempt.await),
        };
        match outcome {
            Some(Outcome::SetUp(mut s)) => {
                counts.ok.fetch_add(1, Ordering::Relaxed);
                with_budget(&mut |b, now| b.accepted(now));
                let t = p.timeout.unwrap_or(Duration::from_secs(10));
                let _ = tokio::time::timeout(t, session(&mut s, p.requests)).await;
                drop(s);
                if p.timeout.is_some() {
                    let d = exp(&mut rng, p.think.as_secs_f64());
                    tokio::time::sleep(Duration::from_secs_f64(d)).await;
                }
            }
            Some(Outcome::Rejected(wait)) => {
                counts.rejects.fetch_add(1, Ordering::Relaxed);
                let wait = with_budget(&mut |b, now| b.refused(now, Some(wait))).unwrap_or(wait);
                tokio::time::sleep(wait).await;
            }
            Some(Outcome::Failed) => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                let wait = with_budget(&mut |b, now| b.failed(now));
                tokio::time::sleep(wait.unwrap_or(Duration::from_millis(10))).await;
            }
            // Timed out: the connection is dropped with the future; reconnect at once.
            None => {
                counts.timeouts.fetch_add(1, Ordering::Relaxed);
                if let Some(wait) = with_budget(&mut |b, now| b.failed(now)) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

async fn attempt(addr: SocketAddr, gives_up: u64, id: u64, tls: Option<&ClientSide>) -> Outcome {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return Outcome::Failed;
    };
    // Close with a reset: a client that gives up aborts, and no TIME_WAIT piles up on the
    // loopback's ports.
    let _ = s.set_zero_linger();
    let _ = s.set_nodelay(true);
    let mut hello = [0u8; HELLO];
    hello[..8].copy_from_slice(&gives_up.to_le_bytes());
    hello[8..].copy_from_slice(&id.to_le_bytes());
    if s.write_all(&hello).await.is_err() {
        return Outcome::Failed;
    }
    let mut a = [0u8; ANSWER];
    if s.read_exact(&mut a).await.is_err() {
        return Outcome::Failed;
    }
    match (a[0], tls) {
        (b'O', None) => Outcome::SetUp(Box::new(s)),
        // Go ahead with TLS: the setup proper, then the answer inside TLS.
        (b'S', Some(tls)) => {
            let Ok(mut s) = tls.connect(s).await else {
                return Outcome::Failed;
            };
            match s.read_exact(&mut a).await {
                Ok(_) if a[0] == b'O' => Outcome::SetUp(Box::new(s)),
                _ => Outcome::Failed,
            }
        }
        (b'R', _) => {
            let ms = u32::from_le_bytes(a[1..].try_into().expect("4 bytes"));
            Outcome::Rejected(Duration::from_millis(ms as u64))
        }
        _ => Outcome::Failed,
    }
}

async fn session(s: &mut Box<dyn Conn>, requests: u32) {
    let mut r = [0u8; REQ];
    for i in 0..requests {
        r[..4].copy_from_slice(&i.to_le_bytes());
        if s.write_all(&r).await.is_err() || s.read_exact(&mut r).await.is_err() {
            return;
        }
    }
}
