//! The service's setup port: accept, admit (or not, depending on the phase; a refusal is
//! answered on the spot), read the client's hello, run the setup (TLS and SCRAM, or the hash),
//! answer, then serve the session's few requests.
//!
//! Wire format. Client to server: a 16-byte hello (the client's give-up time in ns of wall
//! clock, its id), later 8-byte requests. Server to client: a 5-byte answer (`O` for set up, or
//! `R` and a retry-after hint in ms as u32 LE), later 8-byte replies. With TLS setups the
//! hello is answered `S` (go ahead, as PostgreSQL answers an SSLRequest) once admitted; the
//! TLS handshake and SCRAM follow, then the `O` and the session inside TLS. The hello carries the
//! give-up time only so the ledger can tell wasted setups from useful ones: no admission
//! decision reads it (a real server does not know its clients' timeouts).

use crate::setup::{hash_chunk, wall_ns, CpuTimed, Ledger, Setup};
use elastic_cpu::gate::{ConnectionGate, RejectReason, Rejected, SetupPermit};
use elastic_cpu_examples::spin::spin_us;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

pub const HELLO: usize = 16;
pub const ANSWER: usize = 5;
pub const REQ: usize = 8;

/// How the phase admits connection setups.
pub enum Admission {
    /// Every accepted connection is set up at once.
    Open,
    /// A fixed rate (`governor`); over it, rejected with a retry-after hint.
    Static {
        limiter: DefaultDirectRateLimiter,
        rate: f64,
        /// Rejects per second over the last second (f64 bits), for the hint.
        pressure: AtomicU64,
    },
    /// The library's connection gate.
    Gated {
        gate: ConnectionGate,
        deadline: Duration,
        /// `--gate-hint crowd`: send the larger of the gate's hint and the crowd hint (the
        /// static phase's rule, at the measured admission rate).
        crowd: Option<Crowd>,
    },
}

/// The gated phase's crowd hint: rejects per second and admissions per second, last second.
pub struct Crowd {
    rejects: AtomicU64,
    admits: AtomicU64,
}

impl Crowd {
    pub fn new() -> Crowd {
        Crowd {
            rejects: AtomicU64::new(0f64.to_bits()),
            admits: AtomicU64::new(1f64.to_bits()),
        }
    }

    fn hint(&self) -> Duration {
        let admits = f64::from_bits(self.admits.load(Ordering::Relaxed)).max(1.0);
        let p = AtomicU64::new(self.rejects.load(Ordering::Relaxed));
        static_hint(admits, &p)
    }
}

impl Admission {
    pub fn fixed_rate(rate: f64) -> Admission {
        let per_sec = NonZeroU32::new(rate.round().max(1.0) as u32).unwrap_or(NonZeroU32::MIN);
        // A burst of 10 ms worth, so bunched arrivals do not leave the rate unused.
        let burst = NonZeroU32::new((rate / 100.0).ceil() as u32).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_second(per_sec).allow_burst(burst);
        Admission::Static {
            limiter: RateLimiter::direct(quota),
            rate: per_sec.get() as f64,
            pressure: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Tell the static limiter (or the gated phase's crowd hint) how many were rejected and
    /// admitted per second lately.
    pub fn set_pressure(&self, rejects_per_sec: f64, admits_per_sec: f64) {
        match self {
            Admission::Static { pressure, .. } => {
                pressure.store(rejects_per_sec.to_bits(), Ordering::Relaxed)
            }
            Admission::Gated { crowd: Some(c), .. } => {
                c.rejects
                    .store(rejects_per_sec.to_bits(), Ordering::Relaxed);
                c.admits.store(admits_per_sec.to_bits(), Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// The static limiter's hint: the time the rejected crowd needs at the fixed rate, with
/// jitter (±50 %), from 20 ms to 5 s: the same idea as the gate's hint, so both phases get
/// clients that spread their retries.
fn static_hint(rate: f64, pressure: &AtomicU64) -> Duration {
    let p = f64::from_bits(pressure.load(Ordering::Relaxed));
    let secs = (p / rate).clamp(0.02, 5.0) * (0.5 + fastrand::f64());
    Duration::from_secs_f64(secs)
}

/// Everything a setup-port connection needs.
pub struct Service {
    pub admission: Admission,
    pub setup: Setup,
    /// Where TLS setups run, if not on the service's own workers (the idle pool's runtime).
    pub setup_pool: Option<tokio::runtime::Handle>,
    pub work_us: f64,
    pub ledger: Ledger,
    /// The clients' timeout, only to tell from a hello how old the attempt is (for the
    /// report; no admission decision uses it).
    pub client_timeout: Duration,
}

/// Bind the setup port (tokio's default accept backlog, 1024: a deeper one holds attempts
/// that go stale before they are accepted) and run its accept loop on `rt`.
pub fn start(rt: &tokio::runtime::Runtime, svc: Arc<Service>) -> Result<SocketAddr, String> {
    let listener = rt
        .block_on(async {
            let s = TcpSocket::new_v4()?;
            s.set_reuseaddr(true)?;
            s.bind("127.0.0.1:0".parse().expect("a valid address"))?;
            s.listen(1024)
        })
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    rt.spawn(accept_loop(listener, svc));
    Ok(addr)
}

/// Attempts accepted between yields of the accept loop.
const ACCEPT_BATCH: u32 = 16;

/// Admission is decided here, before the hello is read: a refused attempt is answered and
/// closed on the spot (no task, no timer, no wait for its hello), so a flood of refusals
/// costs as little as a refusal can. Admitted and queued attempts get a task of their own,
/// so a waiting admission never holds up accept.
async fn accept_loop(listener: TcpListener, svc: Arc<Service>) {
    let mut accepted = 0u32;
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                Ledger::add(&svc.ledger.accepted, 1);
                // In a flood accept is always ready: let the worker's other tasks (established
                // requests among them) run every few attempts, not only when tokio's budget
                // of 128 runs out.
                accepted = accepted.wrapping_add(1);
                if accepted.is_multiple_of(ACCEPT_BATCH) {
                    tokio::task::yield_now().await;
                }
                match decide(&svc).await {
                    Decision::Refuse(hint, expired) => refuse_now(sock, &svc.ledger, hint, expired),
                    Decision::Run(admit) => {
                        tokio::spawn(connection(sock, svc.clone(), admit));
                    }
                }
            }
            // Out of file descriptors (the open phase's pile of setups): what a real server
            // does, back off and try again; meanwhile the kernel's backlog fills.
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// What the accept loop decided for one attempt.
enum Decision {
    /// Refused: the hint, and whether it waited past its deadline.
    Refuse(Duration, bool),
    /// Set it up (after an admission still pending, for the gated phase).
    Run(Admit),
}

/// An attempt on its way to a setup.
enum Admit {
    /// Open, or admitted by the static limiter.
    Now,
    /// The gate admitted it at once.
    Permit(SetupPermit),
    /// Queued in the gate: the connection's task waits for it.
    Waiting(elastic_cpu::gate::Admission),
}

/// The phase's admission, polled once: the gate answers a refusal at its first poll.
async fn decide(svc: &Service) -> Decision {
    match &svc.admission {
        Admission::Open => Decision::Run(Admit::Now),
        Admission::Static {
            limiter,
            rate,
            pressure,
        } => match limiter.check() {
            Ok(()) => Decision::Run(Admit::Now),
            Err(_) => Decision::Refuse(static_hint(*rate, pressure), false),
        },
        Admission::Gated {
            gate,
            deadline,
            crowd,
        } => {
            let mut admission = gate.admit(*deadline);
            let first =
                std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut admission).poll(cx))).await;
            match first {
                Poll::Ready(Ok(permit)) => Decision::Run(Admit::Permit(permit)),
                Poll::Ready(Err(rej)) => Decision::Refuse(
                    gated_hint(&rej, crowd.as_ref()),
                    rej.reason() == RejectReason::Expired,
                ),
                Poll::Pending => Decision::Run(Admit::Waiting(admission)),
            }
        }
    }
}

fn gated_hint(rej: &Rejected, crowd: Option<&Crowd>) -> Duration {
    match crowd {
        Some(c) => rej.retry_after().max(c.hint()),
        None => rej.retry_after(),
    }
}

fn count_refusal(l: &Ledger, expired: bool) {
    if expired {
        Ledger::add(&l.expired, 1);
    } else {
        Ledger::add(&l.rejected, 1);
    }
}

/// Answer a refusal without waiting: the 5-byte answer fits any socket buffer; the hello,
/// if it has come, is read (without waiting) so the close is a FIN, not a reset that could
/// overtake the answer.
fn refuse_now(sock: TcpStream, l: &Ledger, hint: Duration, expired: bool) {
    count_refusal(l, expired);
    let _ = sock.try_write(&answer_bytes(b'R', hint_ms(hint)));
    let mut hello = [0u8; HELLO];
    let _ = sock.try_read(&mut hello);
}

fn hint_ms(hint: Duration) -> u32 {
    hint.as_millis().min(u32::MAX as u128) as u32
}

fn answer_bytes(tag: u8, ms: u32) -> [u8; ANSWER] {
    let mut a = [0u8; ANSWER];
    a[0] = tag;
    a[1..].copy_from_slice(&ms.to_le_bytes());
    a
}

async fn answer<S: AsyncWrite + Unpin>(sock: &mut S, tag: u8, ms: u32) -> bool {
    sock.write_all(&answer_bytes(tag, ms)).await.is_ok()
}

async fn connection(mut sock: TcpStream, svc: Arc<Service>, admit: Admit) {
    let l = &svc.ledger;
    let _ = sock.set_nodelay(true);
    let mut hello = [0u8; HELLO];
    // The client says hello at once; a silent peer does not hold a socket for long.
    match tokio::time::timeout(Duration::from_secs(2), sock.read_exact(&mut hello)).await {
        Ok(Ok(_)) => {}
        _ => {
            Ledger::add(&l.gone, 1);
            return;
        }
    }
    let gives_up_ns = u64::from_le_bytes(hello[..8].try_into().expect("8 bytes"));
    let seed = u64::from_le_bytes(hello[8..].try_into().expect("8 bytes"));
    if gives_up_ns != u64::MAX {
        let started = gives_up_ns.saturating_sub(svc.client_timeout.as_nanos() as u64);
        Ledger::add(&l.hellos, 1);
        Ledger::add(&l.hello_age_ns, wall_ns().saturating_sub(started));
    }
    let permit = match admit {
        Admit::Now => None,
        Admit::Permit(p) => Some(p),
        Admit::Waiting(admission) => match admission.await {
            Ok(p) => Some(p),
            Err(rej) => {
                count_refusal(l, rej.reason() == RejectReason::Expired);
                let crowd = match &svc.admission {
                    Admission::Gated { crowd, .. } => crowd.as_ref(),
                    _ => None,
                };
                let _ = answer(&mut sock, b'R', hint_ms(gated_hint(&rej, crowd))).await;
                return;
            }
        },
    };
    // Every phase runs the same setup, paced by the permit where there is one, so only
    // admission differs between the phases.
    match &svc.setup {
        Setup::Tls { server, .. } => {
            if !answer(&mut sock, b'S', 0).await {
                Ledger::add(&l.gone, 1);
                return;
            }
            let server = server.clone();
            let setup = async move {
                let mut s = server.acceptor.accept(sock).await?;
                server.scram(&mut s).await.map(|()| s)
            };
            let run = async move {
                match permit {
                    Some(p) => p.run(CpuTimed::new(setup)).await,
                    None => CpuTimed::new(setup).await,
                }
            };
            let (stream, cpu) = match &svc.setup_pool {
                Some(pool) => match pool.spawn(run).await {
                    Ok(done) => done,
                    Err(_) => return,
                },
                None => run.await,
            };
            if let (true, Ok(s)) = (settle(l, gives_up_ns, cpu, stream.is_ok()), stream) {
                serve(s, &svc).await;
            }
        }
        Setup::Hash(cost) => {
            let cost = *cost;
            let mut permit = permit;
            let (_, cpu) = CpuTimed::new(async {
                for i in 0..cost.chunks {
                    hash_chunk(seed ^ i as u64, cost.iters);
                    match &mut permit {
                        Some(p) => p.pace().await,
                        None => tokio::task::yield_now().await,
                    }
                }
            })
            .await;
            drop(permit);
            if settle(l, gives_up_ns, cpu, true) {
                serve(sock, &svc).await;
            }
        }
    }
}

/// Book a finished setup: wasted (its client gave up, or broke it off midway) or completed.
/// True when the session goes on.
fn settle(l: &Ledger, gives_up_ns: u64, cpu: Duration, ok: bool) -> bool {
    let ns = cpu.as_nanos() as u64;
    if !ok || wall_ns() > gives_up_ns {
        Ledger::add(&l.wasted, 1);
        Ledger::add(&l.wasted_ns, ns);
        return false;
    }
    Ledger::add(&l.completed, 1);
    Ledger::add(&l.useful_ns, ns);
    true
}

/// Answer the set-up client and serve its session's requests.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut sock: S, svc: &Service) {
    if !answer(&mut sock, b'O', 0).await {
        return;
    }
    let mut req = [0u8; REQ];
    while sock.read_exact(&mut req).await.is_ok() {
        spin_us(svc.work_us);
        Ledger::add(&svc.ledger.requests, 1);
        if sock.write_all(&req).await.is_err() || sock.flush().await.is_err() {
            break;
        }
    }
}
