package errs

// Domain is the domain of every ErrorInfo this service answers (AIP-193):
// it qualifies the reasons, which are unique within it.
const Domain = "engagement.videngage.dev"

// Reason is the stable, machine-readable cause of a refusal: the reason of
// the ErrorInfo in the error answer, one value per distinct cause, so that a
// client branches on it and never on the message. A value, once published,
// keeps its meaning; docs/openapi.yaml lists every value (a test holds the
// two lists equal).
type Reason string

// The reasons. The HTTP status of each is in httpx, the one mapping.
const (
	// The request's form.
	InvalidQuery      Reason = "INVALID_QUERY"      // the query string does not parse
	RepeatedParameter Reason = "REPEATED_PARAMETER" // a query parameter or header sent more than once
	InvalidJSON       Reason = "INVALID_JSON"       // the body is not one JSON object of valid UTF-8
	UnknownField      Reason = "UNKNOWN_FIELD"      // the body has a field the operation does not take
	WrongFieldType    Reason = "WRONG_FIELD_TYPE"   // a field of the body has the wrong JSON type
	MissingField      Reason = "MISSING_FIELD"      // a required field or parameter is absent
	InvalidID         Reason = "INVALID_ID"         // an id does not match ^[A-Za-z0-9_-]{1,64}$
	InvalidValue      Reason = "INVALID_VALUE"      // a value is out of its range, set or format
	InvalidPageToken  Reason = "INVALID_PAGE_TOKEN" // pageToken is not a nextPageToken of this listing
	InvalidSession    Reason = "INVALID_SESSION_TOKEN"
	BodyTooLarge      Reason = "BODY_TOO_LARGE"
	MethodNotAllowed  Reason = "METHOD_NOT_ALLOWED"
	UnknownPath       Reason = "UNKNOWN_PATH"

	// Identity and permission.
	TokenMissing       Reason = "TOKEN_MISSING"
	TokenInvalid       Reason = "TOKEN_INVALID"
	TokenExpired       Reason = "TOKEN_EXPIRED"
	AccountNotAccepted Reason = "ACCOUNT_NOT_ACCEPTED"
	AccountErasing     Reason = "ACCOUNT_ERASING"
	NotModerator       Reason = "NOT_MODERATOR"
	ModeratorRevoked   Reason = "MODERATOR_REVOKED"
	NotAuthor          Reason = "NOT_AUTHOR"
	OriginNotAllowed   Reason = "ORIGIN_NOT_ALLOWED"

	// Reactions and comments.
	StaleVersion         Reason = "STALE_VERSION"
	TooManyLinks         Reason = "TOO_MANY_LINKS"
	YoungAccountLinks    Reason = "YOUNG_ACCOUNT_LINKS"
	DuplicateComment     Reason = "DUPLICATE_COMMENT"
	IdempotencyKeyReused Reason = "IDEMPOTENCY_KEY_REUSED"
	CommentNotFound      Reason = "COMMENT_NOT_FOUND"
	ParentNotFound       Reason = "PARENT_NOT_FOUND"
	ParentIsReply        Reason = "PARENT_IS_REPLY"
	ParentOnOtherVideo   Reason = "PARENT_ON_OTHER_VIDEO"

	// Limits and availability.
	RateLimited         Reason = "RATE_LIMITED"
	BackendUnavailable  Reason = "BACKEND_UNAVAILABLE"
	AuthKeysUnavailable Reason = "AUTH_KEYS_UNAVAILABLE"
	RequestCancelled    Reason = "REQUEST_CANCELLED"
	Internal            Reason = "INTERNAL"

	// The push endpoints' (Pub/Sub's) own.
	InvalidMessage Reason = "INVALID_MESSAGE"
)

// Reasons is every Reason, in the order of the constants.
var Reasons = []Reason{
	InvalidQuery, RepeatedParameter, InvalidJSON, UnknownField, WrongFieldType, MissingField,
	InvalidID, InvalidValue, InvalidPageToken, InvalidSession, BodyTooLarge, MethodNotAllowed, UnknownPath,
	TokenMissing, TokenInvalid, TokenExpired, AccountNotAccepted, AccountErasing, NotModerator,
	ModeratorRevoked, NotAuthor, OriginNotAllowed,
	StaleVersion, TooManyLinks, YoungAccountLinks, DuplicateComment, IdempotencyKeyReused,
	CommentNotFound, ParentNotFound, ParentIsReply, ParentOnOtherVideo,
	RateLimited, BackendUnavailable, AuthKeysUnavailable, RequestCancelled, Internal,
	InvalidMessage,
}

// Error is a refusal a domain makes, with its Reason, the request field at
// fault (empty when none) and a message that tells the caller what to fix.
// A domain's sentinel errors are Errors, compared with errors.Is; httpx maps
// them to answers by their Reason alone, knowing no domain.
type Error struct {
	Reason  Reason
	Field   string
	Message string
	// Metadata is the ErrorInfo's metadata: the facts of the refusal a
	// program may use (a limit, a current version), as strings.
	Metadata map[string]string
}

// New returns a refusal with its reason, field and message.
func New(reason Reason, field, message string) *Error {
	return &Error{Reason: reason, Field: field, Message: message}
}

func (e *Error) Error() string { return e.Message }
