package setting

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// values is one of each kind of setting, bound to its fields.
type values struct {
	s, u, secret, one string
	n                 int
	n64               int64
	f, frac           float64
	b                 bool
	d, d0             time.Duration
}

func (v *values) group() Group {
	return Group{Title: "All", Settings: []Setting{
		String(&v.s, "S", "def", "a text"),
		URL(&v.u, "U", "", "a URL"),
		Secret(&v.secret, "SECRET", "a secret"),
		OneOf(&v.one, "ONE", "a", []string{"a", "b"}, "a choice"),
		Int(&v.n, "N", 5, 1, 10, "a number"),
		PositiveInt64(&v.n64, "N64", 7, "a positive number"),
		PositiveFloat(&v.f, "F", 1.5, "a rate"),
		Fraction(&v.frac, "FRAC", 0.5, "a share"),
		Bool(&v.b, "B", false, "a switch"),
		Millis(&v.d, "D", time.Minute, "a duration"),
		MillisOrZero(&v.d0, "D0", time.Second, "a duration or none"),
	}}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	var v values
	require.NoError(t, Load(lookup(nil), []Group{v.group()}))
	require.Equal(t, values{s: "def", one: "a", n: 5, n64: 7, f: 1.5, frac: 0.5, d: time.Minute, d0: time.Second}, v, "the defaults")

	require.NoError(t, Load(lookup(map[string]string{
		"S": " text ", "U": "https://x.example/", "SECRET": "k", "ONE": "B", "N": "10", "N64": "9000000000",
		"F": "0.25", "FRAC": "1", "B": "yes", "D": "90s", "D0": "0",
	}), []Group{v.group()}))
	require.Equal(t, values{s: "text", u: "https://x.example", secret: "k", one: "b", n: 10, n64: 9000000000, f: 0.25, frac: 1, b: true, d: 90 * time.Second}, v)

	require.NoError(t, Load(lookup(map[string]string{"S": "  ", "D": "250"}), []Group{v.group()}))
	require.Equal(t, "def", v.s, "a blank value is no value")
	require.Equal(t, 250*time.Millisecond, v.d, "a number is milliseconds")
}

// TestLoadReportsEveryProblem: each malformed value is named with what it
// must be, the field keeps its default, and the Checks run after every
// Finish.
func TestLoadReportsEveryProblem(t *testing.T) {
	t.Parallel()
	var v values
	g := v.group()
	var order []string
	g.Finish = func() { order = append(order, "finish") }
	g.Check = func() []string { order = append(order, "check"); return []string{"the values disagree"} }
	err := Load(lookup(map[string]string{
		"ONE": "c", "N": "11", "N64": "0", "F": "NaN", "FRAC": "2", "B": "maybe", "D": "-5", "D0": "soon",
	}), []Group{g, {Title: "Other", Finish: func() { order = append(order, "finish") }}})
	require.Error(t, err)
	for _, want := range []string{
		`ONE must be one of a, b, got "c"`,
		`N must be a whole number from 1 to 10, got "11"`,
		`N64 must be a positive integer, got "0"`,
		`F must be a positive number, got "NaN"`,
		`FRAC must be a number from 0 to 1, got "2"`,
		`B must be true or false, got "maybe"`,
		`D must be a positive number of milliseconds, got "-5"`,
		`D0 must be a positive number of milliseconds, got "soon"`,
		"the values disagree",
	} {
		require.ErrorContains(t, err, want)
	}
	require.True(t, strings.HasPrefix(err.Error(), "invalid configuration: "))
	require.Equal(t, 5, v.n, "a malformed value leaves the default")
	require.Equal(t, []string{"finish", "finish", "check"}, order)
}

// TestValue: logs show no secret: a secret only says it is set, and a
// URL's password and secret-looking query values are masked.
func TestValue(t *testing.T) {
	t.Parallel()
	secret, dbURL, kv, plain := "s3cr3t", "postgres://u:pw-1@db:5432/x?sslpassword=pw-2&sslmode=disable", "host=db password=pw-3", "ord"
	require.Equal(t, "[set]", Secret(&secret, "K", "").Value())
	empty := ""
	require.Empty(t, Secret(&empty, "K", "").Value())
	v := String(&dbURL, "DATABASE_URL", "", "").Masked().Value()
	require.NotContains(t, v, "pw-1")
	require.NotContains(t, v, "pw-2")
	require.Contains(t, v, "db:5432")
	require.Contains(t, v, "sslmode=disable")
	require.Equal(t, "[set]", String(&kv, "DATABASE_URL", "", "").Masked().Value(), "a keyword/value string is no URL")
	require.Equal(t, "ord", String(&plain, "REGION", "", "").Value())
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	var v values
	md := Markdown([]Group{v.group(), {Title: "Second", Doc: "About | pipes.", Settings: []Setting{
		Millis(&v.d, "LONG", 2*time.Hour, "a | b"),
		Int(&v.n, "CPUS", 4, 1, 64, "computed").Shown("number of CPUs"),
	}}})
	require.Contains(t, md, "## All\n\n| setting | default | range | meaning |\n")
	require.Contains(t, md, "| `N` | `5` | 1 to 10 | a number |\n")
	require.Contains(t, md, "| `ONE` | `a` | `a`, `b` | a choice |\n")
	require.Contains(t, md, "| `SECRET` |  |  | a secret |\n")
	require.Contains(t, md, "\n## Second\n\nAbout | pipes.\n\n")
	require.Contains(t, md, "| `LONG` | `7200000` (2 h) | positive (ms) | a \\| b |\n")
	require.Contains(t, md, "| `CPUS` | number of CPUs |")
}
