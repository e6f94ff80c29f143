//! [`SetupListener`]: a [`GatedListener`] whose admitted connections are set up (a TLS
//! handshake, an authentication exchange) under their permits, each in a task of its own, and
//! handed out once ready. With feature `axum` it is an `axum::serve::Listener`.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::listener::GatedListener;

/// Set-up connections waiting for [`SetupListener::accept`].
const READY: usize = 64;

/// Connections through a [`GatedListener`], each set up by `setup` under its permit
/// ([`SetupPermit::run`](crate::gate::SetupPermit::run)), so the setup's CPU is paced as the
/// gate's and the permit is held for the setup only; the connection is handed out once its
/// setup is done. A setup that fails (the client left mid-handshake) is dropped, and so is one
/// still unfinished at the gate's
/// [`setup_timeout`](crate::gate::GateSettings::setup_timeout), which closes its connection
/// (counted in [`GateSnapshot::timed_out`](crate::gate::GateSnapshot::timed_out)). While a
/// setup waits on its client it holds none of the places setups run in, so clients that stall
/// their setups do not keep others out.
///
/// It needs the runtime's I/O driver and timer (`enable_all()`, as `#[tokio::main]` gives).
///
/// ```no_run
/// use elastic_cpu_pacer::gate::{GateSettings, GatedListener, SetupListener};
/// use elastic_cpu_pacer::Elastic;
///
/// # async fn serve(elastic: Elastic) -> std::io::Result<()> {
/// let gate = elastic.connection_gate(GateSettings::new()).expect("valid settings");
/// let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// // With tokio-rustls: `move |tcp| acceptor.clone().accept(tcp)`.
/// let mut listener = SetupListener::new(GatedListener::new(tcp, gate)?, |tcp| async { Ok(tcp) });
/// // With axum: `axum::serve(listener, router).await`.
/// let (conn, _addr) = listener.accept().await?;
/// # drop(conn);
/// # Ok(())
/// # }
/// ```
pub struct SetupListener<Io> {
    incoming: mpsc::Receiver<(Io, SocketAddr)>,
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

impl<Io: Send + 'static> SetupListener<Io> {
    /// Set up each connection `listener` admits with `setup`, on the current runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: it spawns its accept loop there, as `tokio::spawn` does.
    #[track_caller]
    pub fn new<F, Fut>(listener: GatedListener, setup: F) -> SetupListener<Io>
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<Io>> + Send + 'static,
    {
        Self::start(listener, setup, None)
    }

    /// As [`new`](Self::new), with the setups run on `runtime`: an idle pool's
    /// ([`IdleRuntime::handle`](crate::idle::IdleRuntime::handle)), where the OS cuts a long
    /// handshake call whenever the foreground needs the core (a bare host; inside a CPU quota
    /// keep them on the service's runtime).
    pub fn on_runtime<F, Fut>(
        listener: GatedListener,
        setup: F,
        runtime: Handle,
    ) -> SetupListener<Io>
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<Io>> + Send + 'static,
    {
        Self::start(listener, setup, Some(runtime))
    }

    #[track_caller]
    fn start<F, Fut>(mut listener: GatedListener, setup: F, on: Option<Handle>) -> Self
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<Io>> + Send + 'static,
    {
        let local_addr = listener.local_addr();
        let gate = listener.gate().shared.clone();
        let (tx, incoming) = mpsc::channel(READY);
        let task = tokio::spawn(async move {
            // Ends with the accept loop, or once this listener is dropped.
            while let Some(accepted) = listener.next().await {
                if tx.is_closed() {
                    return;
                }
                // An accept error (out of descriptors): the accept loop has paused already.
                let Ok((stream, addr, permit)) = accepted else {
                    continue;
                };
                let mut setup = Box::pin(permit.run(setup(stream)));
                let tx = tx.clone();
                let gate = gate.clone();
                let done = async move {
                    match tokio::time::timeout(gate.setup_timeout, setup.as_mut()).await {
                        Ok(Ok(io)) => {
                            let _ = tx.send((io, addr)).await;
                        }
                        Ok(Err(_)) => {}
                        Err(_) => {
                            // Counted before the drop that settles the permit and closes the
                            // connection: its peer sees the count once it sees the end.
                            gate.timed_out.fetch_add(1, Ordering::Relaxed);
                            drop(setup);
                        }
                    }
                };
                match &on {
                    Some(rt) => drop(rt.spawn(done)),
                    None => drop(tokio::spawn(done)),
                }
            }
        });
        SetupListener {
            incoming,
            local_addr,
            task,
        }
    }

    /// The next set-up connection.
    pub async fn accept(&mut self) -> io::Result<(Io, SocketAddr)> {
        self.incoming
            .recv()
            .await
            .ok_or_else(|| io::Error::other("the accept loop has ended"))
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl<Io> Drop for SetupListener<Io> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<Io> fmt::Debug for SetupListener<Io> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupListener")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl<Io> axum::serve::Listener for SetupListener<Io>
where
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    type Io = Io;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Io, SocketAddr) {
        match SetupListener::accept(self).await {
            Ok(conn) => conn,
            // The accept loop is gone (its runtime is shutting down): nothing more comes.
            Err(_) => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }
}
