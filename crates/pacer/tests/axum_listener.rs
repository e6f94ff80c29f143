//! `gate::SetupListener` as the listener of `axum::serve`, through a real router: each
//! connection's setup runs under its permit before axum sees the connection; a refused one
//! gets an HTTP 503 with `Retry-After`.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use elastic_cpu_pacer::gate::{ConnectionGate, GateSettings, GatedListener, SetupListener};
use elastic_cpu_pacer::Elastic;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn runtime(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap()
}

/// axum serving `/hello` through `gate` on 127.0.0.1, each connection set up first by a toy
/// handshake (the client says `H`, the server answers `A`, a handshake's shape).
async fn serve_hello(gate: &ConnectionGate) -> std::net::SocketAddr {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listener = SetupListener::new(GatedListener::new(tcp, gate.clone()).unwrap(), {
        |mut s: TcpStream| async move {
            let mut hello = [0u8; 1];
            s.read_exact(&mut hello).await?;
            s.write_all(b"A").await?;
            Ok(s)
        }
    });
    let addr = listener.local_addr();
    let app = Router::new().route("/hello", get(|| async { "hi" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The client's side of the toy setup, then one HTTP request: the whole response.
async fn set_up_and_get(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"H").await.unwrap();
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).await.unwrap();
    assert_eq!(&ack, b"A");
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[test]
fn axum_serves_connections_once_their_setup_is_done() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = runtime(&elastic);
    rt.block_on(async {
        let gate = elastic.connection_gate(GateSettings::new()).unwrap();
        let addr = serve_hello(&gate).await;
        for _ in 0..3 {
            let response = set_up_and_get(addr).await;
            assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
            assert!(response.ends_with("hi"), "{response}");
        }
        let s = gate.snapshot();
        assert_eq!((s.admitted, s.rejected, s.in_setup), (3, 0, 0), "{s:?}");
    });
}

#[test]
fn a_refused_connection_gets_a_503_with_retry_after() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = runtime(&elastic);
    rt.block_on(async {
        // Setups estimated at 10 s of CPU at a share of 0.01: after the first, no attempt can
        // start within its 100 ms deadline.
        let settings = GateSettings::new()
            .share(0.01, 0.05)
            .initial_share(0.01)
            .setup_cost(Duration::from_secs(10))
            .deadline(Duration::from_millis(100));
        let gate = elastic.connection_gate(settings).unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut listener = GatedListener::on_reject(tcp, gate.clone(), |s, _, rejected| {
            let _ = s.try_write(rejected.http_503().as_bytes());
        })
        .unwrap();
        let addr = listener.local_addr();
        let _first = TcpStream::connect(addr).await.unwrap();
        let (_conn, _, _permit) = listener.accept().await.unwrap();
        let mut second = TcpStream::connect(addr).await.unwrap();
        let mut out = String::new();
        second.read_to_string(&mut out).await.unwrap();
        assert!(
            out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{out}"
        );
        let secs: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("Retry-After: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("a Retry-After header");
        assert!((1..=30).contains(&secs), "{secs}");
        assert_eq!(gate.snapshot().rejected, 1);
    });
}

#[test]
fn silent_clients_are_closed_at_the_setup_timeout_and_keep_nobody_out() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = runtime(&elastic);
    rt.block_on(async {
        // One setup runs at once; setups get 300 ms.
        let settings = GateSettings::new()
            .share(0.05, 0.05)
            .initial_share(0.05)
            .setup_timeout(Duration::from_millis(300));
        let gate = elastic.connection_gate(settings).unwrap();
        assert_eq!(gate.setup_timeout(), Duration::from_millis(300));
        let addr = serve_hello(&gate).await;
        // Three clients that connect and say nothing: more than the one running place.
        let mut silent = Vec::new();
        for _ in 0..3 {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        while gate.snapshot().admitted + gate.snapshot().expired < 3 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(gate.snapshot().admitted, 3, "{:?}", gate.snapshot());
        // An honest client still sets up and is served.
        let response = set_up_and_get(addr).await;
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        // The silent ones are closed at their timeout: each reads the end.
        for mut s in silent {
            let mut buf = [0u8; 8];
            let read = s.read(&mut buf).await;
            assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        }
        let s = gate.snapshot();
        assert_eq!((s.timed_out, s.admitted, s.rejected), (3, 4, 0), "{s:?}");
        assert_eq!((s.in_setup, s.waiting_on_peer), (0, 0), "{s:?}");
    });
}
