// Package testcorpus is a small corpus for tests of search and tagging:
// thirteen short markdown documents on distinct topics (one in Chinese),
// each of a few sections, and queries whose answer is one section.
package testcorpus

import (
	"embed"
	"io/fs"
	"path"
	"slices"
	"strings"
)

//go:embed docs/*.md
var docs embed.FS

// Doc is one document of the corpus.
type Doc struct {
	// Name is the file's name without ".md" ("beekeeping").
	Name string
	Text string
}

// Docs returns the corpus, by name.
func Docs() []Doc {
	entries, err := fs.ReadDir(docs, "docs")
	if err != nil {
		panic(err)
	}
	var out []Doc
	for _, e := range entries {
		b, err := docs.ReadFile(path.Join("docs", e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, Doc{Name: strings.TrimSuffix(e.Name(), ".md"), Text: string(b)})
	}
	slices.SortFunc(out, func(a, b Doc) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Query is a question and where its answer is.
type Query struct {
	Text string
	// Doc names the document that answers it.
	Doc string
	// Section is the heading of the section that answers it.
	Section string
}

// Queries are worded apart from the documents' sentences, but share some
// words (or forms of them) with the answer: what lexical search can find.
var Queries = []Query{
	{Text: "what relative humidity should a parchment store room keep", Doc: "parchment", Section: "Storage climate"},
	{Text: "why does a bee colony swarm", Doc: "beekeeping", Section: "Swarming in spring"},
	{Text: "how often to feed a sourdough starter kept in the fridge", Doc: "sourdough", Section: "Feeding the starter"},
	{Text: "pyroclastic flow danger from an explosive eruption", Doc: "volcanoes", Section: "Explosive eruptions"},
	{Text: "Sicilian Defence: counterattack on the queenside", Doc: "chess", Section: "The Sicilian Defence"},
	{Text: "starfish and sea anemones at low tide", Doc: "tidepools", Section: "Who lives there"},
	{Text: "patch a punctured inner tube", Doc: "bicycle", Section: "Fixing a puncture"},
	{Text: "autovacuum cannot remove dead tuples while long transactions run", Doc: "postgres", Section: "Autovacuum"},
	{Text: "arches carrying an aqueduct channel across a valley", Doc: "aqueducts", Section: "Building the channel"},
	{Text: "ratio of browns to greens in a compost heap", Doc: "compost", Section: "Greens and browns"},
	{Text: "target chord tones when improvising over a ii-V-I", Doc: "jazz", Section: "Playing over the changes"},
	{Text: "best tilt angle for solar panels facing south", Doc: "solar", Section: "Orientation and tilt"},
	{Text: "绿茶冲泡的水温", Doc: "tea", Section: "绿茶的冲泡"},
}
