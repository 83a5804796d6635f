//! The Prometheus scrape endpoint: `GET /metrics` on its own plain-HTTP
//! listener (`--metrics-listen`), apart from the gRPC port.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::scheduler::Metrics;

/// Serves `GET /metrics` until `signal` resolves.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    metrics.render(),
                )
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await
}
