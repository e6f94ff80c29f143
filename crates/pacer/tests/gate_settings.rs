//! Every bad connection-gate setting is a typed error naming it; and a gate on a real governor
//! thread and runtime: the listener, and callers released when the governor goes.

mod common;

use std::time::Duration;

use common::*;
use elastic_cpu_pacer::gate::{GateSettings, GatedListener, QueueOrder, RejectReason};
use elastic_cpu_pacer::Elastic;

#[test]
fn each_bad_setting_is_named() {
    let elastic = Elastic::builder().build().unwrap();
    let bad = |s: GateSettings| elastic.connection_gate(s).unwrap_err();
    let cases: [(GateSettings, &str, &str); 16] = [
        (
            GateSettings::new().deadline(Duration::ZERO),
            "deadline",
            "0ns",
        ),
        (
            GateSettings::new().deadline(Duration::from_secs(7200)),
            "deadline",
            "7200s",
        ),
        (GateSettings::new().max_queue(0), "max_queue", "0"),
        (
            GateSettings::new().max_queue(2_000_000),
            "max_queue",
            "2000000",
        ),
        (
            GateSettings::new().setup_cost(Duration::ZERO),
            "setup_cost",
            "0ns",
        ),
        (
            GateSettings::new().setup_cost(Duration::from_secs(11)),
            "setup_cost",
            "11s",
        ),
        (GateSettings::new().share(f64::NAN, 0.5), "min_share", "NaN"),
        (GateSettings::new().share(0.001, 0.5), "min_share", "0.001"),
        (GateSettings::new().share(0.1, 1.5), "max_share", "1.5"),
        (GateSettings::new().share(0.1, 0.01), "max_share", "0.01"),
        (GateSettings::new().share(0.5, 0.2), "max_share", "0.2"),
        (
            GateSettings::new().initial_share(f64::INFINITY),
            "initial_share",
            "inf",
        ),
        (
            GateSettings::new().setup_timeout(Duration::ZERO),
            "setup_timeout",
            "0ns",
        ),
        (
            GateSettings::new().setup_timeout(Duration::from_secs(7200)),
            "setup_timeout",
            "7200s",
        ),
        (GateSettings::new().max_in_flight(0), "max_in_flight", "0"),
        (
            GateSettings::new().max_in_flight(2_000_000),
            "max_in_flight",
            "2000000",
        ),
    ];
    for (settings, setting, value) in cases {
        let e = bad(settings);
        assert_eq!((e.setting, e.value.as_str()), (setting, value), "{e}");
        assert!(e.to_string().contains(setting));
    }
    // The bounds themselves are fine, and order and the cap take any value.
    let ok = GateSettings::new()
        .deadline(Duration::from_millis(1))
        .max_queue(1)
        .setup_cost(Duration::from_micros(1))
        .share(0.01, 0.05)
        .initial_share(1.0)
        .order(QueueOrder::Fifo)
        .cap_concurrency(false)
        .setup_timeout(Duration::from_secs(3600))
        .max_in_flight(1);
    let gate = elastic.connection_gate(ok).unwrap();
    assert_eq!(
        gate.snapshot().share,
        0.05,
        "the initial share is clamped into the bounds"
    );
}

#[test]
fn waiting_callers_are_released_when_the_governor_thread_ends() {
    must_finish(
        "a gate without its governor",
        Duration::from_secs(30),
        || {
            let elastic = Elastic::builder().cpus(1.0).build().unwrap();
            let gate = elastic
                .connection_gate(GateSettings::new().share(0.01, 0.05).initial_share(0.01))
                .unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async {
                // One setup held: at 0.01 of one CPU the gate runs one setup at a time.
                let held = gate.admit(Duration::from_secs(1)).await.unwrap();
                let waiting = tokio::spawn(gate.admit(Duration::from_secs(3600)));
                tokio::task::yield_now().await;
                assert_eq!(gate.snapshot().queue_len, 1);
                drop(elastic);
                let r = waiting.await.unwrap().unwrap_err();
                assert_eq!(r.reason(), RejectReason::Closed);
                drop(held);
            });
        },
    );
}

#[test]
fn the_listener_hands_out_admitted_connections_and_refused_ones_to_on_reject() {
    must_finish("the gated listener", Duration::from_secs(60), || {
        let elastic = Elastic::builder().build().unwrap();
        let rt = elastic
            .runtime(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all(),
            )
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            // Admitted.
            let gate = elastic.connection_gate(GateSettings::new()).unwrap();
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut listener = GatedListener::new(tcp, gate.clone()).unwrap();
            let addr = listener.local_addr();
            let client = tokio::spawn(async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                let mut buf = [0u8; 2];
                s.read_exact(&mut buf).await.unwrap();
                buf
            });
            let (mut stream, _, mut permit) = listener.accept().await.unwrap();
            permit.pace().await;
            drop(permit);
            stream.write_all(b"ok").await.unwrap();
            assert_eq!(&client.await.unwrap(), b"ok");
            assert_eq!(gate.snapshot().admitted, 1);

            // Refused: a gate whose one place for a setup is taken (0.01 of 2 CPUs) and whose
            // deadline is 1 ms: the attempt expires on the governor's next tick and the stream
            // goes to on_reject, which writes the hint.
            let tight = elastic
                .connection_gate(
                    GateSettings::new()
                        .deadline(Duration::from_millis(1))
                        .share(0.01, 0.05)
                        .initial_share(0.01),
                )
                .unwrap();
            let held = tight.admit(Duration::from_secs(1)).await.unwrap();
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let listener = GatedListener::on_reject(tcp, tight.clone(), |mut stream, _, r| {
                tokio::spawn(async move {
                    let line = format!("retry-after-ms {}\n", r.retry_after().as_millis());
                    let _ = stream.write_all(line.as_bytes()).await;
                });
            })
            .unwrap();
            let mut s = tokio::net::TcpStream::connect(listener.local_addr())
                .await
                .unwrap();
            let mut line = String::new();
            s.read_to_string(&mut line).await.unwrap();
            assert!(line.starts_with("retry-after-ms "), "{line:?}");
            assert_eq!(tight.snapshot().expired, 1);
            drop(held);

            // Refused at the first poll (queue full): on_reject runs on the accept loop, with
            // no task of its own, so it writes without blocking.
            let full = elastic
                .connection_gate(
                    GateSettings::new()
                        .max_queue(1)
                        .order(elastic_cpu_pacer::gate::QueueOrder::Fifo)
                        .share(0.01, 0.05)
                        .initial_share(0.01),
                )
                .unwrap();
            // The one place for a setup (ceil(0.01 × 2)), and the one place in the queue.
            let held = full.admit(Duration::from_secs(60)).await.unwrap();
            let waiting = tokio::spawn({
                let full = full.clone();
                async move { full.admit(Duration::from_secs(60)).await.is_ok() }
            });
            while full.snapshot().queue_len == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let listener = GatedListener::on_reject(tcp, full.clone(), |stream, _, r| {
                assert_eq!(r.reason(), elastic_cpu_pacer::gate::RejectReason::QueueFull);
                let _ = stream.try_write(b"full\n");
            })
            .unwrap();
            let mut s = tokio::net::TcpStream::connect(listener.local_addr())
                .await
                .unwrap();
            let mut line = String::new();
            s.read_to_string(&mut line).await.unwrap();
            assert_eq!(line, "full\n");
            let snap = full.snapshot();
            assert_eq!((snap.rejected, snap.expired, snap.queue_len), (1, 0, 1));
            drop(held);
            assert!(
                waiting.await.unwrap(),
                "the queued attempt was not admitted"
            );
        });
    });
}
