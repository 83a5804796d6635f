//! Where log lines go: a buffer that a thread of its own writes out, so
//! that a runtime thread never makes a system call for a line nor wakes
//! another thread for each.
//!
//! Every call writes two audit lines. With a channel to a writer thread
//! (`tracing-appender`'s non-blocking writer) each line wakes that thread
//! when it is idle, as it is between the calls of a single session: a
//! `futex` wake on the runtime thread, a context switch, a `write` and a
//! `flush` per line, 1.4 of the server's 5.7 context switches per one-read
//! batch at C=1 (BENCHMARKS.md, "Session 15"). Here a line is appended to a
//! buffer under a mutex, and the thread writes at most once per [`GATHER`]
//! whatever was appended meanwhile, waking by its own timer. Only the first
//! line after a [`GATHER`] with none wakes it (it then gathers for
//! [`GATHER`] before writing). So while lines come, no logging thread
//! wakes it; while none come, it sleeps without a timer.
//!
//! Not lossy, and bounded: once [`MAX_BUFFERED_BYTES`] wait, a logging
//! thread waits for the writer (as it would on a blocking stderr), so no
//! audit line is ever dropped and a stalled stderr holds at most that much
//! memory. A buffer past [`HURRY_BYTES`] is written without waiting out the
//! gathering time. The price: a line reaches stderr about [`GATHER`] after
//! it was logged (the first line after a quiet moment waits out all of it;
//! a loaded machine adds its scheduling delay); lines still buffered when
//! the process is killed (`SIGKILL`) are lost, about that much time's worth. A graceful exit
//! writes everything ([`LogWriterGuard`]'s drop); a line logged after that
//! is written at once by the thread that logs it.
//!
//! The writes are whole ([`FdSink`]): a gathered buffer is larger than a
//! pipe takes at once, so a short write is continued and a non-blocking
//! stderr (a pipe a supervisor handed down with `O_NONBLOCK`) is waited on
//! until it takes more, rather than the rest of the buffer being dropped
//! with a line torn in two.

#![allow(unsafe_code)]

use std::io::{self, Write};
use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the writer gathers lines after the first one wakes it.
pub const GATHER: Duration = Duration::from_millis(5);

/// Buffered bytes at which the writer is woken at once.
pub const HURRY_BYTES: usize = 64 * 1024;

/// Buffered bytes at which a logging thread waits for the writer (about
/// 16,000 audit lines).
pub const MAX_BUFFERED_BYTES: usize = 8 * 1024 * 1024;

/// Capacity the writer keeps in its spare buffer between writes: a burst's
/// larger buffer is freed, not held through the quiet that follows.
const KEPT_CAPACITY_BYTES: usize = 256 * 1024;

/// A `tracing_subscriber` writer whose lines a thread of its own writes to
/// the sink given to [`LogWriter::spawn`]. Cheap to clone.
#[derive(Clone)]
pub struct LogWriter {
    shared: Arc<Shared>,
}

/// Held for as long as lines may be logged; its drop writes what is
/// buffered and stops the thread.
pub struct LogWriterGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for lines, or for its gathering time to end.
    lines: Condvar,
    /// Logging threads wait here while the buffer is full.
    room: Condvar,
    /// Locked by whoever writes to the sink: the writer thread, or after
    /// the guard's drop the logging thread itself.
    sink: Mutex<Box<dyn Write + Send>>,
    gather: Duration,
    hurry: usize,
    max: usize,
}

#[derive(Default)]
struct State {
    buf: Vec<u8>,
    /// The writer waits with no deadline: the next line must wake it.
    idle: bool,
    /// The buffer passed `hurry` and the writer has been told.
    hurried: bool,
    closed: bool,
}

impl LogWriter {
    /// Starts the writer thread (named `name`) writing to `sink`.
    pub fn spawn(
        name: &str,
        sink: impl Write + Send + 'static,
    ) -> io::Result<(LogWriter, LogWriterGuard)> {
        Self::spawn_with(name, sink, GATHER, HURRY_BYTES, MAX_BUFFERED_BYTES)
    }

    fn spawn_with(
        name: &str,
        sink: impl Write + Send + 'static,
        gather: Duration,
        hurry: usize,
        max: usize,
    ) -> io::Result<(LogWriter, LogWriterGuard)> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            lines: Condvar::new(),
            room: Condvar::new(),
            sink: Mutex::new(Box::new(sink)),
            gather,
            hurry,
            max,
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || shared.write_out())?
        };
        Ok((
            LogWriter {
                shared: shared.clone(),
            },
            LogWriterGuard {
                shared,
                thread: Some(thread),
            },
        ))
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a buffer of whole lines.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write_to_sink(&self, bytes: &[u8]) {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        // Nowhere to report a failing stderr: the line is dropped, as a
        // direct write's error would be.
        let _ = sink.write_all(bytes).and_then(|()| sink.flush());
    }

    /// Appends one line (what the formatter hands over at once).
    fn append(&self, bytes: &[u8]) {
        let mut st = self.state();
        // Full: wait for the writer (a line longer than the whole buffer
        // goes in alone).
        while !st.closed && !st.buf.is_empty() && st.buf.len() + bytes.len() > self.max {
            if !st.hurried {
                st.hurried = true;
                self.lines.notify_one();
            }
            st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.closed {
            drop(st);
            self.write_to_sink(bytes);
            return;
        }
        st.buf.extend_from_slice(bytes);
        if st.idle {
            st.idle = false;
            self.lines.notify_one();
        } else if st.buf.len() >= self.hurry && !st.hurried {
            st.hurried = true;
            self.lines.notify_one();
        }
    }

    /// The writer thread: at most one write per `gather` (sooner only when
    /// the buffer passes `hurry` or the guard closes), so that lines logged
    /// meanwhile wake nobody; after a `gather` with no line it waits for
    /// the next one, which wakes it, and gathers again from there.
    fn write_out(&self) {
        let mut out = Vec::new();
        let mut st = self.state();
        let mut last_write = Instant::now();
        loop {
            st = self.gather_until(st, last_write + self.gather);
            if st.buf.is_empty() {
                if st.closed {
                    return;
                }
                st.idle = true;
                while st.buf.is_empty() && !st.closed {
                    st = self.lines.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                st.idle = false;
                st = self.gather_until(st, Instant::now() + self.gather);
                // Woken with nothing to write: the guard closed.
                if st.buf.is_empty() {
                    return;
                }
            }
            st.hurried = false;
            std::mem::swap(&mut st.buf, &mut out);
            self.room.notify_all();
            drop(st);
            self.write_to_sink(&out);
            last_write = Instant::now();
            out.clear();
            if out.capacity() > KEPT_CAPACITY_BYTES {
                out = Vec::new();
            }
            st = self.state();
        }
    }

    /// Waits until `deadline`, or less when the buffer passes `hurry` or
    /// the guard closes.
    fn gather_until<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        deadline: Instant,
    ) -> MutexGuard<'a, State> {
        while !st.closed && !st.hurried {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .lines
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        st
    }
}

impl Drop for LogWriterGuard {
    fn drop(&mut self) {
        self.shared.state().closed = true;
        self.shared.lines.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A file descriptor (stderr) written whole: `write` retries an interrupted
/// call and, when the descriptor is non-blocking and full (EAGAIN), waits
/// with `poll` until it can take more. The descriptor is not closed.
pub struct FdSink(RawFd);

impl FdSink {
    /// The process's stderr.
    pub fn stderr() -> Self {
        Self(libc::STDERR_FILENO)
    }
}

impl Write for FdSink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        loop {
            // SAFETY: writes from a valid slice to a descriptor we do not own.
            let n = unsafe { libc::write(self.0, bytes.as_ptr().cast(), bytes.len()) };
            if let Ok(n) = usize::try_from(n) {
                return Ok(n);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => {
                    let mut fd = libc::pollfd {
                        fd: self.0,
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    // SAFETY: polls one valid pollfd. An error or hang-up
                    // shows in the next write's error.
                    unsafe { libc::poll(&mut fd, 1, -1) };
                }
                _ => return Err(e),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One line being written (the formatter writes each event at once).
pub struct LogLine<'a>(&'a Shared);

impl Write for LogLine<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.append(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine(&self.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A sink that hands every write to a channel, and can be held shut.
    #[derive(Clone)]
    struct Probe {
        writes: mpsc::Sender<Vec<u8>>,
        gate: Arc<Mutex<()>>,
    }

    impl Write for Probe {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let _open = self.gate.lock().unwrap();
            let _ = self.writes.send(bytes.to_vec());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn probe() -> (Probe, mpsc::Receiver<Vec<u8>>, Arc<Mutex<()>>) {
        let (tx, rx) = mpsc::channel();
        let gate = Arc::new(Mutex::new(()));
        (
            Probe {
                writes: tx,
                gate: gate.clone(),
            },
            rx,
            gate,
        )
    }

    fn line(w: &LogWriter, text: &str) {
        use tracing_subscriber::fmt::MakeWriter as _;
        w.make_writer().write_all(text.as_bytes()).unwrap();
    }

    const WAIT: Duration = Duration::from_secs(30);

    #[test]
    fn a_lone_line_is_written_without_the_guard_dropped() {
        let (sink, writes, _gate) = probe();
        let (w, _guard) = LogWriter::spawn("log-test", sink).unwrap();
        line(&w, "one\n");
        assert_eq!(writes.recv_timeout(WAIT).unwrap(), b"one\n");
        // Idle again: the next line wakes it again.
        line(&w, "two\n");
        assert_eq!(writes.recv_timeout(WAIT).unwrap(), b"two\n");
    }

    #[test]
    fn lines_gathered_together_are_written_in_one_write_in_order() {
        let (sink, writes, _gate) = probe();
        // A long gathering time: everything below lands in one write.
        let (w, guard) =
            LogWriter::spawn_with("log-test", sink, Duration::from_secs(60), 1 << 20, 1 << 20)
                .unwrap();
        for i in 0..100 {
            line(&w, &format!("line {i}\n"));
        }
        drop(guard);
        let all: Vec<Vec<u8>> = writes.try_iter().collect();
        let expected: String = (0..100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(all, vec![expected.into_bytes()]);
    }

    #[test]
    fn a_full_buffer_makes_loggers_wait_and_loses_nothing() {
        let (sink, writes, gate) = probe();
        // 64-byte buffer, written at 32: the sink is held shut, so the
        // logger must wait rather than drop lines.
        let (w, guard) =
            LogWriter::spawn_with("log-test", sink, Duration::from_secs(60), 32, 64).unwrap();
        let shut = gate.lock().unwrap();
        let logger = {
            let w = w.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    line(&w, &format!("l{i:02}\n"));
                }
            })
        };
        // The writer took a first buffer and is stuck on the sink; the
        // logger fills the next one and waits.
        let deadline = std::time::Instant::now() + WAIT;
        while w.shared.state().buf.len() + 4 <= 64 {
            assert!(
                std::time::Instant::now() < deadline,
                "the logger never filled the buffer"
            );
            std::thread::yield_now();
        }
        assert!(!logger.is_finished());
        drop(shut);
        logger.join().unwrap();
        drop(guard);
        let all: Vec<u8> = writes.try_iter().flatten().collect();
        let expected: String = (0..50).map(|i| format!("l{i:02}\n")).collect();
        assert_eq!(String::from_utf8(all).unwrap(), expected);
    }

    /// A gathered buffer larger than a non-blocking pipe takes at once
    /// arrives whole, line after line, while the reader is slow.
    #[test]
    fn a_full_non_blocking_pipe_is_waited_on_not_torn() {
        use std::io::Read as _;
        use std::os::fd::{AsRawFd as _, FromRawFd as _};
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into the array.
        assert_eq!(
            unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) },
            0
        );
        // SAFETY: both fds were just made and are owned here alone.
        let (mut read, write) = unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        // The read end blocking, the write end not.
        // SAFETY: fcntl on an fd owned here.
        unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, 0) };
        let (w, guard) = LogWriter::spawn_with(
            "log-test",
            FdSink(write.as_raw_fd()),
            Duration::from_secs(60),
            1 << 30,
            1 << 30,
        )
        .unwrap();
        // 400 KiB of lines: six times a pipe's 64 KiB, in one write.
        let lines: Vec<String> = (0..4096)
            .map(|i| format!("{i:05} {}\n", "x".repeat(94)))
            .collect();
        for l in &lines {
            line(&w, l);
        }
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut chunk = [0u8; 4096];
            // To the end of file: the write end closes after the guard.
            loop {
                let n = read.read(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&chunk[..n]);
            }
            all
        });
        drop(guard);
        drop(write);
        let all = reader.join().unwrap();
        assert_eq!(String::from_utf8(all).unwrap(), lines.concat());
    }

    #[test]
    fn a_line_after_the_guard_is_written_directly() {
        let (sink, writes, _gate) = probe();
        let (w, guard) = LogWriter::spawn("log-test", sink).unwrap();
        line(&w, "before\n");
        drop(guard);
        line(&w, "after\n");
        let all: Vec<Vec<u8>> = writes.try_iter().collect();
        assert_eq!(all, vec![b"before\n".to_vec(), b"after\n".to_vec()]);
    }
}
