package ocr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/provider"
)

// DefaultTesseractTimeout bounds one tesseract run when
// TesseractConfig.Timeout is zero.
const DefaultTesseractTimeout = 2 * time.Minute

// TesseractConfig configures the local engine.
type TesseractConfig struct {
	// Command is the tesseract program ("tesseract" on PATH if empty).
	Command string
	// Language is tesseract's -l argument ("eng" if empty; Debian's
	// tesseract-ocr-eng).
	Language string
	// Timeout bounds one run (DefaultTesseractTimeout if zero).
	Timeout time.Duration
	// Concurrency bounds the runs at once (the number of CPUs if zero):
	// each run takes a core, and a chunked phase asks for many pages at
	// once. A call waiting for its turn waits within its context.
	Concurrency int
}

// Tesseract is an Engine running the tesseract command on the image bytes
// (stdin to stdout, no temporary files): real OCR offline, for the
// embedded default with no provider. It suits the large variant or the
// original; small images read poorly.
type Tesseract struct {
	cfg   TesseractConfig
	path  string
	model string
	slots chan struct{}
}

var _ Engine = (*Tesseract)(nil)

// NewTesseract finds the command and its version, so that a machine
// without tesseract fails at start-up rather than on every page.
func NewTesseract(cfg TesseractConfig) (*Tesseract, error) {
	if cfg.Command == "" {
		cfg.Command = "tesseract"
	}
	if cfg.Language == "" {
		cfg.Language = "eng"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTesseractTimeout
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = runtime.NumCPU()
	}
	path, err := exec.LookPath(cfg.Command)
	if err != nil {
		return nil, fmt.Errorf("ocr: the local engine needs the tesseract command (Debian: apt-get install tesseract-ocr; scripts/setup.sh run installs it): %w", err)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ocr: running %s --version: %w: %s", path, err, bytes.TrimSpace(out))
	}
	version, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return &Tesseract{cfg: cfg, path: path, model: strings.TrimSpace(version), slots: make(chan struct{}, cfg.Concurrency)}, nil
}

// tesseractEnv is the whole environment of a tesseract run: it parses
// images a worker wrote, so it gets none of the orchestrator's variables
// (the database URL, tokens, storage keys), only those that choose its
// data and locale, and one thread per run: callers run several pages at
// once, and OpenMP threads contending for the same cores make each run
// slower.
func tesseractEnv() []string {
	env := []string{"OMP_THREAD_LIMIT=1"}
	for _, name := range []string{"TESSDATA_PREFIX", "LANG", "LC_ALL", "LC_CTYPE"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// Provider is the name results carry: "tesseract".
func (t *Tesseract) Provider() string { return "tesseract" }

// Transcribe runs tesseract on img. An image tesseract cannot read is a
// permanent error with its own message; a run past the timeout is transient.
func (t *Tesseract) Transcribe(ctx context.Context, img Image) (Result, error) {
	// tesseract reads a non-image input as a list of file names to OCR, so
	// only what sniffs as an image is given to it.
	if _, err := imageType(Image{Data: img.Data}); err != nil {
		return Result{}, err
	}
	select {
	case t.slots <- struct{}{}:
		defer func() { <-t.slots }()
	case <-ctx.Done():
		return Result{}, fmt.Errorf("ocr: waiting for tesseract: %w", ctx.Err())
	}
	runCtx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, t.path, "-", "-", "-l", t.cfg.Language)
	cmd.Stdin = bytes.NewReader(img.Data)
	cmd.Env = tesseractEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return Result{}, fmt.Errorf("ocr: running tesseract: %w", ctx.Err())
	case runCtx.Err() != nil:
		return Result{}, &Error{Class: Transient, Timeout: true, Message: fmt.Sprintf("tesseract did not finish within %s", t.cfg.Timeout), Err: err}
	case err != nil:
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		if _, ok := errors.AsType[*exec.ExitError](err); ok {
			return Result{}, &Error{Class: Permanent, Message: "tesseract could not read the image: " + msg, Err: err}
		}
		return Result{}, &Error{Class: Transient, Message: "running tesseract: " + msg, Err: err}
	}
	// A local run is a request that reports no tokens.
	provider.Record(ctx, t.model, provider.Usage{Requests: 1})
	return Result{Text: strings.TrimSpace(stdout.String()), Model: t.model, Provider: "tesseract"}, nil
}
