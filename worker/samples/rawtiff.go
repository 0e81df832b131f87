package samples

import (
	"bytes"
	"encoding/binary"
	"math"
)

// ycbcrTIFF writes the pattern as an uncompressed YCbCr TIFF with 2x2
// chroma subsampling, the layout of many scanners' and cameras' TIFFs.
// libvips cannot write one (it stores YCbCr only inside JPEG compression),
// so the file is written by hand: a little-endian classic TIFF, one strip.
// w and h must be even.
func ycbcrTIFF(w, h int) []byte {
	pix := pattern(w, h, 1)
	at := func(x, y int) (r, g, b float64) {
		i := (y*w + x) * 3
		return float64(pix[i]), float64(pix[i+1]), float64(pix[i+2])
	}
	clamp := func(v float64) byte { return byte(max(0, min(255, math.Round(v)))) }

	// Full-range (JFIF) conversion, matching ReferenceBlackWhite
	// 0/255/128/255/128/255 and the default Rec. 601 coefficients.
	var data bytes.Buffer
	for y := 0; y < h; y += 2 {
		for x := 0; x < w; x += 2 {
			var cb, cr float64
			for dy := range 2 {
				for dx := range 2 {
					r, g, b := at(x+dx, y+dy)
					data.WriteByte(clamp(0.299*r + 0.587*g + 0.114*b))
					cb += 128 - 0.168736*r - 0.331264*g + 0.5*b
					cr += 128 + 0.5*r - 0.418688*g - 0.081312*b
				}
			}
			data.WriteByte(clamp(cb / 4))
			data.WriteByte(clamp(cr / 4))
		}
	}

	return rawTIFF(w, h, photometricYCbCr, data.Bytes(), data.Len())
}

// TruncatedTIFF is an uncompressed RGB TIFF whose pixel data stops half way
// through its only strip, as a failed upload or copy leaves it. Its header
// and directory come first, so readers see a valid TIFF until they read the
// pixels.
func TruncatedTIFF(w, h int) []byte {
	data := pattern(w, h, 1)
	return rawTIFF(w, h, photometricRGB, data[:len(data)/2], len(data))
}

const (
	photometricRGB   = 2
	photometricYCbCr = 6
)

// rawTIFF writes a little-endian classic TIFF of 8-bit, 3-sample pixels,
// uncompressed in one strip, with the directory before the pixels.
// declared is the strip length the directory claims (len(data) unless
// making a broken file). YCbCr gets 2x2 subsampling.
func rawTIFF(w, h int, photometric uint16, data []byte, declared int) []byte {
	const (
		short    = 3
		long     = 4
		rational = 5
	)
	entries := 10
	if photometric == photometricYCbCr {
		entries += 3
	}
	ifdSize := 2 + entries*12 + 4
	bitsAt := 8 + ifdSize
	refAt := bitsAt + 6
	dataAt := refAt + 48

	le := binary.LittleEndian
	var out bytes.Buffer
	out.WriteString("II")
	_ = binary.Write(&out, le, uint16(42))
	_ = binary.Write(&out, le, uint32(8))
	_ = binary.Write(&out, le, uint16(entries))
	entry := func(tag, typ uint16, count uint32, value []byte) {
		_ = binary.Write(&out, le, tag)
		_ = binary.Write(&out, le, typ)
		_ = binary.Write(&out, le, count)
		var v [4]byte
		copy(v[:], value)
		out.Write(v[:])
	}
	u16 := func(vs ...uint16) []byte {
		b := make([]byte, 2*len(vs))
		for i, v := range vs {
			le.PutUint16(b[2*i:], v)
		}
		return b
	}
	u32 := func(v int) []byte { return le.AppendUint32(nil, uint32(v)) }

	// Entries in ascending tag order, as TIFF requires.
	entry(256, long, 1, u32(w))            // ImageWidth
	entry(257, long, 1, u32(h))            // ImageLength
	entry(258, short, 3, u32(bitsAt))      // BitsPerSample 8,8,8 (out of line)
	entry(259, short, 1, u16(1))           // Compression: none
	entry(262, short, 1, u16(photometric)) // PhotometricInterpretation
	entry(273, long, 1, u32(dataAt))       // StripOffsets
	entry(277, short, 1, u16(3))           // SamplesPerPixel
	entry(278, long, 1, u32(h))            // RowsPerStrip
	entry(279, long, 1, u32(declared))     // StripByteCounts
	entry(284, short, 1, u16(1))           // PlanarConfiguration: chunky
	if photometric == photometricYCbCr {
		entry(530, short, 2, u16(2, 2))     // YCbCrSubSampling
		entry(531, short, 1, u16(1))        // YCbCrPositioning: centred
		entry(532, rational, 6, u32(refAt)) // ReferenceBlackWhite (out of line)
	}
	_ = binary.Write(&out, le, uint32(0)) // no next IFD
	out.Write(u16(8, 8, 8))               // BitsPerSample values
	for _, v := range []uint32{0, 255, 128, 255, 128, 255} {
		_ = binary.Write(&out, le, [2]uint32{v, 1}) // ReferenceBlackWhite values
	}
	out.Write(data)
	return out.Bytes()
}
