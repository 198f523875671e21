//! Extractors whose rejections are JSON and name the problem. Bodies: syntax errors are 400,
//! type and field errors 422 with the field's path, an oversized body 413. Query strings and
//! path parameters that do not parse: 400.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body.
#[derive(Debug, Clone)]
pub struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::Unprocessable(data_error(&e.body_text()))),
            Err(JsonRejection::JsonSyntaxError(e)) => Err(ApiError::BadRequest(e.body_text())),
            Err(e) => Err(ApiError::Rejected(e.status(), e.body_text())),
        }
    }
}

/// A body that does not fit its type, said from the field on (`array: \`9-0\` counts down …`):
/// axum's lead-in would hide the field from a client that reads the first words.
fn data_error(text: &str) -> String {
    text.strip_prefix("Failed to deserialize the JSON body into the target type: ").unwrap_or(text).to_owned()
}

/// A query string. axum's own answers a malformed one (`?limit=-1`) with a plain-text 400; this
/// one answers with the JSON error body every other failure has.
#[derive(Debug, Clone)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(e) => Err(ApiError::BadRequest(e.body_text())),
        }
    }
}

/// Path parameters, with the JSON error body when one does not parse (`/v1/jobs/abc`).
#[derive(Debug, Clone)]
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(e) => Err(ApiError::Rejected(e.status(), e.body_text())),
        }
    }
}
