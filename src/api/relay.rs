//! Requests for a session another replica runs (with a durable store): a
//! Confirm or Cancel this replica cannot carry out is recorded in the store
//! for the session's owner, which is woken, carries it out and records its
//! answer; the caller gets that answer, code and message as the owner gave
//! them. Requests and answers travel in the wire form (prost), so the owner
//! applies exactly what the client sent, with the name of the principal who
//! sent it (the owner's audit lines name who asked and who answered).
//!
//! Not here: how requests travel (`crate::store`), what they do (the
//! scheduler).

use prost::Message;
use tonic::{Code, Status};

use super::error::ApiError;
use super::pb;
use crate::scheduler::{CancelRequest, ConfirmRequest, ScheduleError, Scheduler};
use crate::tenant::TenantId;

/// What a relayed request is, as recorded.
pub(super) const CONFIRM: &str = "confirm";
pub(super) const CANCEL: &str = "cancel";
/// A WatchBatch: the owner mirrors the batch's log into the store.
pub(super) const WATCH: &str = "watch";
/// A ScheduleCalls: the owner accepts the batch (queued behind the
/// session's others, as on one replica), runs it to its end and mirrors its
/// log.
pub(super) const SCHEDULE: &str = "schedule";

/// A relayed request: the client's message in its wire form and the name
/// of the principal the receiving replica authenticated. The tenant is
/// not in it: it is the store key's (see [`apply`]).
#[derive(serde::Serialize, serde::Deserialize)]
struct Relayed {
    principal: String,
    body: Vec<u8>,
}

/// The owner's answer: a status, and the response when it is OK.
#[derive(serde::Serialize, serde::Deserialize)]
struct Answer {
    code: i32,
    message: String,
    body: Vec<u8>,
}

fn encode<T: Message>(result: Result<T, Status>) -> Vec<u8> {
    let answer = match result {
        Ok(response) => Answer {
            code: Code::Ok as i32,
            message: String::new(),
            body: response.encode_to_vec(),
        },
        Err(status) => Answer {
            code: status.code() as i32,
            message: status.message().to_string(),
            body: Vec::new(),
        },
    };
    serde_json::to_vec(&answer).unwrap_or_default()
}

fn decode<T: Message + Default>(bytes: &[u8]) -> Result<T, Status> {
    let answer: Answer = serde_json::from_slice(bytes)
        .map_err(|e| Status::internal(format!("the owner's answer cannot be read: {e}")))?;
    match Code::from_i32(answer.code) {
        Code::Ok => T::decode(answer.body.as_slice())
            .map_err(|e| Status::internal(format!("the owner's answer cannot be read: {e}"))),
        code => Err(Status::new(code, answer.message)),
    }
}

fn store_status(e: crate::store::StoreError) -> Status {
    ApiError::from(ScheduleError::Store(e)).into()
}

/// Relays `body` to the replica running `session_id`, if another one does:
/// `None` when none does (the caller answers itself).
pub(super) async fn to_owner<T: Message + Default>(
    scheduler: &Scheduler,
    principal: &crate::tenant::Principal,
    session_id: &str,
    kind: &str,
    body: Vec<u8>,
) -> Result<Option<T>, Status> {
    let Some(owner) = scheduler
        .owner_elsewhere(session_id)
        .await
        .map_err(store_status)?
    else {
        return Ok(None);
    };
    let relayed = Relayed {
        principal: principal.name.to_string(),
        body,
    };
    let body = serde_json::to_vec(&relayed)
        .map_err(|e| Status::internal(format!("a request cannot be relayed: {e}")))?;
    let answer = scheduler
        .relay(&owner, session_id, kind, body)
        .await
        .map_err(store_status)?;
    decode(&answer).map(Some)
}

/// This replica's answer to a request relayed to it; never relayed again.
///
/// `key` is the session's key in the store (`<tenant>/<session id>`, as
/// the receiving replica made it from its caller's credential): the request
/// runs in that tenant's namespace, never in the one its body might suggest.
pub(super) async fn apply(scheduler: &Scheduler, key: &str, kind: &str, body: &[u8]) -> Vec<u8> {
    let tenant = key
        .split_once('/')
        .and_then(|(t, _)| TenantId::new(t).ok())
        .unwrap_or_default();
    let tenant = &tenant;
    let unreadable =
        |e: prost::DecodeError| Status::internal(format!("a relayed request cannot be read: {e}"));
    let relayed: Relayed = match serde_json::from_slice(body) {
        Ok(relayed) => relayed,
        Err(e) => {
            return encode::<pb::ConfirmResponse>(Err(Status::internal(format!(
                "a relayed request cannot be read: {e}"
            ))));
        }
    };
    let principal: std::sync::Arc<str> = relayed.principal.into();
    let body = relayed.body.as_slice();
    match kind {
        CONFIRM => encode(match pb::ConfirmRequest::decode(body) {
            Ok(request) => confirm_here(scheduler, tenant, request, principal).await,
            Err(e) => Err(unreadable(e)),
        }),
        CANCEL => encode(match pb::CancelRequest::decode(body) {
            Ok(request) => cancel_here(scheduler, tenant, request).await,
            Err(e) => Err(unreadable(e)),
        }),
        SCHEDULE => encode(match pb::ScheduleCallsRequest::decode(body) {
            Ok(request) => schedule_here(scheduler, tenant, request, principal).await,
            Err(e) => Err(unreadable(e)),
        }),
        WATCH => encode(match pb::WatchBatchRequest::decode(body) {
            Ok(request) => mirror_here(scheduler, key, request).await,
            Err(e) => Err(unreadable(e)),
        }),
        other => encode::<pb::ConfirmResponse>(Err(Status::internal(format!(
            "unknown relayed request '{}'",
            other.chars().take(16).collect::<String>()
        )))),
    }
}

async fn confirm_here(
    scheduler: &Scheduler,
    tenant: &TenantId,
    request: pb::ConfirmRequest,
    principal: std::sync::Arc<str>,
) -> Result<pb::ConfirmResponse, Status> {
    let mut confirm = ConfirmRequest::try_from(request)?;
    // Who answered on the replica the client reached.
    confirm.principal = principal;
    let confirmed = scheduler
        .confirm_as(tenant, confirm)
        .await
        .map_err(ApiError::from)?;
    Ok(confirmed.into())
}

async fn schedule_here(
    scheduler: &Scheduler,
    tenant: &TenantId,
    request: pb::ScheduleCallsRequest,
    principal: std::sync::Arc<str>,
) -> Result<pb::BatchAccepted, Status> {
    let mut batch = crate::scheduler::BatchRequest::try_from(request)?;
    batch.principal = principal;
    let session = tenant.session_key(&batch.session_id);
    let mut stream = scheduler
        .schedule_as(tenant, batch)
        .await
        .map_err(ApiError::from)?;
    let accepted = pb::BatchAccepted {
        batch_id: stream.batch_id().to_string(),
        replayed: stream.replayed(),
        ..Default::default()
    };
    scheduler
        .mirror(&session, &accepted.batch_id)
        .await
        .map_err(store_status)?;
    // Its reader here: the batch runs to its end (its client, on the other
    // replica, reads the mirrored log; Cancel stops it from anywhere).
    tokio::spawn(async move { while stream.next().await.is_some() {} });
    Ok(accepted)
}

async fn mirror_here(
    scheduler: &Scheduler,
    key: &str,
    request: pb::WatchBatchRequest,
) -> Result<(), Status> {
    match scheduler
        .mirror(key, &request.batch_id)
        .await
        .map_err(store_status)?
    {
        true => Ok(()),
        false => Err(Status::not_found(format!(
            "batch '{}' is not running on the replica that owns session '{}'",
            request.batch_id.chars().take(64).collect::<String>(),
            request.session_id.chars().take(64).collect::<String>()
        ))),
    }
}

async fn cancel_here(
    scheduler: &Scheduler,
    tenant: &TenantId,
    request: pb::CancelRequest,
) -> Result<pb::CancelResponse, Status> {
    let cancel = CancelRequest::try_from(request)?;
    let summary = scheduler
        .cancel_as(tenant, cancel)
        .await
        .map_err(ApiError::from)?;
    Ok(summary.into())
}

/// Applies the requests other replicas relay to this one, each in its own
/// task, until the store's inbox closes.
pub(super) fn serve_inbox(scheduler: &Scheduler) {
    let Some(mut inbox) = scheduler.take_inbox() else {
        return;
    };
    let scheduler = scheduler.clone();
    tokio::spawn(async move {
        while let Some(item) = inbox.recv().await {
            let scheduler = scheduler.clone();
            tokio::spawn(async move {
                tracing::debug!(session = %item.session_id, kind = %item.kind, "relayed request");
                let answer = apply(&scheduler, &item.session_id, &item.kind, &item.body).await;
                let _ = item.reply.send(answer);
            });
        }
    });
}
