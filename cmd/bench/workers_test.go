package main

import (
	"context"
	"strings"
	"testing"
)

// TestBenchWorkers runs the worker benchmark once on 3-megapixel inputs
// (24 megapixels take over a minute under -race, which slows the Go JPEG
// decoder that checks the outputs and the pixel generator): both sides
// must produce complete JPEGs of the expected sizes, which benchWorkersAt
// checks, and every figure must have times to compare.
func TestBenchWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("times the workers against the vips CLI; make test runs it")
	}
	figs, err := benchWorkersAt(context.Background(), 1, 2000, 1500)
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 3 {
		t.Fatalf("%d figures, want 3", len(figs))
	}
	for _, f := range figs {
		if f.Ours <= 0 || f.VIPS <= 0 || f.VIPSStartup <= 0 || f.VIPSCmd == "" {
			t.Errorf("%s: incomplete figure %+v", f.Name, f)
		}
	}
	table := workersTable(figs)
	for _, f := range figs {
		if !strings.Contains(table, f.Name) {
			t.Errorf("the table has no row for %s:\n%s", f.Name, table)
		}
	}
	t.Log("\n" + table)
}
