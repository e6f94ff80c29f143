//! `tower::PacedLayer` through a real axum router served over TCP: the layered route's work is
//! charged as elastic work, the other route's is not.

use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use elastic_cpu_pacer::tower::PacedLayer;
use elastic_cpu_pacer::Elastic;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// About `ms` of CPU, as a bulk route's work.
fn work(ms: u64) -> String {
    let until = Instant::now() + Duration::from_millis(ms);
    let mut n = 0u64;
    while Instant::now() < until {
        n = n.wrapping_add(1);
    }
    format!("{n}")
}

/// One HTTP/1.1 request over a fresh connection; the response's status line.
async fn get_status(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.lines().next().unwrap_or_default().to_string()
}

#[test]
fn the_layered_route_runs_as_paced_elastic_work() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap();
    rt.block_on(async {
        let app = Router::new()
            .route("/export", get(|| async { work(20) }))
            .layer(PacedLayer::new(&elastic))
            .route("/fast", get(|| async { work(20) }));
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(tcp, app).await });
        let before = elastic.snapshot().used;
        assert_eq!(get_status(addr, "/fast").await, "HTTP/1.1 200 OK");
        let after_fast = elastic.snapshot().used;
        assert_eq!(
            after_fast, before,
            "the unlayered route is not elastic work"
        );
        assert_eq!(get_status(addr, "/export").await, "HTTP/1.1 200 OK");
        let charged = elastic.snapshot().used - after_fast;
        assert!(charged >= Duration::from_millis(15), "{charged:?}");
    });
}
