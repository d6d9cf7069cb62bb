//! The one mapping from the application layer's errors to HTTP (SPEC §9 "Errors"):
//! `{"error": {"code", "message", "diagnostics"}}` with 401/403/404/409/413/422/500.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use loopwright_app::Error;
use serde::Serialize;
use utoipa::ToSchema;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// `unauthorized`, `forbidden`, `not_found`, `conflict`, `invalid`, `internal`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// Every problem found in a file, for `invalid`.
    pub diagnostics: Vec<serde_json::Value>,
}

/// The body of an error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `unauthorized`, `forbidden`, `not_found`, `conflict`, `invalid` or `internal`.
    pub code: String,
    /// What is wrong, and what to do.
    pub message: String,
    /// Each problem in a pipeline or agent file: file, position, stage, field, message, help.
    #[schema(value_type = Vec<Object>)]
    pub diagnostics: Vec<serde_json::Value>,
}

impl ApiError {
    /// An error with no diagnostics.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), diagnostics: Vec::new() }
    }

    /// 401.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this request needs `Authorization: Bearer TOKEN` (the token is in .loopwright/state/serve.token)",
        )
    }

    /// 403.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 422.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::Usage(m) => Self::invalid(m),
            Error::Invalid(ref d) => Self {
                diagnostics: d.items.iter().filter_map(|i| serde_json::to_value(i).ok()).collect(),
                ..Self::invalid(e.message())
            },
            Error::NotFound(m) => Self::not_found(m),
            Error::Conflict(m) => Self::new(StatusCode::CONFLICT, "conflict", m),
            Error::Forbidden(m) => Self::new(StatusCode::FORBIDDEN, "forbidden", m),
            Error::Internal(e) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("{e:#}")),
        }
    }
}

impl From<loopwright_engine::StoreError> for ApiError {
    fn from(e: loopwright_engine::StoreError) -> Self {
        Error::from(e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail { code: self.code.to_owned(), message: self.message, diagnostics: self.diagnostics },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body was not read: the connection cannot carry another request,
            // and a client that reused it would see the next request fail.
            response
                .headers_mut()
                .insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
        }
        response
    }
}

/// The largest request body read (1 MiB); a larger one is answered 413.
pub const MAX_BODY: usize = 1 << 20;

/// A JSON body that answers a malformed one with this module's error shape (422, or 413 past
/// the size limit) instead of axum's plain-text rejections. Unknown fields are refused by the
/// request types themselves (`deny_unknown_fields`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

/// Like [`Json`], but an empty body is the type's default (`POST /approve` with no body).
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalJson<T>(pub T);

async fn body_bytes<S: Send + Sync>(req: axum::extract::Request, state: &S) -> Result<axum::body::Bytes, ApiError> {
    use axum::extract::FromRequest;
    axum::body::Bytes::from_request(req, state).await.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid", "the request body is larger than 1 MiB")
        } else {
            ApiError::invalid(format!("cannot read the request body: {}", r.body_text()))
        }
    })
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(format!("the request body is not what was expected: {e}")))
}

impl<T, S> axum::extract::FromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        parse(&bytes).map(Json)
    }
}

impl<T, S> axum::extract::FromRequest<S> for OptionalJson<T>
where
    T: serde::de::DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        parse(&bytes).map(OptionalJson)
    }
}

/// A query string that answers a malformed one (a wrong type, an unknown parameter) with this
/// module's error shape (422) instead of axum's plain-text 400.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Query(value))
            .map_err(|r| ApiError::invalid(format!("the query string is not what was expected: {}", r.body_text())))
    }
}
