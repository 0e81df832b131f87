// Package setting declares the orchestrator's environment settings: each
// one's name, default, range and meaning, and the field its value goes
// to. One table of declarations is both what the configuration is parsed
// from (Load) and what its reference, docs/configuration.md, is
// generated from (Markdown), so the two cannot drift apart.
//
// A package that has settings declares them beside the small config
// struct it takes, bound to that struct's fields; config gathers every
// package's declarations into one table.
package setting

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Setting is one environment variable: its name, default, range and
// meaning, and how its value is parsed into the field it is bound to.
type Setting struct {
	// Name is the environment variable's name.
	Name string
	// Doc says what the setting does, in a sentence of Markdown.
	Doc string
	// Default is the default as the reference shows it; empty for none.
	Default string
	// Range is the values accepted as the reference shows them (e.g.
	// "1 to 100"); empty when any value of the kind is.
	Range string
	// Secret marks a value that must never be shown (tokens, keys): the
	// log of the configuration says only whether it is set.
	Secret bool
	// URL marks a URL whose password and secret-looking query values are
	// masked when the configuration is logged.
	URL bool

	reset func()               // sets the field to the default
	parse func(v string) error // sets the field from v, which is not empty
	show  func() string        // the field's value as text
}

// Shown returns s with the reference showing def as its default, for a
// default the value does not say well (a computed one, a size in bytes).
func (s Setting) Shown(def string) Setting {
	s.Default = def
	return s
}

// Hidden returns s marked Secret.
func (s Setting) Hidden() Setting {
	s.Secret = true
	return s
}

// Masked returns s marked URL: a URL whose secrets logs mask.
func (s Setting) Masked() Setting {
	s.URL = true
	return s
}

// Value is the bound field's value as logs may show it: a secret's is
// "[set]" or empty, and a URL's password and secret-looking query values
// are masked (a value that is not a URL with a scheme, such as a
// keyword/value database string, is "[set]").
func (s Setting) Value() string {
	v := s.show()
	switch {
	case v == "":
		return ""
	case s.Secret:
		return "[set]"
	case s.URL:
		if u, err := url.Parse(v); err != nil || u.Scheme == "" {
			return "[set]"
		}
		return redactURL(v)
	}
	return v
}

// redactURL masks the password of a URL's user info, if it has one, and
// the values of query parameters that may hold a secret (password,
// sslpassword, token, key, secret, signature, ...).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "[invalid URL]"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			lk := strings.ToLower(k)
			for _, w := range []string{"password", "token", "key", "secret", "signature", "credential"} {
				if strings.Contains(lk, w) {
					q[k] = []string{"xxxxx"}
					break
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Group is a set of settings that belong together, with a title and an
// introduction for the reference.
type Group struct {
	Title string
	// Doc introduces the group in the reference, in Markdown; it may be
	// empty.
	Doc      string
	Settings []Setting
	// Finish, when set, runs once every value was read, before the
	// Checks: it gathers values read into temporaries into the config
	// they belong to (a map's values, which cannot be bound).
	Finish func()
	// Check, when set, reports what is wrong with the group's values
	// taken together (a minimum above a maximum, two phases on one app),
	// after every value was parsed.
	Check func() []string
}

// Load sets every setting of groups from lookup (os.LookupEnv in
// production, a map in tests): its value if set and not blank, else its
// default. It reports every malformed value and every problem of the
// groups' Checks at once, so one start tells an operator all that is
// wrong.
func Load(lookup func(string) (string, bool), groups []Group) error {
	var problems []string
	for _, g := range groups {
		for _, s := range g.Settings {
			s.reset()
			v, ok := lookup(s.Name)
			if v = strings.TrimSpace(v); !ok || v == "" {
				continue
			}
			if err := s.parse(v); err != nil {
				s.reset()
				problems = append(problems, fmt.Sprintf("%s must be %s, got %q", s.Name, err.Error(), v))
			}
		}
	}
	for _, g := range groups {
		if g.Finish != nil {
			g.Finish()
		}
	}
	for _, g := range groups {
		if g.Check != nil {
			problems = append(problems, g.Check()...)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}

// Names are the names of groups' settings, in order.
func Names(groups []Group) []string {
	var out []string
	for _, g := range groups {
		for _, s := range g.Settings {
			out = append(out, s.Name)
		}
	}
	return out
}

// expectation is a parse error: what the value must be.
type expectation string

func (e expectation) Error() string { return string(e) }

// String declares a text setting.
func String(dst *string, name, def, doc string) Setting {
	return Setting{Name: name, Doc: doc, Default: code(def),
		reset: func() { *dst = def },
		parse: func(v string) error { *dst = v; return nil },
		show:  func() string { return *dst }}
}

// URL declares a URL setting; a trailing slash is trimmed, so paths join
// cleanly.
func URL(dst *string, name, def, doc string) Setting {
	s := String(dst, name, def, doc)
	s.URL = true
	s.parse = func(v string) error { *dst = strings.TrimRight(v, "/"); return nil }
	return s
}

// Secret declares a secret text setting, which has no default.
func Secret(dst *string, name, doc string) Setting {
	return String(dst, name, "", doc).Hidden()
}

// OneOf declares a text setting that must be one of allowed (compared
// without case); def may be "" for none.
func OneOf(dst *string, name, def string, allowed []string, doc string) Setting {
	s := String(dst, name, def, doc)
	shown := make([]string, len(allowed))
	for i, a := range allowed {
		shown[i] = code(a)
	}
	s.Range = strings.Join(shown, ", ")
	s.parse = func(v string) error {
		v = strings.ToLower(v)
		for _, a := range allowed {
			if v == a {
				*dst = v
				return nil
			}
		}
		return expectation("one of " + strings.Join(allowed, ", "))
	}
	return s
}

// Int declares a whole number from lo to hi.
func Int(dst *int, name string, def, lo, hi int, doc string) Setting {
	var n int64
	s := Int64(&n, name, int64(def), int64(lo), int64(hi), doc)
	s.reset = func() { *dst = def }
	parse := s.parse
	s.parse = func(v string) error {
		err := parse(v)
		*dst = int(n)
		return err
	}
	s.show = func() string { return strconv.Itoa(*dst) }
	return s
}

// Int64 declares a whole number from lo to hi.
func Int64(dst *int64, name string, def, lo, hi int64, doc string) Setting {
	return Setting{Name: name, Doc: doc, Default: code(strconv.FormatInt(def, 10)), Range: fmt.Sprintf("%d to %d", lo, hi),
		reset: func() { *dst = def },
		parse: func(v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < lo || n > hi {
				return expectation(fmt.Sprintf("a whole number from %d to %d", lo, hi))
			}
			*dst = n
			return nil
		},
		show: func() string { return strconv.FormatInt(*dst, 10) }}
}

// PositiveInt declares a whole number above 0.
func PositiveInt(dst *int, name string, def int, doc string) Setting {
	s := Int(dst, name, def, 1, math.MaxInt, doc)
	return positive(s)
}

// PositiveInt64 declares a whole number above 0.
func PositiveInt64(dst *int64, name string, def int64, doc string) Setting {
	return positive(Int64(dst, name, def, 1, math.MaxInt64, doc))
}

// positive words s's range and error as a positive integer's.
func positive(s Setting) Setting {
	s.Range = "positive"
	parse := s.parse
	s.parse = func(v string) error {
		if parse(v) != nil {
			return expectation("a positive integer")
		}
		return nil
	}
	return s
}

// PositiveFloat declares a number above 0.
func PositiveFloat(dst *float64, name string, def float64, doc string) Setting {
	return Setting{Name: name, Doc: doc, Default: code(formatFloat(def)), Range: "positive",
		reset: func() { *dst = def },
		parse: func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || math.IsInf(f, 0) { // !(f > 0) refuses NaN too
				return expectation("a positive number")
			}
			*dst = f
			return nil
		},
		show: func() string { return formatFloat(*dst) }}
}

// Fraction declares a number from 0 to 1.
func Fraction(dst *float64, name string, def float64, doc string) Setting {
	return Setting{Name: name, Doc: doc, Default: code(formatFloat(def)), Range: "0 to 1",
		reset: func() { *dst = def },
		parse: func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return expectation("a number from 0 to 1")
			}
			*dst = f
			return nil
		},
		show: func() string { return formatFloat(*dst) }}
}

// Bool declares true or false (also 1/0, yes/no, on/off).
func Bool(dst *bool, name string, def bool, doc string) Setting {
	return Setting{Name: name, Doc: doc, Default: code(strconv.FormatBool(def)),
		reset: func() { *dst = def },
		parse: func(v string) error {
			switch strings.ToLower(v) {
			case "1", "true", "yes", "on":
				*dst = true
			case "0", "false", "no", "off":
				*dst = false
			default:
				return expectation("true or false")
			}
			return nil
		},
		show: func() string { return strconv.FormatBool(*dst) }}
}

// Millis declares a positive duration, given in milliseconds as spec
// 000's settings are; a Go duration ("5s", "250ms") is accepted too.
func Millis(dst *time.Duration, name string, def time.Duration, doc string) Setting {
	return Setting{Name: name, Doc: doc, Default: millis(def), Range: "positive (ms)",
		reset: func() { *dst = def },
		parse: func(v string) error {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
				*dst = time.Duration(n) * time.Millisecond
				return nil
			}
			if d, err := time.ParseDuration(v); err == nil && d > 0 {
				*dst = d
				return nil
			}
			return expectation("a positive number of milliseconds")
		},
		show: func() string { return strconv.FormatInt(dst.Milliseconds(), 10) }}
}

// MillisOrZero is Millis that also accepts 0 (none).
func MillisOrZero(dst *time.Duration, name string, def time.Duration, doc string) Setting {
	s := Millis(dst, name, def, doc)
	s.Range = "0 or more (ms)"
	parse := s.parse
	s.parse = func(v string) error {
		if v == "0" {
			*dst = 0
			return nil
		}
		return parse(v)
	}
	return s
}

// millis shows a default duration in milliseconds, with a reading aid
// for long ones.
func millis(d time.Duration) string {
	s := code(strconv.FormatInt(d.Milliseconds(), 10))
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		s += fmt.Sprintf(" (%d h)", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		s += fmt.Sprintf(" (%d min)", d/time.Minute)
	}
	return s
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// code backquotes a non-empty value, as the reference shows values.
func code(v string) string {
	if v == "" {
		return ""
	}
	return "`" + v + "`"
}

// Share is a bound given either as a count or as a percentage of a whole
// ("25", "1%").
type Share struct {
	// Count is the bound as a count, when Percent is false.
	Count int64
	// Percent: Of is Value percent of the whole.
	Percent bool
	Value   float64
}

// Of is the bound for a whole of total: Count, or Value percent of total,
// rounded down.
func (s Share) Of(total int64) int64 {
	if !s.Percent {
		return s.Count
	}
	return int64(math.Floor(float64(total) * s.Value / 100))
}

func (s Share) String() string {
	if s.Percent {
		return formatFloat(s.Value) + "%"
	}
	return strconv.FormatInt(s.Count, 10)
}

// ParseShare reads a Share: a whole number from 0, or a percentage from 0
// to 100 followed by "%".
func ParseShare(v string) (Share, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || !(f >= 0 && f <= 100) {
			return Share{}, expectation(`a whole number, or a percentage from 0 to 100 such as "1%"`)
		}
		return Share{Percent: true, Value: f}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return Share{}, expectation(`a whole number, or a percentage from 0 to 100 such as "1%"`)
	}
	return Share{Count: n}, nil
}

// ShareOf declares a Share setting (ParseShare).
func ShareOf(dst *Share, name, def, doc string) Setting {
	d, err := ParseShare(def)
	if err != nil {
		panic(fmt.Sprintf("setting %s: default %q: %v", name, def, err))
	}
	return Setting{Name: name, Doc: doc, Default: code(def), Range: "count or percentage",
		reset: func() { *dst = d },
		parse: func(v string) error {
			s, err := ParseShare(v)
			if err != nil {
				return err
			}
			*dst = s
			return nil
		},
		show: func() string { return dst.String() }}
}

// Func declares a setting of a kind its own package reads: parse sets the
// field from a value that is not empty, failing with what the value must
// be ("a list of name:price pairs"); reset sets the field to the default;
// show is the field's value as text. def is the default as the reference
// shows it, rng the values accepted.
func Func(name, def, rng, doc string, reset func(), parse func(v string) error, show func() string) Setting {
	return Setting{Name: name, Doc: doc, Default: def, Range: rng, reset: reset, parse: parse, show: show}
}
