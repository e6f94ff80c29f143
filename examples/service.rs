//! A whole service: an axum JSON API whose accept loop is gated (each connection a TLS 1.3
//! handshake and a SCRAM-SHA-256 password check, paced as setup work; `--plain` for plain
//! TCP), an `/export` route whose body is compressed by paced elastic work, and the library's
//! metrics on `/metrics` for Prometheus.
//!
//! ```text
//! cargo run --release --example service              # serves on a printed address until Ctrl-C
//! cargo run --release --example service -- --plain   # plain HTTP: try it with curl
//! curl http://127.0.0.1:PORT/status ; curl -s http://127.0.0.1:PORT/export?chunks=64 | wc -c
//! ```
//!
//! Run time: until Ctrl-C. Privileges: none (it listens on a loopback port chosen by the OS).
//!
//! With TLS a client first does SCRAM over the TLS stream (user `storm`, the password in
//! `elastic_cpu_examples::handshake`), then speaks HTTP/1.1 on it: the test below is such a
//! client. A refused connection is answered `503 Service Unavailable` with `Retry-After`, in
//! plain text before any TLS, and closed.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use elastic_cpu::gate::{ConnectionGate, GateSettings, GatedListener, SetupListener};
use elastic_cpu::tower::PacedLayer;
use elastic_cpu::{Elastic, PacedStreamExt};
use elastic_cpu_examples::handshake::ServerSide;
use elastic_cpu_examples::table::{csv_rows, deflate};
use futures_util::StreamExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Flags.
#[derive(Parser, Debug)]
#[command(
    name = "service",
    about = "An axum service with a gated accept loop, a paced export and Prometheus metrics"
)]
struct Args {
    /// address to listen on
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// plain TCP: no TLS, no SCRAM
    #[arg(long)]
    plain: bool,
    /// runtime worker threads
    #[arg(long, default_value = "2")]
    workers: usize,
}

/// What the routes share.
struct App {
    elastic: Elastic,
    gate: ConnectionGate,
    prometheus: PrometheusHandle,
}

/// How connections are set up.
enum Setup {
    Plain,
    Tls(Arc<ServerSide>),
}

/// A connection once set up: plain TCP or TLS over it.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

fn main() {
    let args = Args::parse();
    let setup = if args.plain {
        Setup::Plain
    } else {
        Setup::Tls(Arc::new(ServerSide::new().unwrap_or_else(|e| fail(&e))))
    };
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let elastic = Elastic::builder()
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(args.workers)
                .enable_all(),
        )
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    rt.block_on(async {
        let gate = elastic
            .connection_gate(GateSettings::new())
            .unwrap_or_else(|e| fail(&e.to_string()));
        let tcp = tokio::net::TcpListener::bind(args.addr)
            .await
            .unwrap_or_else(|e| fail(&e.to_string()));
        let app = Arc::new(App {
            elastic: elastic.clone(),
            gate: gate.clone(),
            prometheus,
        });
        let (addr, server) = serve(tcp, gate, setup, app).unwrap_or_else(|e| fail(&e));
        let mode = if args.plain {
            "http"
        } else {
            "tls+scram, then http"
        };
        println!("serving on {addr} ({mode}); Ctrl-C to stop");
        let _ = std::io::stdout().flush();
        tokio::select! {
            _ = server => {}
            _ = tokio::signal::ctrl_c() => println!("stopping"),
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    elastic.shutdown();
}

fn fail(e: &str) -> ! {
    eprintln!("service: {e}");
    std::process::exit(1)
}

/// Serve `app` on `tcp` through `gate`: refused connections get a 503 with `Retry-After`, and
/// admitted ones are set up (TLS + SCRAM, or nothing) under their permits before axum sees
/// them. Returns the address and the server's future.
fn serve(
    tcp: tokio::net::TcpListener,
    gate: ConnectionGate,
    setup: Setup,
    app: Arc<App>,
) -> Result<(SocketAddr, impl std::future::Future<Output = ()>), String> {
    let elastic = app.elastic.clone();
    let gated = GatedListener::on_reject(tcp, gate, |stream, _, rejected| {
        // Before any TLS: a 503 in plain text, then close. `try_write`: never wait here.
        let _ = stream.try_write(rejected.http_503().as_bytes());
    })
    .map_err(|e| e.to_string())?;
    let listener: SetupListener<Box<dyn Conn>> = match setup {
        Setup::Plain => SetupListener::new(gated, |tcp: TcpStream| async move {
            Ok(Box::new(tcp) as Box<dyn Conn>)
        }),
        Setup::Tls(server) => SetupListener::new(gated, move |tcp: TcpStream| {
            let server = server.clone();
            async move {
                let mut tls = server.acceptor.accept(tcp).await?;
                server
                    .scram(&mut tls)
                    .await
                    .map_err(|e| std::io::Error::other(e.0))?;
                Ok(Box::new(tls) as Box<dyn Conn>)
            }
        }),
    };
    let addr = listener.local_addr();
    let router = Router::new()
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        // The export's response future is bulk work too: the whole handler runs paced.
        .route("/export", get(export).layer(PacedLayer::new(&elastic)))
        .with_state(app);
    Ok((addr, async move {
        let _ = axum::serve(listener, router).await;
    }))
}

/// `/status`: what the library decided, as JSON.
async fn status(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    let s = app.elastic.snapshot();
    let g = app.gate.snapshot();
    Json(serde_json::json!({
        "share": s.share,
        "cpus": s.cpus,
        "target_us": s.target.as_micros() as u64,
        "sched_p99_us": s.sched_p99.map(|d| d.as_micros() as u64),
        "elastic_cpu_secs": s.used.as_secs_f64(),
        "gate": {
            "share": g.share,
            "admitted": g.admitted,
            "rejected": g.rejected,
            "expired": g.expired,
            "in_setup": g.in_setup,
            "setup_cpu_secs": g.setup_cpu.as_secs_f64(),
        },
    }))
}

/// `/metrics`: the library's metrics (and anything else recorded) in Prometheus' text format.
async fn metrics(State(app): State<Arc<App>>) -> String {
    app.prometheus.render()
}

#[derive(serde::Deserialize)]
struct ExportQuery {
    /// 32 KiB chunks to compress.
    chunks: Option<u32>,
}

/// Chunks an export may ask for.
const MAX_CHUNKS: u32 = 4096;
const CHUNK: usize = 32 * 1024;

/// `/export?chunks=N`: N chunks of 32 KiB of table-like rows, each compressed with deflate
/// (about a millisecond of CPU), streamed as they are made, as paced elastic work.
async fn export(State(app): State<Arc<App>>, Query(q): Query<ExportQuery>) -> Body {
    let chunks = q.chunks.unwrap_or(16).min(MAX_CHUNKS);
    let stream = futures_util::stream::iter(0..chunks)
        .map(|i| {
            Ok::<Bytes, std::io::Error>(Bytes::from(deflate(&csv_rows(u64::from(i) << 20, CHUNK))))
        })
        .paced(&app.elastic);
    Body::from_stream(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use elastic_cpu_examples::handshake::ClientSide;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The service on 127.0.0.1, port 0, with `settings` for its gate.
    async fn start(
        elastic: &Elastic,
        settings: GateSettings,
    ) -> (SocketAddr, Arc<ServerSide>, ConnectionGate) {
        let server = Arc::new(ServerSide::new().unwrap());
        let gate = elastic.connection_gate(settings).unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let app = Arc::new(App {
            elastic: elastic.clone(),
            gate: gate.clone(),
            prometheus: PrometheusBuilder::new().build_recorder().handle(),
        });
        let (addr, fut) = serve(tcp, gate.clone(), Setup::Tls(server.clone()), app).unwrap();
        tokio::spawn(fut);
        (addr, server, gate)
    }

    async fn request<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, path: &str) -> Vec<u8> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        out
    }

    fn runtime(elastic: &Elastic) -> tokio::runtime::Runtime {
        elastic
            .runtime(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all(),
            )
            .build()
            .unwrap()
    }

    #[test]
    fn a_client_sets_up_with_tls_and_scram_and_exports() {
        let elastic = Elastic::builder().build().unwrap();
        runtime(&elastic).block_on(async {
            let (addr, server, gate) = start(&elastic, GateSettings::new()).await;
            let client = ClientSide::new(&server.cert).unwrap();
            let tcp = TcpStream::connect(addr).await.unwrap();
            let mut tls = client.connect(tcp).await.expect("TLS and SCRAM");
            let response = request(&mut tls, "/export?chunks=4").await;
            let head = String::from_utf8_lossy(&response[..response.len().min(200)]).to_string();
            assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
            // Four compressed 32 KiB chunks came back, much smaller than 128 KiB.
            assert!(
                response.len() > 1_000 && response.len() < 64 * 1024,
                "{}",
                response.len()
            );
            // The export ran as elastic work; the setup as the gate's.
            assert!(elastic.snapshot().used > Duration::ZERO);
            let g = gate.snapshot();
            assert_eq!((g.admitted, g.in_setup), (1, 0));
            assert!(g.setup_cpu > Duration::ZERO);
        });
    }

    /// Clients that connect and send nothing, more of them than setups may run at once, do not
    /// keep an honest client out (under the default settings), and each is closed at the
    /// setup timeout.
    #[test]
    fn silent_clients_do_not_keep_an_honest_one_out() {
        let elastic = Elastic::builder().build().unwrap();
        runtime(&elastic).block_on(async {
            let (addr, server, gate) = start(&elastic, GateSettings::new()).await;
            // The running cap is set at the governor's first tick.
            while gate.snapshot().stats.max_in_setup == usize::MAX {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let silent_n = gate.snapshot().stats.max_in_setup + 2;
            // One at a time, each waiting on its client before the next comes (on a loaded
            // machine a burst could outwait its 1 s deadline before the first setup's poll):
            // each attempt ends its admission, admitted or refused once it cannot start.
            let ended = |g: &elastic_cpu::gate::GateSnapshot| g.admitted + g.rejected + g.expired;
            let mut silent = Vec::new();
            for n in 1..=silent_n {
                silent.push(TcpStream::connect(addr).await.unwrap());
                loop {
                    let g = gate.snapshot();
                    if ended(&g) >= n as u64 && g.in_setup == 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            let g = gate.snapshot();
            assert_eq!(g.admitted, silent_n as u64, "all admitted: {g:?}");
            assert_eq!((g.waiting_on_peer, g.in_setup), (silent_n, 0), "{g:?}");
            // A bound against a hang, not a timing assertion.
            let guard = Duration::from_secs(60);
            let client = ClientSide::new(&server.cert).unwrap();
            let tcp = TcpStream::connect(addr).await.unwrap();
            let mut tls = tokio::time::timeout(guard, client.connect(tcp))
                .await
                .expect("the honest client is set up while the silent ones wait")
                .expect("TLS and SCRAM");
            let response = request(&mut tls, "/status").await;
            assert!(response.starts_with(b"HTTP/1.1 200 OK"));
            // Admitted, and never late: the gate refuses or expires what cannot start in time.
            let g = gate.snapshot();
            assert_eq!(
                (g.admitted, g.rejected, g.expired),
                (silent_n as u64 + 1, 0, 0)
            );
            assert_eq!(g.timed_out, 0, "{g:?}");
            // The silent ones are closed at the setup timeout: each reads the end.
            for mut s in silent {
                let mut buf = [0u8; 64];
                let read = tokio::time::timeout(guard, s.read(&mut buf)).await;
                assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
            }
            let g = gate.snapshot();
            assert_eq!(
                (g.timed_out, g.waiting_on_peer, g.in_setup),
                (silent_n as u64, 0, 0)
            );
        });
    }

    #[test]
    fn a_refused_connection_gets_a_retry_hint() {
        let elastic = Elastic::builder().build().unwrap();
        runtime(&elastic).block_on(async {
            // Setups estimated at 10 s at a share of 0.01: after one, none can start in time.
            let settings = GateSettings::new()
                .share(0.01, 0.05)
                .initial_share(0.01)
                .setup_cost(Duration::from_secs(10))
                .deadline(Duration::from_millis(100));
            let (addr, _server, gate) = start(&elastic, settings).await;
            let _first = TcpStream::connect(addr).await.unwrap();
            // The first is admitted (into debt) before the second arrives.
            while gate.snapshot().admitted == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let mut second = TcpStream::connect(addr).await.unwrap();
            let mut out = String::new();
            second.read_to_string(&mut out).await.unwrap();
            assert!(
                out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
                "{out}"
            );
            assert!(out.contains("\r\nRetry-After: "), "{out}");
        });
    }
}
