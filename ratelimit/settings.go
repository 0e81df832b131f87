package ratelimit

import (
	"fmt"
	"strings"

	"github.com/arke-institute/orchestrator/setting"
)

// Settings declares an adaptive bucket's six settings, bound to dst:
// spec 004's INITIAL_MAX_TOKENS, INITIAL_REFILL_RATE, MAX_MAX_TOKENS,
// MAX_REFILL_RATE, MIN_MAX_TOKENS and MIN_REFILL_RATE, their names after
// prefix (e.g. "EMBEDDINGS_" for EMBEDDINGS_INITIAL_MAX_TOKENS), with
// DefaultAdaptive's defaults. what names the bucket in their docs.
func Settings(dst *Adaptive, prefix, what string) []setting.Setting {
	def := DefaultAdaptive()
	return []setting.Setting{
		setting.PositiveFloat(&dst.InitialMaxTokens, prefix+"INITIAL_MAX_TOKENS", def.InitialMaxTokens, what+" at start: its burst (requests)"),
		setting.PositiveFloat(&dst.InitialRefillRate, prefix+"INITIAL_REFILL_RATE", def.InitialRefillRate, what+" at start: requests per second; until the first 429 it grows x1.5 for every half second's worth of successes (slow start), then +0.5/s for every 10 in a row"),
		setting.PositiveFloat(&dst.MaxMaxTokens, prefix+"MAX_MAX_TOKENS", def.MaxMaxTokens, "the largest burst "+what+" grows to"),
		setting.PositiveFloat(&dst.MaxRefillRate, prefix+"MAX_REFILL_RATE", def.MaxRefillRate, "the highest rate "+what+" grows to, for the whole fleet: the provider's contracted limit, if known; its 429s find it otherwise"),
		setting.PositiveFloat(&dst.MinMaxTokens, prefix+"MIN_MAX_TOKENS", def.MinMaxTokens, "the smallest burst "+what+" shrinks to (at least 1)"),
		setting.PositiveFloat(&dst.MinRefillRate, prefix+"MIN_REFILL_RATE", def.MinRefillRate, "the lowest rate "+what+" shrinks to: a 429, a 503 or a timeout cuts the rate by 1/s or to 0.8 of itself, whichever is lower; the n-th in a row with no success between also backs off min(60 s, 2^(n-1) s), or the provider's `Retry-After` if longer"),
	}
}

// Problems says what is wrong with a's values taken together, its
// settings' names after prefix (as Settings): each initial value must lie
// between its minimum and its maximum, and a bucket must hold a token.
func (a Adaptive) Problems(prefix string) []string {
	var problems []string
	if a.MinMaxTokens < 1 {
		problems = append(problems, fmt.Sprintf("%sMIN_MAX_TOKENS must be at least 1 (a bucket holding less never grants a token), got %v", prefix, a.MinMaxTokens))
	}
	if a.MinMaxTokens > a.InitialMaxTokens || a.InitialMaxTokens > a.MaxMaxTokens {
		problems = append(problems, fmt.Sprintf("%[1]sMIN_MAX_TOKENS <= %[1]sINITIAL_MAX_TOKENS <= %[1]sMAX_MAX_TOKENS must hold, got %[2]v, %[3]v, %[4]v", prefix, a.MinMaxTokens, a.InitialMaxTokens, a.MaxMaxTokens))
	}
	if a.MinRefillRate > a.InitialRefillRate || a.InitialRefillRate > a.MaxRefillRate {
		problems = append(problems, fmt.Sprintf("%[1]sMIN_REFILL_RATE <= %[1]sINITIAL_REFILL_RATE <= %[1]sMAX_REFILL_RATE must hold, got %[2]v, %[3]v, %[4]v", prefix, a.MinRefillRate, a.InitialRefillRate, a.MaxRefillRate))
	}
	return problems
}

// RoleBucket is the bucket a role's calls to a provider draw on: its
// name, before ":" and the provider's host in the key, and its limit.
type RoleBucket struct {
	Name  string
	Limit Adaptive
}

// Key is the bucket's key for provider (a host, or a local engine's name).
func (b RoleBucket) Key(provider string) string { return b.Name + ":" + provider }

// The roles that call providers, each with a bucket of its own per
// provider unless the operator shares them (Shared).
const (
	RoleOCR        = "ocr"
	RoleEmbeddings = "embeddings"
	RoleTags       = "tags"
)

// SharedChoices are the values of PROVIDER_LIMIT_SHARED: which roles share
// one bucket per provider host (unset: none).
var SharedChoices = []string{"embeddings,tags", "ocr,tags", "ocr,embeddings", "ocr,embeddings,tags"}

// Shared is each role's bucket given limits, each role's own, and shared,
// "" or a value of SharedChoices: the roles it names draw on one bucket per
// provider host, named after them all ("embeddings+tags"), under the
// first one's limit. Roles that call different hosts still draw on
// different buckets.
func Shared(limits map[string]Adaptive, shared string) map[string]RoleBucket {
	out := make(map[string]RoleBucket, len(limits))
	for role, limit := range limits {
		out[role] = RoleBucket{Name: role, Limit: limit}
	}
	if shared == "" {
		return out
	}
	roles := strings.Split(shared, ",")
	b := RoleBucket{Name: strings.Join(roles, "+"), Limit: limits[roles[0]]}
	for _, role := range roles {
		out[role] = b
	}
	return out
}
