//! API errors and the one mapping from errors to gRPC status codes.

use tonic::Status;

use crate::scheduler::{CancelError, ConfirmError, ScheduleError, WatchError};
use crate::store::StoreError;
use crate::workspaces::WorkspaceError;

/// Why a request could not be processed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidArgument(String),
    /// GetSession of a session that does not exist (in the caller's tenant).
    #[error("no session '{}'", crate::workspaces::shown(.0))]
    UnknownSession(String),
    /// ListWorkspaces on a server without a workspaces root.
    #[error(
        "this server has a single workspace (no --workspaces-root); there are no named workspaces to list"
    )]
    NoWorkspacesRoot,
    /// Listing the tenant's workspaces failed (the reason is logged).
    #[error("the workspaces root cannot be read; the server logged why")]
    WorkspacesUnreadable,
    #[error(transparent)]
    Unauthenticated(#[from] AuthError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Confirm(#[from] ConfirmError),
    #[error(transparent)]
    Cancel(#[from] CancelError),
    #[error(transparent)]
    Watch(#[from] WatchError),
}

/// A store failure's status: the store's errors are the same whichever RPC
/// met them.
fn store_status(e: &StoreError, message: String) -> Status {
    match e {
        StoreError::RequestIdConflict { .. } => Status::already_exists(message),
        StoreError::UnknownBatch { .. } => Status::not_found(message),
        StoreError::EventsDropped { .. } => Status::failed_precondition(message),
        StoreError::Unavailable { .. }
        | StoreError::OwnerSilent { .. }
        | StoreError::OwnedElsewhere { .. }
        | StoreError::LeaseLost { .. }
        | StoreError::RunningElsewhere { .. } => Status::unavailable(message),
    }
}

/// A workspace refusal's status (ScheduleCalls; see `crate::workspaces`).
fn workspace_status(e: &WorkspaceError, message: String) -> Status {
    match e {
        WorkspaceError::Required | WorkspaceError::Mismatch { .. } => {
            Status::failed_precondition(message)
        }
        WorkspaceError::NotServed { .. } => Status::invalid_argument(message),
        WorkspaceError::NotAllowed { .. } => Status::permission_denied(message),
        WorkspaceError::Missing { .. } => Status::not_found(message),
        WorkspaceError::Unusable { .. } => Status::unavailable(message),
    }
}

/// Why a request carries no valid credentials (UNAUTHENTICATED). What was
/// sent is never repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing 'authorization: Bearer <token>' metadata")]
    Missing,
    #[error("invalid bearer token")]
    Invalid,
    #[error("invalid JWT: {0}")]
    Jwt(super::jwt::JwtReason),
    #[error("the client certificate names no configured tenant principal (tls_clients)")]
    UnmappedCert,
    #[error("more than one 'authorization' metadata value")]
    Ambiguous,
}

use crate::scheduler::tenants::TenantRefusal;

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        let status = status_of(e);
        // What an operator needs to see of a refusal: who was turned away
        // and why (the reasons name no secret: a credential is never in
        // them, a quota names the tenant and its use).
        let code = match status.code() {
            tonic::Code::Unauthenticated => Some("unauthenticated"),
            tonic::Code::PermissionDenied => Some("permission_denied"),
            tonic::Code::ResourceExhausted => Some("resource_exhausted"),
            _ => None,
        };
        if let Some(code) = code {
            tracing::info!(
                target: "toolsched::audit",
                code,
                reason = status.message(),
                "request refused"
            );
        }
        status
    }
}

fn status_of(e: ApiError) -> Status {
    let message = e.to_string();
    match e {
        ApiError::InvalidArgument(_) => Status::invalid_argument(message),
        ApiError::UnknownSession(_) => Status::not_found(message),
        ApiError::NoWorkspacesRoot => Status::failed_precondition(message),
        ApiError::WorkspacesUnreadable => Status::unavailable(message),
        ApiError::Unauthenticated(_) => Status::unauthenticated(message),
        ApiError::Schedule(s) => match s {
            ScheduleError::Invalid(_) => Status::invalid_argument(message),
            ScheduleError::TooManyCalls { .. }
            | ScheduleError::TooManySessions { .. }
            | ScheduleError::TooManyBatches { .. } => Status::resource_exhausted(message),
            ScheduleError::ShuttingDown => Status::unavailable(message),
            ScheduleError::SandboxLevelNotAllowed { .. } => Status::permission_denied(message),
            ScheduleError::GraceTooLong { .. } => Status::resource_exhausted(message),
            ScheduleError::Tenant(t) => match t {
                TenantRefusal::ModeNotAllowed { .. } | TenantRefusal::SandboxLevel { .. } => {
                    Status::permission_denied(message)
                }
                TenantRefusal::Quota { .. } => Status::resource_exhausted(message),
            },
            ScheduleError::Store(e) => store_status(&e, message),
            ScheduleError::Workspace(w) => workspace_status(&w, message),
        },
        ApiError::Confirm(c) => match c {
            ConfirmError::Invalid(_) => Status::invalid_argument(message),
            ConfirmError::UnknownSession { .. } | ConfirmError::UnknownCall { .. } => {
                Status::not_found(message)
            }
            ConfirmError::NotAwaitingApproval { .. }
            | ConfirmError::AlreadyEnded { .. }
            | ConfirmError::StaleCorrelation { .. }
            | ConfirmError::OutcomeNotOffered { .. }
            | ConfirmError::CannotModify { .. }
            | ConfirmError::AnsweredDifferently { .. } => Status::failed_precondition(message),
            ConfirmError::InvalidNewContent { .. } => Status::invalid_argument(message),
            ConfirmError::Unavailable | ConfirmError::NotRecorded { .. } => {
                Status::unavailable(message)
            }
        },
        ApiError::Cancel(c) => match c {
            CancelError::Invalid(_) => Status::invalid_argument(message),
            CancelError::UnknownSession { .. } | CancelError::UnknownBatch { .. } => {
                Status::not_found(message)
            }
            CancelError::Unavailable => Status::unavailable(message),
        },
        ApiError::Watch(w) => match w {
            WatchError::Invalid(_) => Status::invalid_argument(message),
            WatchError::Store(e) => store_status(&e, message),
            WatchError::BeyondEnd { .. } => Status::out_of_range(message),
            WatchError::Unavailable => Status::unavailable(message),
        },
    }
}
