// Package protocol names the versions of the protocol between the
// orchestrator and its workers: the environment a worker gets, its lease
// requests, heartbeats, requests for URLs and callbacks, their bodies and
// the URL lists. Both sides import it, so the versions are named once.
//
// The orchestrator tells a worker its version in the environment
// (EnvVar), of a task and of a pool machine; a worker sends its own with
// every request (Header). An orchestrator accepts every version from
// Oldest to Current, so that the workers of the previous release go on
// through a rolling upgrade, and refuses a newer one (Check).
package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// The versions.
const (
	// V1 is the unversioned protocol of the releases before V2: its
	// orchestrators set no EnvVar and its workers send no Header.
	V1 = 1
	// V2 versions the protocol: EnvVar and Header; the bodies are V1's.
	V2 = 2

	// Oldest is the oldest version an orchestrator of this release takes:
	// the previous release's.
	Oldest = V1
	// Current is this release's version.
	Current = V2
)

// EnvVar is the worker's environment variable that holds its
// orchestrator's version (absent: V1).
const EnvVar = "WORKER_PROTOCOL"

// Header is the request header in which a worker sends its version
// (absent: V1).
const Header = "Worker-Protocol"

// Parse reads a version as EnvVar or Header holds it: "" is V1.
func Parse(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return V1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("worker protocol %q is not a version (a whole number from 1)", v)
	}
	return n, nil
}

// Check reads the version a worker sent in Header and says whether this
// orchestrator speaks it: an error names the versions it takes.
func Check(header string) (int, error) {
	n, err := Parse(header)
	switch {
	case err != nil:
		return 0, err
	case n > Current:
		return n, fmt.Errorf("worker protocol %d is newer than this orchestrator's (%d-%d): upgrade the orchestrators before the workers' images", n, Oldest, Current)
	case n < Oldest:
		return n, fmt.Errorf("worker protocol %d is older than this orchestrator's (%d-%d): the workers' image is more than one release old", n, Oldest, Current)
	}
	return n, nil
}

// Value is a version as EnvVar and Header hold it.
func Value(n int) string { return strconv.Itoa(n) }
