package manifest

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMalformedJSON is matched (with errors.Is) by the error returned when a
// queue message body or a manifest is not one well-formed JSON value. It lets
// the HTTP layer tell "could not even read it" apart from a *ValidationError,
// which lists what is wrong with a readable document.
var ErrMalformedJSON = errors.New("malformed JSON")

// ValidationError lists every problem found in a queue message or a
// manifest. All problems are reported together so that the uploader can fix
// them in one round trip instead of discovering them one rejection at a time.
type ValidationError struct {
	// Subject names what was validated ("batch message" or "manifest"); it
	// makes Error read "invalid <subject>: ...".
	Subject string
	// Problems are the individual findings, each naming the field (and for a
	// manifest file, its r2_key) and the rule it breaks. When there were more
	// than 20 only the first 20 are kept and the last entry says how many
	// were left out.
	Problems []string
}

// Error reads "invalid <subject>: <problem>; <problem>; ...".
func (e *ValidationError) Error() string {
	subject := e.Subject
	if subject == "" {
		subject = "input"
	}
	return "invalid " + subject + ": " + strings.Join(e.Problems, "; ")
}

// Subjects of the two kinds of ValidationError this package returns.
const (
	subjectMessage  = "batch message"
	subjectManifest = "manifest"
)

// malformedError reports unreadable JSON. It is its own type, rather than a
// wrapped ErrMalformedJSON, so that its message reads "body is not valid
// JSON: <decoder error>" without the sentinel's text in the middle.
type malformedError struct {
	what string // "body" or "manifest"
	err  error
}

func (e *malformedError) Error() string {
	return e.what + " is not valid JSON: " + e.err.Error()
}

func (e *malformedError) Unwrap() error { return e.err }

func (e *malformedError) Is(target error) bool { return target == ErrMalformedJSON }

// maxProblems caps a ValidationError: a manifest of ten thousand files with
// the wrong prefix would otherwise produce an error nobody can read (or log).
const maxProblems = 20

// problems collects validation findings in the order they are found.
type problems struct {
	list    []string
	dropped int
}

func (p *problems) addf(format string, args ...any) {
	if len(p.list) >= maxProblems {
		p.dropped++
		return
	}
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

// err returns nil when nothing was found, or a *ValidationError.
func (p *problems) err(subject string) error {
	if len(p.list) == 0 {
		return nil
	}
	list := p.list
	if p.dropped > 0 {
		list = append(list, fmt.Sprintf("... and %d more", p.dropped))
	}
	return &ValidationError{Subject: subject, Problems: list}
}
