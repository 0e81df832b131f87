package tiffworker

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// tiff builds the IFD chain of a TIFF (no pixel data: the walk reads none)
// with one NewSubfileType per directory.
func tiff(t testing.TB, order binary.ByteOrder, big bool, subfileTypes ...uint32) []byte {
	t.Helper()
	var b bytes.Buffer
	if order == binary.LittleEndian {
		b.WriteString("II")
	} else {
		b.WriteString("MM")
	}
	w := func(v any) { require.NoError(t, binary.Write(&b, order, v)) }
	if big {
		w(uint16(43))
		w(uint16(8))
		w(uint16(0))
		w(uint64(16))
	} else {
		w(uint16(42))
		w(uint32(8))
	}
	for i, st := range subfileTypes {
		last := i == len(subfileTypes)-1
		if big {
			w(uint64(1))
			w(uint16(254))
			w(uint16(4))
			w(uint64(1))
			w(st)
			w(uint32(0))
			next := uint64(b.Len() + 8)
			if last {
				next = 0
			}
			w(next)
		} else {
			w(uint16(1))
			w(uint16(254))
			w(uint16(4))
			w(uint32(1))
			w(st)
			next := uint32(b.Len() + 4)
			if last {
				next = 0
			}
			w(next)
		}
	}
	return b.Bytes()
}

func TestReadDirectories(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order binary.ByteOrder
		big   bool
	}{
		{"ClassicLittleEndian", binary.LittleEndian, false},
		{"ClassicBigEndian", binary.BigEndian, false},
		{"BigTIFF", binary.LittleEndian, true},
		{"BigTIFFBigEndian", binary.BigEndian, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A scan, its thumbnail, a second page, a transparency mask.
			data := tiff(t, tc.order, tc.big, 0, 1, 2, 4)
			dirs, err := readDirectories(bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			require.Equal(t, []directory{{0}, {1}, {2}, {4}}, dirs)
			require.Equal(t, []int{0, 2}, documentPages(dirs))
		})
	}

	t.Run("OnlyReducedImages", func(t *testing.T) {
		dirs, err := readDirectories(bytes.NewReader(tiff(t, binary.LittleEndian, false, 1, 1)), 1000)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, documentPages(dirs), "nothing else to convert")
	})

	t.Run("Loop", func(t *testing.T) {
		data := tiff(t, binary.LittleEndian, false, 0)
		binary.LittleEndian.PutUint32(data[len(data)-4:], 8) // next IFD: itself
		_, err := readDirectories(bytes.NewReader(data), int64(len(data)))
		require.ErrorContains(t, err, "loops back")
	})

	t.Run("Truncated", func(t *testing.T) {
		data := tiff(t, binary.LittleEndian, false, 0, 0)
		_, err := readDirectories(bytes.NewReader(data[:len(data)-6]), int64(len(data)-6))
		require.ErrorContains(t, err, "IFD 1 at offset")
	})

	t.Run("NotTIFF", func(t *testing.T) {
		for _, data := range [][]byte{nil, []byte("%PDF-1.7 ..."), []byte("II\x2b\x00")} {
			_, err := readDirectories(bytes.NewReader(data), int64(len(data)))
			require.ErrorIs(t, err, errNotTIFF)
		}
	})
}

// TestOverlappingDirectoriesRefused: a TIFF whose directories overlap
// (the bytes of one read again as the next, as a bomb chains 100,000 out
// of 2 MB) is refused once the directories read add up to more than the
// file, having read no more than the file, and before libvips sees it.
func TestOverlappingDirectoriesRefused(t *testing.T) {
	t.Parallel()
	// Directory A at 8: k entries, then the offset of the next, 10: the
	// middle of A, whose first entry's tag (k) is B's count. B's entries
	// are A's bytes again, and B's next offset is 0.
	const k = 1000
	n := 16 + 12*k
	data := make([]byte, n)
	copy(data, "II")
	binary.LittleEndian.PutUint16(data[2:], 42)
	binary.LittleEndian.PutUint32(data[4:], 8)
	binary.LittleEndian.PutUint16(data[8:], k)
	binary.LittleEndian.PutUint16(data[10:], k)
	binary.LittleEndian.PutUint32(data[10+12*k:], 10)
	r := &countingReader{r: bytes.NewReader(data)}
	_, err := readDirectories(r, int64(n))
	require.ErrorIs(t, err, errHostile)
	require.ErrorContains(t, err, "IFD 1 at offset 10: a directory chain no TIFF writer makes: the directories so far overlap")
	require.LessOrEqual(t, r.read, int64(n), "no more read than the file")

	// Without the chain back into A, A alone.
	binary.LittleEndian.PutUint32(data[10+12*k:], 0)
	dirs, err := readDirectories(bytes.NewReader(data), int64(n))
	require.NoError(t, err)
	require.Len(t, dirs, 1)

	binary.LittleEndian.PutUint32(data[10+12*k:], 10)
	file := filepath.Join(t.TempDir(), "bomb.tif")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	_, err = inspect(file, int64(n), slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, errHostile, "refused, not handed to libvips")
}

// TestTooManyPagesRefused: a TIFF of more than maxPages directories fails
// with a message that says so.
func TestTooManyPagesRefused(t *testing.T) {
	t.Parallel()
	data := tiff(t, binary.LittleEndian, false, make([]uint32, maxPages+1)...)
	file := filepath.Join(t.TempDir(), "many.tif")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	_, err := inspect(file, int64(len(data)), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "the TIFF has 10001 pages, more than the 10000 a worker converts")
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r    io.ReaderAt
	read int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.read += int64(n)
	return n, err
}
