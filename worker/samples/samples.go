// Package samples makes synthetic images of known content in every TIFF
// flavour the TIFF worker must read (compressions, colour spaces, bit
// depths, tiling, BigTIFF, several pages), so tests can check the converted
// pixels and examples/gen can write the sample batch; and small hand-written
// PDFs (text pages, scanned pages, encrypted) for the PDF worker. It needs
// libvips (vips.Startup) for everything but the hand-written YCbCr TIFF and
// the PDFs.
package samples

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/arke-institute/orchestrator/worker/vips"
)

// Colour is an 8-bit sRGB colour.
type Colour [3]uint8

// QuadrantColours are the colours of the test pattern's quadrants: top
// left, top right, bottom left, bottom right. They are inside the gamut of
// the built-in CMYK profile, so a CMYK round trip stays close.
var QuadrantColours = [4]Colour{
	{200, 40, 40},  // red
	{40, 160, 70},  // green
	{80, 100, 150}, // blue
	{230, 210, 60}, // yellow
}

// Expected is the colour of the test pattern at (x, y) on page (1-based)
// of a w x h image. Page p shows the quadrant colours rotated by p-1
// places, so the order of converted pages can be checked.
func Expected(page, x, y, w, h int) Colour {
	q := 0
	if x >= w/2 {
		q++
	}
	if y >= h/2 {
		q += 2
	}
	return QuadrantColours[(q+page-1)%4]
}

// Grey is the grey level of a colour (Rec. 601 luma), the expected value
// of greyscale variants.
func Grey(c Colour) uint8 {
	return uint8(math.Round(0.299*float64(c[0]) + 0.587*float64(c[1]) + 0.114*float64(c[2])))
}

// Variant is one kind of TIFF file.
type Variant string

// The TIFF variants. Each shows the quadrant pattern (Expected); Multipage
// has three pages; Pyramid adds reduced-resolution pages that are not
// pages of the document.
const (
	LZW       Variant = "lzw"
	Deflate   Variant = "deflate"
	PackBits  Variant = "packbits"
	None      Variant = "uncompressed"
	JPEG      Variant = "jpeg"    // JPEG-compressed, stored as YCbCr (libvips's default)
	YCbCr     Variant = "ycbcr"   // uncompressed YCbCr with 2x2 chroma subsampling
	Tiled     Variant = "tiled"   // 16x16 tiles, LZW
	BigTIFF   Variant = "bigtiff" // 64-bit offsets, LZW
	CMYK      Variant = "cmyk"    // CMYK without an embedded profile, LZW
	CMYKICC   Variant = "cmyk-icc"
	RGB16     Variant = "rgb16"  // 16 bits per sample, Deflate with predictor
	Grey16    Variant = "grey16" // 16-bit greyscale
	Grey8     Variant = "grey8"
	Bilevel   Variant = "bilevel" // 1 bit per pixel, CCITT G4 (fax); white above, black below
	Alpha     Variant = "alpha"   // RGBA, the bottom-right quadrant fully transparent
	Multipage Variant = "multipage"
	Pyramid   Variant = "pyramid" // tiled pyramid: full size plus reduced-resolution pages
)

// Variants lists every variant, in the order tests run them.
var Variants = []Variant{LZW, Deflate, PackBits, None, JPEG, YCbCr, Tiled, BigTIFF, CMYK, CMYKICC, RGB16, Grey16, Grey8, Bilevel, Alpha, Multipage, Pyramid}

// Pages is the number of document pages of a variant (what the worker
// should convert).
func (v Variant) Pages() int {
	if v == Multipage {
		return 3
	}
	return 1
}

// TIFF writes the pattern as a w x h TIFF of the variant. w and h should be
// even multiples of 16 for the tiled and subsampled variants.
func TIFF(v Variant, w, h int) ([]byte, error) {
	switch v {
	case YCbCr:
		return ycbcrTIFF(w, h), nil
	case Multipage:
		return save(pattern(w, h, 3), vips.FormatUchar, 3, vips.InterpretationSRGB, w, 3*h, h, ".tif[compression=lzw]")
	}
	pix := pattern(w, h, 1)
	switch v {
	case LZW:
		return saveRGB(pix, w, h, ".tif[compression=lzw]")
	case Deflate:
		return saveRGB(pix, w, h, ".tif[compression=deflate,predictor=horizontal]")
	case PackBits:
		return saveRGB(pix, w, h, ".tif[compression=packbits]")
	case None:
		return saveRGB(pix, w, h, ".tif[compression=none]")
	case JPEG:
		return saveRGB(pix, w, h, ".tif[compression=jpeg,Q=95]")
	case Tiled:
		return saveRGB(pix, w, h, ".tif[compression=lzw,tile,tile-width=16,tile-height=16]")
	case BigTIFF:
		return saveRGB(pix, w, h, ".tif[compression=lzw,bigtiff]")
	case Pyramid:
		return saveRGB(pix, w, h, ".tif[compression=lzw,tile,tile-width=16,tile-height=16,pyramid]")
	case CMYK, CMYKICC:
		return cmykTIFF(pix, w, h, v == CMYKICC)
	case RGB16:
		return save(widen(pix), vips.FormatUshort, 3, vips.InterpretationRGB16, w, h, 0, ".tif[compression=deflate,predictor=horizontal]")
	case Grey16:
		return save(widen(grey(pix)), vips.FormatUshort, 1, vips.InterpretationGrey16, w, h, 0, ".tif[compression=deflate]")
	case Grey8:
		return save(grey(pix), vips.FormatUchar, 1, vips.InterpretationBW, w, h, 0, ".tif[compression=lzw]")
	case Bilevel:
		bw := make([]byte, w*h)
		for i := range w * h / 2 {
			bw[i] = 255
		}
		return save(bw, vips.FormatUchar, 1, vips.InterpretationBW, w, h, 0, ".tif[compression=ccittfax4,bitdepth=1]")
	case Alpha:
		rgba := make([]byte, 0, w*h*4)
		for y := range h {
			for x := range w {
				a := byte(255)
				if x >= w/2 && y >= h/2 {
					a = 0
				}
				i := (y*w + x) * 3
				rgba = append(rgba, pix[i], pix[i+1], pix[i+2], a)
			}
		}
		return save(rgba, vips.FormatUchar, 4, vips.InterpretationSRGB, w, h, 0, ".tif[compression=lzw]")
	}
	return nil, fmt.Errorf("unknown TIFF variant %q", v)
}

// Image is page (1-based) of the pattern as a w x h 8-bit sRGB image, to
// encode in any format.
func Image(w, h, page int) (*vips.Image, error) {
	all := pattern(w, h, page)
	return vips.FromMemory(all[len(all)-w*h*3:], w, h, 3, vips.FormatUchar, vips.InterpretationSRGB)
}

// pattern is the interleaved RGB pixels of pages 1..n of the pattern,
// stacked vertically.
func pattern(w, h, pages int) []byte {
	pix := make([]byte, 0, w*h*pages*3)
	for p := 1; p <= pages; p++ {
		for y := range h {
			for x := range w {
				c := Expected(p, x, y, w, h)
				pix = append(pix, c[0], c[1], c[2])
			}
		}
	}
	return pix
}

func grey(rgb []byte) []byte {
	out := make([]byte, len(rgb)/3)
	for i := range out {
		out[i] = Grey(Colour{rgb[3*i], rgb[3*i+1], rgb[3*i+2]})
	}
	return out
}

// widen turns 8-bit samples into 16-bit ones of the same brightness
// (v * 257), in the machine's byte order as libvips expects in memory.
func widen(pix []byte) []byte {
	out := make([]byte, 2*len(pix))
	for i, v := range pix {
		binary.NativeEndian.PutUint16(out[2*i:], uint16(v)*257)
	}
	return out
}

func saveRGB(pix []byte, w, h int, suffix string) ([]byte, error) {
	return save(pix, vips.FormatUchar, 3, vips.InterpretationSRGB, w, h, 0, suffix)
}

// save encodes pixels; pageHeight > 0 marks them as stacked pages.
func save(pix []byte, format vips.BandFormat, bands int, interp vips.Interpretation, w, h, pageHeight int, suffix string) ([]byte, error) {
	im, err := vips.FromMemory(pix, w, h, bands, format, interp)
	if err != nil {
		return nil, err
	}
	defer im.Close()
	if pageHeight > 0 {
		paged, err := im.WithPageHeight(pageHeight)
		if err != nil {
			return nil, err
		}
		defer paged.Close()
		im = paged
	}
	return im.Save(suffix)
}

// cmykTIFF converts the pattern to CMYK with libvips's built-in profile.
// Without withProfile the profile (about 1 MB) is removed, so readers fall
// back to a default CMYK profile.
func cmykTIFF(pix []byte, w, h int, withProfile bool) ([]byte, error) {
	rgb, err := vips.FromMemory(pix, w, h, 3, vips.FormatUchar, vips.InterpretationSRGB)
	if err != nil {
		return nil, err
	}
	defer rgb.Close()
	cmyk, err := rgb.Colourspace(vips.InterpretationCMYK)
	if err != nil {
		return nil, err
	}
	defer cmyk.Close()
	if !withProfile {
		bare, err := cmyk.WithoutField(vips.ICCProfileField)
		if err != nil {
			return nil, err
		}
		defer bare.Close()
		cmyk = bare
	}
	return cmyk.Save(".tif[compression=lzw]")
}
