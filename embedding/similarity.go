package embedding

import (
	"container/heap"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Dot is the dot product of a and b, over the shorter's length.
func Dot(a, b []float32) float32 {
	n := min(len(a), len(b))
	a, b = a[:n], b[:n]
	// Four sums at once: the loop's additions do not wait on each other.
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

// Norm is v's Euclidean length.
func Norm(v []float32) float32 { return float32(math.Sqrt(float64(Dot(v, v)))) }

// Cosine is the cosine similarity of a and b, in [-1, 1]; 0 when either
// is zero.
func Cosine(a, b []float32) float32 {
	na, nb := Norm(a), Norm(b)
	if na == 0 || nb == 0 {
		return 0
	}
	return Dot(a, b) / (na * nb)
}

// Normalize scales v to unit length in place (a zero v stays zero) and
// returns it.
func Normalize(v []float32) []float32 {
	n := Norm(v)
	if n == 0 {
		return v
	}
	for i := range v {
		v[i] /= n
	}
	return v
}

// Match is a vector's place and its similarity to a query.
type Match struct {
	// Index is the vector's place in the slice given to TopK, or its ID in
	// an Index.
	Index int64
	Score float32
}

// TopK returns the k vectors most similar to query by cosine, best first
// (equal scores by Index). Vectors of another length than query's score
// as they would padded with zeros; zero vectors score 0.
func TopK(query []float32, vectors [][]float32, k int) []Match {
	var top topK
	top.reset(k)
	qn := Norm(query)
	for i, v := range vectors {
		var s float32
		if vn := Norm(v); qn != 0 && vn != 0 {
			s = Dot(query, v) / (qn * vn)
		}
		top.offer(int64(i), s)
	}
	return top.sorted()
}

// Index holds unit vectors of one length by ID for exact cosine search: a
// flat matrix scanned on every core. It is the in-memory copy a search
// ranks when the table is too slow to scan (100,000 x 512 takes some
// 10 ms). It is safe for concurrent use.
type Index struct {
	dims int

	mu   sync.RWMutex
	ids  []int64
	rows map[int64]int // ID -> row
	data []float32     // row r is data[r*dims : (r+1)*dims]
}

// NewIndex returns an empty index of vectors of dims values.
func NewIndex(dims int) *Index {
	return &Index{dims: dims, rows: map[int64]int{}}
}

// Len is the number of vectors.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.ids)
}

// Dimensions is the vectors' length.
func (x *Index) Dimensions() int { return x.dims }

// Set stores v (normalised, as a copy) under id, replacing what id had.
func (x *Index) Set(id int64, v []float32) error {
	if len(v) != x.dims {
		return fmt.Errorf("embedding: vector of %d dimensions in an index of %d", len(v), x.dims)
	}
	unit := Normalize(append([]float32(nil), v...))
	x.mu.Lock()
	defer x.mu.Unlock()
	r, ok := x.rows[id]
	if !ok {
		r = len(x.ids)
		x.rows[id] = r
		x.ids = append(x.ids, id)
		x.data = append(x.data, unit...)
		return nil
	}
	copy(x.data[r*x.dims:], unit)
	return nil
}

// Delete removes the vectors of ids that are there.
func (x *Index) Delete(ids ...int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		r, ok := x.rows[id]
		if !ok {
			continue
		}
		// The last row fills the hole.
		last := len(x.ids) - 1
		if r != last {
			x.ids[r] = x.ids[last]
			x.rows[x.ids[r]] = r
			copy(x.data[r*x.dims:(r+1)*x.dims], x.data[last*x.dims:])
		}
		delete(x.rows, id)
		x.ids = x.ids[:last]
		x.data = x.data[:last*x.dims]
	}
}

// minRowsPerWorker keeps small searches on one goroutine.
const minRowsPerWorker = 8192

// Search returns the k vectors most similar to query by cosine, best first
// (equal scores by ID), with their IDs as Match.Index. The rows are
// scanned on every core.
func (x *Index) Search(query []float32, k int) ([]Match, error) {
	if len(query) != x.dims {
		return nil, fmt.Errorf("embedding: query of %d dimensions in an index of %d", len(query), x.dims)
	}
	q := Normalize(append([]float32(nil), query...))
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := len(x.ids)
	workers := max(1, min(runtime.GOMAXPROCS(0), n/minRowsPerWorker))
	parts := make([]topK, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			top := &parts[w]
			top.reset(k)
			for r := w * n / workers; r < (w+1)*n/workers; r++ {
				top.offer(x.ids[r], Dot(q, x.data[r*x.dims:(r+1)*x.dims]))
			}
		})
	}
	wg.Wait()
	var all topK
	all.reset(k)
	for _, p := range parts {
		for _, m := range p.h {
			all.offer(m.Index, m.Score)
		}
	}
	return all.sorted(), nil
}

// topK keeps the k best matches seen, in a min-heap (the worst on top).
type topK struct {
	k int
	h matchHeap
}

func (t *topK) reset(k int) {
	t.k = max(0, k)
	t.h = make(matchHeap, 0, t.k)
}

func (t *topK) offer(id int64, score float32) {
	switch {
	case t.k == 0:
	case len(t.h) < t.k:
		heap.Push(&t.h, Match{Index: id, Score: score})
	case better(Match{Index: id, Score: score}, t.h[0]):
		t.h[0] = Match{Index: id, Score: score}
		heap.Fix(&t.h, 0)
	}
}

// sorted empties t into a slice, best first.
func (t *topK) sorted() []Match {
	out := make([]Match, len(t.h))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&t.h).(Match)
	}
	return out
}

// better orders matches: higher score, then lower index.
func better(a, b Match) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Index < b.Index
}

type matchHeap []Match

func (h matchHeap) Len() int           { return len(h) }
func (h matchHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h matchHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *matchHeap) Push(x any)        { *h = append(*h, x.(Match)) }
func (h *matchHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}
