package search

import (
	"net/url"
	"strconv"

	"github.com/arke-institute/orchestrator/problem"
)

// DefaultResults is a page's size when a search does not say.
const DefaultResults = 10

// QueryOf reads a search from the parameters of GET /documents/search
// (and the dashboard's search page): q, k, offset, batch_id, prefix and
// tag, repeated for each tag. Search checks the values' ranges.
func QueryOf(v url.Values) (Query, error) {
	q := Query{Text: v.Get("q"), K: DefaultResults, BatchID: v.Get("batch_id"), KeyPrefix: v.Get("prefix")}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"k", &q.K}, {"offset", &q.Offset}} {
		s := v.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return Query{}, &problem.InputError{Msg: "invalid search: " + p.name + " must be a whole number, got " + strconv.Quote(s)}
		}
		*p.dst = n
	}
	for _, t := range v["tag"] {
		if t != "" {
			q.Tags = append(q.Tags, t)
		}
	}
	return q, nil
}
