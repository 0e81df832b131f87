package manifest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The tests use the standard library only: the module's go.sum does not yet
// hold the checksums testify's require package needs (go.yaml.in/yaml/v3).

// readTestdata returns a file of testdata/, which holds the examples of
// spec 001 verbatim.
func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// mutateJSON decodes data into generic values, lets mutate change them and
// encodes the result, so that each failing case is the spec example with one
// thing wrong.
func mutateJSON(t *testing.T, data []byte, mutate func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(m)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exampleMessage is the spec's example queue message, parsed.
func exampleMessage(t *testing.T) QueueMessage {
	t.Helper()
	msg, err := ParseQueueMessage(readTestdata(t, "queue_message.json"))
	if err != nil {
		t.Fatalf("example message: %v", err)
	}
	return msg
}

// requireNoError stops the test on err.
func requireNoError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// requireEqual compares with reflect.DeepEqual.
func requireEqual[T any](t *testing.T, want, got T) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("not equal:\nwant: %#v\n got: %#v", want, got)
	}
}

// requireProblems asserts err is a *ValidationError with the subject that
// lists every one of want, verbatim.
func requireProblems(t *testing.T, err error, subject string, want ...string) *ValidationError {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a *ValidationError, got %T: %v", err, err)
	}
	if ve.Subject != subject {
		t.Fatalf("subject: want %q, got %q", subject, ve.Subject)
	}
	for _, w := range want {
		if !slices.Contains(ve.Problems, w) {
			t.Fatalf("missing problem %q in:\n  %s", w, strings.Join(ve.Problems, "\n  "))
		}
	}
	return ve
}

// requireMalformed asserts err reports unreadable JSON with the prefix.
func requireMalformed(t *testing.T, err error, prefix string) {
	t.Helper()
	if !errors.Is(err, ErrMalformedJSON) {
		t.Fatalf("want ErrMalformedJSON, got %T: %v", err, err)
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		t.Fatalf("malformed JSON must not be a *ValidationError: %v", err)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("want prefix %q, got %q", prefix, err.Error())
	}
}

// parseBoth parses data with ParseManifest and with ValidateManifest, whose
// Document's files are read back into a Manifest, and requires the same
// result (the same error, or the same manifest) of both.
func parseBoth(t testing.TB, data []byte, msg QueueMessage, limits Limits) (Manifest, error) {
	t.Helper()
	m, err := ParseManifest(data, msg, limits)
	doc, derr := ValidateManifest(data, msg, limits)
	if !reflect.DeepEqual(err, derr) {
		t.Fatalf("ParseManifest and ValidateManifest disagree:\n ParseManifest: %v\nValidateManifest: %v", err, derr)
	}
	if derr != nil {
		if doc != nil {
			t.Fatalf("ValidateManifest returned a document with its error %v", derr)
		}
		return m, err
	}
	read := doc.Manifest
	read.Directories = slices.Clone(read.Directories)
	for i := range read.Directories {
		if read.Directories[i].Files != nil {
			t.Fatalf("the document holds the files of directory %d", i)
		}
		read.Directories[i].Files = slices.Collect(doc.Files(i))
		if read.Directories[i].Files == nil {
			read.Directories[i].Files = []FileInfo{}
		}
	}
	if !reflect.DeepEqual(m, read) {
		t.Fatalf("ValidateManifest's document reads differently:\nParseManifest: %#v\n document: %#v", m, read)
	}
	return m, err
}
