package leasehold

import (
	"errors"
	"fmt"
)

// Kind is a class of error with a fixed code in the HTTP API.
type Kind string

// The error kinds. Their string is the API's error code.
const (
	KindInvalid       Kind = "bad_request"
	KindUnauthorized  Kind = "unauthorized"
	KindForbidden     Kind = "forbidden"
	KindNotFound      Kind = "not_found"
	KindLeaseLost     Kind = "lease_lost"
	KindConflict      Kind = "conflict"
	KindTooLarge      Kind = "too_large"
	KindUnprocessable Kind = "unprocessable"
	KindNoSpace       Kind = "no_space"
	KindUnavailable   Kind = "unavailable"
	KindInternal      Kind = "internal"
)

// Error is an error of a Kind with a message meant for the user.
type Error struct {
	Kind    Kind
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
func Errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of kind k with a message, keeping cause for logs.
func Wrap(k Kind, cause error, format string, args ...any) error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...), Err: cause}
}

// ErrorKind is the kind of err: its own when it is an *Error, else internal.
func ErrorKind(err error) Kind {
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
