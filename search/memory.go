package search

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
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

// coarseWords is how many of a signature's first words nearest compares
// for every entry; only the nearest refineFactor*n of them by those are
// compared whole.
const (
	coarseWords  = 4
	refineFactor = 20
)

// signatures is a process's in-memory index of the vector signatures of
// current versions' chunks of one embedder: 64 bytes of signature and 12
// of key and position a chunk (76 MB a million chunks, whatever the
// dimensions). A search compares the first 256 bits of every entry's
// signature (a scan of 32 MB a million chunks, which memory bandwidth
// bounds), then the whole signature of the nearest by those. It holds no
// text and no vector: search reranks its candidates with their quantised
// vectors in Postgres (chunk_vectors), whose read also drops any that stopped being
// current since the index last looked.
type signatures struct {
	// dims is the vectors' size, bits their signatures' (signatureLen).
	dims, bits, words int
	// cw and fw split a signature's words: the first cw are in coarse, the
	// rest in fine (entry i's at coarse[i*cw:(i+1)*cw], fine[i*fw:...]).
	cw, fw int

	mu     sync.RWMutex
	keys   []int64 // entry i's chunk key
	coarse []uint64
	fine   []uint64
	byDoc  map[int64][]int32 // a document version's entries
	// since is the oldest transaction that was running when the index
	// last read what changed (DocumentSearchXmin): the next read starts
	// there.
	since int64

	refreshing sync.Mutex
}

func newSignatures(dims int) *signatures {
	n := signatureLen(dims)
	w := words(n)
	return &signatures{dims: dims, bits: n, words: w, cw: min(w, coarseWords), fw: w - min(w, coarseWords), byDoc: map[int64][]int32{}}
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
	return cap(s.keys)*8 + cap(s.coarse)*8 + cap(s.fine)*8 + len(s.keys)*4
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
	whole := make([]uint64, s.words)
	if err := signatureFromBits(whole, sig, s.bits); err != nil {
		return fmt.Errorf("document %d chunk %d: %w", doc, idx, err)
	}
	pos := len(s.keys)
	s.coarse = append(s.coarse, whole[:s.cw]...)
	s.fine = append(s.fine, whole[s.cw:]...)
	s.keys = append(s.keys, chunkKey(doc, idx))
	s.byDoc[doc] = append(s.byDoc[doc], int32(pos))
	return nil
}

// signature is entry i's whole signature.
func (s *signatures) signature(i int) signature {
	return append(slices.Clone(s.coarse[i*s.cw:(i+1)*s.cw]), s.fine[i*s.fw:(i+1)*s.fw]...)
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
			copy(s.coarse[pos*s.cw:(pos+1)*s.cw], s.coarse[last*s.cw:])
			copy(s.fine[pos*s.fw:(pos+1)*s.fw], s.fine[last*s.fw:])
			moved, _ := splitKey(s.keys[pos])
			at := s.byDoc[moved]
			at[slices.Index(at, int32(last))] = int32(pos)
		}
		s.keys = s.keys[:last]
		s.coarse = s.coarse[:last*s.cw]
		s.fine = s.fine[:last*s.fw]
	}
}

// nearest is the keys of the n chunks whose signatures are nearest q's,
// nearest first (ties by key; of those tied at the n-th distance, the
// first in the index): of the refineFactor*n nearest by their
// first coarseWords words, those nearest by the whole signature.
func (s *signatures) nearest(q signature, n int) []int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	buf := distances.Get().(*[]uint16)
	defer distances.Put(buf)
	if cap(*buf) < len(s.keys) {
		*buf = make([]uint16, len(s.keys))
	}
	dist := (*buf)[:len(s.keys)]
	mins := make([]uint16, (len(dist)+blockLen-1)/blockLen)
	hist := make([]int, s.bits+1)
	qc, qf := q[:s.cw], q[s.cw:]
	if s.cw == 4 {
		distances4(dist, mins, hist, qc, s.coarse)
	} else {
		for b := range mins {
			least := uint16(math.MaxUint16)
			for i := b * blockLen; i < min((b+1)*blockLen, len(dist)); i++ {
				d := distance(qc, s.coarse[i*s.cw:(i+1)*s.cw])
				dist[i] = uint16(d)
				hist[d]++
				least = min(least, uint16(d))
			}
			mins[b] = least
		}
	}
	type hit struct {
		key  int64
		dist uint16
	}
	// The m nearest by the coarse distance are those within the distance
	// where its counts from 0 reach m.
	m := n
	if s.fw > 0 {
		m = refineFactor * n
	}
	// Entries at the limit itself are taken first come until there are m.
	limit, below := s.bits, 0
	for d, c := range hist {
		if below+c >= m {
			limit = d
			break
		}
		below += c
	}
	atLimit := m - below
	hits := make([]hit, 0, min(m, len(s.keys)))
	for b, least := range mins {
		if int(least) > limit {
			continue // the most blocks: none of theirs is near enough
		}
		for i := b * blockLen; i < min((b+1)*blockLen, len(dist)); i++ {
			d := dist[i]
			switch {
			case int(d) > limit:
				continue
			case int(d) == limit:
				if atLimit == 0 {
					continue
				}
				atLimit--
			}
			if s.fw > 0 {
				d += uint16(distance(qf, s.fine[i*s.fw:(i+1)*s.fw]))
			}
			hits = append(hits, hit{s.keys[i], d})
		}
	}
	if len(hits) > n {
		// The n nearest by the whole signature, found as the coarse
		// stage's were: sorting all m would cost more than the scan.
		clear(hist)
		for _, h := range hits {
			hist[h.dist]++
		}
		limit, below = s.bits, 0
		for d, c := range hist {
			if below+c >= n {
				limit = d
				break
			}
			below += c
		}
		atLimit, kept := n-below, hits[:0]
		for _, h := range hits {
			switch {
			case int(h.dist) > limit:
				continue
			case int(h.dist) == limit:
				if atLimit == 0 {
					continue
				}
				atLimit--
			}
			kept = append(kept, h)
		}
		hits = kept
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(cmp.Compare(a.dist, b.dist), cmp.Compare(a.key, b.key))
	})
	out := make([]int64, len(hits))
	for i, h := range hits {
		out[i] = h.key
	}
	return out
}

// distances holds the scratch of nearest: a distance an entry.
var distances = sync.Pool{New: func() any { return new([]uint16) }}

// blockLen is how many entries nearest's coarse scan notes the least
// distance of, so that its second pass skips the blocks with none within
// the limit (about 94% of them for 4,000 of a million).
const blockLen = 16

// distances4 is nearest's coarse scan of 4 words an entry, unrolled: the
// query's words stay in registers. It notes each entry's distance, their
// histogram and each block's least.
func distances4(dist, mins []uint16, hist []int, q signature, coarse []uint64) {
	q0, q1, q2, q3 := q[0], q[1], q[2], q[3]
	for b := range mins {
		least := uint16(math.MaxUint16)
		for i := b * blockLen; i < min((b+1)*blockLen, len(dist)); i++ {
			e := coarse[i*4 : i*4+4 : i*4+4]
			d := bits.OnesCount64(e[0]^q0) + bits.OnesCount64(e[1]^q1) + bits.OnesCount64(e[2]^q2) + bits.OnesCount64(e[3]^q3)
			dist[i] = uint16(d)
			hist[d]++
			least = min(least, uint16(d))
		}
		mins[b] = least
	}
}
