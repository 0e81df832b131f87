package search

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/arke-institute/orchestrator/db"
)

// chunkBits is how many bits of a chunk's key hold its index.
const chunkBits = 24

func chunkKey(doc int64, idx int32) int64 { return doc<<chunkBits | int64(idx) }

func splitKey(key int64) (int64, int32) { return key >> chunkBits, int32(key & (1<<chunkBits - 1)) }

// errTooLarge says there are more chunks than an index may hold.
var errTooLarge = errors.New("too many chunks for the in-memory index")

// loadPage is how many signatures one query of a load reads.
const loadPage = 50_000

// signatures is a process's in-memory index of the vector signatures of
// current versions' chunks of one embedder: dims/8 bytes of signature and
// 12 of key and position a chunk (76 MB a million chunks at 512
// dimensions), scanned whole by Hamming distance, a few milliseconds a
// million. It holds no text and no vector: search reranks its candidates
// with the vectors in the table, which also drops any that stopped being
// current since the index last looked.
type signatures struct {
	dims, words int

	mu    sync.RWMutex
	keys  []int64           // entry i's chunk key
	sigs  []uint64          // entry i's signature: sigs[i*words : (i+1)*words]
	byDoc map[int64][]int32 // a document version's entries
	// since is the oldest transaction that was running when the index
	// last read what changed (DocumentSearchXmin): the next read starts
	// there.
	since int64

	refreshing sync.Mutex
}

func newSignatures(dims int) *signatures {
	return &signatures{dims: dims, words: words(dims), byDoc: map[int64][]int32{}}
}

// len is the number of chunks the index holds.
func (s *signatures) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.keys)
}

// bytes is about what the index takes in memory.
func (s *signatures) bytes() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return cap(s.keys)*8 + cap(s.sigs)*8 + len(s.keys)*4
}

// load reads the signatures of every current version's chunks of model
// and dims, a page at a time, refusing to hold more than limit. Versions
// made current or not meanwhile are read again by the next refresh, which
// starts from the oldest transaction running before the load began.
func (s *signatures) load(ctx context.Context, q *db.Queries, model string, limit int) error {
	since, err := q.DocumentSearchXmin(ctx)
	if err != nil {
		return fmt.Errorf("reading the transaction horizon: %w", err)
	}
	var afterDoc int64
	var afterChunk int32 = -1
	for {
		rows, err := q.DocumentSearchSignaturesPage(ctx, db.DocumentSearchSignaturesPageParams{EmbeddingModel: model, EmbeddingDims: int32(s.dims),
			AfterDocument: afterDoc, AfterChunk: afterChunk, Max: loadPage})
		if err != nil {
			return fmt.Errorf("loading signatures after document %d chunk %d: %w", afterDoc, afterChunk, err)
		}
		if s.len()+len(rows) > limit {
			return fmt.Errorf("%w: more than %d chunks have vectors (SEARCH_INDEX_MAX_CHUNKS)", errTooLarge, limit)
		}
		s.mu.Lock()
		for _, r := range rows {
			if err := s.add(r.DocumentID, r.ChunkIndex, r.Signature.Bytes); err != nil {
				s.mu.Unlock()
				return err
			}
		}
		s.mu.Unlock()
		if len(rows) < loadPage {
			break
		}
		last := rows[len(rows)-1]
		afterDoc, afterChunk = last.DocumentID, last.ChunkIndex
	}
	s.mu.Lock()
	s.since = since
	s.mu.Unlock()
	return nil
}

// refresh brings the index in step with the versions made current or not
// since it last looked, unless another search is doing so (that one's
// result is as good). It refuses to grow past limit.
func (s *signatures) refresh(ctx context.Context, q *db.Queries, model string, limit int) error {
	if !s.refreshing.TryLock() {
		return nil
	}
	defer s.refreshing.Unlock()
	s.mu.RLock()
	since := s.since
	s.mu.RUnlock()
	next, err := q.DocumentSearchXmin(ctx)
	if err != nil {
		return fmt.Errorf("reading the transaction horizon: %w", err)
	}
	changed, err := q.DocumentSearchChanged(ctx, since)
	if err != nil {
		return fmt.Errorf("reading the versions changed since transaction %d: %w", since, err)
	}
	var current []int64
	for _, c := range changed {
		if c.Current {
			current = append(current, c.ID)
		}
	}
	var rows []db.DocumentSearchSignaturesRow
	if len(current) > 0 {
		rows, err = q.DocumentSearchSignatures(ctx, db.DocumentSearchSignaturesParams{DocumentIDs: current, EmbeddingModel: model, EmbeddingDims: int32(s.dims)})
		if err != nil {
			return fmt.Errorf("loading the signatures of %d versions: %w", len(current), err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range changed {
		s.remove(c.ID)
	}
	if len(s.keys)+len(rows) > limit {
		return fmt.Errorf("%w: more than %d chunks have vectors (SEARCH_INDEX_MAX_CHUNKS)", errTooLarge, limit)
	}
	for _, r := range rows {
		if err := s.add(r.DocumentID, r.ChunkIndex, r.Signature.Bytes); err != nil {
			return err
		}
	}
	s.since = next
	return nil
}

// add appends a chunk's signature. The caller holds mu.
func (s *signatures) add(doc int64, idx int32, sig []byte) error {
	pos := len(s.keys)
	s.sigs = append(s.sigs, make([]uint64, s.words)...)
	if err := signatureFromBits(s.sigs[pos*s.words:], sig, s.dims); err != nil {
		s.sigs = s.sigs[:pos*s.words]
		return fmt.Errorf("document %d chunk %d: %w", doc, idx, err)
	}
	s.keys = append(s.keys, chunkKey(doc, idx))
	s.byDoc[doc] = append(s.byDoc[doc], int32(pos))
	return nil
}

// remove drops a version's entries, each replaced by the last entry. The
// caller holds mu.
func (s *signatures) remove(doc int64) {
	positions := s.byDoc[doc]
	delete(s.byDoc, doc)
	slices.Sort(positions)
	for i := len(positions) - 1; i >= 0; i-- {
		pos, last := int(positions[i]), len(s.keys)-1
		if pos != last {
			s.keys[pos] = s.keys[last]
			copy(s.sigs[pos*s.words:(pos+1)*s.words], s.sigs[last*s.words:])
			moved, _ := splitKey(s.keys[pos])
			at := s.byDoc[moved]
			at[slices.Index(at, int32(last))] = int32(pos)
		}
		s.keys = s.keys[:last]
		s.sigs = s.sigs[:last*s.words]
	}
}

// nearest is the keys of the n chunks whose signatures are nearest q's,
// nearest first (ties by key).
func (s *signatures) nearest(q signature, n int) []int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	dist := make([]uint16, len(s.keys))
	hist := make([]int, s.dims+1)
	for i := range s.keys {
		d := distance(q, s.sigs[i*s.words:(i+1)*s.words])
		dist[i] = uint16(d)
		hist[d]++
	}
	// The n nearest are those within the distance where the counts from
	// 0 reach n.
	limit, seen := s.dims, 0
	for d, c := range hist {
		if seen += c; seen >= n {
			limit = d
			break
		}
	}
	type hit struct {
		key  int64
		dist uint16
	}
	hits := make([]hit, 0, min(seen, len(s.keys)))
	for i, d := range dist {
		if int(d) <= limit {
			hits = append(hits, hit{s.keys[i], d})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(cmp.Compare(a.dist, b.dist), cmp.Compare(a.key, b.key))
	})
	out := make([]int64, 0, min(n, len(hits)))
	for _, h := range hits[:min(n, len(hits))] {
		out = append(out, h.key)
	}
	return out
}
