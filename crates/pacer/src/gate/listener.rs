//! [`GatedListener`]: a `TcpListener` whose connections come with setup permits.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::connection::ConnectionGate;
use super::permit::SetupPermit;
use super::rejected::Rejected;

/// What to do with a refused connection: write the retry hint, log, or just drop it (which
/// closes it).
type OnReject = Arc<dyn Fn(TcpStream, SocketAddr, Rejected) + Send + Sync>;

type Accepted = io::Result<(TcpStream, SocketAddr, SetupPermit)>;

/// Accepts connections continuously and admits each through a [`ConnectionGate`] with the
/// gate's [`deadline`](crate::gate::GateSettings::deadline); [`accept`](Self::accept) hands out the
/// admitted ones with their permits.
///
/// Accepting never waits for an admission: a task accepts in a loop and polls each
/// connection's admission once; one refused at that poll (it could not start in time, or the
/// queue is full) is dealt with there and then, costing no task, and any other is admitted in
/// a task of its own, so one slow admission never holds back the next `accept`. Refused
/// connections are closed at once (dropped), or handed to the function given to
/// [`on_reject`](Self::on_reject), which can write the retry hint first (it runs on the accept
/// loop or on the connection's admission task: it must not block; `try_write` the hint, or
/// spawn anything slow).
///
/// An accept error that is not one connection's own (out of file descriptors, out of memory)
/// pauses the loop, 1 ms at first and doubling up to 1 s while errors go on, so a server out
/// of descriptors does not spin a worker; it accepts again once they are free. Every error is
/// also handed to [`accept`](Self::accept), for the log; the loop goes on regardless.
///
/// It needs the runtime's I/O driver and timer (`enable_all()`, as `#[tokio::main]` gives).
///
/// ```no_run
/// use elastic_cpu_pacer::gate::{GateSettings, GatedListener};
/// use elastic_cpu_pacer::Elastic;
///
/// # async fn serve(elastic: Elastic) -> std::io::Result<()> {
/// let gate = elastic.connection_gate(GateSettings::new()).expect("valid settings");
/// let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let mut listener = GatedListener::new(tcp, gate)?;
/// loop {
///     let (stream, _addr, mut permit) = match listener.accept().await {
///         Ok(accepted) => accepted,
///         // Out of descriptors and the like: the loop has paused and goes on by itself.
///         Err(e) => {
///             eprintln!("accept: {e}");
///             continue;
///         }
///     };
///     tokio::spawn(async move {
///         // The handshake's CPU work, paced; the permit settles when dropped.
///         permit.pace().await;
///         drop(permit);
///         drop(stream); // ... then serve the connection
///     });
/// }
/// # }
/// ```
pub struct GatedListener {
    incoming: mpsc::Receiver<Accepted>,
    gate: ConnectionGate,
    local_addr: SocketAddr,
    accept_loop: JoinHandle<()>,
}

/// Connections accepted between yields of the accept loop.
const ACCEPT_BATCH: u32 = 16;

/// Admitted connections waiting for [`GatedListener::accept`]: each holds its permit, so a
/// caller that stops accepting holds the gate's in-setup places and admission stops too.
const READY: usize = 64;

impl GatedListener {
    /// Start accepting on `listener` (on the current tokio runtime; an error outside one).
    /// Refused connections are dropped, which closes them.
    pub fn new(listener: TcpListener, gate: ConnectionGate) -> io::Result<GatedListener> {
        Self::with_on_reject(listener, gate, None)
    }

    /// Start accepting; refused connections go to `on_reject` (say, to write the retry hint
    /// before closing).
    pub fn on_reject(
        listener: TcpListener,
        gate: ConnectionGate,
        on_reject: impl Fn(TcpStream, SocketAddr, Rejected) + Send + Sync + 'static,
    ) -> io::Result<GatedListener> {
        Self::with_on_reject(listener, gate, Some(Arc::new(on_reject)))
    }

    fn with_on_reject(
        listener: TcpListener,
        gate: ConnectionGate,
        on_reject: Option<OnReject>,
    ) -> io::Result<GatedListener> {
        let handle = Handle::try_current().map_err(io::Error::other)?;
        let local_addr = listener.local_addr()?;
        let (tx, incoming) = mpsc::channel(READY);
        let accept_loop = handle.spawn(accept_loop(listener, gate.clone(), on_reject, tx));
        Ok(GatedListener {
            incoming,
            gate,
            local_addr,
            accept_loop,
        })
    }

    /// The next admitted connection, with its permit. Errors of the underlying `accept` are
    /// passed on (the loop keeps accepting).
    pub async fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr, SetupPermit)> {
        self.next()
            .await
            .unwrap_or_else(|| Err(io::Error::other("the accept loop has ended")))
    }

    /// The next admitted connection or accept error; `None` once the accept loop has ended.
    pub(crate) async fn next(&mut self) -> Option<Accepted> {
        self.incoming.recv().await
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The gate it admits through.
    pub fn gate(&self) -> &ConnectionGate {
        &self.gate
    }
}

/// The first pause after an accept error that is not one connection's own.
const ACCEPT_PAUSE_MIN: Duration = Duration::from_millis(1);
/// The longest pause: how soon a server out of descriptors accepts again once they are free.
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Whether an accept error is one connection's own (its client reset or left before the
/// accept), after which the next accept is as likely to succeed as ever.
fn connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

impl Drop for GatedListener {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl fmt::Debug for GatedListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatedListener")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

async fn accept_loop(
    listener: TcpListener,
    gate: ConnectionGate,
    on_reject: Option<OnReject>,
    tx: mpsc::Sender<Accepted>,
) {
    let deadline = gate.default_deadline();
    let mut accepted = 0u32;
    let mut pause = ACCEPT_PAUSE_MIN;
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                let own = connection_error(&e);
                if tx.send(Err(e)).await.is_err() {
                    return;
                }
                if !own {
                    // Out of descriptors and the like: accept would fail again at once.
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ACCEPT_PAUSE_MAX);
                }
                continue;
            }
        };
        pause = ACCEPT_PAUSE_MIN;
        if tx.is_closed() {
            return;
        }
        accepted = accepted.wrapping_add(1);
        if accepted.is_multiple_of(ACCEPT_BATCH) {
            // In a flood accept is always ready: let the worker's other tasks run.
            tokio::task::yield_now().await;
        }
        // The first poll refuses at once what cannot start in time: that costs no task.
        let mut admission = gate.admit(deadline);
        let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut admission).poll(cx))).await;
        if let Poll::Ready(Err(rejected)) = first {
            if let Some(f) = &on_reject {
                f(stream, addr, rejected);
            }
            continue;
        }
        let tx = tx.clone();
        let on_reject = on_reject.clone();
        tokio::spawn(async move {
            let outcome = match first {
                Poll::Ready(outcome) => outcome,
                Poll::Pending => admission.await,
            };
            match outcome {
                Ok(permit) => {
                    // If the listener is gone, the permit settles and the stream closes here.
                    let _ = tx.send(Ok((stream, addr, permit))).await;
                }
                Err(rejected) => {
                    if let Some(f) = on_reject {
                        f(stream, addr, rejected);
                    }
                }
            }
        });
    }
}
