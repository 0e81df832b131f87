package manifest

import (
	"encoding/json"
	"unicode/utf8"
)

// The readers split objects and arrays with a scanner of their own rather
// than json.Unmarshal, which checks the whole of its input before decoding
// it: read level by level, a manifest was checked once per level, and that
// was most of the time its reading took. The scanner checks nothing. Every
// value it is given is valid JSON: decodeOne checked the document whole, and
// the values split out of it are parts of it. Input it cannot read is handed
// to json.Unmarshal, which decides.

// scanObject fills obj with the members of raw, a JSON object (trimmed),
// their values aliasing raw. It returns false when raw is not one.
func scanObject(raw []byte, obj object) bool {
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == '}' {
		return i == len(raw)-1
	}
	for i < len(raw) && raw[i] == '"' {
		end := stringEnd(raw, i)
		if end < 0 {
			return false
		}
		key := raw[i:end]
		if i = skipSpace(raw, end); i >= len(raw) || raw[i] != ':' {
			return false
		}
		i = skipSpace(raw, i+1)
		vend := valueEnd(raw, i)
		if vend < 0 {
			return false
		}
		name, ok := keyName(key)
		if !ok {
			return false
		}
		obj[name] = rawRef(raw[i:vend])
		switch i = skipSpace(raw, vend); {
		case i < len(raw) && raw[i] == ',':
			i = skipSpace(raw, i+1)
		case i == len(raw)-1 && raw[i] == '}':
			return true
		default:
			return false
		}
	}
	return false
}

// scanArray returns the elements of raw, a JSON array (trimmed), aliasing
// raw; false when raw is not one.
func scanArray(raw []byte) ([]rawRef, bool) {
	out := []rawRef{}
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == ']' {
		return out, i == len(raw)-1
	}
	for i < len(raw) {
		end := valueEnd(raw, i)
		if end < 0 {
			return nil, false
		}
		out = append(out, rawRef(raw[i:end]))
		switch i = skipSpace(raw, end); {
		case i < len(raw) && raw[i] == ',':
			i = skipSpace(raw, i+1)
		case i == len(raw)-1 && raw[i] == ']':
			return out, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// knownKeys are the members the readers look up: an object's key that is
// one of them is not allocated again for each object read.
var knownKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"batch_id", "total_files", "total_bytes", "directories", "directory_path", "processing_config",
		"ocr", "describe", "pinax", "file_count", "files", "r2_key", "logical_path", "file_name",
		"file_size", "content_type", "cid", "preprocessor_tags",
	} {
		m[k] = k
	}
	return m
}()

// keyName decodes an object's key (with its quotes) as json.Unmarshal
// does.
func keyName(quoted []byte) (string, bool) {
	body := quoted[1 : len(quoted)-1]
	plain := true // no escape, nothing but ASCII: the key is its bytes
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if !plain {
		var s string
		return s, json.Unmarshal(quoted, &s) == nil
	}
	if k, ok := knownKeys[string(body)]; ok {
		return k, true
	}
	return string(body), true
}

// skipSpace is the index of the first byte from i on that is not JSON
// white space.
func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index just past the string starting at raw[i] (a
// quote), or -1.
func stringEnd(raw []byte, i int) int {
	for j := i + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// valueEnd is the index just past the value starting at raw[i], or -1.
func valueEnd(raw []byte, i int) int {
	if i >= len(raw) {
		return -1
	}
	switch raw[i] {
	case '"':
		return stringEnd(raw, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(raw); j++ {
			switch raw[j] {
			case '"':
				end := stringEnd(raw, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i // a number, true, false or null
	for j < len(raw) && raw[j] != ',' && raw[j] != '}' && raw[j] != ']' && raw[j] != ' ' && raw[j] != '\t' && raw[j] != '\n' && raw[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
