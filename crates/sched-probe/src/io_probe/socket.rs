//! Canaries from a writer thread: a timestamp sent into a datagram socket every period, read by
//! a task on the runtime ([`IoCanary::Thread`](super::IoCanary::Thread); the only source off
//! Linux).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::{IoProbeError, IoShared};
use crate::shared::nanos;

/// A canary is the write time as nanoseconds since the probe's start, little-endian.
const CANARY_LEN: usize = 8;

/// Starts the reader task on the runtime and the writer thread (`elastic-cpu-io-canary`).
pub(super) fn start(
    handle: &Handle,
    shared: &Arc<IoShared>,
) -> Result<(JoinHandle<()>, thread::JoinHandle<()>), IoProbeError> {
    let (send, recv) = socket_pair().map_err(IoProbeError::Socket)?;
    let recv = super::register(handle, || RecvEnd::from_std(recv))?;
    // Both ends measure from the same origin: a canary carries its write time.
    let origin = Instant::now();
    let reader = handle.spawn(read_canaries(recv, shared.clone(), origin));
    let writer = {
        let shared = shared.clone();
        thread::Builder::new()
            .name("elastic-cpu-io-canary".into())
            .spawn(move || write_canaries(&send, &shared, origin))
    };
    match writer {
        Ok(writer) => Ok((reader, writer)),
        Err(e) => {
            reader.abort();
            Err(IoProbeError::Thread(e))
        }
    }
}

/// The writer thread: one canary per period, skipping ahead rather than bursting after a delay.
fn write_canaries(send: &StdEnd, shared: &IoShared, origin: Instant) {
    let mut next = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        let written = nanos(origin.elapsed());
        match send.send(&written.to_le_bytes()) {
            Ok(_) => {
                shared.sent.fetch_add(1, Ordering::Relaxed);
            }
            // The reader is held up and the buffer is full: the queued canaries will report it.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                shared.skipped.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The reading end is closed: the runtime has shut down (or the reader was aborted).
            Err(_) => return,
        }
        let period = shared.period();
        next += period;
        let now = Instant::now();
        if next <= now {
            next = now + period;
        }
        thread::park_timeout(next - now);
        // Woken out of a longer wait by a shorter period (leaving quiet): the next canary goes
        // now.
        if shared.period() < period {
            next = next.min(Instant::now());
        }
    }
}

/// The reader task: reads canaries as the I/O driver reports them and records their age.
async fn read_canaries(recv: RecvEnd, shared: Arc<IoShared>, origin: Instant) {
    // Larger than a canary, so that a longer datagram is seen as such (and ignored).
    let mut buf = [0u8; 2 * CANARY_LEN];
    loop {
        match recv.recv(&mut buf).await {
            Ok(CANARY_LEN) => {
                let mut bytes = [0u8; CANARY_LEN];
                bytes.copy_from_slice(&buf[..CANARY_LEN]);
                let written = u64::from_le_bytes(bytes);
                shared.record(nanos(origin.elapsed()).saturating_sub(written));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The socket failed (or the writer is gone): nothing more to read.
            Err(_) => return,
        }
    }
}

/// One end of the socket pair, as std has it (the writer's end stays so).
#[cfg(unix)]
type StdEnd = std::os::unix::net::UnixDatagram;
/// The reading end, registered with the runtime's I/O driver.
#[cfg(unix)]
type RecvEnd = tokio::net::UnixDatagram;
#[cfg(not(unix))]
type StdEnd = std::net::UdpSocket;
#[cfg(not(unix))]
type RecvEnd = tokio::net::UdpSocket;

/// A connected datagram socket pair, both ends non-blocking (the writer never blocks on a full
/// buffer; tokio requires it of the reader). The reading end is not registered yet.
#[cfg(unix)]
fn socket_pair() -> io::Result<(StdEnd, StdEnd)> {
    let (send, recv) = StdEnd::pair()?;
    send.set_nonblocking(true)?;
    recv.set_nonblocking(true)?;
    Ok((send, recv))
}

#[cfg(not(unix))]
fn socket_pair() -> io::Result<(StdEnd, StdEnd)> {
    use std::net::Ipv4Addr;
    let send = StdEnd::bind((Ipv4Addr::LOCALHOST, 0))?;
    let recv = StdEnd::bind((Ipv4Addr::LOCALHOST, 0))?;
    // Connected both ways: the reader only accepts datagrams from the writer.
    send.connect(recv.local_addr()?)?;
    recv.connect(send.local_addr()?)?;
    send.set_nonblocking(true)?;
    recv.set_nonblocking(true)?;
    Ok((send, recv))
}
