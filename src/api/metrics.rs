//! The Prometheus scrape endpoint, `GET /metrics` on its own plain-HTTP
//! listener (`--metrics-listen`), apart from the gRPC port; and the tower
//! layer that counts the gRPC server's requests by method and status code
//! and times them to their status (a stream's end, not its first response
//! headers).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use tokio::net::TcpListener;
use tonic::codegen::Body;

use crate::scheduler::{Metrics, Scheduler};

/// Serves `GET /metrics` until `signal` resolves: the scheduler's metrics
/// and the state of its MCP servers as of each scrape.
pub async fn serve_metrics(
    listener: TcpListener,
    scheduler: Scheduler,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let scheduler = scheduler.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    scheduler.metrics().render(&scheduler.mcp_statuses()),
                )
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await
}

/// The methods counted by name; any other path (a client may send any) is
/// `other`, so that clients cannot grow the label set.
const METHODS: &[&str] = &[
    "/toolsched.v1.ToolScheduler/ScheduleCalls",
    "/toolsched.v1.ToolScheduler/Confirm",
    "/toolsched.v1.ToolScheduler/Cancel",
    "/toolsched.v1.ToolScheduler/ListTools",
    "/toolsched.v1.ToolScheduler/GetServerInfo",
    "/toolsched.v1.ToolScheduler/WatchBatch",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.health.v1.Health/List",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The `method` label of a request path: `toolsched.v1.ToolScheduler/Confirm`.
fn method_label(path: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == path)
        .map_or("other", |m| &m[1..])
}

/// gRPC status codes by number, as names (`OK`, `NOT_FOUND`, …).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The `grpc-status` in `headers`, if there is one.
fn status_in(headers: &http::HeaderMap) -> Option<&'static str> {
    let value = headers.get("grpc-status")?.to_str().ok()?;
    let code = value.parse::<i32>().ok()?;
    Some(code_name(tonic::Code::from_i32(code)))
}

// === impl GrpcMetricsLayer ===

/// Wraps the gRPC server's services: see [`Metrics::grpc_handled`].
#[derive(Clone)]
pub struct GrpcMetricsLayer {
    metrics: Arc<Metrics>,
}

impl GrpcMetricsLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service of [`GrpcMetricsLayer`].
#[derive(Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

/// What is recorded once the status is known.
struct Pending {
    metrics: Arc<Metrics>,
    method: &'static str,
    started: Instant,
}

impl Pending {
    fn record(self, code: &str) {
        self.metrics
            .grpc_handled(self.method, code, self.started.elapsed());
    }
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body + Unpin,
{
    type Response = http::Response<MeteredBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let pending = Pending {
            metrics: self.metrics.clone(),
            method: method_label(request.uri().path()),
            started: Instant::now(),
        };
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await?;
            // A trailers-only response (an error, or a rewritten one) has
            // its status in the headers; otherwise it comes in the trailers.
            let pending = match status_in(response.headers()) {
                Some(code) => {
                    pending.record(code);
                    None
                }
                None => Some(pending),
            };
            Ok(response.map(|inner| MeteredBody { inner, pending }))
        })
    }
}

// === impl MeteredBody ===

/// A response body that records the request when its trailers pass (or
/// when it is dropped before them: the client went away, CANCELLED).
pub struct MeteredBody<B> {
    inner: B,
    pending: Option<Pending>,
}

impl<B: Body + Unpin> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(status_in)
                    && let Some(pending) = self.pending.take()
                {
                    pending.record(code);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(pending) = self.pending.take() {
                    pending.record("INTERNAL");
                }
            }
            // The end without a status: not a well-formed gRPC response.
            Poll::Ready(None) => {
                if let Some(pending) = self.pending.take() {
                    pending.record("UNKNOWN");
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for MeteredBody<B> {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.record("CANCELLED");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_methods_are_labels() {
        assert_eq!(
            method_label("/toolsched.v1.ToolScheduler/Confirm"),
            "toolsched.v1.ToolScheduler/Confirm"
        );
        assert_eq!(
            method_label("/grpc.health.v1.Health/Check"),
            "grpc.health.v1.Health/Check"
        );
        assert_eq!(method_label("/toolsched.v1.ToolScheduler/Nope"), "other");
        assert_eq!(method_label("/x"), "other");
    }
}
