//! The one place errors become HTTP responses.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gantry_store::StoreError;
use serde::Serialize;

/// Why a request failed. 4xx variants carry a sentence for the client; 5xx are logged with
/// their cause and answered with a generic body.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No or unknown bearer token.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// The token is known but expired, revoked or (a join token) already used.
    #[error("token {0}")]
    TokenRefused(&'static str),
    /// A one-time sign-in code (or the token behind it) does not work (401).
    #[error("{0}")]
    SignInRefused(&'static str),
    /// Too many failed authentications from this address; wait.
    #[error("too many failed authentications from this address; try again in a minute")]
    TooManyFailures,
    /// The token may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The body is not JSON, or a query parameter is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The body is JSON but a field is wrong; the message names the field.
    #[error("{0}")]
    Unprocessable(String),
    /// No such thing.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    /// A limit of the caller's team is reached (pending jobs); wait or cancel.
    #[error("{0}")]
    TooMany(String),
    /// The server's data disk is below its free-space floor (`--min-free-disk`).
    #[error("{0}")]
    InsufficientStorage(String),
    /// Rejected before reaching the handler (wrong content type, body too large).
    #[error("{1}")]
    Rejected(StatusCode, String),
    /// Something broke inside.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// One sentence.
    pub error: String,
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::NotFound(format!("{what} not found")),
            StoreError::Conflict(what) => ApiError::Conflict(what),
            StoreError::LimitReached(what) => ApiError::TooMany(what),
            StoreError::CredentialChanged(what) => ApiError::Forbidden(what),
            e @ StoreError::StaleEpoch { .. } => ApiError::Conflict(e.to_string()),
            // A restart of PostgreSQL, a terminated connection, a deadlock with another
            // replica's transaction: 503, which a client may repeat where that is safe (a read,
            // a submission with its key) at this replica or the next.
            e if e.is_transient() => {
                ApiError::Rejected(StatusCode::SERVICE_UNAVAILABLE, format!("{e}; try again"))
            }
            e => ApiError::Internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::Unauthorized | ApiError::TokenRefused(_) | ApiError::SignInRefused(_) => {
                StatusCode::UNAUTHORIZED
            }
            ApiError::TooManyFailures => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Rejected(status, _) => *status,
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "request failed");
                let body = ErrorBody { error: "internal error; see the server log".into() };
                return (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response();
            }
        };
        (status, Json(ErrorBody { error: self.to_string() })).into_response()
    }
}
