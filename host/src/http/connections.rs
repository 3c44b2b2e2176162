//! Bounds on the connections the HTTP server keeps: at most
//! `--max-connections` at once (one more is closed at once, freeing its
//! file descriptor), a connection that sends nothing within
//! `--header-timeout-ms` is closed, and — set on the HTTP/1 builder by the
//! server — a request head must arrive within the same time of the
//! connection waiting for it, which also ends idle keep-alive connections.
//! TLS handshakes have their own bound (axum-server's, 10 s).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// An acceptor (for axum-server) that holds each connection to the bounds
/// of the HTTP settings (`--max-connections`, `--header-timeout-ms`); TLS
/// wraps it.
#[derive(Debug, Clone)]
pub(crate) struct Bounded {
    slots: Arc<Semaphore>,
    first_byte: Duration,
}

impl Bounded {
    pub fn new(max: usize, first_byte: Duration) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            first_byte,
        }
    }
}

impl<S: Send + 'static> axum_server::accept::Accept<TcpStream, S> for Bounded {
    type Stream = Counted;
    type Service = S;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Counted, S)>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let slot = Arc::clone(&self.slots).try_acquire_owned();
        let first_byte = self.first_byte;
        Box::pin(async move {
            let Ok(slot) = slot else {
                tracing::warn!("connection closed: too many connections (--max-connections)");
                return Err(io::Error::other("too many connections"));
            };
            // Wait for the first byte itself (readiness alone can be
            // reported before any data arrives).
            let mut first = [0u8; 1];
            match tokio::time::timeout(first_byte, stream.peek(&mut first)).await {
                Ok(Ok(0)) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed")),
                Ok(read) => {
                    read?;
                }
                Err(_) => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "silent connection"));
                }
            }
            Ok((
                Counted {
                    stream,
                    _slot: slot,
                },
                service,
            ))
        })
    }
}

/// A connection that holds its slot until it closes.
#[derive(Debug)]
pub struct Counted {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The acceptor of either kind of server (plain or TLS), bounded.
#[derive(Debug, Clone)]
pub(crate) enum Acceptor {
    Plain(Bounded),
    Tls(axum_server::tls_rustls::RustlsAcceptor<Bounded>),
}

impl<S: Send + 'static> axum_server::accept::Accept<TcpStream, S> for Acceptor {
    type Stream = Stream;
    type Service = S;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Stream, S)>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        match self {
            Acceptor::Plain(bounded) => {
                let accepted = bounded.accept(stream, service);
                Box::pin(async move { accepted.await.map(|(s, svc)| (Stream::Plain(s), svc)) })
            }
            Acceptor::Tls(tls) => {
                let accepted = tls.accept(stream, service);
                Box::pin(async move {
                    accepted
                        .await
                        .map(|(s, svc)| (Stream::Tls(Box::new(s)), svc))
                })
            }
        }
    }
}

/// A connection of either kind.
#[derive(Debug)]
pub enum Stream {
    Plain(Counted),
    Tls(Box<tokio_rustls::server::TlsStream<Counted>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
