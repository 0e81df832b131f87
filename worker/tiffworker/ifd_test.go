package tiffworker

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// tiff builds the IFD chain of a TIFF (no pixel data: the walk reads none)
// with one NewSubfileType per directory.
func tiff(t *testing.T, order binary.ByteOrder, big bool, subfileTypes ...uint32) []byte {
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
			dirs, err := readDirectories(bytes.NewReader(data))
			require.NoError(t, err)
			require.Equal(t, []directory{{0}, {1}, {2}, {4}}, dirs)
			require.Equal(t, []int{0, 2}, documentPages(dirs))
		})
	}

	t.Run("OnlyReducedImages", func(t *testing.T) {
		dirs, err := readDirectories(bytes.NewReader(tiff(t, binary.LittleEndian, false, 1, 1)))
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, documentPages(dirs), "nothing else to convert")
	})

	t.Run("Loop", func(t *testing.T) {
		data := tiff(t, binary.LittleEndian, false, 0)
		binary.LittleEndian.PutUint32(data[len(data)-4:], 8) // next IFD: itself
		_, err := readDirectories(bytes.NewReader(data))
		require.ErrorContains(t, err, "loops back")
	})

	t.Run("Truncated", func(t *testing.T) {
		data := tiff(t, binary.LittleEndian, false, 0, 0)
		_, err := readDirectories(bytes.NewReader(data[:len(data)-6]))
		require.ErrorContains(t, err, "IFD 1 at offset")
	})

	t.Run("NotTIFF", func(t *testing.T) {
		for _, data := range [][]byte{nil, []byte("%PDF-1.7 ..."), []byte("II\x2b\x00")} {
			_, err := readDirectories(bytes.NewReader(data))
			require.ErrorIs(t, err, errNotTIFF)
		}
	})
}
