package samples

import (
	"bytes"
	"crypto/md5"
	"crypto/rc4"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"strings"
)

// PDFPage is one page of a sample PDF: lines of text (a text layer, as a
// word processor makes), a full-page scan (an image and no text, as a
// scanner makes), both, or neither (a blank page).
type PDFPage struct {
	// Width and Height are the page size in points (1/72 in); zero means US
	// Letter, 612 x 792.
	Width, Height float64
	// Lines are set in 12 pt Helvetica from the top left. Characters
	// outside Latin-1 are written as '?'.
	Lines []string
	// Scan, when not nil, fills the page, stored as a JPEG image XObject.
	Scan image.Image
}

// PDFOptions are the options of PDF.
type PDFOptions struct {
	// UserPassword is needed to open the file. When it or OwnerPassword is
	// set the file is encrypted (standard security handler, RC4 40-bit);
	// with only an owner password anyone can open it.
	UserPassword  string
	OwnerPassword string
}

// Pattern is page (1-based) of the test pattern (Expected) as a Go image,
// for PDF scans.
func Pattern(w, h, page int) *image.RGBA {
	im := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := Expected(page, x, y, w, h)
			im.SetRGBA(x, y, color.RGBA{c[0], c[1], c[2], 255})
		}
	}
	return im
}

// PDF writes a small valid PDF of the pages, by hand, with a correct
// cross-reference table. No pages makes a PDF whose page tree is empty,
// which readers refuse. It needs no libvips.
func PDF(pages []PDFPage, opts PDFOptions) ([]byte, error) {
	w := &pdfWriter{}
	if opts.UserPassword != "" || opts.OwnerPassword != "" {
		w.encryptWith(opts.UserPassword, opts.OwnerPassword)
	}

	// Objects 1 to 3 are the catalog, the page tree and the font; each page
	// follows as its page object, its content stream and its scan if any.
	kids := make([]string, 0, len(pages))
	next := 4
	for _, p := range pages {
		kids = append(kids, fmt.Sprintf("%d 0 R", next))
		next += 2
		if p.Scan != nil {
			next++
		}
	}
	w.object("<< /Type /Catalog /Pages 2 0 R >>")
	w.object(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(pages)))
	w.object("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
	for _, p := range pages {
		width, height := p.Width, p.Height
		if width == 0 || height == 0 {
			width, height = 612, 792
		}
		num := w.count() + 1
		resources := "/Font << /F1 3 0 R >>"
		if p.Scan != nil {
			resources += fmt.Sprintf(" /XObject << /Im1 %d 0 R >>", num+2)
		}
		w.object(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %s %s] /Contents %d 0 R /Resources << %s >> >>",
			num2(width), num2(height), num+1, resources))

		var content bytes.Buffer
		if p.Scan != nil {
			fmt.Fprintf(&content, "q %s 0 0 %s 0 0 cm /Im1 Do Q\n", num2(width), num2(height))
		}
		if len(p.Lines) > 0 {
			fmt.Fprintf(&content, "BT /F1 12 Tf 14 TL 36 %s Td", num2(height-40))
			for i, l := range p.Lines {
				if i > 0 {
					content.WriteString(" T*")
				}
				content.WriteString(" " + pdfString(l) + " Tj")
			}
			content.WriteString(" ET\n")
		}
		w.stream("", content.Bytes())

		if p.Scan != nil {
			var jpg bytes.Buffer
			if err := jpeg.Encode(&jpg, p.Scan, &jpeg.Options{Quality: 85}); err != nil {
				return nil, fmt.Errorf("encoding scan: %w", err)
			}
			space := "/DeviceRGB"
			if _, ok := p.Scan.(*image.Gray); ok {
				space = "/DeviceGray"
			}
			b := p.Scan.Bounds()
			w.stream(fmt.Sprintf("/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace %s /BitsPerComponent 8 /Filter /DCTDecode ",
				b.Dx(), b.Dy(), space), jpg.Bytes())
		}
	}
	return w.finish(), nil
}

// num2 formats a PDF number without a needless fraction.
func num2(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// pdfString is s as a PDF literal string in WinAnsiEncoding (Latin-1 for
// the letters that matter here).
func pdfString(s string) string {
	var b strings.Builder
	b.WriteByte('(')
	for _, r := range s {
		switch {
		case r == '(' || r == ')' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r >= 0xa0 && r <= 0xff:
			fmt.Fprintf(&b, "\\%03o", r)
		default:
			b.WriteByte('?')
		}
	}
	b.WriteByte(')')
	return b.String()
}

// pdfWriter lays out numbered objects and their cross-reference table.
type pdfWriter struct {
	buf     bytes.Buffer
	offsets []int
	// key is the file's RC4 key when encrypting, id its first file ID, and
	// encrypt the trailer's /Encrypt dictionary.
	key     []byte
	id      []byte
	encrypt string
}

func (w *pdfWriter) count() int { return len(w.offsets) }

func (w *pdfWriter) object(body string) {
	if w.buf.Len() == 0 {
		// A binary comment line tells transfer programs the file is binary.
		w.buf.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	}
	w.offsets = append(w.offsets, w.buf.Len())
	fmt.Fprintf(&w.buf, "%d 0 obj\n%s\nendobj\n", len(w.offsets), body)
}

// stream writes a stream object with the given dictionary entries,
// encrypting data when the file is encrypted.
func (w *pdfWriter) stream(dict string, data []byte) {
	if w.key != nil {
		data = w.rc4(len(w.offsets)+1, data)
	}
	w.object(fmt.Sprintf("<< %s/Length %d >>\nstream\n%s\nendstream", dict, len(data), data))
}

// pdfPadding pads passwords (PDF 1.7, 7.6.3.3, algorithm 2).
var pdfPadding = []byte{
	0x28, 0xbf, 0x4e, 0x5e, 0x4e, 0x75, 0x8a, 0x41, 0x64, 0x00, 0x4e, 0x56, 0xff, 0xfa, 0x01, 0x08,
	0x2e, 0x2e, 0x00, 0xb6, 0xd0, 0x68, 0x3e, 0x80, 0x2f, 0x0c, 0xa9, 0xfe, 0x64, 0x53, 0x69, 0x7a,
}

func pad(password string) []byte {
	return append([]byte(password[:min(len(password), 32)]), pdfPadding[:32-min(len(password), 32)]...)
}

func rc4Crypt(key, data []byte) []byte {
	c, err := rc4.NewCipher(key)
	if err != nil {
		panic(err) // key lengths here are 5 to 16 bytes, always valid
	}
	out := make([]byte, len(data))
	c.XORKeyStream(out, data)
	return out
}

// encryptWith sets up the standard security handler, revision 2 (PDF 1.7,
// 7.6.3, algorithms 2 to 4): a 40-bit RC4 file key from the user password.
func (w *pdfWriter) encryptWith(user, owner string) {
	if owner == "" {
		owner = user
	}
	const perms = -4 // every permission granted
	id := md5.Sum([]byte(user + "\x00" + owner))
	w.id = id[:]
	ownerHash := md5.Sum(pad(owner))
	o := rc4Crypt(ownerHash[:5], pad(user))

	h := md5.New()
	h.Write(pad(user))
	h.Write(o)
	_ = binary.Write(h, binary.LittleEndian, int32(perms))
	h.Write(w.id)
	w.key = h.Sum(nil)[:5]
	u := rc4Crypt(w.key, pdfPadding)
	w.encrypt = fmt.Sprintf("<< /Filter /Standard /V 1 /R 2 /O <%x> /U <%x> /P %d >>", o, u, perms)
}

// rc4 encrypts an object's data with its own key (algorithm 1).
func (w *pdfWriter) rc4(num int, data []byte) []byte {
	h := md5.New()
	h.Write(w.key)
	h.Write([]byte{byte(num), byte(num >> 8), byte(num >> 16), 0, 0})
	return rc4Crypt(h.Sum(nil)[:min(len(w.key)+5, 16)], data)
}

func (w *pdfWriter) finish() []byte {
	trailer := ""
	if w.encrypt != "" {
		w.object(w.encrypt)
		trailer = fmt.Sprintf(" /Encrypt %d 0 R /ID [<%x> <%x>]", len(w.offsets), w.id, w.id)
	}
	xref := w.buf.Len()
	fmt.Fprintf(&w.buf, "xref\n0 %d\n0000000000 65535 f \n", len(w.offsets)+1)
	for _, off := range w.offsets {
		fmt.Fprintf(&w.buf, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&w.buf, "trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n", len(w.offsets)+1, trailer, xref)
	return w.buf.Bytes()
}
