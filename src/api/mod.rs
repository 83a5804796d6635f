//! The gRPC face: the `toolsched.v1.ToolScheduler` service, server reflection
//! (v1 and v1alpha), `grpc.health.v1`, bearer-token authentication and
//! graceful shutdown. Handlers convert requests to domain types on their first
//! line ([`convert`]) and only talk to the [`Scheduler`].

pub mod auth;
pub mod bound;
pub mod codec;
pub mod convert;
pub use convert::WireCodec;
pub mod error;
pub mod jwt;
pub mod metrics;
pub mod relay;
pub mod routing;
pub mod tls;
pub mod wire;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::scheduler::{
    BatchRequest, CancelError, CancelRequest, ConfirmError, ConfirmRequest, ScheduleError,
    Scheduler, WatchError, WatchRequest,
};
use crate::store::StoreError;
use error::ApiError;

/// Generated proto types and service stubs.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("toolsched.v1");

    /// Encoded descriptors of our proto and the well-known types it imports,
    /// for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("toolsched_descriptor");
}

use wire::EncodedEvent;
use wire::server::tool_scheduler_server::{ToolScheduler, ToolSchedulerServer};

/// The `ToolScheduler` service over a [`Scheduler`].
pub struct Service {
    scheduler: Scheduler,
    /// Every event sent is cut to fit this (see [`bound`]).
    max_event_bytes: usize,
}

impl Service {
    pub fn new(scheduler: Scheduler, max_event_bytes: usize) -> Self {
        Self {
            scheduler,
            max_event_bytes,
        }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<EncodedEvent, Status>> + Send>>;

#[tonic::async_trait]
impl ToolScheduler for Service {
    type ScheduleCallsStream = EventStream;

    async fn schedule_calls(
        &self,
        request: Request<pb::ScheduleCallsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let principal = auth::principal(&request);
        let (metadata, _, body) = request.into_parts();
        // W3C Trace Context in the metadata: the batch's span joins the
        // caller's trace.
        let header = |name| metadata.get(name).and_then(|v| v.to_str().ok());
        let parent = crate::telemetry::TraceParent::from_headers(
            header("traceparent"),
            header("tracestate"),
        );
        // Kept for the session's owner, should another replica run it
        // (a durable store only: the memory store's hot path copies nothing).
        let relay_body = self
            .scheduler
            .is_durable()
            .then(|| prost::Message::encode_to_vec(&body));
        let mut batch = BatchRequest::try_from(body)?;
        routing::check(&metadata, &batch.session_id)?;
        batch.trace_parent = parent;
        batch.principal = principal.name.clone();
        let session = batch.session_id.clone();
        let workspace = batch.workspace.clone();
        // The store's key of the session: its owner, on another replica,
        // applies what is relayed in the same tenant's namespace.
        let key = principal.tenant.session_key(&session);
        let stream = match self.scheduler.schedule_as(&principal.tenant, batch).await {
            Ok(stream) => stream,
            // Another replica runs the session: the batch is queued there
            // through the store, and its log read here as it grows.
            Err(ScheduleError::Store(e @ StoreError::OwnedElsewhere { .. })) => {
                let accepted = match relay_body {
                    Some(body) => {
                        relay::to_owner::<pb::BatchAccepted>(
                            &self.scheduler,
                            &principal,
                            &key,
                            relay::SCHEDULE,
                            body,
                        )
                        .await?
                    }
                    None => None,
                };
                let Some(accepted) = accepted else {
                    return Err(ApiError::from(ScheduleError::Store(e)).into());
                };
                let watch = WatchRequest {
                    session_id: key,
                    batch_id: accepted.batch_id,
                    after_sequence: 0,
                };
                let stream = self
                    .scheduler
                    .watch_store(watch)
                    .await
                    .map_err(ApiError::from)?;
                let events = WireEvents::new(stream, accepted.replayed, self.max_event_bytes);
                return Ok(Response::new(Box::pin(events)));
            }
            Err(e) => return Err(ApiError::from(e).into()),
        };
        tracing::debug!(
            tenant = %principal.tenant,
            principal = &*principal.name,
            %session,
            workspace = workspace.as_ref().map(|w| w.as_str()),
            batch = stream.batch_id(),
            replayed = stream.replayed(),
            "batch accepted"
        );
        let replayed = stream.replayed();
        let events = WireEvents::new(stream, replayed, self.max_event_bytes);
        Ok(Response::new(Box::pin(events)))
    }

    type WatchBatchStream = EventStream;

    async fn watch_batch(
        &self,
        request: Request<pb::WatchBatchRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let principal = auth::principal(&request);
        let (metadata, _, body) = request.into_parts();
        let watch = WatchRequest::try_from(body.clone())?;
        routing::check(&metadata, &watch.session_id)?;
        let key = principal.tenant.session_key(&watch.session_id);
        let stream = match self
            .scheduler
            .watch_as(&principal.tenant, watch.clone())
            .await
        {
            Ok(stream) => stream,
            // Running on another replica: it mirrors the batch's log into
            // the store, which this replica reads as it grows.
            Err(e @ WatchError::Store(StoreError::OwnedElsewhere { .. })) => {
                match relay::to_owner::<()>(
                    &self.scheduler,
                    &principal,
                    &key,
                    relay::WATCH,
                    prost::Message::encode_to_vec(&body),
                )
                .await?
                {
                    Some(()) => self
                        .scheduler
                        .watch_store(WatchRequest {
                            session_id: key,
                            ..watch
                        })
                        .await
                        .map_err(ApiError::from)?,
                    None => return Err(ApiError::from(e).into()),
                }
            }
            Err(e) => return Err(ApiError::from(e).into()),
        };
        let events = WireEvents::new(stream, false, self.max_event_bytes);
        Ok(Response::new(Box::pin(events)))
    }

    async fn confirm(
        &self,
        request: Request<pb::ConfirmRequest>,
    ) -> Result<Response<pb::ConfirmResponse>, Status> {
        let principal = auth::principal(&request);
        let (metadata, _, body) = request.into_parts();
        let mut confirm = ConfirmRequest::try_from(body.clone())?;
        routing::check(&metadata, &confirm.session_id)?;
        confirm.principal = principal.name.clone();
        let key = principal.tenant.session_key(&confirm.session_id);
        match self.scheduler.confirm_as(&principal.tenant, confirm).await {
            Ok(confirmed) => Ok(Response::new(confirmed.into())),
            // Not here: the replica running the session answers.
            Err(e @ (ConfirmError::UnknownSession { .. } | ConfirmError::UnknownCall { .. })) => {
                match relay::to_owner(
                    &self.scheduler,
                    &principal,
                    &key,
                    relay::CONFIRM,
                    prost::Message::encode_to_vec(&body),
                )
                .await?
                {
                    Some(answer) => Ok(Response::new(answer)),
                    None => Err(ApiError::from(e).into()),
                }
            }
            Err(e) => Err(ApiError::from(e).into()),
        }
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let principal = auth::principal(&request);
        let (metadata, _, body) = request.into_parts();
        let cancel = CancelRequest::try_from(body.clone())?;
        routing::check(&metadata, &cancel.session_id)?;
        let key = principal.tenant.session_key(&cancel.session_id);
        let here = self.scheduler.cancel_as(&principal.tenant, cancel).await;
        // Nothing to cancel here: the replica running the session, if
        // another one does, cancels there.
        let elsewhere = match &here {
            Ok(s) => s.cancelled_calls == 0 && s.cancelled_batches == 0,
            Err(e) => matches!(
                e,
                CancelError::UnknownSession { .. } | CancelError::UnknownBatch { .. }
            ),
        };
        if elsewhere
            && let Some(answer) = relay::to_owner(
                &self.scheduler,
                &principal,
                &key,
                relay::CANCEL,
                prost::Message::encode_to_vec(&body),
            )
            .await?
        {
            return Ok(Response::new(answer));
        }
        let summary = here.map_err(ApiError::from)?;
        Ok(Response::new(summary.into()))
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let principal = auth::principal(&request);
        // What the caller's tenant sees: its table may leave MCP servers out.
        let tools = self
            .scheduler
            .registry_for(&principal.tenant)
            .declarations()
            .map(Into::into)
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools }))
    }

    async fn get_server_info(
        &self,
        _request: Request<pb::GetServerInfoRequest>,
    ) -> Result<Response<pb::GetServerInfoResponse>, Status> {
        Ok(Response::new(pb::GetServerInfoResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            sandbox: Some(self.scheduler.sandbox().as_ref().into()),
            mcp_servers: self
                .scheduler
                .mcp_statuses()
                .into_iter()
                .map(convert::mcp_server_info)
                .collect(),
            workspaces: Some(pb::WorkspacesInfo {
                named: self.scheduler.workspaces().is_some(),
                create: self.scheduler.workspaces().is_some_and(|w| w.creates()),
            }),
            replica_id: self.scheduler.replica_id().unwrap_or_default().to_string(),
        }))
    }

    async fn list_workspaces(
        &self,
        request: Request<pb::ListWorkspacesRequest>,
    ) -> Result<Response<pb::ListWorkspacesResponse>, Status> {
        let principal = auth::principal(&request);
        let listed = self
            .scheduler
            .list_workspaces(&principal.tenant)
            .await
            .ok_or(ApiError::NoWorkspacesRoot)?;
        let (names, truncated) = listed.map_err(|e| {
            tracing::warn!(tenant = %principal.tenant, error = %e, "cannot list workspaces");
            ApiError::WorkspacesUnreadable
        })?;
        Ok(Response::new(pb::ListWorkspacesResponse {
            workspaces: names.into_iter().map(|n| n.to_string()).collect(),
            truncated,
        }))
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::GetSessionResponse>, Status> {
        let principal = auth::principal(&request);
        let session_id = convert::get_session_id(request.into_inner())?;
        let store_error = |e| Status::from(ApiError::from(ScheduleError::Store(e)));
        // Run by another replica: what the store has (a session this one
        // ran before may still be live here, out of date).
        let elsewhere = match self.scheduler.is_durable() {
            true => self
                .scheduler
                .owner_elsewhere(&principal.tenant.session_key(&session_id))
                .await
                .map_err(store_error)?,
            false => None,
        };
        let here = match elsewhere {
            None => {
                self.scheduler
                    .describe_as(&principal.tenant, &session_id)
                    .await
            }
            Some(_) => None,
        };
        let (view, owner) = match here {
            Some(view) => (view, None),
            None => self
                .scheduler
                .describe_stored(&principal.tenant, &session_id)
                .await
                .map_err(store_error)?
                .ok_or_else(|| ApiError::UnknownSession(session_id.clone()))?,
        };
        Ok(Response::new(convert::session_view(
            session_id, view, owner,
        )))
    }
}

/// A batch's events as stream messages. It ends OK only after
/// `Completed`: a log that ends before it (the replica running the batch
/// stopped: killed, or its lease lost) ends the stream `UNAVAILABLE`, so a
/// client never takes a short stream for a finished batch, and re-attaches
/// with `WatchBatch`.
struct WireEvents {
    events: crate::scheduler::BatchStream,
    replayed: bool,
    max_event_bytes: usize,
    ended: bool,
}

impl WireEvents {
    fn new(events: crate::scheduler::BatchStream, replayed: bool, max_event_bytes: usize) -> Self {
        Self {
            events,
            replayed,
            max_event_bytes,
            ended: false,
        }
    }
}

impl Stream for WireEvents {
    type Item = Result<EncodedEvent, Status>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.events).poll_next(cx) {
            Poll::Ready(Some(entry)) => Poll::Ready(Some(Ok(wire_event(
                &entry,
                self.replayed,
                self.max_event_bytes,
            )))),
            Poll::Ready(None) => {
                self.ended = true;
                if self.events.completed() {
                    Poll::Ready(None)
                } else {
                    Poll::Ready(Some(Err(Status::unavailable(
                        "the replica running this batch stopped before it completed: \
                         WatchBatch after the last sequence seen follows it where it is \
                         taken over",
                    ))))
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A logged event as a stream message, cut to `max_event_bytes`: the
/// entry's encoded form ([`WireCodec`], made once for every stream of the
/// batch), unless this stream's message differs from it (a replayed
/// BatchAccepted says so) or it is over `max_event_bytes`.
fn wire_event(
    entry: &crate::store::Entry<crate::scheduler::BatchEvent>,
    replayed: bool,
    max_event_bytes: usize,
) -> EncodedEvent {
    use crate::scheduler::BatchEvent;
    // A replayed stream's BatchAccepted says so: it (and any event read
    // back encoded, which may be it) is made for this stream.
    let accepted = matches!(
        entry.event,
        BatchEvent::Accepted { .. } | BatchEvent::Recorded(_)
    );
    if !(replayed && accepted) {
        let encoded = entry.encoded_by(&WireCodec);
        if encoded.len() <= max_event_bytes {
            return EncodedEvent(encoded.clone());
        }
    }
    let mut message = convert::entry_to_pb(entry, replayed);
    let omitted = bound::fit(&mut message, max_event_bytes);
    if omitted > 0 {
        tracing::debug!(
            sequence = entry.sequence,
            omitted,
            max_event_bytes,
            "event cut to fit max_event_bytes"
        );
    }
    EncodedEvent(prost::Message::encode_to_vec(&message).into())
}

/// TCP keepalive on accepted connections: finds clients that vanished
/// without closing (a dead peer otherwise holds its batch forever).
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Transport settings of the server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// When set, every ToolScheduler RPC needs `authorization: Bearer <token>`
    /// (health and reflection stay open for probes and grpcurl).
    pub auth_token: Option<String>,
    /// Static tokens by SHA-256 hash, each of a tenant and principal (see
    /// [`auth`]); with `auth_token`, every ToolScheduler RPC needs one of
    /// them.
    pub auth_tokens: Vec<auth::StaticToken>,
    /// JWT bearer tokens verified against a JWKS file (see [`jwt`]).
    pub jwt: Option<jwt::JwtConfig>,
    /// TLS on the listener (and mTLS with a client CA), see [`tls`].
    pub tls: Option<tls::TlsSettings>,
    /// HTTP/2 streams per connection (tonic's default is unlimited).
    pub max_concurrent_streams: u32,
    /// Largest request message, in bytes.
    pub max_request_bytes: usize,
    /// Largest message sent, in bytes: an event over it has its largest
    /// strings cut (with a note) so that a client with this receive limit
    /// gets every event. Default: gRPC's default receive limit, 4 MiB.
    pub max_event_bytes: usize,
    /// An HTTP/2 PING is sent on a connection from which nothing arrived
    /// for this long...
    pub http2_keepalive_interval: Duration,
    /// ...and a connection that does not answer it within this is closed:
    /// its streams end and their batches are cancelled as if the client had
    /// gone ("The client went away (stream closed)."). A frozen client
    /// (SIGSTOP, a dead NAT) is thus dropped within interval + timeout;
    /// TCP keepalive alone never notices one whose kernel still ACKs.
    pub http2_keepalive_timeout: Duration,
    /// After SIGTERM: how long running batches may go on before they are
    /// cancelled.
    pub shutdown_grace: Duration,
    /// After the grace, once the remaining calls are cancelled: how long
    /// streams and connections get to close before they are dropped. A
    /// client that stops reading its stream, or an open health `Watch`,
    /// would otherwise keep the process alive indefinitely.
    pub shutdown_close: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            auth_tokens: Vec::new(),
            jwt: None,
            tls: None,
            max_concurrent_streams: 1024,
            max_request_bytes: 4 * 1024 * 1024,
            max_event_bytes: bound::DEFAULT_MAX_EVENT_BYTES,
            http2_keepalive_interval: Duration::from_secs(30),
            http2_keepalive_timeout: Duration::from_secs(20),
            shutdown_grace: Duration::from_secs(10),
            shutdown_close: Duration::from_secs(5),
        }
    }
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("auth_tokens: {0}")]
    Auth(#[from] auth::TokenConfigError),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// Serves on `listener` until `signal` resolves, then shuts down gracefully:
/// health goes NOT_SERVING (the server as a whole, "", and
/// `toolsched.v1.ToolScheduler`) and new batches are refused (UNAVAILABLE); running
/// batches get [`ServerOptions::shutdown_grace`]; then `shutdown` is
/// cancelled, which ends every remaining call Cancelled ("The server is
/// shutting down.") and closes the streams; streams and connections still
/// open [`ServerOptions::shutdown_close`] later are dropped.
pub async fn serve(
    listener: TcpListener,
    scheduler: Scheduler,
    shutdown: tokio_util::sync::CancellationToken,
    options: ServerOptions,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<ToolSchedulerServer<Service>>().await;
    let draining = tokio_util::sync::CancellationToken::new();
    follow_store(&scheduler, &health, &draining);
    // Both reflection versions: grpcurl 1.8.6 only speaks v1alpha.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;

    let check_auth = auth::Authenticator::new(
        options.auth_token.as_deref(),
        &options.auth_tokens,
        options.jwt.as_ref(),
    )?
    .interceptor();
    relay::serve_inbox(&scheduler);
    let service =
        ToolSchedulerServer::new(Service::new(scheduler.clone(), options.max_event_bytes))
            .max_decoding_message_size(options.max_request_bytes);
    let service = tonic::service::interceptor::InterceptedService::new(service, check_auth);

    let grpc_metrics = metrics::GrpcMetricsLayer::new(scheduler.metrics().clone());
    let grace = options.shutdown_grace;
    let close = options.shutdown_close;
    let (cancelled_tx, cancelled_rx) = tokio::sync::oneshot::channel::<()>();
    let drain = async move {
        signal.await;
        tracing::info!("shutting down: refusing new batches");
        draining.cancel();
        // The server-wide status first: probes that check "" (the default
        // of grpc_health_probe and Kubernetes' gRPC probe) stop routing
        // here as well.
        health
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        health
            .set_not_serving::<ToolSchedulerServer<Service>>()
            .await;
        scheduler.stop_accepting().await;
        if tokio::time::timeout(grace, scheduler.idle()).await.is_err() {
            tracing::warn!(
                grace_secs = grace.as_secs_f64(),
                "grace period over: cancelling the calls still running"
            );
        }
        shutdown.cancel();
        let _ = cancelled_tx.send(());
        // Each stream ends once its last events are written.
        scheduler.idle().await;
    };
    // From the cancellation on, streams and connections get `close`: a
    // client that does not read holds its batch stream open, and tonic's
    // graceful close waits for every open stream (a health Watch never ends
    // by itself).
    let closed = async move {
        if cancelled_rx.await.is_ok() {
            tokio::time::sleep(close).await;
        } else {
            std::future::pending::<()>().await;
        }
    };

    let max_request_bytes = options.max_request_bytes;
    let tls = options
        .tls
        .as_ref()
        .map(tls::TlsAcceptor::new)
        .transpose()?;
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(options.max_concurrent_streams)
        .http2_keepalive_interval(Some(options.http2_keepalive_interval))
        .http2_keepalive_timeout(Some(options.http2_keepalive_timeout))
        // Outermost: it sees the status as the client gets it.
        .layer(grpc_metrics)
        .layer(tower::util::MapResponseLayer::new(
            move |response: http::Response<tonic::body::Body>| {
                request_errors_as_client_errors(response, max_request_bytes)
            },
        ))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(service);
    let server: Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> =
        match tls {
            Some(tls) => {
                Box::pin(router.serve_with_incoming_shutdown(tls.incoming(listener), drain))
            }
            None => Box::pin(
                router.serve_with_incoming_shutdown(
                    // Without TCP_NODELAY, Nagle's algorithm and delayed ACKs hold
                    // each small event back ~40 ms.
                    tonic::transport::server::TcpIncoming::from(listener)
                        .with_nodelay(Some(true))
                        .with_keepalive(Some(TCP_KEEPALIVE)),
                    drain,
                ),
            ),
        };
    tokio::select! {
        served = server => served?,
        () = closed => tracing::warn!(
            close_secs = close.as_secs_f64(),
            "streams or connections still open after the close period (a client not reading, a health Watch); dropping them"
        ),
    }
    Ok(())
}

/// Health (`toolsched.v1.ToolScheduler`) follows a store that can be lost: NOT_SERVING while it cannot
/// be reached (new batches fail UNAVAILABLE by themselves), SERVING when it
/// is back, until the drain takes health over.
fn follow_store(
    scheduler: &Scheduler,
    health: &tonic_health::server::HealthReporter,
    draining: &tokio_util::sync::CancellationToken,
) {
    use tonic::server::NamedService;
    let Some(mut reachable) = scheduler.store_reachable() else {
        return;
    };
    let (health, draining) = (health.clone(), draining.clone());
    tokio::spawn(async move {
        loop {
            let status = if *reachable.borrow_and_update() {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            if draining.is_cancelled() {
                return;
            }
            // The named service only: readiness follows the store; ""
            // (liveness) stays SERVING, as restarting a replica would not
            // bring the store back.
            health
                .set_service_status(<ToolSchedulerServer<Service> as NamedService>::NAME, status)
                .await;
            tokio::select! {
                () = draining.cancelled() => return,
                changed = reachable.changed() => if changed.is_err() { return },
            }
        }
    });
}

/// Rewrites the status of requests the codec could not take: a request
/// that does not decode (invalid UTF-8, nesting past the decoder's limit) is
/// the client's fault, so INVALID_ARGUMENT rather than tonic's INTERNAL; an
/// oversized one is RESOURCE_EXHAUSTED (gRPC's code for "request larger than
/// max") naming the limit, rather than OUT_OF_RANGE. Both are trailers-only
/// responses, so the status is in the headers.
fn request_errors_as_client_errors<B>(
    mut response: http::Response<B>,
    max_request_bytes: usize,
) -> http::Response<B> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    let message = status.message();
    let replacement = match status.code() {
        tonic::Code::Internal if message.starts_with("failed to decode Protobuf message") => {
            let reason = message.rsplit(": ").next().unwrap_or(message);
            Status::invalid_argument(format!(
                "malformed request: the message could not be decoded ({reason})"
            ))
        }
        tonic::Code::OutOfRange if message.contains("message length too large") => {
            Status::resource_exhausted(format!(
                "request message too large: {message} (max_request_bytes = {max_request_bytes}, --max-request-bytes)"
            ))
        }
        _ => return response,
    };
    if replacement.add_header(response.headers_mut()).is_err() {
        tracing::warn!("could not rewrite a request decoding status");
    }
    response
}
