package main

import (
	"testing"
	"time"

	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
)

// TestOCRGroups checks the OCR batch's shape: directories of dirFiles
// refs with OCR on, split into chunks of OCR_CHUNK_REFS.
func TestOCRGroups(t *testing.T) {
	for _, tc := range []struct {
		refs, dirFiles, dirs, chunks, lastDir int
	}{
		{refs: 600, dirFiles: 500, dirs: 2, chunks: 12, lastDir: 100},
		{refs: 15000, dirFiles: 500, dirs: 30, chunks: 300, lastDir: 500},
		{refs: 12, dirFiles: 5, dirs: 3, chunks: 1, lastDir: 2},
		{refs: 120, dirFiles: 5, dirs: 24, chunks: 3, lastDir: 5}, // 10 directories a chunk
	} {
		opts := ocrOptions{dirFiles: tc.dirFiles}
		groups := ocrGroups("staging/B/", tc.refs, tc.dirFiles)
		if len(groups) != tc.dirs || opts.dirs(tc.refs) != tc.dirs || opts.chunks(tc.refs) != tc.chunks {
			t.Errorf("%d refs: %d groups, dirs() %d, chunks() %d; want %d dirs, %d chunks",
				tc.refs, len(groups), opts.dirs(tc.refs), opts.chunks(tc.refs), tc.dirs, tc.chunks)
			continue
		}
		files := 0
		for _, g := range groups {
			if !g.ProcessingConfig.OCR {
				t.Errorf("%s: OCR off", g.DirectoryPath)
			}
			for _, f := range g.Files {
				if f.ContentType != "image/jpeg" || f.R2Key != "staging/B"+f.LogicalPath {
					t.Errorf("file %+v", f)
				}
			}
			files += len(g.Files)
		}
		if files != tc.refs || len(groups[len(groups)-1].Files) != tc.lastDir {
			t.Errorf("%d refs: %d files, %d in the last directory", tc.refs, files, len(groups[len(groups)-1].Files))
		}
	}
}

// TestE2EGroups checks that the e2e manifest keeps its shape: every tenth
// file a TIFF, e2eDirFiles per directory, OCR off.
func TestE2EGroups(t *testing.T) {
	groups := e2eGroups("staging/B/", 2500)
	if len(groups) != 3 || len(groups[2].Files) != 500 {
		t.Fatalf("%d groups", len(groups))
	}
	tiffs := 0
	for _, g := range groups {
		if g.ProcessingConfig.OCR || !g.ProcessingConfig.Pinax {
			t.Errorf("%s: config %+v", g.DirectoryPath, g.ProcessingConfig)
		}
		for _, f := range g.Files {
			if f.ContentType == "image/tiff" {
				tiffs++
			}
		}
	}
	if tiffs != 250 {
		t.Errorf("%d TIFFs, want 250", tiffs)
	}
}

func TestRateBetween(t *testing.T) {
	t0 := time.Now()
	var samples []ocrSample
	for i := range 21 { // 10 OK a second for 20 s, sampled every second
		samples = append(samples, ocrSample{at: t0.Add(time.Duration(i) * time.Second), counts: fakeocr.Counts{OK: 10 * i}})
	}
	if got := rateBetween(samples, t0.Add(2500*time.Millisecond), t0.Add(15*time.Second)); got != 10 {
		t.Errorf("rate %v, want 10", got)
	}
	if got := rateBetween(samples, t0.Add(18*time.Second), t0.Add(20*time.Second)); got != 0 {
		t.Errorf("rate over 2 s %v, want 0 (too short to tell)", got)
	}
	if got := rateBetween(samples, t0, t0.Add(time.Minute)); got != 0 {
		t.Errorf("rate past the samples %v, want 0", got)
	}
}

func TestParseSettings(t *testing.T) {
	got, err := parseSettings("-doc-env", "PROVIDER_LIMIT_SHARED=embeddings,tags, MAX_REFILL_RATE=50,,")
	if err != nil || len(got) != 2 || got["PROVIDER_LIMIT_SHARED"] != "embeddings,tags" || got["MAX_REFILL_RATE"] != "50" {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := parseSettings("-doc-env", "tags,A=1"); err == nil {
		t.Error("a first entry without = is refused")
	}
	if _, err := parseFloats("8, 50,x"); err == nil {
		t.Error("parseFloats took x")
	}
}
