//! Elastic work: a backup-like export of an in-memory sorted table. Each scan task walks its
//! key range as a `Stream` of chunks (rows encoded with delta-varint keys, then CRC-32), and
//! writes every chunk to its own async sink, like a writer to a file or a socket.

use futures_util::stream::Stream;
use futures_util::StreamExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::AsyncWriteExt;

pub const VALUE_LEN: usize = 48;

/// One row of the table.
pub struct Row {
    pub key: u64,
    pub ts: u64,
    pub value: [u8; VALUE_LEN],
}

/// The sorted table.
pub struct Table {
    pub rows: Vec<Row>,
}

impl Table {
    pub fn build(n: usize, seed: u64) -> Table {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut key = 1_000u64;
        let mut rows = Vec::with_capacity(n);
        for _ in 0..n {
            key += rng.u64(1..=64);
            let ts = 1_700_000_000_000 + rng.u64(..1_000_000_000);
            let mut value = [0u8; VALUE_LEN];
            // Half random bytes, half a repeating pattern: values look like real records.
            for (i, b) in value.iter_mut().enumerate() {
                *b = if i < VALUE_LEN / 2 {
                    rng.u8(..)
                } else {
                    b"abcdefgh"[i % 8]
                };
            }
            rows.push(Row { key, ts, value });
        }
        Table { rows }
    }
}

/// An encoded chunk of rows.
pub struct Chunk {
    pub data: Vec<u8>,
    pub rows: u32,
    pub crc: u32,
}

fn crc_table() -> &'static [u32; 256] {
    static T: OnceLock<[u32; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    })
}

/// CRC-32 (IEEE), bytewise table.
pub fn crc32(data: &[u8]) -> u32 {
    let t = crc_table();
    let mut c = !0u32;
    for &b in data {
        c = t[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encode rows `[from, to)`: delta-varint key, varint timestamp, length-prefixed value; CRC.
pub fn encode(rows: &[Row]) -> Chunk {
    let mut data = Vec::with_capacity(rows.len() * (VALUE_LEN + 16));
    let mut prev = rows.first().map(|r| r.key).unwrap_or(0);
    varint(&mut data, prev);
    for r in rows {
        varint(&mut data, r.key - prev);
        prev = r.key;
        varint(&mut data, r.ts);
        varint(&mut data, VALUE_LEN as u64);
        data.extend_from_slice(&r.value);
    }
    let crc = crc32(&data);
    Chunk {
        data,
        rows: rows.len() as u32,
        crc,
    }
}

/// One scan task's stream: walks `[start, end)` in chunks, wrapping around, until `stop`.
pub struct ScanStream {
    table: Arc<Table>,
    start: usize,
    end: usize,
    pos: usize,
    chunk_rows: usize,
    stop: Arc<AtomicBool>,
}

impl ScanStream {
    pub fn new(
        table: Arc<Table>,
        start: usize,
        end: usize,
        chunk_rows: usize,
        stop: Arc<AtomicBool>,
    ) -> ScanStream {
        ScanStream {
            table,
            start,
            end,
            pos: start,
            chunk_rows,
            stop,
        }
    }

    /// Produce the next chunk (synchronously).
    pub fn next_chunk(&mut self) -> Chunk {
        let to = (self.pos + self.chunk_rows).min(self.end);
        let c = encode(&self.table.rows[self.pos..to]);
        self.pos = if to >= self.end { self.start } else { to };
        c
    }
}

impl Stream for ScanStream {
    type Item = Chunk;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        let this = self.get_mut();
        if this.stop.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(this.next_chunk()))
    }
}

/// Rows and bytes that reached the sink.
#[derive(Default)]
pub struct Counters {
    pub rows: AtomicU64,
    pub bytes: AtomicU64,
    pub crc: AtomicU64,
}

/// How the scan tasks consume their stream.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Consume {
    /// `for_each(send)`: polls as long as tokio's cooperative budget allows.
    Plain,
    /// `yield_now()` after every chunk.
    YieldEach,
}

/// Drive one stream of chunks into this task's sink: an always-ready async writer
/// (`tokio::io::sink()`, which takes tokio's cooperative budget like a socket or file write
/// that never blocks), then count what was written.
pub async fn drive<S>(stream: S, counters: Arc<Counters>, consume: Consume)
where
    S: Stream<Item = Chunk> + Send,
{
    let mut out = tokio::io::sink();
    let mut stream = std::pin::pin!(stream);
    while let Some(c) = stream.next().await {
        if out.write_all(&c.data).await.is_err() {
            break;
        }
        counters.rows.fetch_add(c.rows as u64, Ordering::Relaxed);
        counters
            .bytes
            .fetch_add(c.data.len() as u64, Ordering::Relaxed);
        counters.crc.fetch_xor(c.crc as u64, Ordering::Relaxed);
        if consume == Consume::YieldEach {
            tokio::task::yield_now().await;
        }
    }
}

/// The key ranges of `tasks` scan tasks over `n` rows.
pub fn ranges(n: usize, tasks: usize) -> Vec<(usize, usize)> {
    (0..tasks)
        .map(|i| (n * i / tasks, n * (i + 1) / tasks))
        .collect()
}

/// Rows per CPU-second of one scan stream, single-threaded, best of several tries; and the
/// CPU time of one chunk.
pub fn calibrate(table: &Arc<Table>, chunk_rows: usize) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut s = ScanStream::new(table.clone(), 0, table.rows.len(), chunk_rows, stop);
    let mut best = 0.0f64;
    let mut sink = 0u32;
    for _ in 0..30 {
        let t = Instant::now();
        let mut rows = 0u64;
        while t.elapsed().as_millis() < 30 {
            let c = s.next_chunk();
            rows += c.rows as u64;
            sink ^= c.crc;
        }
        best = best.max(rows as f64 / t.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    (best, chunk_rows as f64 / best)
}
