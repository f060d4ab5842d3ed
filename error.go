package leasehold

import (
	"errors"
	"fmt"
)

// ErrorKind is a class of error with a fixed code in the HTTP API: its
// constants are the root package's Kind* names, the one use of a bare
// "Kind" in Go identifiers (a group's source is a SourceKind).
type ErrorKind string

// The error kinds. Their string is the API's error code.
const (
	KindInvalid       ErrorKind = "bad_request"
	KindUnauthorized  ErrorKind = "unauthorized"
	KindForbidden     ErrorKind = "forbidden"
	KindNotFound      ErrorKind = "not_found"
	KindLeaseLost     ErrorKind = "lease_lost"
	KindConflict      ErrorKind = "conflict"
	KindTooLarge      ErrorKind = "too_large"
	KindUnprocessable ErrorKind = "unprocessable"
	KindNoSpace       ErrorKind = "no_space"
	KindUnavailable   ErrorKind = "unavailable"
	KindInternal      ErrorKind = "internal"
)

// Error is an error of an ErrorKind with a message meant for the user.
type Error struct {
	Kind    ErrorKind
	Message string
	// Err is the cause, kept for logs and errors.Is; never shown to users.
	Err error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Kind)
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLeaseLost) true for every error of that kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Err == nil && t.Kind == e.Kind
}

// Sentinels for errors.Is, one per kind.
var (
	ErrInvalid       = &Error{Kind: KindInvalid}
	ErrUnauthorized  = &Error{Kind: KindUnauthorized}
	ErrForbidden     = &Error{Kind: KindForbidden}
	ErrNotFound      = &Error{Kind: KindNotFound}
	ErrLeaseLost     = &Error{Kind: KindLeaseLost}
	ErrConflict      = &Error{Kind: KindConflict}
	ErrTooLarge      = &Error{Kind: KindTooLarge}
	ErrUnprocessable = &Error{Kind: KindUnprocessable}
	ErrNoSpace       = &Error{Kind: KindNoSpace}
	ErrUnavailable   = &Error{Kind: KindUnavailable}
	ErrInternal      = &Error{Kind: KindInternal}
)

// Errorf returns an error of kind k with a formatted message.
func Errorf(k ErrorKind, format string, args ...any) error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of kind k with a message, keeping cause for logs.
func Wrap(k ErrorKind, cause error, format string, args ...any) error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...), Err: cause}
}

// KindOf is the ErrorKind of err: its own when it is an *Error, else internal.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// ErrorMessage is the message of err meant for users: an *Error's message,
// or a generic one for internal errors, whose details stay in the logs.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Kind != KindInternal {
		return e.Error()
	}
	return "internal error"
}
