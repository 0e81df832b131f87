package tasktoken_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// TestTokensOpenTheirScopeOnly: a sealed token opens its own scope and
// gives its nonce's record; presented for another task, batch or pool, cut,
// altered or made up, it is refused as unauthorized.
func TestTokensOpenTheirScopeOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	k := tasktoken.New(pool)
	scope := tasktoken.Task("B1", "tiff_t000")
	token, err := k.Seal(ctx, scope, "nonce-1")
	require.NoError(t, err)
	record, err := k.Open(ctx, scope, token)
	require.NoError(t, err)
	require.Equal(t, tasktoken.Record("nonce-1"), record)
	require.Equal(t, record, tasktoken.RecordOf(token))

	// Another keyring of the same database shares the key.
	record, err = tasktoken.New(pool).Open(ctx, scope, token)
	require.NoError(t, err)
	require.Equal(t, tasktoken.Record("nonce-1"), record)
	// Another database's orchestrator has a key of its own.
	_, err = tasktoken.New(dbtest.New(t)).Open(ctx, scope, token)
	require.ErrorIs(t, err, tasktoken.ErrForged)

	nonce, tag, _ := strings.Cut(token, ".")
	flipped := []byte(tag)
	flipped[0] ^= 1
	for name, c := range map[string]struct {
		scope tasktoken.Scope
		token string
	}{
		"OtherTask":       {tasktoken.Task("B1", "tiff_t001"), token},
		"OtherBatch":      {tasktoken.Task("B2", "tiff_t000"), token},
		"ShiftedBoundary": {tasktoken.Task("B1t", "iff_t000"), token},
		"Pool":            {tasktoken.PoolMachine(1), token},
		"NonceOnly":       {scope, nonce},
		"OtherNonce":      {scope, "nonce-2." + tag},
		"AlteredTag":      {scope, nonce + "." + string(flipped)},
		"TruncatedTag":    {scope, token[:len(token)-1]},
		"EmptyNonce":      {scope, "." + tag},
		"MadeUp":          {scope, "not-a-token"},
		"ExtraSeparator":  {scope, token + ".x"},
	} {
		_, err := k.Open(ctx, c.scope, c.token)
		require.ErrorIs(t, err, tasktoken.ErrForged, name)
		require.ErrorIs(t, err, problem.ErrUnauthorized, name)
	}
	_, err = k.Open(ctx, scope, "")
	require.ErrorIs(t, err, tasktoken.ErrMissing)
}

// TestKeyMadeOnce: processes that start together on an empty database
// agree on one key.
func TestKeyMadeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	scope := tasktoken.Task("B", "t")
	tokens := make([]string, 8)
	var wg sync.WaitGroup
	for i := range tokens {
		wg.Go(func() {
			tok, err := tasktoken.New(pool).Seal(ctx, scope, "n")
			require.NoError(t, err)
			tokens[i] = tok
		})
	}
	wg.Wait()
	for _, tok := range tokens {
		require.Equal(t, tokens[0], tok)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM server_keys`).Scan(&n))
	require.Equal(t, 1, n)
}
