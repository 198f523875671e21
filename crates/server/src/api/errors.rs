//! Where the control plane's domain errors meet HTTP: each [`CommandError`] is given its
//! status here and nowhere else (the store's errors keep their one mapping in `crate::error`).

use crate::command::CommandError;
use crate::error::ApiError;

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Forbidden(why) => ApiError::Forbidden(why),
            CommandError::Invalid(why) => ApiError::Unprocessable(why),
            CommandError::NotFound(why) => ApiError::NotFound(why),
            CommandError::Conflict(why) => ApiError::Conflict(why),
            CommandError::LimitReached(why) => ApiError::TooMany(why),
            CommandError::Store(e) => ApiError::from(e),
            CommandError::Aborted(why) => ApiError::Internal(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use gantry_store::StoreError;

    use super::*;

    fn status(e: CommandError) -> StatusCode {
        ApiError::from(e).into_response().status()
    }

    #[test]
    fn each_command_error_gets_the_status_its_meaning_calls_for() {
        assert_eq!(status(CommandError::Forbidden("no".into())), StatusCode::FORBIDDEN);
        assert_eq!(status(CommandError::Invalid("priority".into())), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status(CommandError::NotFound("job 1 not found".into())), StatusCode::NOT_FOUND);
        assert_eq!(status(CommandError::Conflict("node up".into())), StatusCode::CONFLICT);
        assert_eq!(status(CommandError::LimitReached("100 pending".into())), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(status(CommandError::Aborted("panic".into())), StatusCode::INTERNAL_SERVER_ERROR);
        let stale = CommandError::Store(StoreError::Conflict("GPU taken".into()));
        assert!(stale.is_stale());
        assert_eq!(status(stale), StatusCode::CONFLICT);
        assert!(!CommandError::Conflict("node up".into()).is_stale());
        assert_eq!(status(CommandError::Store(StoreError::NotFound("job 3".into()))), StatusCode::NOT_FOUND);
    }
}
