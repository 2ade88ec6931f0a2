//! The exact public error messages of the API contract (sent as `text/plain`).

pub const NOT_SIGNED_IN: &str = "you are not signed in";
pub const FORBIDDEN: &str = "forbidden";
pub const INVALID_JWT_PAYLOAD: &str = "invalid JWT payload";
pub const BAD_REQUEST_BODY: &str = "bad request body";
pub const BAD_FORMAT_ICON: &str = "bad format: icon";
pub const DUPLICATED_ISU: &str = "duplicated: isu";
pub const JIA_SERVICE_ERROR: &str = "JIAService returned error";
pub const NOT_FOUND_ISU: &str = "not found: isu";
/// A worker refuses to roll back a registration JIA accepted (internal).
pub const ACCEPTED_REGISTRATION: &str = "accepted by JIA: the registration is finished, not rolled back";
pub const MISSING_DATETIME: &str = "missing: datetime";
pub const BAD_FORMAT_DATETIME: &str = "bad format: datetime";
pub const BAD_FORMAT_END_TIME: &str = "bad format: end_time";
pub const MISSING_CONDITION_LEVEL: &str = "missing: condition_level";
pub const BAD_FORMAT_START_TIME: &str = "bad format: start_time";
/// `POST /api/isu`: a `jia_isu_uuid` longer than a UUID (the reference's `CHAR(36)` insert fails).
pub const BAD_FORMAT_JIA_ISU_UUID: &str = "bad format: jia_isu_uuid";
/// `POST /api/isu`: an `isu_name` longer than the reference's `VARCHAR(255)`.
pub const BAD_FORMAT_ISU_NAME: &str = "bad format: isu_name";
/// 413: a request body over the route's limit (the contract has no message for it).
pub const PAYLOAD_TOO_LARGE: &str = "request body too large";
/// 413: a condition batch with more elements than a device may send at once.
pub const TOO_MANY_CONDITIONS: &str = "too many conditions in one batch";
pub const INTERNAL: &str = "internal server error";
pub const UNAUTHORIZED_INTERNAL: &str = "cluster secret required";

/// Content-Type of every text error body.
pub const TEXT_PLAIN: &str = "text/plain; charset=UTF-8";
/// Content-Type of every JSON body.
pub const APPLICATION_JSON: &str = "application/json; charset=UTF-8";
