package tiffworker

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzReadDirectories: make fuzz; `go test` runs the seed corpus. Whatever
// the file, the directory walk never panics, never reads much more than
// the file, and finds no more directories than the file could hold.
func FuzzReadDirectories(f *testing.F) {
	for _, data := range [][]byte{
		tiff(f, binary.LittleEndian, false, 0, 1, 2, 4),
		tiff(f, binary.BigEndian, true, 0, 0),
		[]byte("II*\x00\x08\x00\x00\x00\x00\x00"),
		[]byte("MM\x00+\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10"),
		nil,
	} {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &countingReader{r: bytes.NewReader(data)}
		dirs, err := readDirectories(r, int64(len(data)))
		// The header (16 bytes at most), the directories (no more than the
		// file) and the count of the one refused (8 bytes).
		if r.read > int64(len(data))+24 {
			t.Fatalf("read %d bytes of a %d-byte file", r.read, len(data))
		}
		if err == nil && len(dirs) > len(data)/6 {
			t.Fatalf("%d directories in %d bytes", len(dirs), len(data))
		}
	})
}
