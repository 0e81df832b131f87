package tiffworker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// directory is what the worker needs of one TIFF image file directory
// (IFD): whether it is a page of the document.
type directory struct {
	// subfileType is NewSubfileType (tag 254): bit 0 marks a
	// reduced-resolution copy of another image (a thumbnail or pyramid
	// level), bit 2 a transparency mask.
	subfileType uint32
}

// isPage reports whether the directory is a page of the document rather
// than a reduced-resolution copy or a mask.
func (d directory) isPage() bool {
	return d.subfileType&(1|4) == 0
}

// errNotTIFF is matched by readDirectories's error for a file without a
// TIFF header (as opposed to a TIFF whose directories are damaged).
var errNotTIFF = errors.New("no TIFF header")

// maxDirectories bounds the walk, as libvips bounds page numbers.
const maxDirectories = 100000

// errHostile is matched by readDirectories's error for a chain no writer
// makes: directories that overlap, or too many. Such a file is refused,
// not handed to libvips.
var errHostile = errors.New("a directory chain no TIFF writer makes")

// readDirectories walks the chain of top-level IFDs of a classic TIFF or a
// BigTIFF of size bytes. libvips counts pages but does not say which are
// thumbnails or pyramid levels that scanners and tiling tools add after
// the real image; converting those would add spurious small "pages".
//
// The directories of a TIFF do not overlap, so together they are no larger
// than the file: a chain whose directories add up to more (the same bytes
// read as directory after directory, 100,000 of them out of 2 MB) is
// refused once it does, and the walk never reads more than the file.
func readDirectories(r io.ReaderAt, size int64) ([]directory, error) {
	var hdr [16]byte
	if _, err := r.ReadAt(hdr[:8], 0); err != nil {
		return nil, errNotTIFF
	}
	var bo binary.ByteOrder
	switch string(hdr[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return nil, errNotTIFF
	}

	var (
		big    bool
		offset uint64
	)
	switch bo.Uint16(hdr[2:]) {
	case 42:
		offset = uint64(bo.Uint32(hdr[4:]))
	case 43:
		if _, err := r.ReadAt(hdr[8:16], 8); err != nil {
			return nil, fmt.Errorf("reading BigTIFF header: %w", err)
		}
		big = true
		offset = bo.Uint64(hdr[8:])
	default:
		return nil, errNotTIFF
	}

	var dirs []directory
	seen := map[uint64]bool{}
	read := int64(0) // the bytes of the directories so far
	for offset != 0 {
		if seen[offset] {
			return nil, fmt.Errorf("IFD chain loops back to offset %d", offset)
		}
		if len(dirs) >= maxDirectories {
			return nil, fmt.Errorf("%w: more than %d IFDs", errHostile, maxDirectories)
		}
		seen[offset] = true
		d, next, n, err := readDirectory(r, bo, big, offset, size-read)
		if err != nil {
			return nil, fmt.Errorf("IFD %d at offset %d: %w", len(dirs), offset, err)
		}
		read += n
		dirs = append(dirs, d)
		offset = next
	}
	return dirs, nil
}

// readDirectory reads one IFD, of at most budget bytes, and returns the
// offset of the next and its own size.
func readDirectory(r io.ReaderAt, bo binary.ByteOrder, big bool, offset uint64, budget int64) (directory, uint64, int64, error) {
	countSize, entrySize, nextSize := 2, 12, 4
	if big {
		countSize, entrySize, nextSize = 8, 20, 8
	}
	var buf [8]byte
	if _, err := r.ReadAt(buf[:countSize], int64(offset)); err != nil {
		return directory{}, 0, 0, err
	}
	var count uint64
	if big {
		count = bo.Uint64(buf[:])
	} else {
		count = uint64(bo.Uint16(buf[:]))
	}
	if count > 1<<16 {
		return directory{}, 0, 0, fmt.Errorf("implausible entry count %d", count)
	}
	n := int64(countSize) + int64(count)*int64(entrySize) + int64(nextSize)
	if n > budget {
		return directory{}, 0, 0, fmt.Errorf("%w: the directories so far overlap (together larger than the file)", errHostile)
	}
	entries := make([]byte, int(count)*entrySize+nextSize)
	if _, err := r.ReadAt(entries, int64(offset)+int64(countSize)); err != nil {
		return directory{}, 0, 0, err
	}

	var d directory
	for i := range int(count) {
		e := entries[i*entrySize:]
		value := e[8:] // inline value: 4 bytes (classic) or 8 (BigTIFF)
		if big {
			value = e[12:]
		}
		switch bo.Uint16(e) {
		case 254: // NewSubfileType, LONG
			d.subfileType = bo.Uint32(value)
		case 255: // SubfileType (old), SHORT: 2 = reduced resolution
			if bo.Uint16(value) == 2 {
				d.subfileType |= 1
			}
		}
	}
	tail := entries[int(count)*entrySize:]
	if big {
		return d, bo.Uint64(tail), n, nil
	}
	return d, uint64(bo.Uint32(tail)), n, nil
}

// documentPages returns the indices of the directories that are pages of
// the document; if none is (a file of nothing but flagged images), all of
// them.
func documentPages(dirs []directory) []int {
	var pages []int
	for i, d := range dirs {
		if d.isPage() {
			pages = append(pages, i)
		}
	}
	if len(pages) == 0 {
		for i := range dirs {
			pages = append(pages, i)
		}
	}
	return pages
}
