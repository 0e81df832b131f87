package chunked

import (
	"fmt"

	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
)

// Config is the chunked executor's configuration: each chunked phase's
// chunk size. How the chunks run is their engine's (Engine.Tuning).
type Config struct {
	// ChunkSize bounds a chunk of a phase: the directory groups
	// (<SHORT>_CHUNK_SIZE, e.g. OCR_CHUNK_SIZE) and refs
	// (<SHORT>_CHUNK_REFS) it holds.
	ChunkSize map[phases.Name]phases.ChunkSize
}

// MaxChunkSize bounds a phase's chunk size, in groups and in refs.
const MaxChunkSize = 10000

// Settings declares the chunked phases' chunk sizes into c.
func Settings(c *Config) []setting.Group {
	g := setting.Group{Title: "Chunked phases",
		Doc: "Phases whose items are processed in chunks, in-process, against a rate-limited provider (see [OCR](operations.md#ocr)); how the chunks run is their engine's settings'."}
	sizes := map[phases.Name]*phases.ChunkSize{}
	for _, p := range phases.All() {
		s := p.Spec()
		if s.Executor != Kind {
			continue
		}
		size := c.ChunkSize[s.Name] // the declaration shows c's value
		sizes[s.Name] = &size
		g.Settings = append(g.Settings,
			setting.Int(&size.Groups, s.Short+"_CHUNK_SIZE", s.Defaults.ChunkSize.Groups, 1, MaxChunkSize,
				fmt.Sprintf("directory groups a chunk of the `%s` phase (%s) holds at most", s.Name, s.Title)),
			setting.Int(&size.Refs, s.Short+"_CHUNK_REFS", s.Defaults.ChunkSize.Refs, 1, MaxChunkSize,
				fmt.Sprintf("refs a chunk of the `%s` phase holds at most; a directory of more is split across chunks. A chunk keeps `MAX_CONCURRENT_PER_ALARM` refs in flight, so smaller chunks mean more refs in flight at once (up to the `%s_WORKERS` chunks a process runs)", s.Name, s.Short)))
	}
	g.Finish = func() {
		c.ChunkSize = make(map[phases.Name]phases.ChunkSize, len(sizes))
		for name, n := range sizes {
			c.ChunkSize[name] = *n
		}
	}
	return []setting.Group{g}
}
