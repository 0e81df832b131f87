package phases

import (
	"slices"
	"testing"
)

// TestMayHaveWorkOfParts: for a list cut into parts anywhere, every phase
// NextWithWork finds for the whole list is one MayHaveWork names for some
// part, from every phase on (the transition that takes over a generation
// written ahead relies on it), and a Screener's MayWork holds for each file
// of its Work.
func TestMayHaveWorkOfParts(t *testing.T) {
	cfg := ProcessingConfig{OCR: true, Describe: true}
	file := func(name, contentType string, tags ...string) File {
		return File{R2Key: "staging/b/d/" + name, LogicalPath: "/d/" + name, FileName: name, DirectoryPath: "/d",
			ContentType: contentType, ProcessingConfig: cfg, Tags: tags}
	}
	off := func(f File) File { f.ProcessingConfig = ProcessingConfig{}; return f }
	kept := func(f File) File { f.Kept = true; return f }
	lists := map[string][]File{
		"Mixed": {
			file("scan.tif", "image/tiff"), file("photo.jpg", "image/jpeg"), file("notes.txt", "text/plain"),
			file("report.pdf", "application/pdf"), off(file("data.csv", "text/csv")),
		},
		// A split PDF whose pages' text makes one document only with the
		// PDF beside it.
		"SplitPDF": {
			off(file("a.csv", "text/csv")),
			file("r.pdf", "application/pdf", TagPDFSource),
			file("r-p1.jpg.ref.json", "application/json", TagImageProcessor), file("r-p1.txt", "text/plain", TagPDFText),
			file("r-p2.jpg.ref.json", "application/json", TagImageProcessor, TagOCR),
			off(file("z.csv", "text/csv")),
		},
		"OCRRefs": {
			off(file("a.jpg.ref.json", "application/json", TagImageProcessor)),
			file("b.jpg.ref.json", "application/json", TagImageProcessor),
			file("c.jpg.ref.json", "application/json", TagImageProcessor, TagOCR),
		},
		"Nothing": {
			off(file("a.csv", "text/csv")), off(file("b.jpg", "image/jpeg", TagTIFFSource)), off(file("c.txt", "text/plain")),
		},
		"Kept": {kept(file("a.jpg", "image/jpeg")), kept(file("b.txt", "text/plain"))},
	}
	found := map[Name]bool{}
	for name, files := range lists {
		for _, p := range registry {
			if s, ok := p.(Screener); ok {
				for _, f := range Work(p, files) {
					if !s.MayWork(f) {
						t.Errorf("%s: %s works on %s, which it says it may not", name, p.Spec().Name, f.FileName)
					}
				}
			}
		}
		for _, from := range names {
			want, _ := NextWithWork(from, files)
			if want != nil {
				found[want.Spec().Name] = true
			}
			// Every cut into two parts, and into single files.
			cuts := [][][]File{}
			for i := range len(files) + 1 {
				cuts = append(cuts, [][]File{files[:i], files[i:]})
			}
			var singles [][]File
			for i := range files {
				singles = append(singles, files[i:i+1])
			}
			cuts = append(cuts, singles)
			for _, parts := range cuts {
				var named []Name
				for _, part := range parts {
					named = append(named, MayHaveWork(from, part)...)
				}
				if want != nil && !slices.Contains(named, want.Spec().Name) {
					t.Errorf("%s from %s: %s has work, and no part says it may (%v)", name, from, want.Spec().Name, named)
				}
			}
		}
	}
	// The lists give every phase work somewhere, and MayHaveWork names
	// none where there is none.
	for _, n := range names {
		if !found[n] {
			t.Errorf("no list has work for %s", n)
		}
	}
	if got := MayHaveWork(First(), lists["Nothing"]); len(got) != 0 {
		t.Errorf("MayHaveWork of a list with no work: %v", got)
	}
}
