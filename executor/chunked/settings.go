package chunked

import (
	"fmt"

	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
)

// Config is the chunked executor's configuration: each chunked phase's
// chunk size. How the chunks run is their engine's (Engine.Tuning).
type Config struct {
	// ChunkSize is how many directory groups one chunk of a phase holds
	// (<SHORT>_CHUNK_SIZE, e.g. OCR_CHUNK_SIZE).
	ChunkSize map[phases.Name]int
}

// MaxChunkSize bounds a phase's chunk size.
const MaxChunkSize = 10000

// Settings declares the chunked phases' chunk sizes into c.
func Settings(c *Config) []setting.Group {
	g := setting.Group{Title: "Chunked phases",
		Doc: "Phases whose items are processed in chunks, in-process, against a rate-limited provider (see [OCR](operations.md#ocr)); how the chunks run is their engine's settings'."}
	sizes := map[phases.Name]*int{}
	for _, p := range phases.All() {
		s := p.Spec()
		if s.Executor != Kind {
			continue
		}
		sizes[s.Name] = new(int)
		*sizes[s.Name] = c.ChunkSize[s.Name] // the declaration shows c's value
		g.Settings = append(g.Settings, setting.Int(sizes[s.Name], s.Short+"_CHUNK_SIZE", s.Defaults.ChunkSize, 1, MaxChunkSize,
			fmt.Sprintf("directory groups per chunk of the `%s` phase (%s)", s.Name, s.Title)))
	}
	g.Finish = func() {
		c.ChunkSize = make(map[phases.Name]int, len(sizes))
		for name, n := range sizes {
			c.ChunkSize[name] = *n
		}
	}
	return []setting.Group{g}
}
