//! A JSON body extractor whose rejections name the problem: syntax errors are 400, type and
//! field errors 422 with the field's path, an oversized body 413.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
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
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::Unprocessable(e.body_text())),
            Err(JsonRejection::JsonSyntaxError(e)) => Err(ApiError::BadRequest(e.body_text())),
            Err(e) => Err(ApiError::Rejected(e.status(), e.body_text())),
        }
    }
}
