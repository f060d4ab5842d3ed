// Package nntp is the news-server client of leasehold's Usenet worker: a
// pool of at most N connections to one server (plain, TLS, or plain
// upgraded with STARTTLS), each set up with MODE READER and, when a user
// is given, AUTHINFO USER/PASS (over TLS when STARTTLS is asked for); GROUP
// for a group's water marks; OVER (or XOVER, for servers without it) for a
// span of article numbers, parsed into Headers; and POST, for tests and
// demos that fill a server. It is built on net/textproto.
//
// A dropped connection is closed and the command tried again on a new one
// (a few times, with a pause); an answer that will not change by asking
// again (a refused login, a missing group) is a StatusError for which
// Permanent reports true. The password is never in an error or a log.
package nntp

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Status codes of RFC 3977 and RFC 4643 that the client acts on.
const (
	StatusCapabilities   = 101
	StatusReadyPosting   = 200 // greeting and MODE READER: posting allowed
	StatusReadyNoPosting = 201 // greeting and MODE READER: no posting
	StatusGroupSelected  = 211
	StatusOverview       = 224
	StatusArticlePosted  = 240
	StatusAuthAccepted   = 281
	StatusSendArticle    = 340
	StatusContinueTLS    = 382 // STARTTLS: begin the TLS negotiation
	StatusPasswordNeeded = 381
	StatusUnavailable    = 400 // service temporarily unavailable
	StatusNoSuchGroup    = 411
	StatusNoGroup        = 412 // no group selected
	StatusNoCurrent      = 420 // no current article (some servers, empty range)
	StatusNoArticles     = 423 // no articles in that range
	StatusPostingFailed  = 441
	StatusAuthRequired   = 480
	StatusAuthFailed     = 481
	StatusAuthSequence   = 482
	StatusTLSRequired    = 483
	StatusUnknownCommand = 500
	StatusSyntaxError    = 501
	StatusPermission     = 502 // permission denied, or service permanently unavailable
	StatusNotSupported   = 503
)

// ParseStatus splits a status line ("211 3 1 3 alt.test") into its
// three-digit code and its text. A line that does not start with three
// digits followed by a space or its end is an error.
func ParseStatus(line string) (code int, text string, err error) {
	line = strings.TrimRight(line, "\r\n")
	if len(line) < 3 || (len(line) > 3 && line[3] != ' ') {
		return 0, "", fmt.Errorf("nntp: malformed status line %q", clip(line))
	}
	for i := range 3 {
		if line[i] < '0' || line[i] > '9' {
			return 0, "", fmt.Errorf("nntp: malformed status line %q", clip(line))
		}
	}
	code, _ = strconv.Atoi(line[:3])
	if code < 100 {
		return 0, "", fmt.Errorf("nntp: malformed status line %q", clip(line))
	}
	if len(line) > 4 {
		text = line[4:]
	}
	return code, text, nil
}

// clip bounds what of a server's line goes into an error.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// StatusError is an answer of the server other than the one a command
// wanted. Command names the command without its secret arguments.
type StatusError struct {
	Command string
	Code    int
	Text    string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nntp: %s: %d %s", e.Command, e.Code, clip(e.Text))
}

// Permanent reports whether asking again cannot change the answer: a
// refused login (481, 482, 502, 480 without a user), a missing group
// (411), a server that wants TLS (483).
func (e *StatusError) Permanent() bool {
	switch e.Code {
	case StatusNoSuchGroup, StatusAuthFailed, StatusAuthSequence, StatusPermission, StatusAuthRequired, StatusTLSRequired:
		return true
	}
	return false
}

// Permanent reports whether err is, or wraps, a StatusError whose answer
// asking again cannot change, a server certificate that does not verify
// (TLS to a server the trusted CAs do not vouch for: the operator gives
// its CA, or the right host name), or a server that will not start TLS
// when StartTLS asked for it.
func Permanent(err error) bool {
	var se *StatusError
	var cert *tls.CertificateVerificationError
	return errors.As(err, &se) && se.Permanent() || errors.As(err, &cert) || errors.Is(err, ErrStartTLS)
}

// ErrStartTLS is a server that does not offer STARTTLS in its
// CAPABILITIES, or refuses it, when Config.StartTLS asks for it: the
// session is not carried on in plain text.
var ErrStartTLS = errors.New("nntp: the server will not start TLS")

// ErrNoSuchGroup matches (errors.Is) the StatusError of a group the server
// does not carry.
var ErrNoSuchGroup = errors.New("nntp: no such group")

// Is makes a 411 StatusError match ErrNoSuchGroup.
func (e *StatusError) Is(target error) bool {
	return target == ErrNoSuchGroup && e.Code == StatusNoSuchGroup
}
