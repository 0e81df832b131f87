package manifest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The priority scale of a batch (the queue message's "priority"): an
// integer from MinPriority to MaxPriority, higher first, DefaultPriority
// when absent, or one of the names of PriorityNames. A batch's launches,
// pool leases and jobs go before those of batches of lower priority
// (docs/architecture.md, Priorities).
const (
	MinPriority     = -10
	MaxPriority     = 10
	DefaultPriority = 0
)

// PriorityNames are the names a priority may be given by, and their
// values: each is the lowest of a band whose batches' jobs River runs at
// one level.
var PriorityNames = map[string]int{"lowest": -10, "low": -5, "normal": 0, "high": 5}

// priorityNameList is PriorityNames in order, for messages.
const priorityNameList = `"lowest" (-10), "low" (-5), "normal" (0), "high" (5)`

// ParsePriority reads a priority as a command line or a form gives it: an
// integer of the scale or one of PriorityNames.
func ParsePriority(s string) (int, error) {
	s = strings.TrimSpace(s)
	if n, ok := PriorityNames[strings.ToLower(s)]; ok {
		return n, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < MinPriority || n > MaxPriority {
		return 0, fmt.Errorf("priority must be an integer from %d (lowest) to %d (highest) or one of %s, got %q",
			MinPriority, MaxPriority, priorityNameList, s)
	}
	return n, nil
}

// priority reads the optional top-level priority: DefaultPriority when
// absent or null.
func (p *problems) priority(obj object, name string) int {
	raw, ok := lookup(obj, name)
	if !ok {
		return DefaultPriority
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if n, ok := PriorityNames[s]; ok {
			return n
		}
		p.addf("%s must be an integer from %d (lowest) to %d (highest) or one of %s, got %s", name, MinPriority, MaxPriority, priorityNameList, show(raw))
		return DefaultPriority
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < MinPriority || n > MaxPriority {
		p.addf("%s must be an integer from %d (lowest) to %d (highest) or one of %s, got %s", name, MinPriority, MaxPriority, priorityNameList, show(raw))
		return DefaultPriority
	}
	return int(n)
}
