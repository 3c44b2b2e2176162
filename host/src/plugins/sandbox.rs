//! The WASI a component gets when it imports WASI (Python policies do;
//! Rust and JavaScript ones built by `verdict build` do not): all of it
//! linked, none of it useful. No preopened folders (a file open finds
//! nothing), no sockets (TCP, UDP and name lookups refused), no
//! environment, no arguments, an empty stdin, wall and monotonic clocks that
//! stand still at zero (a policy's time is `ctx.now`), random bytes that are
//! the same fixed sequence in every instance (a policy is a function of its
//! input), and stdout and stderr written to the host's log line by line,
//! tagged with the plugin, up to a bounded number of bytes per instance.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{Deterministic, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder};

/// Bytes of stdout and stderr together one instance may write to the log;
/// beyond it, output is dropped (said once).
pub(crate) const OUTPUT_BUDGET: usize = 64 << 10;

/// Longest line written to the log; longer ones are cut (as the `log`
/// import's messages are).
const MAX_LINE: usize = super::runtime::MAX_LOG_MESSAGE;

/// A WASI context that grants nothing, for one instance of `plugin`.
pub(crate) fn deny_all(plugin: &Arc<str>) -> WasiCtx {
    let budget = Arc::new(Mutex::new(OUTPUT_BUDGET));
    WasiCtxBuilder::new()
        .stdout(LogStream::new(plugin, "stdout", &budget))
        .stderr(LogStream::new(plugin, "stderr", &budget))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .wall_clock(Frozen)
        .monotonic_clock(Frozen)
        .secure_random(Deterministic::new(fixed_bytes()))
        .insecure_random(Deterministic::new(fixed_bytes()))
        .insecure_random_seed(0)
        .build()
}

/// The "random" bytes: a fixed permutation of 0..=255, cycled.
fn fixed_bytes() -> Vec<u8> {
    (0..256u32).map(|i| ((i * 167 + 13) % 256) as u8).collect()
}

/// A clock that always says zero.
struct Frozen;

impl HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Frozen {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

/// stdout or stderr of an instance, into the host's log at `info` (stdout)
/// or `warn` (stderr), a line at a time.
#[derive(Clone)]
struct LogStream {
    plugin: Arc<str>,
    stream: &'static str,
    /// The unfinished line.
    line: Arc<Mutex<Vec<u8>>>,
    /// Bytes left to write, shared by both streams of the instance.
    budget: Arc<Mutex<usize>>,
}

impl LogStream {
    fn new(plugin: &Arc<str>, stream: &'static str, budget: &Arc<Mutex<usize>>) -> Self {
        Self {
            plugin: Arc::clone(plugin),
            stream,
            line: Arc::default(),
            budget: Arc::clone(budget),
        }
    }

    /// Take `bytes`, writing each finished line to the log.
    fn take(&self, bytes: &[u8]) {
        let allowed = {
            let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
            if *budget == 0 {
                return;
            }
            let allowed = bytes.len().min(*budget);
            *budget -= allowed;
            if *budget == 0 {
                tracing::warn!(
                    plugin = &*self.plugin,
                    "the plugin wrote over {OUTPUT_BUDGET} bytes to stdout and stderr; the rest is dropped"
                );
            }
            allowed
        };
        let mut line = self.line.lock().unwrap_or_else(|p| p.into_inner());
        for &byte in &bytes[..allowed] {
            if byte == b'\n' {
                self.emit(&line);
                line.clear();
            } else if line.len() < MAX_LINE {
                line.push(byte);
            }
        }
    }

    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let plugin = &*self.plugin;
        let stream = self.stream;
        if stream == "stderr" {
            tracing::warn!(plugin, stream, "{text}");
        } else {
            tracing::info!(plugin, stream, "{text}");
        }
    }
}

impl Drop for LogStream {
    fn drop(&mut self) {
        // The last clone of a stream says what is left of its line.
        if Arc::strong_count(&self.line) == 1 {
            let line = self.line.lock().unwrap_or_else(|p| p.into_inner());
            if !line.is_empty() {
                self.emit(&line);
            }
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for LogStream {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        self.take(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(MAX_LINE)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.take(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_taken_by_lines_within_one_budget_for_both_streams() {
        let plugin: Arc<str> = Arc::from("p");
        let budget = Arc::new(Mutex::new(100));
        let out = LogStream::new(&plugin, "stdout", &budget);
        let err = LogStream::new(&plugin, "stderr", &budget);
        out.take(b"one line\nhalf ");
        assert_eq!(*out.line.lock().unwrap(), b"half ");
        err.take(&[b'x'; 60]);
        assert_eq!(*budget.lock().unwrap(), 100 - 14 - 60);
        // Past the budget, output is dropped, not kept.
        out.take(&[b'y'; 60]);
        assert_eq!(*budget.lock().unwrap(), 0);
        assert_eq!(out.line.lock().unwrap().len(), 5 + 26);
        out.take(b"more\n");
        assert_eq!(
            out.line.lock().unwrap().len(),
            5 + 26,
            "nothing taken past the budget"
        );
    }

    #[test]
    fn a_long_line_is_cut() {
        let plugin: Arc<str> = Arc::from("p");
        let budget = Arc::new(Mutex::new(OUTPUT_BUDGET));
        let out = LogStream::new(&plugin, "stdout", &budget);
        out.take(&vec![b'z'; MAX_LINE * 2]);
        assert_eq!(out.line.lock().unwrap().len(), MAX_LINE);
    }
}
