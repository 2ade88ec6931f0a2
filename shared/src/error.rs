//! The exact public error messages of the API contract (sent as `text/plain`).

pub const NOT_SIGNED_IN: &str = "you are not signed in";
pub const FORBIDDEN: &str = "forbidden";
pub const INVALID_JWT_PAYLOAD: &str = "invalid JWT payload";
pub const BAD_REQUEST_BODY: &str = "bad request body";
pub const BAD_FORMAT_ICON: &str = "bad format: icon";
pub const DUPLICATED_ISU: &str = "duplicated: isu";
pub const JIA_SERVICE_ERROR: &str = "JIAService returned error";
pub const NOT_FOUND_ISU: &str = "not found: isu";
pub const MISSING_DATETIME: &str = "missing: datetime";
pub const BAD_FORMAT_DATETIME: &str = "bad format: datetime";
pub const BAD_FORMAT_END_TIME: &str = "bad format: end_time";
pub const MISSING_CONDITION_LEVEL: &str = "missing: condition_level";
pub const BAD_FORMAT_START_TIME: &str = "bad format: start_time";
pub const INTERNAL: &str = "internal server error";
pub const UNAUTHORIZED_INTERNAL: &str = "cluster secret required";

/// Content-Type of every text error body.
pub const TEXT_PLAIN: &str = "text/plain; charset=UTF-8";
/// Content-Type of every JSON body.
pub const APPLICATION_JSON: &str = "application/json; charset=UTF-8";
